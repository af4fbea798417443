"""QA synthesis: seed questions grown by inject/fuzz edits and kept only when verified.

    from gemkit.synth.qa import RunConfig, run
    stats = run("out/", RunConfig(n=100, world_size=10_000, seed=0))

See docs/synth-qa.md for the record format and the three verification stages. The names
listed in `__init__.pyi` load on first use, so registering `qa:Synth-v0`
(`gemkit.synth.qa.builtin_set`) imports none of the synthesis machinery.
"""

from gemkit._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
