"""Attacks on the `code:` env's grader: each answer wants the reward without doing the task.

Every attack runs for real (bubblewrap sandbox, the env's own grader) and must end with
reward 0.0 and success False. The problems are small and public; what matters is that no
answer that fails to compute them can pass.
"""

from __future__ import annotations

import ast
import json
import struct

import pytest

import gemkit
from gemkit.envs.code import runtime, statements
from gemkit.envs.code.env import BUILTIN_PATH
from gemkit.envs.code.probes import split_test
from gemkit.sandbox import wire

PROBLEMS = {
    "add": {
        "question": "Write add(a, b).",
        "tests": ["assert add(1, 2) == 3", "assert add(-5, 5) == 0", "assert add(20, 22) == 42"],
    },
    "reverse": {
        "question": "Write reverse_string(s).",
        "tests": ["assert reverse_string('abc') == 'cba'", "assert reverse_string('') == ''"],
    },
    "builtins": {
        "question": "Write two_sum(nums, target): the indices of the two numbers.",
        "tests": [
            "assert tuple(two_sum([2, 7, 11], 9)) == (0, 1)",
            "assert sorted(two_sum([3, 2, 4], 6)) == [1, 2]",
            # a length check alone passes any plain answer of that length ([0, 0]) as well
            "assert len(two_sum([1, 5, 3, 9], 14)) == 2 and two_sum([1, 5, 3, 9], 14)[1] == 3",
            "assert isinstance(two_sum([1, 2], 3), list) and two_sum([1, 2], 3) == [0, 1]",
        ],
    },
    "flags": {
        "question": "Write is_even(n).",
        "tests": [
            "assert is_even(2) is True",
            "assert is_even(3) == False",
            "assert is_even(4) and not is_even(5)",  # `assert is_even(4)` alone: True passes
        ],
    },
    "raises": {
        "question": "Write root(n): the integer square root; ValueError('n must be >= 0') if n < 0.",
        "tests": [
            "assert root(9) == 3",
            "try:\n    root(-1)\nexcept ValueError as e:\n    assert str(e) == 'n must be >= 0'\n"
            "else:\n    raise AssertionError('no ValueError')",
        ],
    },
    "check": {
        "question": "Write double(x).",
        "tests": [
            "for x, want in [(1, 2), (2, 4), (5, 10)]:\n    got = double(x)\n"
            "    if got != want:\n        raise AssertionError(f'{x}: {got} != {want}')"
        ],
    },
    "named": {
        "question": "Write secret(x).",
        "tests": ["expected = 987654321\nassert secret(1) == expected"],
    },
    "squares": {
        "question": "Write squares(n), yielding 0, 1, 4, ... for 0 <= i < n.",
        "tests": ["assert list(squares(3)) == [0, 1, 4]", "assert sum(squares(4)) == 14"],
    },
    "callbacks": {  # the program's exceptions must not end the test's iterations
        "question": "Write same(x), returning x.",
        "tests": [
            "assert all(map(lambda x: same(x) == x, [1, 2, 3]))",
            "assert list(filter(lambda x: same(x) != x, [1, 2])) == [] and same(0) == 0",
        ],
    },
    "tolerance": {
        "question": "Write area(r), the area of a circle of radius r.",
        "tests": ["assert abs(area(1) - 3.14159) < 1e-4", "assert abs(area(2) - 12.56637) < 1e-4"],
    },
    "pairs": {
        "question": "Write pairs(xs): a set of the pairs (x, y) of xs with x < y.",
        "tests": ["assert pairs([1, 2]) == {(1, 2)}", "assert pairs([]) == set()"],
    },
}
NAMES = list(PROBLEMS)
FUNCTIONS = "add reverse_string two_sum is_even root double secret squares same area pairs"

# an object that passes any comparison, truth or hash test
EQ = """
class Eq:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return False
    def __gt__(self, other): return False
    def __bool__(self): return True
    def __hash__(self): return 0
    def __len__(self): return 2
    def __iter__(self): return iter([])
"""


def every_function(body: str) -> str:
    """Define every function the problems ask for with the same body."""
    return "".join(f"def {name}(*a, **k):\n    {body}\n" for name in FUNCTIONS.split())


FORGED_RECORD = (runtime.MARK + '[[0,"v",true],[1,"v",true],[2,"v",true]]').encode()
# what the sandbox's child reports when the code ran to its end (length header, exit code 0,
# flag 1: finished), as the supervisor reads it from the child's result pipe
FORGED_REPORT = struct.pack(">I", 9) + struct.pack(">qB", 0, 1)

ATTACKS = {
    "eq_always_true": EQ + every_function("return Eq()"),
    "int_subclass": "class I(int):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
    "    __hash__ = int.__hash__\n" + every_function("return I(-7)"),
    "str_subclass": "class S(str):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
    "    __hash__ = str.__hash__\n" + every_function("return S('zz')"),
    "list_subclass": "class L(list):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
    + every_function("return L([-7])"),
    "set_subclass": "class T(set):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
    + every_function("return T({-7})"),
    "patched_builtins": EQ
    + """
import builtins, sys
_REAL = {n: getattr(builtins, n) for n in ("tuple", "sorted", "len", "sum", "list", "isinstance")}
def _lie(name):
    real = _REAL[name]
    def fake(*a, **k):  # lies to the test's frames only, so the machinery around keeps working
        if sys._getframe(1).f_code.co_name in ("<module>", "<lambda>"):
            return True if name == "isinstance" else Eq()
        return real(*a, **k)
    return fake
for _n in _REAL:
    setattr(builtins, _n, _lie(_n))
"""
    + every_function("return Eq()"),
    "patched_assertion_error": "import builtins, os\n"
    "class Quiet(BaseException):\n    def __init__(self, *a):\n        os._exit(0)\n"
    "builtins.AssertionError = Quiet\n" + every_function("return None"),
    "raises_stop_iteration": every_function("raise StopIteration"),
    "redefines_the_builtins_a_test_checks_with": every_function("return -7")
    + "".join(f"def {b}(*a, **k):\n    return 0\n" for b in ("abs", "len", "round", "all", "any"))
    + "def isinstance(*a):\n    return True\ndef sorted(x, **k):\n    return x\n",
    "sys_exit_before_tests": every_function("return None") + "import sys\nsys.exit(0)\n",
    "os_exit_before_tests": every_function("return None") + "import os\nos._exit(0)\n",
    "atexit_forgery": every_function("return None")
    + "import atexit, os\n"
    + f"atexit.register(lambda: os.write(1, {FORGED_RECORD!r}))\n",
    "settrace_rebinds_test_names": "import sys\n"
    "def tracer(frame, event, arg):\n"
    "    if frame.f_code.co_name == '<module>':\n"
    "        frame.f_globals['expected'] = 41\n"
    "        frame.f_globals['want'] = 41\n"
    "    return tracer\n"
    "sys.settrace(tracer)\n"
    "sys._getframe().f_trace = tracer  # the frame the tests run in, too\n"
    + every_function("return 41"),
    "redefine_probe": EQ + "import builtins, threading, time\n"
    "__probe__ = lambda k, thunk=None: Eq()\n"
    "builtins.__probe__ = __probe__\n"
    "g = globals()\n"
    "def keep():\n"
    "    while True:\n"
    "        g['__probe__'] = __probe__\n"
    "        time.sleep(0)\n"
    "threading.Thread(target=keep, daemon=True).start()\n" + every_function("return Eq()"),
    "patched_json_forges_record": "import json\n"
    'json.dumps = lambda entry, **kw: \'[%d,"v","forged"]\' % entry[0]\n'
    + every_function("return None"),
    "printed_forged_records": every_function("return None")
    + "import os\n"
    + 'for fake in (\'[[0,"v",{"__eq__":1}]]\', \'[[0,"v",["o","int"]]]\', \'[[0,"v",3]]\'):\n'
    + f"    os.write(1, ({runtime.MARK!r} + fake + '\\n').encode())\n"
    + "os.write(1, b'0123456789abcdef0123456789abcdef[0, {\"ok\": true}]\\n')\n"
    + "os._exit(0)\n",
    "forged_report_on_result_fd": every_function("return None")
    + "import os\n"
    + f"report = {FORGED_REPORT!r}\n"
    + "for fd in range(3, 256):\n"
    + "    try:\n        os.write(fd, report)\n    except OSError:\n        pass\n"
    + "os._exit(0)\n",
    "exception_with_lying_message": "class S(str):\n    __eq__ = lambda s, o: True\n"
    "    __ne__ = lambda s, o: False\n    __hash__ = str.__hash__\n"
    "class E(ValueError):\n    def __str__(self): return S('')\n"
    "    __eq__ = lambda s, o: True\n"
    "def root(n):\n    raise E()\n" + every_function("raise E()").replace("def root(", "def _r("),
    "lying_iterables": EQ + "class It:\n    def __iter__(self):\n        return iter([Eq()] * 3)\n"
    "def gen():\n    yield from [Eq()] * 3\n"
    + every_function("return It() if a and a[0] != 3 else gen()"),
    "reads_expected_values_from_frames": """
import sys, linecache, re
def _steal(name, args):
    text = []
    f = sys._getframe(2)
    while f is not None:
        text.append(repr(f.f_code.co_consts))
        for code in f.f_code.co_consts:
            if hasattr(code, 'co_consts'):
                text.append(repr(code.co_consts))
        text.extend(repr(v) for v in list(f.f_globals.values()) + list(f.f_locals.values()))
        f = f.f_back
    for lines in list(linecache.cache.values()):
        text.extend(lines[2])
    call = re.escape(name + '(' + ', '.join(map(repr, args)) + ')')
    for t in text:
        m = re.search(call + r"\\)?\\s*(?:==|is)\\s*(.+?)(?:\\s*$|\\\\n|,\\s*')", t)
        if m:
            try:
                return eval(m.group(1))
            except Exception:
                pass
    for t in text:
        for n in re.findall(r"\\b\\d{6,}\\b", t):
            return int(n)
"""
    + "".join(f"def {n}(*a):\n    return _steal({n!r}, a)\n" for n in FUNCTIONS.split()),
    "reads_the_problem_files": """
import os, json
def _answers():
    found = []
    for top in ('/sandbox', '/tmp', '/work', '/root', '/home', '/etc', '/opt', '/srv', '/var'):
      for root, dirs, files in os.walk(top):
        for name in files:
            if name.endswith(('.jsonl', '.json')):
                try:
                    found.append(open(os.path.join(root, name)).read())
                except OSError:
                    pass
    for extra in (PROBLEM_FILE, '/proc/self/cmdline', '/proc/self/environ'):
        try:
            found.append(open(extra).read())
        except OSError:
            pass
    found.append(repr(dict(os.environ)))
    return found
TEXT = _answers()
import re
def _lookup(name, args):
    call = re.escape(name + '(' + ', '.join(map(repr, args)) + ')')
    for t in TEXT:
        m = re.search(call + r"\\s*==\\s*([^\\"\\\\n]+)", t)
        if m:
            return eval(m.group(1))
""".replace("PROBLEM_FILE", repr(str(BUILTIN_PATH)))
    + "".join(f"def {n}(*a):\n    return _lookup({n!r}, a)\n" for n in FUNCTIONS.split()),
    "huge_and_deep_answers": "def _deep():\n    x = []\n    for _ in range(100_000):\n"
    "        x = [x]\n    return x\n"
    + "".join(
        f"def {n}(*a):\n    return {v}\n"
        for n, v in zip(
            FUNCTIONS.split(),
            ["10 ** 200_000", "'x' * 3_000_000", "_deep()", "_deep()", "10 ** 200_000"]
            + ["_deep()", "10 ** 200_000", "iter(_deep())", "_deep()", "10 ** 200_000"]
            + ["set(range(300_000))"],
            strict=True,
        )
    ),
    "floods_its_output": every_function("print('3' * 2_000_000)\n    return None"),
}


@pytest.fixture(scope="module")
def env():
    # generous: a loaded CI machine must not turn a run into a timeout that hides a pass
    return gemkit.make("code:Jsonl-v0", problems=list(PROBLEMS.values()), timeout=20)


@pytest.mark.parametrize("attack", list(ATTACKS))
@pytest.mark.parametrize("problem", NAMES)
def test_an_attack_earns_nothing(env, attack, problem):
    env.reset(options={"index": NAMES.index(problem)})
    obs, reward, terminated, _, info = env.step(f"```python\n{ATTACKS[attack]}\n```")
    assert (reward, info["success"], terminated) == (0.0, False, True), (info, obs)
    assert info["passed"] == 0 and info["error"]


def test_the_forged_report_is_the_one_a_finished_child_sends():
    """Keeps the result-fd attack honest: it forges exactly what the supervisor reads."""
    finished = {"exit_code": 0, "finished": True, "exception": None}
    assert wire.encode_report(finished) == FORGED_REPORT


def test_each_attack_is_answered_with_a_clear_reason(env):
    reasons = {}
    for attack in ("eq_always_true", "forged_report_on_result_fd", "huge_and_deep_answers"):
        env.reset(options={"index": NAMES.index("add")})
        reasons[attack] = env.step(f"```python\n{ATTACKS[attack]}\n```")[4]["error"]
    assert "only builtin data crosses to the grader" in reasons["eq_always_true"]
    assert "exited before the test ran" in reasons["forged_report_on_result_fd"]
    assert "too large" in reasons["huge_and_deep_answers"]


def _constants(tree: ast.AST) -> set[str]:
    """The constants of a tree, but the probe numbers of `__probe__(k, ...)` calls."""
    skip = {
        id(n.args[0])
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "__probe__"
    }
    return {
        repr(n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in skip
    }


@pytest.mark.parametrize("problem", NAMES)
def test_the_program_never_holds_an_expected_value(problem):
    """No constant of a test but its probes' inputs reaches the program's process."""
    for test in PROBLEMS[problem]["tests"]:
        split = split_test(test)
        if problem == "callbacks":  # a probe inside a lambda runs whenever it is called:
            assert not split.blind  # such a test runs whole in the program's process
            continue
        assert split.blind
        inputs = set().union(*(_constants(ast.parse(p)) for p in split.probes))
        program = ast.parse(split.program)
        assert repr(split.program) in statements.program_source("pass", split)
        leaked = (_constants(ast.parse(test)) - inputs) & _constants(program)
        if problem == "check":  # a loop over (input, expected) pairs hands the program both
            assert leaked == {"1", "2", "4", "5", "10"}
        else:
            assert not leaked, (test, split.program)
        for other in PROBLEMS[problem]["tests"]:  # nor does another test's text
            assert other == test or other not in ast.unparse(program)


def test_feedback_never_shows_an_expected_value_the_prompt_did_not():
    """An agent that copies answers out of the feedback finds none for the hidden tests."""
    io = {
        "question": "Print the input doubled.",
        "tests": [{"input": f"{n}\n", "output": f"{2 * n}\n"} for n in (2, 5, 7)],
    }
    env = gemkit.make("code:Jsonl-v0", problems=[PROBLEMS["add"], io], max_attempts=3, timeout=20)
    answer = "```python\ndef add(a, b):\n    return 3\nprint(0)\n```"  # passes the shown test
    for index, hidden in ((0, ["== 0", "42"]), (1, ["'4", "10", "14"])):
        env.reset(options={"index": index})
        terminated = False
        while not terminated:
            obs, reward, terminated, _, info = env.step(answer)
            assert "First failure" in obs and not any(h in obs for h in hidden), obs
        assert reward < 1.0 and info["success"] is False


@pytest.mark.parametrize(
    "record, why",
    [
        ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
        ('[[0,"v",["i","' + "f" * 30_000 + '"]]]', "too large"),
        ('[[0,"v",12345]]', "no known type tag"),
        ('[[0,"v",{"a":1}]]', "bare numbers and objects"),
        ('[[0,"v",NaN]]', "bare numbers"),
        ('[[0,"v",["q",1]]]', "no known type tag"),
        ('[[0,"v",["s",["l"]]]]', "not hashable"),
        ('[[0,"v",["s",["o","Foo"]]]]', "not builtin data"),
        ('[[true,"v",null]]', "not [k, kind"),
        ('[[0,"v",' + '["l",' * 70 + "null" + "]" * 70 + "]]", "nested more than"),
        ("x" * (runtime.MAX_RECORD + 1), "longer than"),
    ],
)
def test_the_grader_reads_a_forged_record_as_a_failure_not_a_crash(record, why):
    verdict = runtime.grade_one("assert __probe__(0) == 3", record)
    assert verdict["ok"] is False and why in verdict["error"], verdict


def test_a_record_of_plain_data_round_trips_exactly():
    value = [None, True, 1, -(2**100), 0.1, float("inf"), -0.0, "é\ud800", b"\x00\xff"]
    value += [(1, "a"), {1, 2}, frozenset({3}), {"k": [1], (1, 2): {4: None}}]
    text = json.dumps([[0, "v", runtime.encode(value)]])
    [(k, kind, back)] = runtime.decode_record(text)
    assert (k, kind) == (0, "v") and back == value
    assert [type(v) for v in back] == [type(v) for v in value]
    assert str(back[6]) == "-0.0"
