"""The two halves of a statement test's check that run inside the sandbox.

This file is sent to the sandbox as source, so it stays standard-library only and imports
nothing from gemkit. The host imports it for its constants and for `decode_record`.

- The program's process (P) runs the candidate's code, then `record(test, globals())`: the
  test runs with every probe (a question to the program, see `probes.py`) wrapped as
  `__probe__(k, lambda: <probe>)`. Each answer is copied into plain data by exact type
  checks and written on stdout after `MARK` as tagged JSON. Everything in P is forgeable,
  this record included: it only ever says what the program answered.
- The grader's process (G) runs `grade(tests, nonce)`: no candidate code ever runs there.
  It reads the records from stdin, decodes each strictly, and runs each test again with
  `__probe__(k)` replaying the recorded answers. A test passes when it runs to its end
  there. G writes one verdict line per test after `nonce`, which only the host knows.

Tagged JSON: None, True, False and str are themselves; every other value is a list whose
first item names its type: `["i", hex]` int, `["f", float.hex()]` float, `["y", hex]` bytes,
`["l", ...]` list, `["t", ...]` tuple, `["s", ...]` set, `["z", ...]` frozenset,
`["d", k1, v1, ...]` dict, `["o", typename]` any other object (opaque). A subclass of one of
these types (Counter, namedtuple, IntEnum) crosses as its base type's value, a numpy scalar as
its `.item()`: never its own methods. A record is a list of
`[k, "v", value]` (probe k returned value), `[k, "x", exception type, message]` (it raised)
and `[k, "e", reason]` (its answer could not be copied).
"""

from __future__ import annotations

# the sandbox's interpreter has this module loaded already (typing it has not: 5 ms)
from collections.abc import Callable

TYPE_CHECKING = False  # typing's, without importing typing (type checkers read it as True)
if TYPE_CHECKING:
    from typing import Any

MARK = "\x1egemkit-probe-record\x1e"
#: bytes of JSON a record may hold (the program's stdout limit is raised to fit it)
MAX_RECORD = 1 << 20
#: nesting depth and number of values one answer may hold
MAX_DEPTH = 64
MAX_NODES = 200_000
#: an int answer may have at most this many hex digits (100,000 bits)
MAX_INT_HEX = 25_000
MAX_MESSAGE = 300

_TAGS = {"i", "f", "y", "l", "t", "s", "z", "d", "o"}


# -- the program's side (P) -----------------------------------------------------------------


class Unencodable(Exception):
    """An answer that cannot cross as plain data (too deep, too large, unhashable parts)."""


# "Any" in quotes: the recorder's part of this file is compiled without its __future__ import
def encode(value: "Any", depth: int = 0, budget: list | None = None) -> object:  # noqa: UP037
    """`value` as tagged JSON data, by exact type; other objects become `["o", typename]`.

    `budget` is [values, characters] left for the whole answer.
    """
    if budget is None:
        budget = [MAX_NODES, MAX_RECORD]
    budget[0] -= 1
    if budget[0] < 0:
        raise Unencodable(f"the answer holds more than {MAX_NODES} values")
    if depth > MAX_DEPTH:
        raise Unencodable(f"the answer is nested more than {MAX_DEPTH} levels deep")
    t = type(value)
    if t not in _EXACT:
        value = _plain_copy(value)
        t = type(value)
        if t not in _EXACT:
            return ["o", _type_name(value)]
    if t is str or t is bytes:
        budget[1] -= len(value) * (1 if t is str else 2)
        if budget[1] < 0:
            raise Unencodable(f"the answer is longer than {MAX_RECORD} characters")
    if value is None or t is bool or t is str:
        return value
    if t is int:
        digits = format(value, "x")
        if len(digits) > MAX_INT_HEX:
            raise Unencodable(f"an int of {value.bit_length()} bits is too large to check")
        return ["i", digits]
    if t is float:
        return ["f", value.hex()]
    if t is bytes:
        return ["y", value.hex()]
    if t is list or t is tuple:
        return ["l" if t is list else "t", *[encode(v, depth + 1, budget) for v in value]]
    if t is set or t is frozenset:
        items = [_encode_key(v, depth + 1, budget) for v in value]
        return ["s" if t is set else "z", *items]
    out: list = ["d"]  # a dict: the only type left of `_EXACT`
    for k, v in value.items():
        out.append(_encode_key(k, depth + 1, budget))
        out.append(encode(v, depth + 1, budget))
    return out


_EXACT = frozenset({type(None), bool, int, float, str, bytes, list, tuple, set, frozenset, dict})


def _plain_copy(value: "Any") -> object:  # noqa: UP037
    """A subclass of a plain type (Counter, namedtuple, IntEnum) as its base type's value,
    through the base type's own methods; a numpy scalar as its `.item()`; else `value`.

    Whatever this computes is only the program's claim: its result must still be plain.
    """
    t = type(value)
    try:
        for base, copy in _COPIES:
            if issubclass(t, base):
                return copy(value)
        if getattr(t, "__module__", None) == "numpy" and hasattr(value, "item"):
            return value.item()
    except Exception:  # a subclass whose own methods fail the copy stays opaque
        pass
    return value


_COPIES = (
    (int, int.__int__),
    (float, float.__float__),
    (str, str.__str__),
    # bytes.__bytes__ is Python 3.11's; on 3.10 a slice of the whole is the same copy
    (bytes, getattr(bytes, "__bytes__", None) or (lambda v: bytes.__getitem__(v, slice(None)))),
    (list, lambda v: list(list.__iter__(v))),
    (tuple, lambda v: tuple(tuple.__iter__(v))),
    (set, lambda v: set(set.__iter__(v))),
    (frozenset, lambda v: frozenset(frozenset.__iter__(v))),
    (dict, lambda v: dict(dict.items(v))),
)


def _encode_key(value: object, depth: int, budget: list) -> object:
    encoded = encode(value, depth, budget)
    if type(encoded) is list and encoded[0] == "o":
        raise Unencodable(f"a set element or dict key of type {encoded[1]} is not builtin data")
    return encoded


def _type_name(value: object) -> str:
    try:
        name = type(value).__name__
    except Exception:
        return "object"
    return name if type(name) is str else "object"


def _builtin_exception_name(exc: BaseException) -> str:
    """The nearest builtin exception class of `exc` (a custom ValueError counts as one)."""
    try:
        for cls in type(exc).__mro__:
            if cls.__module__ == "builtins":
                return cls.__name__
    except Exception:
        pass
    return "Exception"


def _message(exc: BaseException) -> str:
    try:
        text = str(exc)
    except BaseException:
        return ""
    return text[:MAX_MESSAGE] if type(text) is str else ""


def record(test: str, namespace: dict) -> None:
    """Run the program's half of a test in the candidate's namespace; print the record."""
    import json
    import os
    import sys

    parts: list[str] = []
    size = [2]

    def add(entry: list) -> None:
        text = json.dumps(entry, separators=(",", ":"))
        size[0] += len(text) + 1
        if size[0] > MAX_RECORD - 100:
            text = json.dumps([entry[0], "e", f"the answers exceed {MAX_RECORD} bytes"])
        parts.append(text)

    def probe(k: int, thunk):  # noqa: ANN001, ANN202 (called by the rewritten test)
        try:
            value = thunk()
        except BaseException as e:
            add([k, "x", _builtin_exception_name(e), _message(e)])
            raise
        try:
            add([k, "v", encode(value)])
        except Unencodable as e:
            add([k, "e", str(e)])
        except Exception as e:  # RecursionError, MemoryError: the answer is too big to copy
            add([k, "e", f"the answer could not be copied ({type(e).__name__})"])
        return value

    namespace["__probe__"] = probe
    try:
        exec(compile(test, "<test>", "exec", dont_inherit=True), namespace)
    except BaseException:  # the grader decides; the record says what was answered
        pass
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    data = (MARK + "[" + ",".join(parts) + "]").encode("ascii")
    while data:
        data = data[os.write(1, data) :]


# -- the grader's side (G) ------------------------------------------------------------------


class RecordError(Exception):
    """A record that is not well-formed tagged JSON."""


def _reject(_value: object) -> None:
    raise RecordError("bare numbers and objects are not part of the format")


def decode_record(text: str, opaque: Callable | None = None) -> list[tuple[int, str, object]]:
    """Parse a record strictly into `(k, kind, payload)` triples; raise `RecordError`."""
    import json

    if len(text) > MAX_RECORD:
        raise RecordError(f"the record is longer than {MAX_RECORD} bytes")
    try:
        data = json.loads(
            text,
            parse_float=_reject,
            parse_constant=_reject,
            parse_int=_small_int,
            object_pairs_hook=_reject,
        )
    except RecordError:
        raise
    except (ValueError, RecursionError, MemoryError) as e:
        raise RecordError(f"the record is not valid JSON ({type(e).__name__})") from None
    if type(data) is not list:
        raise RecordError("the record is not a list")
    out = []
    try:
        for entry in data:
            out.append(_decode_entry(entry, opaque))
    except _Refused:  # an opaque value where a hashable one must be
        raise RecordError("a set element or dict key is not builtin data") from None
    return out


def _decode_entry(entry: object, opaque: Callable | None) -> tuple[int, str, object]:
    if type(entry) is not list or len(entry) < 3 or type(entry[0]) is not int:
        raise RecordError("a record entry is not [k, kind, ...]")
    k, kind = entry[0], entry[1]
    if kind == "v" and len(entry) == 3:
        return (k, kind, decode(entry[2], opaque))
    if kind == "x" and len(entry) == 4 and all(type(x) is str for x in entry[2:]):
        return (k, kind, (entry[2][:100], entry[3][:MAX_MESSAGE]))
    if kind == "e" and len(entry) == 3 and type(entry[2]) is str:
        return (k, kind, entry[2][:MAX_MESSAGE])
    raise RecordError(f"a record entry of kind {str(kind)[:20]!r} is malformed")


def _small_int(text: str) -> int:
    if len(text) > 9:
        raise RecordError("a probe index is out of range")
    return int(text)


def decode(data: Any, opaque: Callable | None = None, depth: int = 0) -> object:
    """Tagged JSON back to a value, checking every part by exact type; raise `RecordError`.

    `opaque(typename)` makes the placeholder for an object that stayed in the program.
    """
    if depth > MAX_DEPTH:
        raise RecordError(f"a value is nested more than {MAX_DEPTH} levels deep")
    t = type(data)
    if data is None or t is bool or t is str:
        return data
    if t is not list or not data or type(data[0]) is not str or data[0] not in _TAGS:
        raise RecordError("a value has no known type tag")
    tag, rest = data[0], data[1:]
    if tag in ("i", "f", "y", "o"):
        if len(rest) != 1 or type(rest[0]) is not str:
            raise RecordError(f"a value tagged {tag!r} is malformed")
        text = rest[0]
        try:
            if tag == "i":
                if len(text) > MAX_INT_HEX + 1:
                    raise RecordError("an int is too large")
                return int(text, 16)
            if tag == "f":
                return float.fromhex(text)
            if tag == "y":
                return bytes.fromhex(text)
        except (ValueError, OverflowError):
            raise RecordError(f"a value tagged {tag!r} is malformed") from None
        if opaque is None:
            raise RecordError("an opaque value where none is allowed")
        return opaque(text[:100])
    items = [decode(x, opaque, depth + 1) for x in rest]
    if tag == "l":
        return items
    if tag == "t":
        return tuple(items)
    try:
        if tag == "s":
            return set(items)
        if tag == "z":
            return frozenset(items)
        if len(items) % 2:
            raise RecordError("a dict has a key without a value")
        return dict(zip(items[::2], items[1::2], strict=True))
    except TypeError:
        raise RecordError("a set element or dict key is not hashable") from None


class _Refused(BaseException):
    """A replay the grader refuses: the test fails whatever it catches."""


class Replayer:
    """`__probe__` in the grader: hands out the recorded answers, probe by probe."""

    def __init__(self) -> None:
        self.queues: dict[int, list] = {}
        self.asked: dict[int, int] = {}
        self.broken: str | None = None
        self.last: tuple[int, str, Any] | None = None
        self.raised: set[int] = set()

    def opaque(self, name: str) -> Opaque:
        """A placeholder for a program object of type `name`, owned by this replayer."""
        return Opaque(name, self)

    def load(self, entries: list[tuple[int, str, object]]) -> None:
        """Queue the decoded record's answers, per probe, in the order they were given."""
        for k, kind, payload in entries:
            self.queues.setdefault(k, []).append((kind, payload))

    def refuse(self, message: str) -> None:
        """Fail the test with `message` (kept even if the test catches what is raised)."""
        if self.broken is None:
            self.broken = message
        raise _Refused(message)

    def __call__(self, k: int, stops: bool = False) -> object:
        """Probe k's next answer; `stops`: a StopIteration it raised may be raised as one."""
        queue = self.queues.get(k, ())
        i = self.asked.get(k, 0)
        self.asked[k] = i + 1
        if i >= len(queue):
            self.refuse(
                "the program's answers do not match the test's evaluation "
                f"(probe {k} was asked {i + 1} times, answered {len(queue)})"
            )
        kind, payload = queue[i]
        self.last = (k, kind, payload)
        if kind == "v":
            return payload
        if kind == "e":
            self.refuse(str(payload))
        name, message = payload  # kind "x": the program raised
        import builtins

        cls = getattr(builtins, name, None)
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            cls = Exception
        if issubclass(cls, (StopIteration, StopAsyncIteration)) and not stops:
            # it would end an iteration of the test's (map, filter, ...) without a check
            cls, message = RuntimeError, f"the program raised {name}"
        try:
            exc = cls(message) if message else cls()
        except Exception:  # an exception class that wants other arguments
            exc = Exception(message)
        self.raised.add(id(exc))
        raise exc

    def describe_last(self) -> list | None:
        """[k, what the last replayed probe gave], for the feedback."""
        if self.last is None:
            return None
        k, kind, payload = self.last
        if kind == "x":
            name, message = payload
            return [k, f"raised {name}" + (f": {message}" if message else "")]
        if kind == "e":
            return [k, str(payload)]
        if type(payload) is Opaque:
            return [k, f"returned a program object ({object.__getattribute__(payload, '_name')})"]
        return [k, f"returned {_describe(payload)}"]


class Opaque:
    """A placeholder for an object that stayed in the program: any use fails the test."""

    __slots__ = ("_name", "_owner")

    def __init__(self, name: str, owner: Replayer):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_owner", owner)


def _refuse(self: Opaque, *args: object, **kwargs: object) -> None:
    name = object.__getattribute__(self, "_name")
    object.__getattribute__(self, "_owner").refuse(
        f"the test used a program object ({name}); only builtin data crosses to the grader"
    )


# every special method Python may call on a value (`is` and `type()` call none)
_OPAQUE_REFUSES = (
    "__getattribute__ __setattr__ __delattr__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__ "
    "__hash__ __bool__ __len__ __length_hint__ __iter__ __next__ __reversed__ __contains__ "
    "__getitem__ __setitem__ __delitem__ __missing__ __call__ __repr__ __str__ __format__ "
    "__bytes__ __int__ __float__ __complex__ __index__ __round__ __trunc__ __floor__ "
    "__ceil__ __abs__ __neg__ __pos__ __invert__ __enter__ __exit__ __add__ __sub__ __mul__ "
    "__matmul__ __truediv__ __floordiv__ __mod__ __divmod__ __pow__ __lshift__ __rshift__ "
    "__and__ __xor__ __or__ __radd__ __rsub__ __rmul__ __rmatmul__ __rtruediv__ "
    "__rfloordiv__ __rmod__ __rdivmod__ __rpow__ __rlshift__ __rrshift__ __rand__ __rxor__ "
    "__ror__ __iadd__ __isub__ __imul__ __itruediv__ __ifloordiv__ __imod__ __ipow__ "
    "__iand__ __ior__ __ixor__ __ilshift__ __irshift__ __reduce__ __reduce_ex__ __dir__ "
    "__sizeof__ __copy__ __deepcopy__ __fspath__ __buffer__ __await__ __aiter__ __anext__"
)
for _name in _OPAQUE_REFUSES.split():
    setattr(Opaque, _name, _refuse)
del _name


def _describe(value: object) -> str:
    import reprlib

    short = reprlib.Repr()
    short.maxstring = short.maxother = 80
    short.maxlong = 60
    return short.repr(value)


class _Discard:
    """Where the tests' own prints go in the grader (its stdout carries the verdicts)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def grade_one(test: str, raw: str) -> dict:
    """Run one test against its record; the verdict as plain data."""
    replayer = Replayer()
    try:
        replayer.load(decode_record(raw, replayer.opaque))
    except RecordError as e:
        message = f"the program's answers could not be read: {e}"
        return {"ok": False, "error": message, "public": message, "last": None}
    namespace = {"__name__": "__main__", "__probe__": replayer}
    error = public = None
    try:
        exec(compile(test, "<test>", "exec", dont_inherit=True), namespace)
    except BaseException as e:  # the test's failure, whatever it is
        text = _message(e)
        error = f"{type(e).__name__}: {text}" if text else type(e).__name__
        # a message the test built may quote expected values; the program's own may be shown
        public = error if id(e) in replayer.raised else type(e).__name__
    if replayer.broken is not None:
        error = public = replayer.broken
    return {"ok": error is None, "error": error, "public": public, "last": replayer.describe_last()}


def grade(tests: list[str], nonce: str, records: list) -> None:
    """Grade every test against its record (None: skip it); one verdict line each on stdout."""
    import json
    import os
    import sys

    sys.stdout = sys.stderr = _Discard()
    for i, (test, raw) in enumerate(zip(tests, records, strict=True)):
        if type(raw) is not str:
            continue  # the host already knows why this test failed
        verdict = grade_one(test, raw)
        line = (nonce + json.dumps([i, verdict]) + "\n").encode("ascii")
        while line:
            line = line[os.write(1, line) :]
