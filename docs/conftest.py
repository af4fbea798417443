"""The docs tests: every ```python and ```bash block of every page under docs/ runs as written.

Each page runs as a reader runs it: its blocks in order, as one session, in a fresh empty
folder. Python blocks share one Python process (docs/session.py), bash blocks run in bash in
the same folder, and an ```output block right after a block holds what that block prints,
which is checked. docs/writing-docs.md states the rules for authors; this file carries them out.

Sybil (https://sybil.readthedocs.io) finds the blocks and makes each one a pytest item with the
page's line; the parser and evaluators below are ours, because a page needs bash blocks,
output blocks and one session per page, which pytest-markdown-docs does not offer.
"""

from __future__ import annotations

import doctest
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sybil import Document, Example, Region, Sybil

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
# one block may take this long; a slower block fails, naming the limit (CI runs on 2 busy cores)
BLOCK_TIMEOUT_S = float(os.environ.get("GEMKIT_DOCS_BLOCK_TIMEOUT", "600"))
LANGUAGES = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash"}
OUTPUT = "output"
FILE = re.compile(r"(?:^|\s)file=(?P<path>\S+)")
NEEDS = re.compile(r"(?:^|\s)needs=(?P<what>\S+)")
NOTEST = re.compile(r"\bnotest\b[\s:—-]*(?P<reason>.*)$")
# a block that installs packages would change the environment every later test runs in
INSTALLS = re.compile(r"\b(?:pip3?|uv pip|python3? -m pip)\s+install\b|\bapt(?:-get)?\s+install\b")
HINT = (
    "(A page runs as one session in a fresh empty folder: its python blocks in order in one "
    "Python process, its bash blocks in bash, with this checkout's `gemkit` and `python` on "
    "PATH. A block that cannot run offline is fenced as ```python notest: <why>. "
    "See docs/writing-docs.md.)"
)


@dataclass(frozen=True)
class Block:
    """One fenced block of a page that runs, with the output the page shows for it."""

    page: str  # relative to the repository, for messages
    language: str  # "python" or "bash", or any language for a `file=` block
    code: str
    line: int  # the fence's line in the page
    notest: str | None  # the reason it does not run, or None
    expected: str | None  # the ```output block right after it, if any
    expected_line: int | None
    file: str | None = None  # `file=PATH`: the block is written to PATH, not run
    needs: str | None = None  # `needs=docker`: skipped where that is missing (unless required)


@dataclass(frozen=True)
class Problem:
    """A page-authoring mistake found while parsing (reported as a failing item)."""

    page: str
    line: int
    message: str


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


OPENING = re.compile(r"(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)")
CLOSING = re.compile(r"[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*")


def fenced_blocks(text: str) -> Iterable[Region]:
    """The fenced code blocks of a Markdown text, as CommonMark reads them.

    A fence is three or more backticks or tildes; a backtick fence's info string has no
    backtick (so a line that starts with inline code is no fence); the block ends at a fence
    of the same character, at least as long, with nothing after it (or at the end of the
    text). A fence inside a block is part of its text.
    """
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    i = 0
    while i < len(lines):
        opening = OPENING.fullmatch(lines[i].rstrip("\n"))
        if opening is None or (opening["fence"][0] == "`" and "`" in opening["info"]):
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        j = i + 1
        while j < len(lines):
            closing = CLOSING.fullmatch(lines[j].rstrip("\n"))
            if closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence):
                break
            j += 1
        body = "".join(
            line[indent:] if line[:indent].isspace() else line for line in lines[i + 1 : j]
        )
        end = starts[min(j + 1, len(lines))]
        yield Region(starts[i], end, lexemes={"info": opening["info"], "source": body})
        i = j + 1


def parse_page(document: Document) -> Iterable[Region]:
    """The runnable blocks of a page, each joined with the ```output block that follows it."""
    page = str(Path(document.path).resolve().relative_to(REPO))
    previous: tuple[Region, Block] | None = None  # the last block, while an output may follow
    for region in fenced_blocks(document.text):
        info = str(region.lexemes["info"]).strip()
        language = info.split(maxsplit=1)[0].lower() if info else ""
        rest = info[len(language) :].strip()
        line = _line_of(document.text, region.start)
        source = str(region.lexemes["source"])
        if language == OUTPUT:
            gap = document.text[previous[0].end : region.start] if previous else "x"
            if previous is None or gap.strip():
                yield _problem_region(
                    region,
                    page,
                    line,
                    "an ```output block must follow a ```python or "
                    "```bash block directly (only blank lines between): it shows what that "
                    "block prints",
                )
                continue
            code_region, block = previous
            if block.notest is None:
                block = Block(**{**block.__dict__, "expected": source, "expected_line": line})
            yield Region(code_region.start, region.end, parsed=block, evaluator=run_block)
            previous = None
            continue
        if previous is not None:
            yield Region(
                previous[0].start, previous[0].end, parsed=previous[1], evaluator=run_block
            )
            previous = None
        file = FILE.search(rest)
        if file is not None:  # a file the reader saves: written to the page's folder in order
            path = file.group("path")
            if Path(path).is_absolute() or ".." in Path(path).parts:
                yield _problem_region(
                    region, page, line, f"file={path} must be a path inside the page's folder"
                )
                continue
            block = Block(page, language or "text", source, line, None, None, None, path)
            yield Region(region.start, region.end, parsed=block, evaluator=run_block)
            continue
        if language not in LANGUAGES:
            continue
        notest = NOTEST.search(rest)
        reason = notest.group("reason").strip() if notest else None
        if notest and not reason:
            yield _problem_region(
                region,
                page,
                line,
                "a `notest` block says why it cannot run, beside the "
                "word: ```bash notest: needs the network (pip install)",
            )
            continue
        if reason is None and INSTALLS.search(source):
            yield _problem_region(
                region,
                page,
                line,
                "this block installs packages, which would change the "
                "environment of every test after it (and needs the network): fence it as "
                "```bash notest: installs packages",
            )
            continue
        needs = NEEDS.search(rest)
        what = needs.group("what") if needs else None
        if what is not None and what not in REQUIREMENTS:
            yield _problem_region(
                region,
                page,
                line,
                f"needs={what} is not a requirement the docs tests know; "
                f"one of: {', '.join(sorted(REQUIREMENTS))}",
            )
            continue
        block = Block(page, LANGUAGES[language], source, line, reason, None, None, needs=what)
        previous = (region, block)
    if previous is not None:
        yield Region(previous[0].start, previous[0].end, parsed=previous[1], evaluator=run_block)


def _problem_region(region: Region, page: str, line: int, message: str) -> Region:
    return Region(region.start, region.end, parsed=Problem(page, line, message), evaluator=report)


def report(example: Example) -> str:
    """A mistake in how a page is written."""
    problem: Problem = example.parsed
    return f"{problem.page}, line {problem.line}: {problem.message}"


def _session_env() -> dict[str, str]:
    """The reader's environment: this checkout's tools first on PATH, nothing of ours."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GEMKIT_", "PYTEST_", "COV_"))
    }
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # a page that reaches for the Hugging Face Hub fails at once instead of hanging offline
    env["HF_HUB_OFFLINE"] = "1"
    env["HF_DATASETS_OFFLINE"] = "1"
    return env


class PageSession:
    """One page's session: an empty folder, a Python process, and the blocks' output files."""

    def __init__(self, page: str) -> None:
        self.page = page
        self.root = Path(tempfile.mkdtemp(prefix=f"gemkit-docs-{Path(page).stem}-"))
        self.folder = self.root / "folder"  # the reader's empty folder
        self.folder.mkdir()
        self.logs = self.root / "logs"
        self.logs.mkdir()
        self.env = _session_env()
        self.failed: Block | None = None
        self.python: subprocess.Popen | None = None
        self._replies: int | None = None
        self._groups: list[int] = []

    def _start_python(self) -> None:
        read_end, write_end = os.pipe()
        self.python = subprocess.Popen(
            [sys.executable, str(DOCS / "session.py"), str(write_end)],
            stdin=subprocess.PIPE,
            stdout=open(self.logs / "python.out", "ab"),  # noqa: SIM115 - owned by the child
            stderr=open(self.logs / "python.err", "ab"),  # noqa: SIM115
            cwd=self.folder,
            env=self.env,
            pass_fds=(write_end,),
            start_new_session=True,
        )
        os.close(write_end)
        self._replies = read_end
        self._groups.append(self.python.pid)

    def run(self, block: Block) -> tuple[str | None, str, str]:
        """Run one block: (what went wrong or None, its stdout, its stderr)."""
        if block.file is not None:
            target = self.folder / block.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code)
            return None, "", ""
        name = "python" if block.language == "python" else "bash"
        out, err = self.logs / f"{name}.out", self.logs / f"{name}.err"
        out.touch()
        err.touch()
        marks = out.stat().st_size, err.stat().st_size
        if block.language == "python":
            problem = self._run_python(block)
        else:
            problem = self._run_bash(block, out, err)
        return problem, _read_from(out, marks[0]), _read_from(err, marks[1])

    def _run_python(self, block: Block) -> str | None:
        if self.python is None:
            self._start_python()
        assert self.python is not None and self.python.stdin is not None
        request = {"code": block.code, "path": str(REPO / block.page), "line": block.line + 1}
        self.python.stdin.write((json.dumps(request) + "\n").encode())
        self.python.stdin.flush()
        reply = self._read_reply()
        if isinstance(reply, str):
            return reply
        return None if reply["ok"] else reply["error"]

    def _read_reply(self) -> dict | str:
        assert self._replies is not None and self.python is not None
        data = b""
        deadline = time.monotonic() + BLOCK_TIMEOUT_S
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._replies], [], [], max(left, 0))
            if not ready:
                self._kill(self.python.pid)
                self.python = None
                return f"the block ran for more than {BLOCK_TIMEOUT_S:.0f} s and was stopped"
            chunk = os.read(self._replies, 65536)
            if not chunk:
                code = self.python.wait()
                self.python = None
                return f"the Python session ended while the block ran (exit status {code})"
            data += chunk
        return json.loads(data)

    def _run_bash(self, block: Block, out: Path, err: Path) -> str | None:
        with open(out, "ab") as stdout, open(err, "ab") as stderr:
            # files, not pipes: a server a block leaves running cannot hold the harness up
            process = subprocess.Popen(
                ["bash", "-e", "-o", "pipefail", "-c", block.code],
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                cwd=self.folder,
                env=self.env,
                start_new_session=True,
            )
        self._groups.append(process.pid)
        try:
            code = process.wait(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._kill(process.pid)
            return f"the block ran for more than {BLOCK_TIMEOUT_S:.0f} s and was stopped"
        return None if code == 0 else f"bash exited with status {code}"

    @staticmethod
    def _kill(group: int) -> None:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        """End the Python session (its exit handlers run), stop what blocks left, drop the folder."""
        if self.python is not None and self.python.stdin is not None:
            self.python.stdin.close()
            try:
                self.python.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        for group in self._groups:
            self._kill(group)
        if self._replies is not None:
            os.close(self._replies)
        shutil.rmtree(self.root, ignore_errors=True)


def _read_from(path: Path, offset: int) -> str:
    with open(path, "rb") as file:
        file.seek(offset)
        return file.read().decode(errors="replace")


def _normalise(text: str) -> str:
    lines = [line.rstrip() for line in text.strip("\n").splitlines()]
    return "\n".join(lines) + "\n"


def output_difference(expected: str, got: str) -> str | None:
    """None when `got` is what the page shows (`...` stands for any text), else a diff."""
    want, have = _normalise(expected), _normalise(got)
    checker = doctest.OutputChecker()
    if checker.check_output(want, have, doctest.ELLIPSIS):
        return None
    example = doctest.Example("", want)
    return checker.output_difference(example, have, doctest.ELLIPSIS | doctest.REPORT_UDIFF)


def _tail(text: str, lines: int = 30) -> str:
    kept = text.rstrip("\n").splitlines()[-lines:]
    return "\n".join("    " + line for line in kept)


def _docker_answers() -> bool:
    try:
        done = subprocess.run(["docker", "info"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


#: what a block may need beyond Python: how to tell it is there, and the variable that makes
#: its absence a failure (CI sets it, as it does for the tests that need the same thing)
REQUIREMENTS = {"docker": (_docker_answers, "GEMKIT_REQUIRE_DOCKER", "a Docker engine")}


def run_block(example: Example) -> str | None:
    """Run a block in its page's session; a message saying what went wrong, or None."""
    block: Block = example.parsed
    where = f"{block.page}, line {block.line}: the ```{block.language} block"
    if block.file is not None:
        where += f" (file={block.file})"
    if block.notest is not None:
        pytest.skip(f"{where} is marked notest: {block.notest}")
    if block.needs is not None:
        present, required_by, name = REQUIREMENTS[block.needs]
        if not os.environ.get(required_by) and not present():
            pytest.skip(f"{where} needs {name}, which is not here ({required_by} is not set)")
    session = example.namespace.get("session")
    if session is None:  # the page's first block that runs
        session = example.namespace["session"] = PageSession(block.page)
    problem, out, err = session.run(block)
    if problem is None and block.expected is not None:
        difference = output_difference(block.expected, out)
        if difference is not None:
            problem = (
                f"it printed something other than the ```output block at line "
                f"{block.expected_line} shows (`...` there stands for any text)\n{difference}"
            )
    if problem is None:
        return None
    parts = [f"{where} failed: {problem.rstrip()}"]
    if session.failed is not None:  # later blocks still run: each one may show another fault
        parts.append(
            f"(the block at line {session.failed.line} of this page failed first: "
            "this failure may follow from that one)"
        )
    else:
        session.failed = block
    if out.strip() and block.expected is None:
        parts.append(f"its stdout ended with:\n{_tail(out)}")
    if err.strip():
        parts.append(f"its stderr ended with:\n{_tail(err)}")
    parts.append(HINT)
    return "\n\n".join(parts)


def _teardown(namespace: dict) -> None:
    session = namespace.get("session")
    if isinstance(session, PageSession):
        session.close()


pytest_collect_file = Sybil(
    parsers=[parse_page],
    patterns=["*.md"],
    teardown=_teardown,
).pytest()
