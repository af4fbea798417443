"""One page's Python session for the docs tests (started by docs/conftest.py, not imported).

A reader who copies a page's ```python blocks pastes them, in order, into one Python session
started in an empty folder. This process is that session: it runs each block it is sent in one
`__main__` namespace, so names, imports and the working folder carry from block to block, and
functions a block defines pickle as `__main__.<name>` (process pools, Ray).

Protocol: the harness writes one JSON request a line on stdin, `{"code", "path", "line"}`, and
reads one JSON reply a line on the file descriptor named by argv[1]: `{"ok": true}` or
`{"ok": false, "error": "<traceback of the block's own frames>"}`. The block's printed output
goes to this process's stdout and stderr, which the harness sends to files and reads back, so
output of child processes and threads is caught as well.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import types


def _error_text(exc: BaseException, path: str) -> str:
    """The traceback from the block's first frame on, without this file's frames."""
    frames = traceback.extract_tb(exc.__traceback__)
    start = next((i for i, frame in enumerate(frames) if frame.filename == path), len(frames))
    lines = traceback.format_list(frames[start:])
    head = "Traceback (most recent call last):\n"
    return "".join([head, *lines, *traceback.format_exception_only(exc)])


def main() -> None:
    """Run blocks from stdin until it closes."""
    replies = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    requests = os.fdopen(os.dup(0), "r")
    # a block that reads stdin reads an empty file, as it would from a script run with `< /dev/null`
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdin = open(0)  # noqa: SIM115 - stays open for the whole session
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = module
    sys.argv = [""]
    sys.path[0] = ""  # the working folder, as in an interactive session; not docs/
    for request_line in requests:
        request = json.loads(request_line)
        # pad with blank lines so tracebacks give the line numbers of the page itself
        source = "\n" * (request["line"] - 1) + request["code"]
        try:
            exec(compile(source, request["path"], "exec"), module.__dict__)
            reply = {"ok": True}
        except SystemExit as exc:
            ok = exc.code in (None, 0)
            reply = {"ok": ok, "error": "" if ok else _error_text(exc, request["path"])}
        except BaseException as exc:  # noqa: BLE001 - every failure is the block's result
            reply = {"ok": False, "error": _error_text(exc, request["path"])}
        sys.stdout.flush()
        sys.stderr.flush()
        replies.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
