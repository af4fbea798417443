"""Task synthesis: <environment, tools, task, verifier> tuples from category generators.

```python
from gemkit.synth.tasks import get_category, synthesize

gen = get_category("trip_planning")
result = synthesize(gen, Path("db.sqlite"), np.random.default_rng(0), target_level=3)
```

Categories register by name in `CATEGORIES` (`gemkit.synth.tasks.generators`); each is a
played category of `gemkit.envs.toolworld` that can also make tasks. The names listed in
`__init__.pyi` load on first use, so registering the `toolworld:` ids
(`gemkit.synth.tasks.builtin_sets`) imports none of the synthesis machinery.
"""

from gemkit._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
