"""Statement tests graded in two processes: the program answers, a clean grader judges.

For each test, the program's process (one stateless sandbox call per test) runs the
candidate's code and then the program half of the test (`probes.split_test`), and prints a
record of its answers (`runtime.record`). One more sandbox call, the grader, runs every test's
grader half on those records (`runtime.grade`); no candidate code ever runs there, and its
verdicts come back on lines that start with a nonce only the host knows. Whatever the
candidate's process does (forged output, patched builtins, objects that equal anything, an
early exit), all that reaches the verdict is plain data.
"""

from __future__ import annotations

import ast
import json
import marshal
import secrets
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from gemkit.envs.code import runtime
from gemkit.envs.code.probes import (
    SplitTest,
    TestShapeError,
    split_test,
    task_builtins,
    top_level_names,
)
from gemkit.sandbox import ExecResult

#: the program's stdout limit: room for its record and some output of its own
MAX_OUTPUT = runtime.MAX_RECORD + 64 * 1024
# what the program's process needs of runtime.py (the grader gets all of it)
_RECORDER_NAMES = frozenset(
    {
        "MARK",
        "MAX_RECORD",
        "MAX_DEPTH",
        "MAX_NODES",
        "MAX_INT_HEX",
        "MAX_MESSAGE",
        "Unencodable",
        "encode",
        "_EXACT",
        "_plain_copy",
        "_COPIES",
        "_encode_key",
        "_type_name",
        "_builtin_exception_name",
        "_message",
        "record",
    }
)


@dataclass(frozen=True)
class Failure:
    """Why a test failed: `error` in full (for `info`); `public`, the same without anything
    the test computed (it may quote expected values), and `detail`, what the program's last
    answer was, for the model's feedback."""

    error: str
    public: str
    detail: str = ""


@cache
def _runtime_code() -> tuple[str, str]:
    """runtime.py compiled once, as hex of marshal data: (the recorder part, all of it).

    The sandbox runs this interpreter, so its bytecode loads there; compiling the source in
    every call would cost each test's process about 1.3 ms, loading it 0.2 ms.
    """
    source = Path(runtime.__file__).read_text(encoding="utf-8")
    tree = ast.parse(source)
    recorder = ast.Module([n for n in tree.body if _defines(n) & _RECORDER_NAMES], [])
    return tuple(  # type: ignore[return-value]
        marshal.dumps(compile(t, "<gemkit-check>", "exec", dont_inherit=True, optimize=2)).hex()
        for t in (recorder, tree)
    )


def _defines(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def program_source(code: str, test: SplitTest) -> str:
    """The candidate's code, then the program half of `test` run by the recorder."""
    recorder, _ = _runtime_code()
    # one expression statement: the candidate's namespace gains only `__probe__`, and the
    # builtins it uses come from the module (the code may have its own `bytes` or `exec`)
    launch = (
        "(lambda b, ns: (b.exec(b.__import__('marshal').loads(b.bytes.fromhex("
        f"'{recorder}')), ns), ns['record']({test.program!r}, b.globals())))"
        "(__import__('builtins'), {'__name__': '__gemkit_check__'})"
    )
    return f"{code}\n\n{launch}\n"


def record_of(test: SplitTest, result: ExecResult) -> str | Failure:
    """The record the program's process printed, or why there is none."""
    if result.stdout_bytes > MAX_OUTPUT:
        reason = f"the program printed more than {MAX_OUTPUT} bytes, so its answers were cut off"
    else:
        at = result.stdout.rfind(runtime.MARK)
        if at >= 0:
            return result.stdout[at + len(runtime.MARK) :].rstrip()
        if result.exception:
            reason = result.exception
        elif result.ok:
            reason = "the code exited before the test ran (sys.exit or os._exit)"
        else:
            reason = f"exit status {result.exit_code}"
    # the program's own error: fair to show
    return Failure(f"{test.source}: {reason}", reason)


def grader_source(tests: list[SplitTest], nonce: str) -> str:
    """The grader's program: it loads the runtime from stdin, then grades every test half."""
    halves = [t.grader for t in tests]
    return (
        "import json, marshal, sys\n"
        'code, records = sys.stdin.read().split("\\n", 1)\n'
        'ns = {"__name__": "__gemkit_grader__"}\n'
        "exec(marshal.loads(bytes.fromhex(code)), ns)\n"
        f'ns["grade"]({halves!r}, {nonce!r}, json.loads(records))\n'
    )


def grader_stdin(records: list[str | Failure]) -> str:
    """The grader's input: the runtime's bytecode (no candidate code runs there, so stdin
    is the host's channel; a literal would cost the grader's compiler 0.4 ms), then the
    records (null where the host already has a failure)."""
    _, everything = _runtime_code()
    return everything + "\n" + json.dumps([r if isinstance(r, str) else None for r in records])


def new_nonce() -> str:
    """A fresh marker for one grader call's verdict lines."""
    return secrets.token_hex(16)


def verdicts(
    tests: list[SplitTest], records: list[str | Failure], result: ExecResult | None, nonce: str
) -> list[Failure | None]:
    """Each test's failure (None: passed), from the host's own failures and the grader's."""
    found: dict[int, dict] = {}
    if result is not None:
        for line in result.stdout.splitlines():
            if line.startswith(nonce):
                try:  # a grader stopped by a limit may leave its last line half written
                    i, verdict = json.loads(line[len(nonce) :])
                except ValueError:
                    continue
                found[i] = verdict
    out: list[Failure | None] = []
    for i, (test, rec) in enumerate(zip(tests, records, strict=True)):
        if isinstance(rec, Failure):
            out.append(rec)
        elif i in found:
            out.append(_failure(test, found[i]))
        else:
            why = (result.exception if result is not None else None) or "no verdict"
            reason = f"the grader could not finish this test ({why})"
            out.append(Failure(f"{test.source}: {reason}", reason))
    return out


def _failure(test: SplitTest, verdict: dict) -> Failure | None:
    if verdict["ok"]:
        return None
    last = verdict.get("last")
    detail = ""
    if last is not None and 0 <= last[0] < len(test.probes):
        detail = f"{test.probes[last[0]]} {last[1]}"
    return Failure(f"{test.source}: {verdict['error']}", verdict["public"], detail)


def split_all(tests: tuple[str, ...], code: str, question: str) -> list[SplitTest | Failure]:
    """Every test split for this code (which may redefine a builtin the question asks for)."""
    shadowed = top_level_names(code) & task_builtins(question)
    out: list[SplitTest | Failure] = []
    for test in tests:
        try:
            out.append(split_test(test, shadowed))
        except TestShapeError as e:  # it loaded, so this code's names make the difference
            reason = f"this test cannot be checked against this code: {e}"
            out.append(Failure(f"{test}: {reason}", reason))
    return out


class Grading:
    """One answer's statement tests: the programs to run, then the grader, then the verdicts.

    The caller runs `programs` (one stateless sandbox call each, all at once), hands the
    results to `answered`, runs `grader` with `stdin` if it is set, hands that result to
    `judged`, and reads `failures()`.
    """

    def __init__(self, tests: tuple[str, ...], code: str, question: str):
        self.splits = split_all(tests, code, question)
        self.tests = [s for s in self.splits if isinstance(s, SplitTest)]
        self.programs = [program_source(code, t) for t in self.tests]
        self.records: list[str | Failure] = []
        self.grader: str | None = None
        self.stdin = ""
        self.nonce = new_nonce()
        self.result: ExecResult | None = None

    def answered(self, results: list[ExecResult]) -> None:
        """Take the programs' results; set up the grader call if any record came back."""
        self.records = [record_of(t, r) for t, r in zip(self.tests, results, strict=True)]
        if any(isinstance(r, str) for r in self.records):
            self.grader = grader_source(self.tests, self.nonce)
            self.stdin = grader_stdin(self.records)

    def judged(self, result: ExecResult) -> None:
        """Take the grader's result."""
        self.result = result

    def failures(self) -> list[Failure | None]:
        """Each test's failure (None: passed), in the problem's order."""
        judged = iter(verdicts(self.tests, self.records, self.result, self.nonce))
        return [next(judged) if isinstance(s, SplitTest) else s for s in self.splits]
