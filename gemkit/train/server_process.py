"""A model server in a child process (a subprocess or a fork) that dies with its parent."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from gemkit.errors import GemkitError
from gemkit.train.engine import ModelEngine
from gemkit.train.model_server import ModelServer, ServerLimits


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, get SIGTERM when the parent dies (even by a kill
    that skips its cleanup), so a server never outlives the trainer that started it."""
    import sys

    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class _ChildServer:
    """A model server in a child of this process on 127.0.0.1: awaited and stopped alike."""

    def __init__(self, log_path: str | Path | None):
        import tempfile

        self._dir = tempfile.TemporaryDirectory(prefix="gemkit-serve-")
        self.log_path = Path(log_path) if log_path else Path(self._dir.name) / "server.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._ready = Path(self._dir.name) / "ready"
        self.proc: Any = None

    def start(self) -> _ChildServer:
        """Start the child (returns at once; `wait` blocks until it serves)."""
        raise NotImplementedError

    def exit_code(self) -> int | None:
        """The child's exit status, or None while it runs."""
        raise NotImplementedError

    def _terminate(self) -> None:
        raise NotImplementedError

    def wait(self, timeout: float = 300.0) -> str:
        """Block until the child serves; its base URL. A child that died is a GemkitError."""
        deadline = time.monotonic() + timeout
        while not self._ready.exists():
            code = self.exit_code()
            if code is not None:
                tail = self.log_path.read_text()[-1500:] if self.log_path.exists() else ""
                raise GemkitError(f"the model server exited ({code}):\n{tail}")
            if time.monotonic() > deadline:
                self.stop()
                raise GemkitError(f"the model server did not start within {timeout:g} s")
            time.sleep(0.02)
        return self.url

    def stop(self) -> None:
        """Stop the child (safe to call twice)."""
        if self.proc is not None and self.exit_code() is None:
            self._terminate()

    def __enter__(self) -> Any:
        self.start()
        self.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._dir.cleanup()


class ServerProcess(_ChildServer):
    """`gemkit serve model` in a child process on 127.0.0.1: started, awaited, stopped.

    `args` are the serve flags after `gemkit serve model` (a PATH or `--tiny ENV`, ...);
    the port is picked here. Its output goes to `log_path` (a temporary file by default).
    """

    def __init__(self, args: Sequence[str], *, log_path: str | Path | None = None):
        super().__init__(log_path)
        self.args = list(args)
        self._log: Any = None

    def start(self) -> ServerProcess:
        """Start the child process (returns at once; `wait` blocks until it serves)."""
        import subprocess
        import sys

        cmd = [sys.executable, "-m", "gemkit", "serve", "model", *self.args]
        cmd += ["--port", str(self.port), "--ready-file", str(self._ready)]
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
        )
        return self

    def exit_code(self) -> int | None:
        """The child's exit status, or None while it runs."""
        return self.proc.poll()

    def _terminate(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except Exception:  # noqa: BLE001 - a child that ignores SIGTERM
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """Stop the child process (safe to call twice)."""
        super().stop()
        if self._log is not None:
            self._log.close()
            self._log = None


class ForkedServer(_ChildServer):
    """The model server in a forked child of this process, over `model` exactly as it is now.

    The child shares the parent's imports and weights (copy-on-write): no second start-up,
    no second load, and the served weights are the learner's by construction. CPU only (CUDA
    does not survive a fork); fork before this process starts threads or an event loop. Same
    interface as `ServerProcess`.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "policy",
        seed: int = 0,
        limits: ServerLimits | None = None,
        token: str | None = None,
        log_path: str | Path | None = None,
    ):
        super().__init__(log_path)
        self.model, self.tokenizer, self.name, self.seed = model, tokenizer, name, seed
        self.limits, self.token = limits or ServerLimits(), token

    def start(self) -> ForkedServer:
        """Fork the child (returns at once; `wait` blocks until it serves)."""
        import multiprocessing

        if str(getattr(self.model, "device", "cpu")) != "cpu":
            raise GemkitError("a forked server needs a CPU model; use ServerProcess for CUDA")
        ctx = multiprocessing.get_context("fork")
        self.proc = ctx.Process(target=self._serve, name="gemkit-model-server", daemon=True)
        self.proc.start()
        return self

    def _serve(self) -> None:  # in the child
        import os
        import sys

        from gemkit.serving import run_app
        from gemkit.vector.aio import new_event_loop

        _die_with_parent()
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        torch.set_num_threads(1)
        engine = ModelEngine(self.model, self.tokenizer, name=self.name, seed=self.seed)
        server = ModelServer(engine, limits=self.limits, token=self.token)

        def started() -> None:
            os.write(1, f"serving {self.name} on {self.url} (forked, weight_version 0)\n".encode())
            self._ready.write_text(self.url)

        run_app(server.app(), "127.0.0.1", self.port, token=server.token, on_start=started,
                loop=new_event_loop())  # fmt: skip
        sys.exit(0)

    def exit_code(self) -> int | None:
        """The child's exit status, or None while it runs."""
        return None if self.proc.is_alive() else self.proc.exitcode

    def _terminate(self) -> None:
        self.proc.terminate()
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(30)
