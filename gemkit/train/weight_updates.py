"""Weight updates over HTTP: the upload endpoints of `ModelServer`, and a model's upload body."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from aiohttp import web

from gemkit.serving import (
    RequestError,
    preview,
    read_body,
)
from gemkit.train.engine import ModelEngine, unique_state

if TYPE_CHECKING:
    from gemkit.train.model_server import ServerLimits


def state_bytes(model: Any) -> bytes:
    """A model's weights as a safetensors body for `POST /update_weights`."""
    from safetensors.torch import save

    state, _ = unique_state(model)
    return save({k: v.detach().contiguous().cpu() for k, v in state.items()})


class WeightUpdates:
    """`ModelServer`'s weight-update endpoints: `POST /update_weights` (a safetensors body)
    and `POST /update_weights_from_disk` (a local folder), each a new version of the weights."""

    engine: ModelEngine
    limits: ServerLimits
    #: the largest weight upload taken, in bytes
    max_upload: int
    _uploads: int

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        raise NotImplementedError

    async def _json(self, request: web.Request, shape: str) -> dict[str, Any]:
        raise NotImplementedError

    def _version_of(self, value: Any) -> int | None:
        if value is None:
            return None
        try:
            version = int(value)
        except (TypeError, ValueError):
            raise RequestError(
                400, f"weight_version must be an integer, got {preview(value)}"
            ) from None
        self.engine.check_version(version)  # early, before a body is read; `load` rechecks
        return version

    async def _apply(self, state: dict[str, torch.Tensor], version: int | None) -> web.Response:
        def load() -> int:
            return self.engine.load(state, version)

        loaded = await self._run(load)
        return web.json_response({"success": True, "weight_version": str(loaded)})

    @contextlib.contextmanager
    def _upload_slot(self) -> Any:
        """One of `max_uploads` slots for a weight upload, or a 429 when all are taken."""
        if self._uploads >= self.limits.max_uploads:
            raise RequestError(
                429,
                f"{self._uploads} weight uploads are already being received (the server's "
                f"cap); send one update at a time",
            )
        self._uploads += 1
        try:
            yield
        finally:
            self._uploads -= 1

    async def _update_weights(self, request: web.Request) -> web.Response:
        from safetensors import SafetensorError
        from safetensors.torch import load as load_bytes

        version = self._version_of(request.query.get("weight_version"))
        with self._upload_slot():
            raw = await read_body(
                request,
                max_body=self.max_upload,
                limit_flag="model: twice its size is the limit of a weight upload",
                timeout=self.limits.upload_timeout_s,
            )
            try:
                state = load_bytes(raw)
            except (SafetensorError, ValueError, RuntimeError):
                raise RequestError(
                    400,
                    "the body is not a safetensors file; send safetensors.torch.save(state_dict)",
                ) from None
            del raw
            return await self._apply(state, version)

    async def _update_from_disk(self, request: web.Request) -> web.Response:
        from safetensors.torch import load_file

        body = await self._json(request, '{"model_path": "DIR", "weight_version": n}')
        unknown = sorted(set(body) - {"model_path", "weight_version"})
        if unknown:
            raise RequestError(
                400, f"unknown field {preview(unknown[0], 40)}; send model_path and weight_version"
            )
        path = body.get("model_path")
        if not isinstance(path, str) or not path:
            raise RequestError(400, "'model_path' must be a folder with model.safetensors")
        version = self._version_of(body.get("weight_version"))
        folder = Path(path)
        files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
        if not files:
            raise RequestError(400, f"no *.safetensors files in {preview(path)}")
        size = sum(f.stat().st_size for f in files)
        if size > self.max_upload:
            raise RequestError(
                413,
                f"the weights in {preview(path)} are {size:,} bytes, over twice the model's size",
            )

        def read() -> dict[str, torch.Tensor]:  # off the event loop: files may be large
            state: dict[str, torch.Tensor] = {}
            for f in files:
                state.update(load_file(str(f)))
            for alias in self.engine._aliases:
                state.pop(alias, None)  # a tied tensor saved twice (save_pretrained keeps one)
            return state

        try:
            state = await self._run(read)
        except Exception:  # noqa: BLE001 - a file that is not safetensors, or unreadable
            raise RequestError(
                400, f"the *.safetensors files in {preview(path)} cannot be read as safetensors"
            ) from None
        return await self._apply(state, version)
