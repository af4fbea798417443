"""`RayVectorEnv`: the vector API with its envs living in Ray actors, across a cluster.

Slots are spread over `num_workers` actors (each holds a contiguous block of envs). One vector
step is a few rounds of one batched call per actor: the slot generators of
`gemkit.vector.base` ask for `("reset", ...)`/`("step", ...)`, the driver groups the requests
of a round by actor, and hands each answer (or exception) back to its slot. So autoreset,
subset stepping and error isolation are exactly those of the sync and async vectors.
"""

from __future__ import annotations

import asyncio
import pickle
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

from gemkit.core import areset_of, astep_of, inner_runs_sync
from gemkit.errors import VectorEnvError
from gemkit.executor import ensure_ray
from gemkit.vector.aio import new_event_loop
from gemkit.vector.base import Request, SlotGen, VectorEnv

Answer = tuple[bool, Any]
#: one round: requests grouped by actor -> answers (or the error that sank the actor's call)
Round = dict[int, dict[int, Request]]


class _EnvGroup:
    """The body of one Ray actor: a block of envs, keyed by slot index."""

    def __init__(self, env_fns: dict[int, Callable[[], Any]]):
        self.envs = {i: fn() for i, fn in env_fns.items()}
        self.sync = {i: inner_runs_sync(e) for i, e in self.envs.items()}
        self.loop: asyncio.AbstractEventLoop | None = None

    def ready(self) -> bool:
        """True once every env is built (construction errors surface here)."""
        return True

    def run(self, requests: dict[int, Request]) -> dict[int, Answer]:
        """Carry out one request per slot; an env's exception is returned, not raised."""
        out: dict[int, Answer] = {}
        slow: dict[int, Request] = {}
        for i, req in requests.items():
            if self.sync[i]:
                out[i] = _answer_sync(self.envs[i], req)
            else:
                slow[i] = req
        if slow:
            if self.loop is None:
                self.loop = new_event_loop()
            done = self.loop.run_until_complete(_answer_all(self.envs, slow))
            out.update(zip(slow, done, strict=True))
        return out

    def close(self) -> None:
        """Close every env."""
        for env in self.envs.values():
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing must close the rest
                pass


def _portable(e: Exception) -> Exception:
    # the exception travels back by pickle; one that cannot is replaced by its text
    try:
        pickle.loads(pickle.dumps(e))
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(e).__name__}: {e}")
    return e


def _answer_sync(env: Any, req: Request) -> Answer:
    try:
        if req[0] == "step":
            return True, env.step(req[1])
        return True, env.reset(seed=req[1], options=req[2])
    except Exception as e:  # noqa: BLE001 - handed to the slot
        return False, _portable(e)


async def _answer_all(envs: dict[int, Any], requests: dict[int, Request]) -> list[Answer]:
    return await asyncio.gather(*(_answer_async(envs[i], r) for i, r in requests.items()))


async def _answer_async(env: Any, req: Request) -> Answer:
    try:
        if req[0] == "step":
            return True, await astep_of(env, req[1])
        return True, await areset_of(env, seed=req[1], options=req[2])
    except Exception as e:  # noqa: BLE001 - handed to the slot
        return False, _portable(e)


class RayVectorEnv(VectorEnv):
    """A vector env whose envs run in `num_workers` Ray actors (default: one per free CPU).

    `address` names the cluster (else `RAY_ADDRESS`, else a local instance; a running Ray
    session is reused). `actor_options` go to `ray.remote` (default `num_cpus=1`,
    `max_restarts=1`). An env that raises marks only its slot; an actor process that dies
    marks every slot it holds, and Ray restarts it: those slots reset on their next step
    (resets wait up to `restart_wait_s` for a restarting actor).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        *,
        autoreset_mode: str = "next_step",
        num_workers: int | None = None,
        address: str | None = None,
        actor_options: dict[str, Any] | None = None,
        start_timeout_s: float = 60.0,
        restart_wait_s: float = 30.0,
    ):
        # the envs are built in the actors, not here
        self._init_slots(len(env_fns), autoreset_mode)
        self._closed = False
        ray = ensure_ray(address)
        self.restart_wait_s = restart_wait_s
        n = self.num_envs
        options = {"num_cpus": 1, "max_restarts": 1, **(actor_options or {})}
        if num_workers is None:
            per = options["num_cpus"] or 1
            num_workers = max(1, int(ray.available_resources().get("CPU", 1) // per))
        if num_workers < 1:
            raise VectorEnvError(f"num_workers must be >= 1, got {num_workers}")
        self.num_workers = w = min(num_workers, n)
        self._owner = [i * w // n for i in range(n)]
        actor_cls = ray.remote(**options)(_EnvGroup)
        self._actors = [
            actor_cls.remote({i: env_fns[i] for i in range(n) if self._owner[i] == k})
            for k in range(w)
        ]
        try:
            ray.get([a.ready.remote() for a in self._actors], timeout=start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            self._kill()
            raise VectorEnvError(
                f"{w} env actors did not start within {start_timeout_s:.0f} s; each asks for "
                f"{options['num_cpus']} CPU and the cluster has "
                f"{ray.available_resources().get('CPU', 0):g} free: pass num_workers= or "
                "actor_options={'num_cpus': 0.5}"
            ) from None
        except ray.exceptions.RayError as e:
            self._kill()
            raise VectorEnvError(f"building the envs in their Ray actors failed: {e}") from e

    # -- the driver -----------------------------------------------------------------------

    def _rounds(self, gens: dict[int, SlotGen]) -> Generator[Round, dict[int, Any], dict[int, Any]]:
        """Advance every slot; yield each round's requests by actor, receive the answers."""
        results: dict[int, Any] = {}
        asked: dict[int, Request] = {}
        for i, gen in gens.items():
            _advance(i, gen, (True, None), asked, results, first=True)
        while asked:
            by_actor: Round = {}
            for i, req in asked.items():
                by_actor.setdefault(self._owner[i], {})[i] = req
            answers = yield by_actor
            asked = {}
            for k, reqs in by_actor.items():
                got = answers[k]
                for i in reqs:
                    if isinstance(got, BaseException):
                        answer: Answer = (False, _actor_failure(got))
                    else:
                        answer = got[i]
                    _advance(i, gens[i], answer, asked, results)
        return results

    def _drive(self, gens: dict[int, SlotGen]) -> dict[int, Any]:
        import ray

        rounds = self._rounds(gens)
        try:
            by_actor = next(rounds)
            while True:
                refs = {k: self._actors[k].run.remote(reqs) for k, reqs in by_actor.items()}
                answers: dict[int, Any] = {}
                try:
                    answers = dict(zip(refs, ray.get(list(refs.values())), strict=True))
                except ray.exceptions.RayError:  # an actor died: find out which, one by one
                    for k, ref in refs.items():
                        try:
                            answers[k] = ray.get(ref)
                        except ray.exceptions.RayError as e:
                            answers[k] = e
                    deadline = time.monotonic() + self.restart_wait_s
                    while (again := _retryable(by_actor, answers)) and time.monotonic() < deadline:
                        time.sleep(0.2)
                        for k in again:
                            try:
                                answers[k] = ray.get(self._actors[k].run.remote(by_actor[k]))
                            except ray.exceptions.RayError as e:
                                answers[k] = e
                by_actor = rounds.send(answers)
        except StopIteration as stop:
            results: dict[int, Any] = stop.value
            return results

    async def _adrive(self, gens: dict[int, SlotGen]) -> dict[int, Any]:
        rounds = self._rounds(gens)
        try:
            by_actor = next(rounds)
            while True:
                keys = list(by_actor)
                refs = [self._actors[k].run.remote(by_actor[k]) for k in keys]
                done = await asyncio.gather(*refs, return_exceptions=True)
                answers = dict(zip(keys, done, strict=True))
                deadline = time.monotonic() + self.restart_wait_s
                while (again := _retryable(by_actor, answers)) and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)
                    refs = [self._actors[k].run.remote(by_actor[k]) for k in again]
                    done = await asyncio.gather(*refs, return_exceptions=True)
                    answers.update(zip(again, done, strict=True))
                by_actor = rounds.send(answers)
        except StopIteration as stop:
            results: dict[int, Any] = stop.value
            return results

    def close(self) -> None:
        """Close every env and stop the actors."""
        if self._closed:
            return
        self._closed = True
        try:
            import ray

            if ray.is_initialized():
                ray.get([a.close.remote() for a in self._actors], timeout=10)
        except Exception:  # noqa: BLE001 - the actors are killed below either way
            pass
        self._kill()

    def _kill(self) -> None:
        try:
            import ray

            if not ray.is_initialized():
                return
        except Exception:  # noqa: BLE001 - interpreter shutdown: Ray tears the actors down
            return
        for actor in getattr(self, "_actors", []):
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._actors = []


def _retryable(by_actor: Round, answers: dict[int, Any]) -> list[int]:
    """Actors that were restarting when asked only to reset: safe to ask again."""
    from ray.exceptions import ActorUnavailableError

    return [
        k
        for k, got in answers.items()
        if isinstance(got, ActorUnavailableError)
        and all(req[0] == "reset" for req in by_actor[k].values())
    ]


def _actor_failure(error: BaseException) -> Exception:
    # Ray's own errors carry a long traceback; the slot gets the cause in one line
    cause = getattr(error, "cause", None)
    why = f"{type(cause).__name__}: {cause}" if cause is not None else type(error).__name__
    return RuntimeError(f"the env's Ray actor failed ({why.splitlines()[0]}); see the Ray logs")


def _advance(
    i: int,
    gen: SlotGen,
    answer: Answer,
    asked: dict[int, Request],
    results: dict[int, Any],
    *,
    first: bool = False,
) -> None:
    ok, value = answer
    try:
        if first:
            asked[i] = next(gen)
        elif ok:
            asked[i] = gen.send(value)
        else:
            asked[i] = gen.throw(value)
    except StopIteration as stop:
        results[i] = stop.value
