"""Env registry: `register`, `make`, `make_vec`, `spec`, `list_envs`.

Ids follow `family:Name-vN[-level]` (version and level optional, e.g. `rg:leg_counting`).
Every family, built-in or third-party, comes from the `gemkit.envs` entry-point group
(gemkit's own are listed in its `pyproject.toml`): an entry points at a module (imported) or
a callable (called) that calls `register`. An entry named `F` or `F.<part>` registers ids of
family `F` and is loaded when an id of `F` is first needed; the others load when an id is
not found, or for a full listing. The registry itself names no family.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from gemkit.errors import GemkitError, InvalidEnvIdError, RegistrationError, UnknownEnvError

if TYPE_CHECKING:
    from gemkit.core import Env
    from gemkit.policy import Policy
    from gemkit.vector import VectorEnv

log = logging.getLogger(__name__)

# a name may hold colons and a level dashes, so that a wrapped family keeps another
# project's ids whole: `gem:game:Game2048-v0-extreme-hard` is GEM's `game:Game2048-v0-...`
ID_RE = re.compile(
    r"^(?P<family>[a-z][a-z0-9_]*):(?P<name>[A-Za-z0-9_.:]+?)"
    r"(?:-v(?P<version>\d+))?(?:-(?P<level>[A-Za-z0-9_.][A-Za-z0-9_.-]*))?$"
)

ENTRY_POINT_GROUP = "gemkit.envs"
#: the distribution whose entries are gemkit's own (their errors are bugs, not plugin trouble)
OWN_DISTRIBUTION = "gemkit"

EntryPoint = str | Callable[..., "Env"]
#: the vector modes of `make_vec`
VECTOR_MODES = ("sync", "async", "process", "ray")


@dataclass
class EnvSpec:
    """Everything needed to build one env id, plus what listings show about it.

    Not frozen, like gymnasium's: its wrappers copy the spec and add themselves to the copy
    (`env.spec` of a wrapped env), which a frozen one refuses.
    """

    id: str
    entry_point: EntryPoint
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    tags: tuple[str, ...] = ()
    expert: str | Callable[..., Any] | None = None
    #: top-level modules the env needs beyond gemkit's own dependencies, and the gemkit extra
    #: that installs them (`gemkit list` marks ids whose modules are missing)
    requires: tuple[str, ...] = ()
    extra: str | None = None
    family: str = ""
    name: str = ""
    version: int | None = None
    level: str | None = None
    # read by gymnasium tooling (env_checker, wrappers) when it finds `env.spec`
    nondeterministic: bool = False
    max_episode_steps: int | None = None
    reward_threshold: float | None = None
    order_enforce: bool = False
    disable_env_checker: bool = True
    additional_wrappers: tuple[Any, ...] = ()
    vector_entry_point: Any = None

    def make(self, **kwargs: Any) -> Env:
        """Build a fresh env from this spec (kwargs override the registered ones)."""
        render_mode = kwargs.pop("render_mode", None)
        factory = _resolve(self.entry_point)
        env = factory(**{**self.kwargs, **kwargs})
        env.unwrapped.spec = self
        if render_mode is not None:
            env.unwrapped.render_mode = render_mode
        made: Env = env
        return made

    def missing(self) -> tuple[str, ...]:
        """The modules of `requires` that are not installed (found without importing them)."""
        return tuple(m for m in self.requires if importlib.util.find_spec(m) is None)

    def install_hint(self) -> str:
        """What to install for this env, e.g. `pip install 'gemkit[rg]'`."""
        if self.extra:
            return f"pip install 'gemkit[{self.extra}]'"
        return "pip install " + " ".join(self.missing() or self.requires)

    def make_expert(self, seed: int | None = None) -> Any:
        """Build this env's scripted expert policy, or raise if it has none.

        An expert that draws random choices (a toolworld baseline) is seeded with `seed`, so
        the same seed plays the same episode; the others ignore it.
        """
        if self.expert is None:
            raise UnknownEnvError(f"{self.id} has no expert policy; use --policy random or an LLM")
        factory = _resolve(self.expert)
        seeded = _takes_seed(factory) and "seed" not in self.kwargs
        return factory(**self.kwargs, **({"seed": seed} if seeded else {}))


def parse_id(env_id: str) -> dict[str, Any]:
    """Split an id into family, name, version and level, or raise with the expected form."""
    m = ID_RE.match(env_id)
    if not m:
        raise InvalidEnvIdError(
            f"{env_id!r} is not an env id; expected 'family:Name-vN[-level]', "
            "e.g. 'game:GuessTheNumber-v0-easy' or 'rg:leg_counting'"
        )
    d = m.groupdict()
    d["version"] = int(d["version"]) if d["version"] is not None else None
    return d


_REGISTRY: dict[str, EnvSpec] = {}
_entries: list[Any] | None = None  # the group's entry points, read once per process
_loaded: set[str] = set()  # "dist/name" of the entries already loaded


def register(
    id: str,
    entry_point: EntryPoint,
    *,
    kwargs: dict[str, Any] | None = None,
    description: str = "",
    tags: Iterable[str] = (),
    expert: str | Callable[..., Any] | None = None,
    requires: Iterable[str] = (),
    extra: str | None = None,
    override: bool = False,
) -> EnvSpec:
    """Register an env id. `entry_point` is a factory or a `"module:attr"` string (lazy).

    `requires` names the top-level modules the env imports beyond gemkit's dependencies and
    `extra` the gemkit extra that installs them; listing checks them without importing.
    """
    parts = parse_id(id)
    if id in _REGISTRY and not override:
        raise RegistrationError(f"{id} is already registered; pass override=True to replace it")
    spec = EnvSpec(
        id=id,
        entry_point=entry_point,
        kwargs=dict(kwargs or {}),
        description=description,
        tags=tuple(tags),
        expert=expert,
        requires=tuple(requires),
        extra=extra,
        **parts,
    )
    _REGISTRY[id] = spec
    return spec


def _takes_seed(factory: Callable[..., Any]) -> bool:
    try:
        return "seed" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


def _resolve(target: str | Callable[..., Any]) -> Callable[..., Any]:
    if callable(target):
        return target
    module, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    resolved: Callable[..., Any] = obj
    return resolved


def _entry_points() -> list[Any]:
    global _entries
    if _entries is None:
        from importlib.metadata import distributions

        # every copy of a distribution's metadata, not only the first on sys.path: a stale
        # gemkit.egg-info in the working directory must not hide the installed entries
        by_key: dict[tuple[str, str], Any] = {}
        for dist in distributions():
            for ep in dist.entry_points.select(group=ENTRY_POINT_GROUP):
                by_key.setdefault((dist.metadata["Name"] or "", ep.name), ep)
        found = sorted(by_key.values(), key=lambda ep: ep.name)
        if not any(_own(ep) for ep in found):
            # an editable install made before the families moved to entry points
            raise RegistrationError(
                "gemkit's env families are missing from its installed metadata (the install "
                "is older than this checkout): run `pip install -e .` (or reinstall gemkit)"
            )
        _entries = found
    return _entries


def _own(ep: Any) -> bool:
    dist = getattr(ep, "dist", None)
    return dist is not None and dist.name == OWN_DISTRIBUTION


def _load(ep: Any) -> None:
    key = f"{getattr(ep.dist, 'name', '?')}/{ep.name}"
    if key in _loaded:
        return
    _loaded.add(key)
    if _own(ep):
        obj = ep.load()  # a failing built-in family is a bug to see, not to skip
    else:
        try:
            obj = ep.load()
        except Exception as e:  # a broken plugin must not break gemkit
            log.warning("could not load env plugin %s (%s): %s", ep.name, ep.value, e)
            return
    if callable(obj):
        obj()


def _load_family(family: str) -> None:
    """Load the entries that register ids of `family` (named `family` or `family.<part>`)."""
    for ep in _entry_points():
        if ep.name == family or ep.name.startswith(family + "."):
            _load(ep)


def _load_plugins() -> None:
    """Load every third-party entry (they may register ids of any family)."""
    for ep in _entry_points():
        if not _own(ep):
            _load(ep)


def _load_all() -> None:
    for ep in _entry_points():
        _load(ep)


def spec(env_id: str) -> EnvSpec:
    """Return the spec of a registered id; unknown ids raise with the closest matches."""
    if env_id in _REGISTRY:
        return _REGISTRY[env_id]
    m = ID_RE.match(env_id)
    if m:
        _load_family(m["family"])
        if env_id in _REGISTRY:
            return _REGISTRY[env_id]
    _load_all()
    if env_id in _REGISTRY:
        return _REGISTRY[env_id]
    close = difflib.get_close_matches(env_id, list(_REGISTRY), n=5, cutoff=0.5)
    if not close and m:
        close = sorted(i for i in _REGISTRY if i.startswith(m["family"] + ":"))[:5]
    hint = f"; closest: {', '.join(close)}" if close else ""
    raise UnknownEnvError(f"no env registered as {env_id!r}{hint}. `gemkit list` shows every id.")


def list_envs(family: str | None = None, tag: str | None = None) -> list[EnvSpec]:
    """Return every registered spec (optionally of one family or with one tag), sorted by id."""
    if family is None:
        _load_all()
    else:
        _load_family(family)
        _load_plugins()
    return sorted(
        (
            s
            for s in _REGISTRY.values()
            if (family is None or s.family == family) and (tag is None or tag in s.tags)
        ),
        key=lambda s: s.id,
    )


def make(
    env_id: str,
    *,
    wrappers: Sequence[Callable[[Env], Env]] = (),
    tools: Sequence[Any] | None = None,
    mcp: Any = None,
    tool_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Env:
    """Build an env by id, optionally give it tools, then apply `wrappers` in order.

    `tools` (names like `"python"` or tool objects) and `mcp` (an MCP server command or URL)
    wrap the env in a `ToolEnvWrapper`, turning a single-turn task into a tool-use task;
    `tool_options` go to the wrapper (e.g. `{"max_tool_uses": 5}`). The tool wrapper sits
    right on the env and `wrappers` go above it, the stack order of docs/agent-loop.md
    (env -> ToolEnvWrapper -> ChatHistory -> context wrappers): a history wrapper then sees
    the tool instructions in the task, and each call with its result.
    """
    return _assemble(spec(env_id), wrappers, tools, mcp, tool_options, kwargs)


def _assemble(
    env_spec: EnvSpec,
    wrappers: Sequence[Callable[[Env], Env]],
    tools: Sequence[Any] | None,
    mcp: Any,
    tool_options: dict[str, Any] | None,
    kwargs: dict[str, Any],
) -> Env:
    """`make` from a spec: build the env, give it its tools, then apply `wrappers`."""
    env = env_spec.make(**kwargs)
    if tools or mcp:
        from gemkit.tools.wrapper import wrap_with_tools

        # a wrapper stands in for its Env (it forwards every Env method): typed as what it wraps
        wrapped = wrap_with_tools(env, tools=tools or (), mcp=mcp, **(tool_options or {}))
        env = cast("Env", wrapped)
    for wrap in wrappers:
        env = wrap(env)
    return env


@dataclass(frozen=True)
class EnvFactory:
    """A picklable recipe for one env of a vector: the spec itself (so a worker process or
    Ray actor needs no registration of its own), the wrappers and the `make` arguments."""

    spec: EnvSpec
    wrappers: tuple[Callable[[Env], Env], ...] = ()
    make_kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> Env:
        """Build the env, as `make(spec.id, wrappers=..., **make_kwargs)` would."""
        kw = dict(self.make_kwargs)
        tools, mcp, options = (
            kw.pop("tools", None),
            kw.pop("mcp", None),
            kw.pop("tool_options", None),
        )
        return _assemble(self.spec, self.wrappers, tools, mcp, options, kw)


def make_vec(
    env_id: str,
    num_envs: int,
    *,
    wrappers: Sequence[Callable[[Env], Env]] = (),
    mode: str = "async",
    autoreset_mode: str = "next_step",
    max_concurrency: int | None = None,
    num_workers: int | None = None,
    driver_envs: int | None = None,
    **kwargs: Any,
) -> VectorEnv:
    """Build `num_envs` copies of an env in a vector: mode `sync`, `async`, `process` or `ray`.

    `num_workers` sets the worker processes (`process`) or actors (`ray`); by default each
    core gets one (in `process`, the driver's core steps a share itself, `driver_envs` envs:
    see `ProcessVectorEnv`). Other keyword arguments go to `make` (tools, tool options, env
    arguments).
    """
    from gemkit.vector import AsyncVectorEnv, SyncVectorEnv

    if mode not in VECTOR_MODES:
        raise ValueError(f"unknown vector mode {mode!r}; expected one of {VECTOR_MODES}")
    if num_workers is not None and mode in ("sync", "async"):
        raise ValueError(f"num_workers is for the process and ray modes, not {mode!r}")
    if driver_envs is not None and mode != "process":
        raise ValueError(f"driver_envs is for the process mode, not {mode!r}")
    factory = EnvFactory(spec(env_id), tuple(wrappers), kwargs)
    fns = [factory] * num_envs
    if mode == "sync":
        return SyncVectorEnv(fns, autoreset_mode=autoreset_mode)
    if mode == "async":
        return AsyncVectorEnv(fns, autoreset_mode=autoreset_mode, max_concurrency=max_concurrency)
    if mode == "process":
        from gemkit.vector.process import ProcessVectorEnv

        return ProcessVectorEnv(
            fns,
            autoreset_mode=autoreset_mode,
            max_concurrency=max_concurrency,
            num_workers=num_workers,
            driver_envs=driver_envs,
        )
    from gemkit.vector.ray import RayVectorEnv

    return RayVectorEnv(fns, autoreset_mode=autoreset_mode, num_workers=num_workers)


POLICIES = ("expert", "random", "llm")


def check_policy(name: str, env_id: str) -> EnvSpec:
    """Check, before any episode, that `env_id` exists, can be built here and be played by `name`.

    Raises `UnknownEnvError` for an unknown id or an expert the id does not have, and
    `GemkitError` naming what to install when a module the env requires is missing.
    """
    env_spec = spec(env_id)
    if name not in POLICIES:
        raise GemkitError(f"unknown policy {name!r}; expected one of {', '.join(POLICIES)}")
    missing = env_spec.missing()
    if missing:
        raise GemkitError(
            f"{env_id} needs {', '.join(missing)}, which is not installed: "
            f"{env_spec.install_hint()}"
        )
    if name == "expert":
        env_spec.make_expert(seed=0)  # no expert, or one that cannot be built, fails here
    return env_spec


def make_policy(name: str, env_id: str, *, seed: int | None = None, **kwargs: Any) -> Policy:
    """Build a policy by name for an env id: `expert`, `random`, or `llm` (kwargs go to it).

    For `llm`, pass one shared `client=` to every policy so its concurrency limit applies to
    all of them; other kwargs (`system_prompt`, `tools`, sampling) go to `LLMPolicy`.
    """
    if name == "expert":
        expert: Policy = spec(env_id).make_expert(seed=seed)
        return expert
    if name == "random":
        from gemkit.policy import RandomPolicy

        env = make(env_id)
        sampler = getattr(env.unwrapped, "random_action", None)
        env.close()
        return RandomPolicy(sampler, seed=seed)
    if name == "llm":
        from gemkit.llm import LLMClient, LLMPolicy

        client = kwargs.pop("client", None) or LLMClient()
        return LLMPolicy(client, **kwargs)
    raise ValueError(f"unknown policy {name!r}; expected 'expert', 'random' or 'llm'")
