"""Executors: run one function over many items, here, in processes, or on a Ray cluster.

    with get_executor("ray", workers=8) as ex:
        for result in ex.map_unordered(build_record, seeds):
            writer.write(result)          # results arrive as they finish, in any order

`map` yields in item order instead (for a run whose output must not depend on the number of
workers). `local` runs in this process (a thread pool when `workers > 1`: right for LLM-bound
work), `process` in a pool of processes (`fn` and items must pickle), `ray` as Ray tasks on the
cluster at `address` (or `RAY_ADDRESS`, else a local one). At most `workers * 2` items are in
flight, so a long or endless iterable of items is consumed lazily. `initializer(*initargs)`
runs once in every worker process before its first item (once in this process for `local`):
the place to open an index or load a world that every item reads.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any, TypeVar

from gemkit.cores import usable_cores
from gemkit.errors import GemkitError

T = TypeVar("T")
R = TypeVar("R")
Init = Callable[..., Any] | None

EXECUTORS = ("local", "process", "ray")


class ExecutorError(GemkitError):
    """An executor that cannot be built (unknown kind, Ray missing or unreachable)."""


class Executor:
    """Maps a function over items with `workers` at a time; use as a context manager."""

    kind = ""

    def __init__(
        self, workers: int | None = None, *, initializer: Init = None, initargs: tuple = ()
    ):
        if workers is not None and workers < 1:
            raise ExecutorError(f"workers must be >= 1, got {workers}")
        self.workers = workers or 1
        self.initializer = initializer
        self.initargs = tuple(initargs)

    def map_unordered(
        self, fn: Callable[[T], R], items: Iterable[T], *, return_exceptions: bool = False
    ) -> Iterator[R]:
        """Yield `fn(item)` for every item in completion order.

        An exception raised by `fn` is raised here (work not started is cancelled), or yielded
        as a value when `return_exceptions=True`.
        """
        yield from self._results(fn, items, ordered=False, return_exceptions=return_exceptions)

    def map(
        self, fn: Callable[[T], R], items: Iterable[T], *, return_exceptions: bool = False
    ) -> Iterator[R]:
        """Yield `fn(item)` for every item in item order (a slow item holds back later ones)."""
        yield from self._results(fn, items, ordered=True, return_exceptions=return_exceptions)

    def _results(
        self, fn: Callable[[T], R], items: Iterable[T], *, ordered: bool, return_exceptions: bool
    ) -> Iterator[Any]:
        raise NotImplementedError

    def close(self) -> None:
        """Release the workers."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} workers={self.workers}>"


def _check(ok: bool, value: Any, return_exceptions: bool) -> Any:
    if not ok and not return_exceptions:
        raise value
    return value


class _FuturesExecutor(Executor):
    def _pool(self) -> cf.Executor:
        raise NotImplementedError

    def _results(
        self, fn: Callable[[T], R], items: Iterable[T], *, ordered: bool, return_exceptions: bool
    ) -> Iterator[Any]:
        pool = self._pool()
        it = iter(items)
        window = deque(pool.submit(fn, x) for x in islice(it, self.workers * 2))
        try:
            while window:
                if ordered:
                    future = window.popleft()
                else:
                    done, _ = cf.wait(window, return_when=cf.FIRST_COMPLETED)
                    future = next(f for f in window if f in done)
                    window.remove(future)
                error = future.exception()
                yield _check(error is None, error or future.result(), return_exceptions)
                window.extend(pool.submit(fn, x) for x in islice(it, 1))
        finally:
            for future in window:
                future.cancel()


class LocalExecutor(_FuturesExecutor):
    """Runs in this process: inline for one worker, else on a pool of `workers` threads."""

    kind = "local"

    def __init__(
        self, workers: int | None = None, *, initializer: Init = None, initargs: tuple = ()
    ):
        super().__init__(workers, initializer=initializer, initargs=initargs)
        self._threads: cf.ThreadPoolExecutor | None = None
        self._initialized = False

    def _pool(self) -> cf.Executor:
        if self._threads is None:
            self._threads = cf.ThreadPoolExecutor(self.workers, thread_name_prefix="gemkit-exec")
        return self._threads

    def _results(
        self, fn: Callable[[T], R], items: Iterable[T], *, ordered: bool, return_exceptions: bool
    ) -> Iterator[Any]:
        if self.initializer is not None and not self._initialized:
            self.initializer(*self.initargs)
            self._initialized = True
        if self.workers > 1:
            yield from super()._results(
                fn, items, ordered=ordered, return_exceptions=return_exceptions
            )
            return
        for x in items:
            try:
                result: Any = fn(x)
            except Exception as e:
                if not return_exceptions:
                    raise
                result = e
            yield result

    def close(self) -> None:
        """Stop the thread pool."""
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None


class ProcessExecutor(_FuturesExecutor):
    """Runs on a pool of `workers` processes (default: `gemkit.cores.usable_cores`); `fn` must
    pickle."""

    kind = "process"

    def __init__(
        self, workers: int | None = None, *, initializer: Init = None, initargs: tuple = ()
    ):
        super().__init__(workers or usable_cores(), initializer=initializer, initargs=initargs)
        self._procs: cf.ProcessPoolExecutor | None = None

    def _pool(self) -> cf.Executor:
        if self._procs is None:
            self._procs = cf.ProcessPoolExecutor(
                self.workers, initializer=self.initializer, initargs=self.initargs
            )
        return self._procs

    def close(self) -> None:
        """Stop the process pool."""
        if self._procs is not None:
            self._procs.shutdown(wait=True, cancel_futures=True)
            self._procs = None


class RayExecutor(Executor):
    """Runs each item as a Ray task (`num_cpus` each); `fn` travels by cloudpickle.

    `workers` bounds the tasks in flight (default: the cluster's CPUs / `num_cpus`).
    """

    kind = "ray"

    def __init__(
        self,
        workers: int | None = None,
        *,
        initializer: Init = None,
        initargs: tuple = (),
        address: str | None = None,
        num_cpus: float = 1,
        init_kwargs: dict[str, Any] | None = None,
    ):
        ray = ensure_ray(address, **(init_kwargs or {}))
        if workers is None:
            workers = max(1, int(ray.cluster_resources().get("CPU", 1) // max(num_cpus, 1e-9)))
        super().__init__(workers, initializer=initializer, initargs=initargs)
        self.num_cpus = num_cpus
        # workers are reused between tasks: the token marks a process as initialized
        self._token = uuid.uuid4().hex

    def _results(
        self, fn: Callable[[T], R], items: Iterable[T], *, ordered: bool, return_exceptions: bool
    ) -> Iterator[Any]:
        import ray

        remote = ray.remote(num_cpus=self.num_cpus, max_retries=0)(_call)
        init = None if self.initializer is None else (self._token, self.initializer, self.initargs)
        job = ray.put((fn, init))
        it = iter(items)
        window = [remote.remote(job, x) for x in islice(it, self.workers * 2)]
        try:
            while window:
                if ordered:
                    ref = window.pop(0)
                else:
                    done, window = ray.wait(window, num_returns=1)
                    ref = done[0]
                try:
                    ok, value = ray.get(ref)
                except ray.exceptions.RayError as e:  # the worker died, or the result won't pickle
                    ok, value = False, e
                yield _check(ok, value, return_exceptions)
                window += [remote.remote(job, x) for x in islice(it, 1)]
        finally:
            for ref in window:
                ray.cancel(ref)


_initialized: set[str] = set()


def _call(job: tuple[Callable[[Any], Any], tuple | None], item: Any) -> tuple[bool, Any]:
    # return the exception instead of raising it, so the caller gets the original type
    # rather than a RayTaskError wrapper
    fn, init = job
    try:
        if init is not None and init[0] not in _initialized:
            init[1](*init[2])
            _initialized.add(init[0])
        return True, fn(item)
    except Exception as e:
        return False, e


def get_executor(
    kind: str = "local",
    workers: int | None = None,
    *,
    initializer: Init = None,
    initargs: tuple = (),
    **options: Any,
) -> Executor:
    """An executor by name: `local`, `process` or `ray` (`options` go to Ray: `address=`...)."""
    if kind == "local":
        return LocalExecutor(workers, initializer=initializer, initargs=initargs)
    if kind == "process":
        return ProcessExecutor(workers, initializer=initializer, initargs=initargs)
    if kind == "ray":
        return RayExecutor(workers, initializer=initializer, initargs=initargs, **options)
    raise ExecutorError(f"unknown executor {kind!r}; expected one of {', '.join(EXECUTORS)}")


def ensure_ray(address: str | None = None, **init_kwargs: Any) -> Any:
    """The `ray` module, connected: reuses a running session, else `ray.init(address)`.

    `address` (or the `RAY_ADDRESS` variable) names a cluster, e.g. `ray://head:10001` or
    `auto`; without one Ray starts a local instance.
    """
    try:
        import ray
    except ImportError as e:
        raise ExecutorError(
            "Ray is not installed; install it with `pip install 'gemkit[ray]'`"
        ) from e
    if not ray.is_initialized():
        init_kwargs.setdefault("include_dashboard", False)
        init_kwargs.setdefault("log_to_driver", False)
        try:
            ray.init(address=address, **init_kwargs)
        except ConnectionError as e:
            raise ExecutorError(
                f"cannot reach a Ray cluster at {address or os.environ.get('RAY_ADDRESS')!r}: "
                f"{e}. Start one with `ray start --head`, or leave the address unset for a "
                "local instance."
            ) from e
    return ray
