"""What every vector env shares: slot semantics for autoreset, seeding and error isolation.

Each slot's work is a small generator that *asks* for env calls (`("reset", seed, options)` or
`("step", action)`) and receives their results or exceptions; the sync, asyncio and Ray vectors
only differ in how they carry those calls out (`drive_sync` here; one task per slot on an event
loop, or rounds of one batched actor call, there), and the process vector runs an asyncio one in
each worker. The semantics therefore live in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from gemkit.errors import VectorEnvError

AUTORESET_MODES = ("next_step", "same_step", "disabled")

Request = tuple[Any, ...]
SlotResult = tuple[str, float, bool, bool, dict[str, Any]]
SlotGen = Generator[Request, Any, Any]
ResetRow = tuple[str, dict[str, Any]]
#: what a slot's generator returns: a SlotResult (a step) or a ResetRow (a reset)
R = TypeVar("R")


@dataclass
class VectorStep:
    """The result of one vector step: gymnasium's 5-tuple `obs, rewards, terminated, truncated,
    infos`, which unpacks and indexes like a tuple (`out[1]` is the rewards), with names."""

    observations: list[str]
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: list[dict[str, Any]]

    def _fields(self) -> tuple[Any, ...]:
        return (self.observations, self.rewards, self.terminated, self.truncated, self.infos)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._fields())

    def __getitem__(self, index: int | slice) -> Any:
        return self._fields()[index]

    def __len__(self) -> int:
        return 5


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def all_failed_message(errors: Mapping[int, str], num_envs: int, *, shown: int = 8) -> str:
    """The message of a reset in which every slot failed: each slot's error (the first few)."""
    which = "every env" if len(errors) == num_envs else f"every one of the {len(errors)} envs"
    lines = [f"env {i}: {text}" for i, text in sorted(errors.items())[:shown]]
    if len(errors) > shown:
        lines.append(f"... and {len(errors) - shown} more")
    return f"{which} failed to reset:\n  " + "\n  ".join(lines)


class VectorEnv:
    """Many copies of an env stepped together, with autoreset and per-slot error isolation.

    - `reset(seed=s)` seeds env *i* with `s + i` (or `seed[i]` for a list).
    - `step(actions)` takes a list (one action per env) or a dict `{index: action}` to step a
      subset; slots not stepped report their last observation, reward 0 and `info["skipped"]`.
    - Autoreset `next_step`: the step after an episode ends resets that slot (its action is
      ignored) and returns the first observation with reward 0. `same_step`: the slot resets in
      the step that ended it; `info["final_obs"]` and `info["final_info"]` keep the last ones.
      `disabled`: the slot stays done until `reset(indices=[i])`; stepping it reports an error.
    - An env that raises marks only its own slot: `info["error"]`, `truncated=True`, and it is
      reset like any finished episode. A slot whose reset failed is reset again at its next
      step (unless autoreset is `disabled`). A `reset()` in which every slot asked fails raises
      `VectorEnvError` with each slot's error: there is no observation to return.
    """

    envs: list[Any]

    def __init__(self, env_fns: Sequence[Callable[[], Any]], *, autoreset_mode: str = "next_step"):
        self._init_slots(len(env_fns), autoreset_mode)
        self.envs = [fn() for fn in env_fns]
        self._closed = False

    def _init_slots(self, num_envs: int, autoreset_mode: str) -> None:
        """Check the arguments and set up the per-slot state (a vector whose envs live
        elsewhere, in workers or actors, calls this instead of building them here)."""
        if autoreset_mode not in AUTORESET_MODES:
            raise VectorEnvError(
                f"unknown autoreset_mode {autoreset_mode!r}; expected one of {AUTORESET_MODES}"
            )
        if num_envs < 1:
            raise VectorEnvError("a vector env needs at least one env")
        self.autoreset_mode = autoreset_mode
        self.num_envs = num_envs
        self.envs = []
        self._last_obs: list[Any] = [""] * num_envs
        self._done = [False] * num_envs
        self._order = list(range(num_envs))  # the slots, for results that come in this order

    # -- slot semantics -------------------------------------------------------------------

    def _seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, int | np.integer):
            return [int(seed) + i for i in range(self.num_envs)]
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise VectorEnvError(f"got {len(seeds)} seeds for {self.num_envs} envs")
        return seeds

    def _reset_slot(
        self, i: int, seed: int | None, options: dict[str, Any] | None
    ) -> Generator[Request, Any, ResetRow]:
        try:
            obs, info = yield ("reset", seed, options)
        except Exception as e:  # noqa: BLE001 - isolate the slot
            obs, info = self._last_obs[i], {"error": _error_text(e)}
            self._done[i] = True
        else:
            self._done[i] = False
        self._last_obs[i] = obs
        return obs, info

    def _first_request(self, i: int, action: Any) -> Request | None:
        """The request `_step_slot(i, action)` makes first (None: it needs no env call).

        A slot whose episode runs (not done) always asks to step its env with the action. The
        generator does nothing before this request, so a vector may carry it out first and run
        the generator once the answer is in, or, for the common answer, not at all
        (`_stepped`).
        """
        if not self._done[i]:
            return ("step", action)
        if self.autoreset_mode == "disabled":
            return None
        # next_step: the episode ended last step; same_step: its reset failed (or its worker
        # process was lost), so there is no episode to step: reset it now
        return ("reset", None, None)

    def _stepped(self, i: int, out: Any) -> SlotResult | None:
        """The result of running slot `i`'s step answered with `out` when its episode goes on
        (the slot's state recorded), else None: the episode ended, the rest of `_step_slot`
        applies. An answer that is not a 5-tuple raises (`_step_slot` reports it)."""
        obs, reward, terminated, truncated, info = out
        if terminated or truncated:
            return None
        self._last_obs[i] = obs
        return obs, float(reward), False, False, info

    def _step_slot(self, i: int, action: Any) -> Generator[Request, Any, SlotResult]:
        first = self._first_request(i, action)
        info: dict[str, Any]
        if first is None:
            info = {"error": f"env {i} has finished its episode; call reset(indices=[{i}])"}
            return self._last_obs[i], 0.0, False, False, info
        if first[0] == "reset":
            obs, info = yield from self._reset_slot(i, None, None)
            return obs, 0.0, False, False, info
        try:
            out = yield first
            result = self._stepped(i, out)  # a malformed answer lands below too
        except Exception as e:  # noqa: BLE001 - isolate the slot
            obs, reward, terminated, truncated = self._last_obs[i], 0.0, False, True
            info = {"error": _error_text(e)}
        else:
            if result is not None:  # the episode goes on
                return result
            obs, reward, terminated, truncated, info = out
        # the episode is over (it ended, or the env raised)
        self._last_obs[i] = obs
        self._done[i] = True
        if self.autoreset_mode == "same_step":
            new_obs, new_info = yield from self._reset_slot(i, None, None)
            final_info = info
            info = {**new_info, "final_obs": obs, "final_info": final_info}
            if "error" in final_info:
                info.setdefault("error", final_info["error"])
            obs = new_obs
        return obs, float(reward), bool(terminated), bool(truncated), info

    def _step_sync(self, i: int, action: Any, env: Any) -> SlotResult:
        """Slot `i`'s step with the env's sync `step`: the common answer (the episode goes
        on) taken by `_stepped` with no generator, any other through `_step_slot`."""
        if self._done[i]:
            return drive_sync(self._step_slot(i, action), env)
        try:  # a running slot asks first to step its env (`_first_request`)
            out = env.step(action)
        except Exception as e:  # noqa: BLE001 - handed to the slot
            return drive_sync(self._step_slot(i, action), env, (e, True))
        try:
            result = self._stepped(i, out)
        except Exception:  # noqa: BLE001 - a malformed answer: the generator reports it
            result = None
        if result is None:
            return drive_sync(self._step_slot(i, action), env, (out, False))
        return result

    def _plan_step(self, actions: Sequence[Any] | Mapping[int, Any]) -> dict[int, Any]:
        if self._closed:
            raise VectorEnvError("this vector env is closed")
        if isinstance(actions, Mapping):
            bad = [i for i in actions if not 0 <= int(i) < self.num_envs]
            if bad:
                raise VectorEnvError(f"indices {bad} out of range for {self.num_envs} envs")
            return {int(i): a for i, a in actions.items()}
        actions = list(actions)
        if len(actions) != self.num_envs:
            raise VectorEnvError(
                f"got {len(actions)} actions for {self.num_envs} envs; pass one per env, "
                "or a dict {index: action} to step a subset"
            )
        return dict(enumerate(actions))

    def _plan_reset(
        self, seed: int | Sequence[int | None] | None, indices: Sequence[int] | None
    ) -> dict[int, int | None]:
        if self._closed:
            raise VectorEnvError("this vector env is closed")
        seeds = self._seeds(seed)
        chosen = range(self.num_envs) if indices is None else indices
        return {int(i): seeds[int(i)] for i in chosen}

    def _collect_step(self, results: dict[int, SlotResult]) -> VectorStep:
        n = self.num_envs
        if len(results) == n:  # every slot stepped: transpose the rows into columns
            in_order = list(results) == self._order
            rows = results.values() if in_order else [results[i] for i in range(n)]
            obs_col, reward_col, terminated_col, truncated_col, info_col = zip(*rows, strict=True)
            return VectorStep(
                list(obs_col),
                np.array(reward_col, dtype=np.float64),
                np.array(terminated_col, dtype=bool),
                np.array(truncated_col, dtype=bool),
                list(info_col),
            )
        obs: list[str] = list(self._last_obs)
        infos: list[dict[str, Any]] = [{"skipped": True} for _ in range(n)]
        rewards = np.zeros(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        for i, (o, r, te, tr, info) in results.items():
            obs[i], rewards[i], terminated[i], truncated[i], infos[i] = o, r, te, tr, info
        return VectorStep(obs, rewards, terminated, truncated, infos)

    def _collect_reset(
        self, results: dict[int, ResetRow]
    ) -> tuple[list[str], list[dict[str, Any]]]:
        infos: list[dict[str, Any]] = [{"skipped": True} for _ in range(self.num_envs)]
        for i, (_, info) in results.items():
            infos[i] = info
        failed = {i: info.get("error", "") for i, (_, info) in results.items() if self._done[i]}
        if len(failed) == self.num_envs:
            # no slot has a first observation: an empty batch would pass for one, so say why
            # (a reset of some slots that fail marks those slots, as a failed step does)
            raise VectorEnvError(all_failed_message(failed, self.num_envs))
        return list(self._last_obs), infos

    # -- how a vector carries out the slots' requests ---------------------------------------

    def _drive(self, gens: dict[int, SlotGen]) -> dict[int, Any]:
        """Run every slot generator to its end; return each slot's result."""
        raise NotImplementedError

    async def _adrive(self, gens: dict[int, SlotGen]) -> dict[int, Any]:
        """Async twin of `_drive` (default: the blocking one)."""
        return self._drive(gens)

    # -- public API -----------------------------------------------------------------------

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
        indices: Sequence[int] | None = None,
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """Reset every env (or `indices`); return observations and infos for all slots."""
        return self._collect_reset(self._reset_results(seed, options, indices))

    def step(self, actions: Sequence[Any] | Mapping[int, Any]) -> VectorStep:
        """Step every env (list) or a subset (dict index → action)."""
        return self._collect_step(self._step_results(actions))

    def _reset_results(
        self,
        seed: int | Sequence[int | None] | None,
        options: dict[str, Any] | None,
        indices: Sequence[int] | None,
    ) -> dict[int, tuple[str, dict[str, Any]]]:
        """Each asked slot's `(obs, info)`, slot state updated; nothing raised for failures."""
        return self._drive(self._reset_gens(seed, options, indices))

    def _step_results(self, actions: Sequence[Any] | Mapping[int, Any]) -> dict[int, SlotResult]:
        """Each stepped slot's 5-tuple, slot state (autoreset, errors) updated."""
        return self._drive(self._step_gens(actions))

    async def areset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
        indices: Sequence[int] | None = None,
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """Async twin of `reset`."""
        return self._collect_reset(await self._areset_results(seed, options, indices))

    async def astep(self, actions: Sequence[Any] | Mapping[int, Any]) -> VectorStep:
        """Async twin of `step`."""
        return self._collect_step(await self._astep_results(actions))

    async def _areset_results(
        self,
        seed: int | Sequence[int | None] | None,
        options: dict[str, Any] | None,
        indices: Sequence[int] | None,
    ) -> dict[int, tuple[str, dict[str, Any]]]:
        """Async twin of `_reset_results`."""
        return await self._adrive(self._reset_gens(seed, options, indices))

    async def _astep_results(
        self, actions: Sequence[Any] | Mapping[int, Any]
    ) -> dict[int, SlotResult]:
        """Async twin of `_step_results`."""
        return await self._adrive(self._step_gens(actions))

    def _reset_gens(
        self,
        seed: int | Sequence[int | None] | None,
        options: dict[str, Any] | None,
        indices: Sequence[int] | None,
    ) -> dict[int, SlotGen]:
        plan = self._plan_reset(seed, indices)
        return {i: self._reset_slot(i, s, options) for i, s in plan.items()}

    def _step_gens(self, actions: Sequence[Any] | Mapping[int, Any]) -> dict[int, SlotGen]:
        return {i: self._step_slot(i, a) for i, a in self._plan_step(actions).items()}

    def close(self) -> None:
        """Close every env; the vector cannot be used afterwards."""
        if self._closed:
            return
        self._closed = True
        for env in self.envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing must close the rest
                pass

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.num_envs

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()


def drive_sync(
    gen: Generator[Request, Any, R], env: Any, answered: tuple[Any, bool] | None = None
) -> R:
    """Carry out a slot's requests with the env's sync methods.

    `answered`: `(answer, raised)` of its first request, already carried out by the caller.
    """
    try:
        request = next(gen)
        if answered is not None:
            answer, raised = answered
            request = gen.throw(answer) if raised else gen.send(answer)
        while True:
            try:
                if request[0] == "step":
                    result = env.step(request[1])
                else:
                    result = env.reset(seed=request[1], options=request[2])
            except Exception as e:  # noqa: BLE001 - handed to the slot
                request = gen.throw(e)
            else:
                request = gen.send(result)
    except StopIteration as stop:
        value: R = stop.value  # the generator's return value
        return value
