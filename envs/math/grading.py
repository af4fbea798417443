"""Is a math answer equivalent to the gold one? Normalised strings, exact numbers, then symbols.

`grade(pred, gold)` tries, cheapest first: equal normalised strings; equal numbers (integers,
decimals, fractions, `1,000`, `50\\%`); and symbolic equivalence, by
`math-verify` where installed (`pip install gemkit[math]`) or else by a small, safe sympy check.
Symbolic checks only see guarded input and stop after `SYMBOLIC_TIMEOUT_S`, in any thread.

Before any of that, an answer that hedges is wrong: one that names several candidates
(`19, 20`, `19 \\lor 20`, `19 \\text{ or } 20`, `\\{19, 20\\}`, `19 \\pm 1`), states a relation
(`19 \\le x`, `19 = 20`) or uses notation the checkers do not read as a value (`\\color`,
`\\tag`, `\\begin{cases}`) scores only where the gold answer has that construct too
(`hedge_marks`). Checkers pick one value out of such text (math-verify reads `19 = 20` as 20),
so without this rule a policy could hedge and let the grader choose.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from fractions import Fraction
from typing import Any, Literal

from gemkit.cores import usable_cores
from gemkit.envs.math.replies import plain_text

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
    else sympy), `math_verify`, `sympy`, or `none` (strings and numbers only). An empty, junk
    or hedged `pred` is never equal to anything.
    """
    plan = grading_plan(pred, gold, backend=backend)
    if isinstance(plan, bool):
        return plan
    return all(symbolic_equal(p, g, backend=backend) for p, g in plan)


async def agrade(pred: str | None, gold: str, *, backend: Backend = "auto") -> bool:
    """`grade` for event loops: symbolic checks run in a thread, never on the loop itself."""
    plan = grading_plan(pred, gold, backend=backend)
    if isinstance(plan, bool):
        return plan
    for p, g in plan:
        if not await asyncio.to_thread(symbolic_equal, p, g, backend=backend):
            return False
    return True


def grading_plan(
    pred: str | None, gold: str, *, backend: Backend = "auto"
) -> bool | list[tuple[str, str]]:
    """The verdict of the cheap checks (text, numbers, hedges; microseconds), or the pairs that
    must all be symbolically equal for `pred` to be right."""
    if pred is None:
        return False
    pred, gold = plain_text(str(pred)), plain_text(str(gold))
    if len(pred) > 10 * len(gold) + 200:  # megabytes in a box cost seconds to normalise
        return False
    p, g = normalize(pred), normalize(gold)
    if not p or not g:  # `\text{}`, `$$`, `.`: nothing to compare, whatever the gold is
        return False
    if p == g:
        return True
    pn, gn = to_number(pred), to_number(gold)
    if pn is not None and gn is not None:  # two plain numbers: nothing can hedge
        return pn == gn
    gold_marks = _gold_marks(gold) if len(gold) <= MAX_SYMBOLIC_CHARS else hedge_marks(gold)
    if "list" in gold_marks and "relation" not in gold_marks:
        pred = _assignments_as_tuple(pred)  # `x = 3, y = 4` for (3, 4)
    extra = hedge_marks(pred) - gold_marks
    if extra:
        if set(extra) != {"relation"}:
            return False
        # `x = 2 + 17 = 19` for 19: a chain of equal sides is one value, `19 = 20` is two
        sides = _equation_sides(pred)
        if len(sides) < 2:
            return False
        pairs: list[tuple[str, str]] = []
        for side in sides:
            plan = grading_plan(side, gold, backend=backend)
            if plan is False:
                return False
            if plan is not True:
                pairs.extend(plan)
        return pairs or True
    if backend == "none" or not _safe_for_symbolic(p) or not _safe_for_symbolic(g):
        return False
    if backend == "math_verify" and not math_verify_available():
        raise ImportError("math-verify is not installed: pip install gemkit[math]")
    if "relation" not in gold_marks:  # `f(x) = ...` for a gold expression: compare the value
        pred = _NAME_LHS_RE.sub("", pred, count=1)
    return [(pred, gold)]


# -- hedges: constructs an answer may use only as often as the gold answer does -------------

#: LaTeX commands that write one value (or are layout): anything else is a hedge mark
VALUE_COMMANDS = frozenset(
    """frac dfrac tfrac cfrac sqrt cdot times div pi infty left right big Big bigg Bigg bigl
    bigr Bigl Bigr displaystyle textstyle circ degree text textbf textit textrm textnormal
    textsf texttt mathrm mathbf mathit mathsf mathtt mbox hbox operatorname ln log lg exp sin
    cos tan sec csc cot arcsin arccos arctan sinh cosh tanh coth binom dbinom tbinom lfloor
    rfloor lceil rceil emptyset varnothing mathbb overline prime hat vec bar dot angle quad
    qquad alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda
    mu nu xi rho sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi
    Sigma Upsilon Phi Psi Omega""".split()
    + [",", ";", ":", "!", " ", "%", "$"]
)
#: commands (and characters) by the kind of hedge they write
_MARK_OF = {
    **dict.fromkeys(
        "= < > ≤ ≥ ≠ ≈ ∼ ≡ le leq leqslant ge geq geqslant lt gt ne neq approx sim simeq cong "
        "equiv propto ll gg prec succ nless ngtr".split(),
        "relation",
    ),
    **dict.fromkeys(", ; & \\ ± ∓ pm mp".split(), "list"),
    **dict.fromkeys("∨ lor vee".split(), "or"),
    **dict.fromkeys("∧ land wedge".split(), "and"),
    **dict.fromkeys("¬ lnot neg not".split(), "not"),
    **dict.fromkeys(
        "→ ⇒ ⇔ ↔ to rightarrow Rightarrow implies iff Leftrightarrow "
        "leftrightarrow longrightarrow Longrightarrow mapsto".split(),
        "implies",
    ),
    **dict.fromkeys("∈ ∉ ⊂ ⊆ ⊃ ⊇ in notin ni subset subseteq supset supseteq".split(), "member"),
    **dict.fromkeys("∪ ∩ cup cap setminus".split(), "set operation"),
    **dict.fromkeys("{ lbrace".split(), "set"),
    **dict.fromkeys("[ ]".split(), "bracket"),
    "mid": "relation",
    **dict.fromkeys("… ldots cdots dots".split(), "dots"),
    "_": "subscript",
    "?": "question mark",
}
#: the closing halves of pairs counted by their opening half
_UNCOUNTED = frozenset("} rbrace | vert lvert rvert".split())
#: words that make an answer a choice, a guess or a condition
HEDGE_WORDS = frozenset(
    """or nor either neither and not no maybe perhaps possibly probably likely approximately
    approx about around roughly nearly almost between except unless otherwise alternatively vs
    versus if else to through guess unsure unknown any some""".split()
)
_TEXT_BLOCK_RE = re.compile(r"\\(?:text\w*|math\w+|mbox|hbox|operatorname)\s*\{([^{}]*)\}")
_COMMAND_RE = re.compile(r"\\([A-Za-z]+|.)", re.S)
_WORD_RE = re.compile(r"[^\W\d_]+")
_THOUSANDS_SEP_RE = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,])")
_ROOT_INDEX_RE = re.compile(r"\\sqrt\s*\[[^\[\]]*\]")
# the name of what is asked: `x`, `x_1`, `AB`, `f(x)`, `\theta`, `\text{Area}`, `m\angle A`
_NAME_LHS_RE = re.compile(
    r"^\s*(?:m?\\angle\s*)?(?:[A-Za-z]+|\\(?:alpha|beta|gamma|delta|theta|phi|varphi|lambda|mu"
    r"|sigma|rho|tau|psi|omega)|\\(?:text|mathrm|operatorname)\s*\{[A-Za-z ]+\})"
    r"(?:_\{?[A-Za-z0-9]+\}?)?'*(?:\([A-Za-z, ]*\))?\s*(?:=|\\in(?![A-Za-z]))\s*(?=\S)"
)


def hedge_marks(answer: str) -> Counter[str]:
    """How often `answer` uses each construct that can hold more than one value.

    A leading `x =` / `x \\in` (the name of what is asked) is not counted; thousands
    separators (`1,000`) and a root's index (`\\sqrt[3]{}`) are not lists. Commands outside
    `VALUE_COMMANDS` count under their own name, hedge words (`HEDGE_WORDS`, in text or not)
    under theirs, and digits inside `\\text{}` next to a value outside it under "text number".
    """
    s = _NAME_LHS_RE.sub("", answer, count=1)
    s = _ROOT_INDEX_RE.sub(r"\\sqrt", s).replace("{,}", "")
    if not re.search(r"[(\[]|\\\{", s):  # in `(19,200)` the comma may be a tuple's
        s = _THOUSANDS_SEP_RE.sub(lambda m: m[0].replace(",", ""), s)
    marks: Counter[str] = Counter()
    texts: list[str] = []

    def take_text(m: re.Match[str]) -> str:
        texts.append(m[1])
        return " "

    for _ in range(3):  # nested \text{\textbf{...}}
        s, n = _TEXT_BLOCK_RE.subn(take_text, s)
        if not n:
            break
    if any(c.isdigit() for t in texts for c in t) and any(c.isdigit() for c in s):
        marks["text number"] += 1
    for m in _COMMAND_RE.finditer(s):
        name = m[1]
        if name not in VALUE_COMMANDS and name not in _UNCOUNTED:
            marks[_MARK_OF.get(name, f"\\{name}")] += 1
    bare = _COMMAND_RE.sub(" ", s)
    for c in bare:
        kind = _MARK_OF.get(c)
        if kind is not None and c != "{":  # a bare brace groups; `\{` opens a set
            marks[kind] += 1
    marks["dots"] += bare.count("...")
    # |x| is a value, `19 | 20` is not: only an unpaired bar counts
    bars = bare.count("|") + sum(s.count(f"\\{v}") for v in ("vert", "lvert", "rvert"))
    marks["bar"] += bars % 2
    for word in _WORD_RE.findall(" ".join([bare, *texts]).casefold()):
        if word in HEDGE_WORDS:
            marks[f"word {word}"] += 1
    return +marks  # drop zero counts


# a gold answer recurs every episode: its marks are kept (callers never change them)
_gold_marks = functools.lru_cache(maxsize=4096)(hedge_marks)


def _assignments_as_tuple(answer: str) -> str:
    """`x = 3, y = 4` as `(3, 4)`; any other answer as it is."""
    items = answer.split(",")
    values = [_NAME_LHS_RE.sub("", item, count=1) for item in items]
    if len(items) < 2 or any(v == item or "=" in v for v, item in zip(values, items, strict=True)):
        return answer
    return "(" + ", ".join(v.strip() for v in values) + ")"


def _equation_sides(answer: str) -> list[str]:
    """The sides of `a = b = c` (after a leading `x =`), split at top-level `=` only."""
    s = _NAME_LHS_RE.sub("", answer, count=1)
    sides: list[str] = []
    cur: list[str] = []
    depth = 0
    for c in s:
        depth += (c in "([{") - (c in ")]}")
        if c == "=" and depth == 0:
            sides.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    sides.append("".join(cur))
    return [x for x in (t.strip() for t in sides) if x] if len(sides) > 1 else []


_HEAVY_RE = re.compile(r"binom|choose|factorial|!|\\sum|\\prod|\\int|gamma|Gamma")
_TOWER_RE = re.compile(r"\^\s*(?:\{[^{}]*|\([^()]*|[\d.]+\s*)\^|exp\W*(?:\\)?exp")
# a factorial of a bracket or inside an exponent: (20!)!, 10^{99!}, (9^{99})!
_FACTORIAL_OF_GROUP_RE = re.compile(r"[)}\]]\s*!|\^\s*\{[^{}]*!|\^\s*\d+\s*!")
# `(...)^{n}` / `\sin(x)^n`: the bracket before a power and the power's literal integers
_GROUP_POWER_RE = re.compile(r"\)\s*\^\s*(?:\{([^{}]*)\}|(\d+))")
_TOKEN_RE = re.compile(r"\d+|.?", re.S)
#: most terms an expanded power of brackets may have: (x+y+z)^{40} has 861 and takes 2 s
MAX_EXPANSION_TERMS = 300


def _safe_for_symbolic(s: str) -> bool:
    """False for inputs that could make a symbolic checker hang: long text, huge powers.

    math-verify's own timeout only works in the main thread, and sympy has none, so text that
    could expand into astronomically large numbers never reaches either. The hard time limit
    still backs this up: these rules only keep the known slow cases from costing it.
    """
    if len(s) > MAX_SYMBOLIC_CHARS or re.search(r"\d{40,}", s):
        return False
    if s.count("^") + s.count("**") + s.count("exp") > 3:
        return False
    # a power of a power (9^9^9, 9^{9^9}, e^{e^x}) or a big literal exponent can take minutes
    if _TOWER_RE.search(s) or re.search(r"(\^|\*\*)\s*\{?\(?\s*\d{4,}", s):
        return False
    if _FACTORIAL_OF_GROUP_RE.search(s) or _expansion_terms(s) > MAX_EXPANSION_TERMS:
        return False
    # factorials, binomials, sums and products are only cheap for small arguments
    return not (_HEAVY_RE.search(s) and re.search(r"\d{4,}", s))


def _expansion_terms(s: str) -> int:
    """About how many terms `s` has once its powers of brackets are expanded.

    `(x+y+z)^{40}` has C(42, 2) = 861; `(a+b+c+d+e)^{20}` 10,626 (half a minute); nested powers
    multiply (`((x+y+z)^{6}+w)^{6}`: 27 s). A power written as a product (`^{3 \\cdot 33}`)
    counts as the product; powers of numbers (`2^{999}`) and of single tokens (`x^{999}`)
    expand to one term. Counts stop growing past `MAX_EXPANSION_TERMS`.
    """
    cap = MAX_EXPANSION_TERMS + 1
    total, product, i = 0, 1, 0
    while i < len(s):
        c = s[i]
        if c in "+-" and i > 0:
            total, product = min(total + product, cap), 1
            i += 1
        elif c in "([{":
            end = _closing(s, i)
            inner, i = s[i + 1 : end], end + 1
            terms = _expansion_terms(inner)
            if s.startswith("^", i):
                power, i = _exponent(s, i + 1)
                if re.search(r"[A-Za-z]", _COMMAND_RE.sub(" ", inner)):
                    terms = math.comb(power + terms - 1, terms - 1)
            product = min(product * terms, cap)
        elif c == "^":
            i = _exponent(s, i + 1)[1]  # a power of one token: nothing to expand
        else:
            i += 1
    return min(total + product, cap)


def _closing(s: str, start: int) -> int:
    """The index of the bracket closing the one at `start` (or the end of `s`)."""
    depth = 0
    for j in range(start, len(s)):
        depth += (s[j] in "([{") - (s[j] in ")]}")
        if depth == 0:
            return j
    return len(s)


def _exponent(s: str, i: int) -> tuple[int, int]:
    """The literal power written at `s[i:]` (the product of its integers) and where it ends."""
    if s.startswith("{", i):
        end = _closing(s, i)
        text, after = s[i + 1 : end], end + 1
    else:
        m = _TOKEN_RE.match(s, i)
        assert m is not None  # `.?` matches the empty string too
        text, after = m[0], m.end()
    power = 1
    for n in re.findall(r"\d+", text):
        power = min(power * max(int(n), 1), 10**6)  # math.comb stays cheap below that
    return power, after


# -- symbolic checks under a hard time limit ------------------------------------------------


class SymbolicTimeout(BaseException):
    """A symbolic check ran out of time (a BaseException, so no checker swallows it)."""


def symbolic_equal(pred: str, gold: str, *, backend: Backend = "auto") -> bool:
    """Symbolic equivalence within `SYMBOLIC_TIMEOUT_S`, in any thread; False on timeout.

    In the main thread a POSIX interval timer interrupts the check; elsewhere (threads,
    Windows) the check runs in a helper process that is killed and replaced when it is late,
    one helper per check in flight, up to one per core (`gemkit.cores.usable_cores`).
    A check that overran its limit is False even if it did answer (a late answer never passes).
    """
    on_main = threading.current_thread() is threading.main_thread()
    if on_main and hasattr(signal, "setitimer"):
        _load_checkers()  # imports take seconds: never count them against the limit
        start = time.monotonic()
        try:
            with _time_limit(SYMBOLIC_TIMEOUT_S):
                result = _symbolic_equal(pred, gold, backend)
        except SymbolicTimeout:
            result = None
        if result is None or time.monotonic() - start > SYMBOLIC_TIMEOUT_S:
            log.warning("symbolic check timed out: %.80r vs %.80r", pred, gold)
            return False
        return result
    return _WORKER.equal(pred, gold, backend)


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    def interrupt(signum: int, frame: Any) -> None:
        raise SymbolicTimeout

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)  # one shot: it can never fire after the check
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
    """Helper-process loop: answer JSON-line requests on stdin until it closes.

    Each reply names its request (`<id> true|false`) and goes to a private copy of stdout:
    anything a checker prints lands on stderr, so no text can pass for a verdict.
    """
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    _load_checkers()
    replies.write("ready\n")
    for line in sys.stdin:
        req_id = -1
        try:
            req = json.loads(line)
            req_id = int(req["id"])
            result = _symbolic_equal(req["pred"], req["gold"], req["backend"])
        except Exception:
            result = False
        replies.write(f"{req_id} {'true' if result is True else 'false'}\n")


class _HelperProcess:
    """A `python -c serve()` child per parent process, started on first use, replaced when late.

    A plain subprocess (not multiprocessing) never re-imports the user's main script and may be
    started from daemonic worker processes too.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._next_id = 0

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
                self._next_id += 1
                request = {"id": self._next_id, "pred": pred, "gold": gold, "backend": backend}
                self._proc.stdin.write(json.dumps(request) + "\n")
                self._proc.stdin.flush()
            except (OSError, RuntimeError) as e:
                log.warning("grading helper process unavailable (%s); answer marked wrong", e)
                self._stop()
                return False
            answer = self._read(SYMBOLIC_TIMEOUT_S)
            if answer in (f"{self._next_id} true", f"{self._next_id} false"):
                return answer.endswith("true")
            log.warning("symbolic check timed out: %.80r vs %.80r", pred, gold)
            self._stop()
            return False


class _Helpers:
    """The helper processes of this process, one check in each at a time, as many checks at
    once as the cores (`usable_cores`, read at each check); more wait for a free helper.

    So checks from many threads (an async vector's envs) run on every core, each in a
    process of its own that is killed when late. A helper starts on first need: checks one at
    a time never start a second one.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._helpers: list[_HelperProcess] = []
        self._free: list[_HelperProcess] = []

    def equal(self, pred: str, gold: str, backend: Backend) -> bool:
        """`_HelperProcess.equal` in a free helper."""
        with self._cond:
            while len(self._helpers) - len(self._free) >= usable_cores():
                self._cond.wait()
            if self._free:
                helper = self._free.pop()  # the most recently used: warm, and the others idle
            else:
                helper = _HelperProcess()  # started by its first check
                self._helpers.append(helper)
        try:
            return helper.equal(pred, gold, backend)
        finally:
            with self._cond:
                self._free.append(helper)
                self._cond.notify()

    def forget(self) -> None:
        """In a forked child: the parent's helpers (and any it had busy) are not this one's."""
        self._cond = threading.Condition()
        self._helpers, self._free = [], []

    def pids(self) -> list[int]:
        """The process ids of the helpers running now."""
        with self._cond:
            helpers = list(self._helpers)
        return [h._proc.pid for h in helpers if h._proc is not None and h._proc.poll() is None]


_WORKER = _Helpers()
if hasattr(os, "register_at_fork"):  # a child forked while checks ran would wait for them
    os.register_at_fork(after_in_child=lambda: _WORKER.forget())


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
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
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

    def delimiters(s: str) -> str:
        pair = s[0] + s[-1] if len(s) >= 2 else ""
        return pair if pair in ("[]", "[)", "(]", "\\}") else "()"  # a bare list is a tuple

    # tuples and lists compare element by element; sets regardless of order; an interval
    # [1, 2] is not the tuple (1, 2)
    if "," in p or "," in g:
        if delimiters(p) != delimiters(g):
            return False
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
