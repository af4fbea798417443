"""Is a math answer equivalent to the gold one? Normalised strings, exact numbers, then symbols.

`grade(pred, gold)` tries, cheapest first: equal normalised strings; equal numbers (integers,
decimals, fractions, `1,000`, `50\\%`); and symbolic equivalence, by
`math-verify` where installed (`pip install gemkit[math]`) or else by a small, safe sympy check.
Symbolic checks only see guarded input and stop after `SYMBOLIC_TIMEOUT_S`, in any thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from fractions import Fraction
from typing import Any, Literal

log = logging.getLogger(__name__)

Backend = Literal["auto", "math_verify", "sympy", "none"]

#: longest answer handed to a symbolic checker; longer ones are compared as strings only
MAX_SYMBOLIC_CHARS = 200
#: hard limit (seconds) on one symbolic check; a check that runs longer counts as not equal
SYMBOLIC_TIMEOUT_S = 5.0
#: how long the helper process that checks answers off the main thread may take to start
STARTUP_TIMEOUT_S = 120.0

_TEXT_RE = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_SPACING_RE = re.compile(r"\\[,;:! ]|\\quad|\\qquad|~")
_ASSIGN_RE = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*=\s*(?=\S)")
_THOUSANDS_RE = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_DEGREE_RE = re.compile(r"\^\s*\{?\\circ\}?")
_NUMBER_RE = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
_FRAC_RE = re.compile(r"^([+-])?\\frac\{([+-]?\d+)\}\{([+-]?\d+)\}$")
_SLASH_RE = re.compile(r"^([+-]?\d+)/([+-]?\d+)$")


def normalize(answer: str) -> str:
    """Canonical text of an answer: no `$`, `\\text{}`, `\\left`/`\\right`, spaces or final `.`."""
    s = answer.strip()
    s = s.replace("$", "")
    for _ in range(3):  # nested \text{\textbf{...}}
        s = _TEXT_RE.sub(r"\1", s)
    s = _SPACING_RE.sub("", s)
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\displaystyle", "")
    s = _DEGREE_RE.sub("", s)
    s = "".join(s.split())
    s = s.rstrip(".")
    s = _ASSIGN_RE.sub("", s)
    s = re.sub(r"\\?%$", "", s)
    if _THOUSANDS_RE.match(s):
        s = s.replace(",", "")
    # \frac12 -> \frac{1}{2}
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    if _NUMBER_RE.match(s) and "." in s:
        s = s.rstrip("0").rstrip(".") or "0"
        if s.startswith("."):
            s = "0" + s
        elif s.startswith("-."):
            s = "-0" + s[1:]
    return s


def to_number(answer: str) -> Fraction | None:
    """The exact value of a plain number (int, decimal, `a/b`, `\\frac{a}{b}`), else None."""
    s = normalize(answer)
    if len(s) > 60:
        return None
    try:
        if _NUMBER_RE.match(s):
            return Fraction(s)
        m = _SLASH_RE.match(s)
        if m:
            return Fraction(int(m[1]), int(m[2]))
        m = _FRAC_RE.match(s)
        if m:
            value = Fraction(int(m[2]), int(m[3]))
            return -value if m[1] == "-" else value
    except (ValueError, ZeroDivisionError):
        return None
    return None


def grade(pred: str | None, gold: str, *, backend: Backend = "auto") -> bool:
    """True when `pred` is mathematically the same answer as `gold`.

    `backend` picks the symbolic check after the cheap ones: `auto` (math-verify if installed,
    else sympy), `math_verify`, `sympy`, or `none` (strings and numbers only).
    """
    if pred is None or not str(pred).strip():
        return False
    pred, gold = str(pred), str(gold)
    p, g = normalize(pred), normalize(gold)
    if p == g:
        return True
    pn, gn = to_number(pred), to_number(gold)
    if pn is not None and gn is not None:
        return pn == gn
    if backend == "none" or not _safe_for_symbolic(p) or not _safe_for_symbolic(g):
        return False
    if backend == "math_verify" and not math_verify_available():
        raise ImportError("math-verify is not installed: pip install gemkit[math]")
    return symbolic_equal(pred, gold, backend=backend)


_HEAVY_RE = re.compile(r"binom|choose|factorial|!|\\sum|\\prod|\\int|gamma|Gamma")
_TOWER_RE = re.compile(r"\^\s*(?:\{[^{}]*|\([^()]*|[\d.]+\s*)\^|exp\W*(?:\\)?exp")


def _safe_for_symbolic(s: str) -> bool:
    """False for inputs that could make a symbolic checker hang: long text, huge powers.

    math-verify's own timeout only works in the main thread, and sympy has none, so text that
    could expand into astronomically large numbers never reaches either.
    """
    if len(s) > MAX_SYMBOLIC_CHARS or re.search(r"\d{40,}", s):
        return False
    if s.count("^") + s.count("**") + s.count("exp") > 3:
        return False
    # a power of a power (9^9^9, 9^{9^9}, e^{e^x}) or a big literal exponent can take minutes
    if _TOWER_RE.search(s) or re.search(r"(\^|\*\*)\s*\{?\(?\s*\d{4,}", s):
        return False
    # factorials, binomials, sums and products are only cheap for small arguments
    return not (_HEAVY_RE.search(s) and re.search(r"\d{4,}", s))


# -- symbolic checks under a hard time limit ------------------------------------------------


class SymbolicTimeout(BaseException):
    """A symbolic check ran out of time (a BaseException, so no checker swallows it)."""


def symbolic_equal(pred: str, gold: str, *, backend: Backend = "auto") -> bool:
    """Symbolic equivalence within `SYMBOLIC_TIMEOUT_S`, in any thread; False on timeout.

    In the main thread a POSIX interval timer interrupts the check; elsewhere (threads,
    Windows) the check runs in a helper process that is killed and replaced when it is late.
    """
    on_main = threading.current_thread() is threading.main_thread()
    if on_main and hasattr(signal, "setitimer"):
        _load_checkers()  # imports take seconds: never count them against the limit
        try:
            with _time_limit(SYMBOLIC_TIMEOUT_S):
                return _symbolic_equal(pred, gold, backend)
        except SymbolicTimeout:
            log.warning("symbolic check timed out: %.80r vs %.80r", pred, gold)
            return False
    return _WORKER.equal(pred, gold, backend)


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    def interrupt(signum: int, frame: Any) -> None:
        raise SymbolicTimeout

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_warm = threading.Event()


def _load_checkers() -> None:
    """Import and warm up the checkers once (seconds: parser tables, sympy caches)."""
    if _warm.is_set():
        return
    with _mv_lock:
        if not _warm.is_set():
            _symbolic_equal("(x+1)^2", "x^2+2x+1", "auto")
            _warm.set()


def _symbolic_equal(pred: str, gold: str, backend: Backend) -> bool:
    if backend in ("auto", "math_verify"):
        result = _math_verify_equal(pred, gold)
        if result is not None:
            return result
    return _sympy_equal(normalize(pred), normalize(gold))


def serve() -> None:
    """Helper-process loop: answer JSON-line requests on stdin until it closes."""
    _load_checkers()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            result = _symbolic_equal(req["pred"], req["gold"], req["backend"])
        except Exception:
            result = False
        sys.stdout.write(("true" if result else "false") + "\n")
        sys.stdout.flush()


class _HelperProcess:
    """A `python -c serve()` child per parent process, started on first use, replaced when late.

    A plain subprocess (not multiprocessing) never re-imports the user's main script and may be
    started from daemonic worker processes too.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()

    def _start(self) -> None:
        code = "from gemkit.envs.math.grading import serve; serve()"
        # the child sees the parent's import path, even one changed at run time
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line.strip())
            lines.put(None)

        threading.Thread(target=pump, daemon=True, name="gemkit-grader-reader").start()
        self._proc, self._lines = proc, lines
        if self._read(STARTUP_TIMEOUT_S) != "ready":
            self._stop()
            raise RuntimeError("the grading helper process did not start")

    def _read(self, timeout: float) -> str | None:
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def equal(self, pred: str, gold: str, backend: Backend) -> bool:
        """Ask the helper; False when it is late (it is then replaced) or cannot start."""
        with self._lock:
            try:
                if self._proc is None or self._proc.poll() is not None:
                    self._start()
                assert self._proc is not None and self._proc.stdin is not None
                request = {"pred": pred, "gold": gold, "backend": backend}
                self._proc.stdin.write(json.dumps(request) + "\n")
                self._proc.stdin.flush()
            except (OSError, RuntimeError) as e:
                log.warning("grading helper process unavailable (%s); answer marked wrong", e)
                self._stop()
                return False
            answer = self._read(SYMBOLIC_TIMEOUT_S)
            if answer in ("true", "false"):
                return answer == "true"
            log.warning("symbolic check timed out: %.80r vs %.80r", pred, gold)
            self._stop()
            return False


_WORKER = _HelperProcess()


# -- math-verify ----------------------------------------------------------------------------

_mv_lock = threading.RLock()
_mv_state: dict[str, object] = {}


def _math_verify():
    """The (parse, verify) pair of math-verify, or None when it is not installed."""
    if "mod" not in _mv_state:
        with _mv_lock:
            if "mod" not in _mv_state:
                try:
                    import math_verify.grader
                    import math_verify.parser
                    from math_verify import parse, verify

                    # we impose our own time limit (symbolic_equal), so math-verify's
                    # signal-based one stays off and its "timeout is disabled" warning
                    # would only confuse users
                    math_verify.grader.TIMEOUT_WARNING_SHOWN = True
                    math_verify.parser.TIMEOUT_WARNING_SHOWN = True
                    _mv_state["mod"] = (parse, verify)
                except ImportError:
                    _mv_state["mod"] = None
    return _mv_state["mod"]


def math_verify_available() -> bool:
    """True when math-verify can be imported."""
    return _math_verify() is not None


def _math_verify_equal(pred: str, gold: str) -> bool | None:
    mv = _math_verify()
    if mv is None:
        return None
    parse, verify = mv
    try:
        g = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
        p = parse(f"\\boxed{{{pred}}}", parsing_timeout=None)
        if not g or not p:
            return False
        return bool(verify(g, p, timeout_seconds=None))
    except Exception:  # a checker bug must never crash an episode
        log.debug("math-verify failed on %r vs %r", pred, gold, exc_info=True)
        return False


# -- sympy fallback -------------------------------------------------------------------------

_FUNCS = {"sqrt", "pi", "sin", "cos", "tan", "log", "ln", "exp", "E", "I"}
_LATEX_SUBS = [
    (r"\\cdot|\\times", "*"),
    (r"\\div", "/"),
    (r"\\pi", " pi "),
    (r"\\ln", " ln"),
    (r"\\log", " log"),
    (r"\\(sin|cos|tan|exp)", r" \1"),
    (r"\\infty", " oo "),
]


def _latex_to_expr(s: str) -> str | None:
    """Rewrite simple LaTeX into sympy syntax; None if anything unsupported remains."""
    for _ in range(10):
        new = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", s)
        new = re.sub(r"\\sqrt\[([^{}\]]*)\]\{([^{}]*)\}", r"((\2)**(1/(\1)))", new)
        new = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", new)
        new = re.sub(r"\\sqrt(\d)", r"sqrt(\1)", new)
        if new == s:
            break
        s = new
    for pattern, repl in _LATEX_SUBS:
        s = re.sub(pattern, repl, s)
    s = s.replace("{", "(").replace("}", ")").replace("^", "**")
    if "\\" in s or re.search(r"[^\w\s+\-*/().,]|_", s):
        return None
    if re.search(r"\.[A-Za-z]", s):
        return None  # attribute access: never hand that to eval-based parsing
    for name in re.findall(r"[A-Za-z]+", s):
        if len(name) > 1 and name not in _FUNCS and name != "oo":
            return None
    return s


def _split_top_level(s: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


def _sympy_equal(p: str, g: str) -> bool:
    try:
        import sympy
        from sympy.parsing.sympy_parser import (
            convert_xor,
            implicit_multiplication_application,
            parse_expr,
            standard_transformations,
        )
    except ImportError:
        return False

    def strip_brackets(s: str) -> str:
        if len(s) >= 2 and s[0] + s[-1] in ("()", "[]"):
            return s[1:-1]
        return s

    # tuples and lists compare element by element; sets regardless of order
    if "," in p or "," in g:
        is_set = all(x.startswith("\\{") and x.endswith("\\}") for x in (p, g))
        ps = _split_top_level(p[2:-2] if is_set else strip_brackets(p))
        gs = _split_top_level(g[2:-2] if is_set else strip_brackets(g))
        if len(ps) != len(gs) or len(ps) < 2:
            return False
        if not is_set:
            return all(_sympy_equal(a, b) for a, b in zip(ps, gs, strict=True))
        left = list(gs)
        for item in ps:
            match = next((x for x in left if _sympy_equal(item, x)), None)
            if match is None:
                return False
            left.remove(match)
        return True

    transformations = (*standard_transformations, convert_xor, implicit_multiplication_application)
    local = {"ln": sympy.log, "E": sympy.E, "I": sympy.I, "pi": sympy.pi}
    try:
        pe, ge = _latex_to_expr(p), _latex_to_expr(g)
        if pe is None or ge is None:
            return False
        a = parse_expr(pe, local_dict=local, transformations=transformations)
        b = parse_expr(ge, local_dict=local, transformations=transformations)
        diff = sympy.simplify(a - b)
        if diff == 0:
            return True
        if diff.is_number:
            return bool(abs(sympy.N(diff)) < 1e-9 * max(1.0, float(abs(sympy.N(b)))))
        return False
    except Exception:  # unparseable text is simply not equal
        log.debug("sympy could not compare %r and %r", p, g, exc_info=True)
        return False
