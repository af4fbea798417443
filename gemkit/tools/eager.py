"""Closing without waiting: run a coroutine up to its first wait now, the rest as a task."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


def start_eagerly(coro: Coroutine[Any, Any, None], loop: asyncio.AbstractEventLoop) -> Any:
    """Run `coro` up to its first suspension now; return a task finishing it, or None if done.

    A task created by a sync `close()` inside `asyncio.run` would be cancelled before its
    first step when the caller returns right after; stepping the coroutine here first means
    tools whose close does not wait (most of them) are closed whatever happens next.
    """
    try:
        waiting_on = coro.send(None)
    except StopIteration:
        return None
    except Exception as e:
        log.warning("closing tools failed: %s: %s", type(e).__name__, e)
        return None
    return loop.create_task(_resume(coro, waiting_on))


async def _resume(coro: Coroutine[Any, Any, None], waiting_on: Any) -> None:
    # what asyncio's Task does for a coroutine: wait for the future it yielded, then resume it
    while True:
        try:
            if asyncio.isfuture(waiting_on):
                await asyncio.wait([waiting_on])
            else:  # a bare yield (asyncio.sleep(0))
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            coro.close()
            raise
        try:
            waiting_on = coro.send(None)
        except StopIteration:
            return
