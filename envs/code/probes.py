"""Split a statement test into the program's half and the grader's half.

A *probe* is a question the test asks the program: the maximal chain of calls, attributes and
subscripts rooted at a name the test does not bind (`add(1, 2)`, `Solution().two_sum(a, 9)`,
`fizzbuzz(15)[-1]`, `CONST`). A converting builtin applied to a probe joins it (`list(gen(3))`,
`len(s)`, `sorted(f(x))`). A name bound straight to a probe (`s = Stack()`) holds a program
object, so chains rooted at it are probes too (`s.push(1)`, `s.pop()`), and so are the
parameters of a test function that every call hands a probe (`def check(candidate): ...`
then `check(add)`). Everything else is the test's own work.

- The grader's half (`grader`) is the whole test with each probe replaced by `__probe__(k)`:
  it runs where no candidate code does, on the recorded answers (see `runtime.py`).
- The program's half (`program`) wraps each probe as `__probe__(k, lambda: <probe>)` and runs
  after the candidate's code. When the test allows it (`blind`), it holds only what the probes
  need: an `assert` keeps its probes and loses its comparison, a check such as
  `if got != want: raise ...` keeps its probes and loses its branch, and assignments nothing
  reads any more go, so expected values never reach the program's process. Tests whose control
  flow needs the outcome of a check (a `while` on a result, `ok = f(x) == 3`, ...) run whole
  there (`blind` False): answers are still judged by the grader, but the program could read
  that test's text.
"""

from __future__ import annotations

import ast
import builtins
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TypeGuard, cast

BUILTIN_NAMES = frozenset(dir(builtins))
PROBE = "__probe__"
#: builtins that turn a program object into data: applied straight to a probe, they run in
#: the program's process with it (so generators and custom containers can be checked); their
#: result still crosses as plain data only. Checks (`isinstance`, `bool`, ...) stay out.
CONVERTERS = frozenset(
    {"list", "tuple", "set", "frozenset", "sorted", "dict", "next", "sum", "min", "max", "len"}
    | {"str", "repr"}
)

# a name written as code in a question: `sorted`, `pow(x, n)`, or sorted(...)
_CODE_NAME = re.compile(r"`([A-Za-z_]\w*)|\b([A-Za-z_]\w*)\(")
_FUNCTIONS = (ast.FunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_SCOPES = (ast.Module, ast.ClassDef, *_FUNCTIONS, *_COMPREHENSIONS)
_UNSUPPORTED = {
    ast.Global: "'global'",
    ast.Nonlocal: "'nonlocal'",
    ast.NamedExpr: "the walrus operator ':='",
    ast.Yield: "'yield'",
    ast.YieldFrom: "'yield from'",
    ast.Await: "'await'",
    ast.AsyncFunctionDef: "'async def'",
    ast.AsyncFor: "'async for'",
    ast.AsyncWith: "'async with'",
    ast.Match: "'match'",
}
if sys.version_info >= (3, 11):  # `except*` is 3.11's (3.10's ast has no TryStar, nor parses one)
    _UNSUPPORTED[ast.TryStar] = "'except*'"


class TestShapeError(ValueError):
    """A statement test that cannot be split into a program half and a grader half."""


@dataclass(frozen=True)
class SplitTest:
    """A statement test as the two processes run it."""

    source: str
    program: str
    grader: str
    probes: tuple[str, ...]
    blind: bool


@dataclass(eq=False)
class _Scope:
    node: ast.AST
    parent: _Scope | None
    # name -> the nodes that bind it here (Assign, For, arg, FunctionDef, alias, ...)
    sites: dict[str, list[ast.AST]] = field(default_factory=dict)

    def bind(self, name: str, site: ast.AST) -> None:
        self.sites.setdefault(name, []).append(site)


_Binding = tuple[_Scope, str]


class _Binder(ast.NodeVisitor):
    """Finds every scope of the test, what each binds, and the scope each node sits in."""

    def __init__(self) -> None:
        self.scope: _Scope | None = None
        self.scope_at: dict[ast.AST, _Scope] = {}
        self.parent: dict[ast.AST, ast.AST] = {}
        self.scopes: dict[ast.AST, _Scope] = {}  # function, class, comprehension -> its scope
        self.owner: dict[ast.arg, ast.FunctionDef | ast.Lambda] = {}

    def visit(self, node: ast.AST) -> None:
        for kind, what in _UNSUPPORTED.items():
            if isinstance(node, kind):
                raise TestShapeError(f"{what} is not supported in a statement test")
        if isinstance(node, ast.Name) and node.id == PROBE:
            raise TestShapeError(f"the name {PROBE} is reserved for the checker")
        if self.scope is not None:
            self.scope_at[node] = self.scope
        super().visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        self._link(node, list(ast.iter_child_nodes(node)))
        super().generic_visit(node)

    def _link(self, node: ast.AST, children: list) -> None:
        for child in children:
            if child is not None:
                self.parent[child] = node

    def _visit_in(self, scope: _Scope, nodes: list) -> None:
        outer, self.scope = self.scope, scope
        for n in nodes:
            self.visit(n)
        self.scope = outer

    def _enter(self, node: ast.AST) -> _Scope:
        scope = self.scopes[node] = _Scope(node, self.scope)
        return scope

    def visit_Module(self, node: ast.Module) -> None:
        self.scope = self._enter(node)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            site = self.parent.get(node, node)
            while isinstance(site, (ast.Tuple, ast.List, ast.Starred)):  # `a, b = ...`
                site = self.parent.get(site, site)
            self.scope_at[node].bind(node.id, site)

    def visit_alias(self, node: ast.alias) -> None:
        if node.name == "*":
            raise TestShapeError("'from ... import *' is not supported in a statement test")
        self.scope_at[node].bind(node.asname or node.name.split(".")[0], node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.scope_at[node].bind(node.name, node)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._function(node, node.body)
        self.scope_at[node].bind(node.name, node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._function(node, [node.body])

    def _function(self, node: ast.FunctionDef | ast.Lambda, body: list) -> None:
        a = node.args
        outer = [*a.defaults, *[d for d in a.kw_defaults if d is not None]]
        if isinstance(node, ast.FunctionDef):
            outer += node.decorator_list
        self._link(node, [*outer, *body])
        for n in outer:
            self.visit(n)
        scope = self._enter(node)
        for arg in [*a.posonlyargs, *a.args, a.vararg, *a.kwonlyargs, a.kwarg]:
            if arg is not None:
                scope.bind(arg.arg, arg)
                self.owner[arg] = node
        self._visit_in(scope, body)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        outer = [*node.bases, *[k.value for k in node.keywords], *node.decorator_list]
        self._link(node, [*outer, *node.body])
        for n in outer:
            self.visit(n)
        self._visit_in(self._enter(node), node.body)
        self.scope_at[node].bind(node.name, node)

    def _comprehension(self, node: ast.AST, elts: list) -> None:
        gens: list[ast.comprehension] = node.generators  # type: ignore[attr-defined]
        self._link(node, [*gens, *elts])
        self.visit(gens[0].iter)  # the first iterable is evaluated outside
        scope = self._enter(node)
        for i, gen in enumerate(gens):
            self._link(gen, [gen.target, gen.iter, *gen.ifs])
            self._visit_in(
                scope, [gen.target, *gen.ifs] if i == 0 else [gen.iter, gen.target, *gen.ifs]
            )
        self._visit_in(scope, elts)

    def visit_ListComp(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> None:
        self._comprehension(node, [node.elt])

    visit_SetComp = visit_ListComp
    visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node, [node.key, node.value])


def _lookup(scope: _Scope, name: str) -> _Scope | None:
    """The scope whose binding of `name` a read in `scope` sees (Python's rules)."""
    s: _Scope | None = scope
    while s is not None:
        # a class body's names are not visible inside the functions it holds
        if name in s.sites and (s is scope or not isinstance(s.node, ast.ClassDef)):
            return s
        s = s.parent
    return None


def _chain_root(node: ast.AST) -> ast.AST:
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return node


def _extends(parent: ast.AST | None, child: ast.AST) -> TypeGuard[ast.AST]:
    """True if `parent` continues the trailer chain that `child` is."""
    if isinstance(parent, (ast.Attribute, ast.Subscript)):
        return parent.value is child
    return isinstance(parent, ast.Call) and parent.func is child


class _Analysis:
    """The probes of one parsed test, and the bindings that hold program objects."""

    def __init__(self, test: str, shadowed: frozenset[str]):
        self.tree = _parse(test)
        binder = _Binder()
        binder.visit(self.tree)
        self.parent = binder.parent
        self.scope_at = binder.scope_at
        self.scopes = binder.scopes
        self.owner = binder.owner
        self.shadowed = shadowed
        self.held: set[_Binding] = set()  # bindings that hold a program object
        while True:  # held names make probes, probes make held names: until nothing changes
            self.probes = self._find_probes()
            self._probe_ids = {id(p) for p in self.probes}
            held = self._find_held()
            if held == self.held:
                break
            self.held = held
        self.index = {id(p): k for k, p in enumerate(self.probes)}
        self._memo: dict[int, bool] = {}

    # -- names ---------------------------------------------------------------------------------

    def binding(self, name: ast.Name) -> _Binding | None:
        """The test's binding a name read refers to; None for a builtin or a program name."""
        scope = _lookup(self.scope_at[name], name.id)
        return None if scope is None else (scope, name.id)

    def sites(self, name: ast.Name) -> list[ast.AST]:
        """Where the test binds the name a read refers to (empty if it does not)."""
        b = self.binding(name)
        return [] if b is None else b[0].sites[b[1]]

    def _is_program_name(self, node: ast.AST) -> bool:
        """A read of a name the program gives: unbound by the test, or bound to a probe."""
        if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load):
            return False
        b = self.binding(node)
        if b is None:
            return node.id not in BUILTIN_NAMES or node.id in self.shadowed
        return b in self.held

    def _find_probes(self) -> list[ast.AST]:
        probes = []
        for node in _walk_in_order(self.tree):
            if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
                continue
            if _extends(self.parent.get(node), node):
                continue
            if not self._is_program_name(_chain_root(node)):
                continue
            if not isinstance(getattr(node, "ctx", ast.Load()), ast.Load):
                raise TestShapeError(
                    f"the test changes a program object ({ast.unparse(node)}); "
                    "only calls and reads can be checked"
                )
            probes.append(self._converted(node))
        return _outermost(probes, self.parent)

    def _converted(self, node: ast.AST) -> ast.AST:
        """The probe grown over converting builtins applied to it (`sorted(f(x))[0]`)."""
        while True:
            parent = self.parent.get(node)
            if _extends(parent, node):
                node = parent
            elif (
                isinstance(parent, ast.Call)
                and parent.args
                and parent.args[0] is node
                and isinstance(parent.func, ast.Name)
                and parent.func.id in CONVERTERS
                and self.binding(parent.func) is None
                and not any(
                    self._is_program_name(n)
                    for arg in [*parent.args[1:], *parent.keywords]
                    for n in ast.walk(arg)
                )
            ):
                node = parent
            else:
                return node

    def _find_held(self) -> set[_Binding]:
        """Bindings that only ever take probes: they hold program objects (`s = Stack()`).

        A name that also takes a value of the test (`n = 0`, then `n = step(n)`) is the
        test's own: the grader computes with the plain copy of each answer it was given.
        """
        candidates: set[_Binding] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and id(node.value) in self._probe_ids:
                scope = self.scope_at[node]
                candidates.update((scope, n) for t in node.targets for n in _target_names(t))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                function = self._test_function(node.func)
                if function is not None:
                    scope = self.scopes[function]
                    candidates.update((scope, p) for p in self._params_given(function, node))
        return {
            b for b in candidates if all(self._takes_probe(b, site) for site in b[0].sites[b[1]])
        }

    def _takes_probe(self, binding: _Binding, site: ast.AST) -> bool:
        if isinstance(site, ast.Assign):
            return id(site.value) in self._probe_ids and all(_plain_target(t) for t in site.targets)
        function = self.owner.get(site) if isinstance(site, ast.arg) else None
        return isinstance(function, ast.FunctionDef) and self._always_given(function, binding[1])

    def _test_function(self, func: ast.Name) -> ast.FunctionDef | None:
        """The `def` a name read refers to, if the test binds the name only there."""
        if not isinstance(func.ctx, ast.Load):
            return None
        sites = self.sites(func)
        if len(sites) == 1 and isinstance(sites[0], ast.FunctionDef):
            return sites[0]
        return None

    def _params_given(self, function: ast.FunctionDef, call: ast.Call) -> set[str]:
        """The parameters of `function` that `call` hands a probe."""
        a = function.args
        positional = [p.arg for p in [*a.posonlyargs, *a.args]]
        given = set()
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break
            if i < len(positional) and id(arg) in self._probe_ids:
                given.add(positional[i])
        for kw in call.keywords:
            if kw.arg is not None and id(kw.value) in self._probe_ids:
                given.add(kw.arg)
        return given

    def _always_given(self, function: ast.FunctionDef, name: str) -> bool:
        """Every use of the function is a call that hands parameter `name` a probe."""
        uses = [
            n
            for n in ast.walk(self.tree)
            if isinstance(n, ast.Name)
            and n.id == function.name
            and self._test_function(n) is function
        ]
        for use in uses:
            call = self.parent.get(use)
            if not (isinstance(call, ast.Call) and call.func is use):
                return False
            if name not in self._params_given(function, call):
                return False
        return bool(uses)

    # -- probes in expressions -----------------------------------------------------------------

    def may_stop(self, probe: ast.AST) -> bool:
        """True for a `next(...)` probe outside any function or comprehension of the test.

        Only there may a StopIteration the program raised reach the grader as one: inside a
        callback (`all(map(lambda x: f(x) == x, xs))`) it would end the iteration quietly.
        """
        if not (isinstance(probe, ast.Call) and isinstance(probe.func, ast.Name)):
            return False
        if probe.func.id != "next" or self.binding(probe.func) is not None:
            return False
        return isinstance(self.scope_at[probe].node, ast.Module)

    def is_probe(self, node: ast.AST) -> bool:
        """True for a probe node."""
        return id(node) in self._probe_ids

    def has_probe(self, node: ast.AST | None) -> bool:
        """True if a probe lies anywhere in `node`."""
        if node is None:
            return False
        key = id(node)
        if key not in self._memo:
            self._memo[key] = self.is_probe(node) or any(
                self.has_probe(c) for c in ast.iter_child_nodes(node)
            )
        return self._memo[key]


def _parse(test: str) -> ast.Module:
    try:
        return ast.parse(test)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise TestShapeError(f"not valid Python ({type(e).__name__}: {e})") from None


def _walk_in_order(node: ast.AST):  # noqa: ANN202
    """Every node, parents before children, children in field order (so in source order)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(list(ast.iter_child_nodes(n))))


def _outermost(probes: list[ast.AST], parent: dict) -> list[ast.AST]:
    """Drop probes nested inside another probe (`g(f(1))`: the whole call is one probe)."""
    ids = {id(p) for p in probes}
    out = []
    for p in probes:
        q = parent.get(p)
        while q is not None and id(q) not in ids:
            q = parent.get(q)
        if q is None:
            out.append(p)
    return out


def _target_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _target_names(e)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def _plain_target(target: ast.AST) -> bool:
    """A target made of names only (`x`, `a, b`), no attribute or subscript."""
    if isinstance(target, ast.Name):
        return True
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_plain_target(e) for e in target.elts)
    return isinstance(target, ast.Starred) and _plain_target(target.value)


# -- the two halves -------------------------------------------------------------------------


def _probe_call(k: int, thunk: ast.expr | None, stops: bool = False) -> ast.Call:
    args: list[ast.expr] = [ast.Constant(k)]
    if stops:
        args.append(ast.Constant(True))
    if thunk is not None:
        no_args = ast.arguments(
            posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], defaults=[]
        )
        args.append(ast.Lambda(args=no_args, body=thunk))
    return ast.Call(func=ast.Name(PROBE, ast.Load()), args=args, keywords=[])


class _Replace(ast.NodeTransformer):
    """Each probe becomes `__probe__(k)` (grader) or `__probe__(k, lambda: probe)` (program)."""

    def __init__(self, analysis: _Analysis, thunks: bool):
        self.a = analysis
        self.thunks = thunks

    def visit(self, node: ast.AST) -> ast.AST:
        if self.a.is_probe(node):
            k = self.a.index[id(node)]
            if self.thunks:
                return _probe_call(k, node)  # type: ignore[arg-type]
            return _probe_call(k, None, stops=self.a.may_stop(node))
        return super().visit(node)

    def visit_expr(self, node: ast.expr) -> ast.expr:
        """`visit` of an expression, which gives an expression (a probe's call, or `node`)."""
        return cast(ast.expr, self.visit(node))


class _NotBlind(Exception):
    """The program's half of this test needs the outcome of a check: it runs whole."""


class _Blind:
    """Builds the program's half that holds only what the probes need."""

    def __init__(self, analysis: _Analysis):
        self.a = analysis
        self.replace = _Replace(analysis, thunks=True)
        self.running = self._running_definitions()
        self.dependent = self._dependent_names()

    def _running_definitions(self) -> set[ast.AST]:
        """The test's functions and classes that ask probes when called (so must run)."""
        definitions = [
            n for n in ast.walk(self.a.tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))
        ]
        running: set[ast.AST] = {d for d in definitions if self.a.has_probe(d)}
        while True:
            grown = running | {
                d
                for d in definitions
                if any(
                    isinstance(c, ast.Call) and self._calls_into(c, running) for c in ast.walk(d)
                )
            }
            if grown == running:
                return running
            running = grown

    def _calls_into(self, call: ast.Call, definitions: set[ast.AST]) -> bool:
        func = call.func
        if not isinstance(func, ast.Name) or not isinstance(func.ctx, ast.Load):
            return False
        return any(site in definitions for site in self.a.sites(func))

    def _dependent_names(self) -> set[str]:
        """Names whose values the program's process cannot know: computed from answers."""
        names: set[str] = set()
        while True:
            grown = set(names)
            for node in ast.walk(self.a.tree):
                value: ast.expr | None = None
                targets: list[ast.expr] = []
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    value = node.value
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                elif isinstance(node, (ast.For, ast.comprehension)):
                    value, targets = node.iter, [node.target]
                elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                    value, targets = node.context_expr, [node.optional_vars]
                if value is not None and self.depends(value, names):
                    grown.update(n for t in targets for n in _target_names(t))
            if grown == names:
                return names
            names = grown

    def depends(self, node: ast.AST | None, names: set[str] | None = None) -> bool:
        """True if `node` holds a probe or reads a name computed from one."""
        if node is None:
            return False
        names = self.dependent if names is None else names
        return self.a.has_probe(node) or any(
            isinstance(n, ast.Name) and n.id in names for n in ast.walk(node)
        )

    def program(self) -> ast.Module:
        """The blind program half; raises `_NotBlind` when the test needs a check's outcome."""
        tree = ast.Module(self.body(self.a.tree.body), [])
        _drop_dead_stores(tree)
        return tree

    # -- statements ----------------------------------------------------------------------------

    def body(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        """A block of the program half (never empty)."""
        out = [s for stmt in stmts for s in self.statement(stmt)]
        return out or [ast.Pass()]

    def _else(self, node: ast.If | ast.While | ast.For | ast.Try) -> list[ast.stmt]:
        return self.body(node.orelse) if node.orelse else []

    def statement(self, node: ast.stmt) -> list[ast.stmt]:
        """One statement of the test as the program half runs it."""
        if isinstance(node, ast.Assert):
            return self._ask([node.test, node.msg])
        if isinstance(node, ast.Raise):
            return self._ask([node.exc, node.cause])
        if isinstance(node, ast.If):
            if not self.depends(node.test):
                return [ast.If(self.value(node.test), self.body(node.body), self._else(node))]
            # a check: its probes are asked, then both branches run, which may only check
            for stmt in [*node.body, *node.orelse]:
                _only_checks(stmt)
            return [*self._ask([node.test]), *self.body(node.body), *self._else(node)]
        if isinstance(node, ast.While):
            if self.depends(node.test):
                raise _NotBlind
            return [ast.While(self.value(node.test), self.body(node.body), self._else(node))]
        if isinstance(node, ast.For):
            iterable = self.value(node.iter)
            return [ast.For(node.target, iterable, self.body(node.body), self._else(node))]
        if isinstance(node, ast.With):
            items = [ast.withitem(self.value(i.context_expr), i.optional_vars) for i in node.items]
            return [ast.With(items, self.body(node.body))]
        if isinstance(node, ast.Try):
            handlers = [
                ast.ExceptHandler(h.type and self.value(h.type), h.name, self.body(h.body))
                for h in node.handlers
            ]
            final = self.body(node.finalbody) if node.finalbody else []
            return [ast.Try(self.body(node.body), handlers, self._else(node), final)]
        if isinstance(node, ast.FunctionDef):
            a = node.args
            a.defaults = [self.value(d) for d in a.defaults]
            a.kw_defaults = [d if d is None else self.value(d) for d in a.kw_defaults]
            node.decorator_list = [self.value(d) for d in node.decorator_list]
            node.body = self.body(node.body)
            return [node]
        if isinstance(node, ast.ClassDef):
            node.bases = [self.value(b) for b in node.bases]
            node.decorator_list = [self.value(d) for d in node.decorator_list]
            node.body = self.body(node.body)
            return [node]
        if isinstance(node, (ast.Expr, ast.Return, ast.Assign, ast.AnnAssign, ast.AugAssign)):
            if node.value is not None:
                node.value = self.value(node.value)
            return [node]
        return [node]  # pass, break, continue, import, delete

    def _ask(self, nodes: list[ast.expr | None]) -> list[ast.stmt]:
        """A statement that asks the probes of `nodes` and computes nothing else."""
        parts = [p for n in nodes if n is not None for p in self.masked(n)]
        return [ast.Expr(ast.Tuple(parts, ast.Load()))] if parts else []

    # -- expressions ---------------------------------------------------------------------------

    def value(self, node: ast.expr) -> ast.expr:
        """An expression the program half computes as written (its probes recorded)."""
        for n in ast.walk(node):
            if isinstance(n, ast.Compare):
                steering = [n.left, *n.comparators]
            elif isinstance(n, ast.BoolOp):
                steering = n.values[:-1]
            elif isinstance(n, ast.IfExp):
                steering = [n.test]
            elif isinstance(n, ast.comprehension):
                steering = n.ifs
            else:
                continue
            if any(self.depends(s) for s in steering):
                raise _NotBlind  # the program would need to know how a check came out
        return self.replace.visit_expr(node)

    def _needed(self, node: ast.AST) -> bool:
        return self.a.has_probe(node) or any(
            isinstance(c, ast.Call) and self._calls_into(c, self.running) for c in ast.walk(node)
        )

    def masked(self, node: ast.expr) -> list[ast.expr]:
        """Expressions that ask every probe in `node`, and compute nothing else of it."""
        if not self._needed(node):
            return []
        if self.a.is_probe(node):
            return [self.replace.visit_expr(node)]
        if isinstance(node, ast.Call) and self._calls_into(node, self.running):
            return [self.value(node)]  # the test's own check function runs as written
        if isinstance(node, _COMPREHENSIONS):
            return [self._masked_comprehension(node)]
        if isinstance(node, ast.Lambda):
            raise _NotBlind  # its probes are asked only when something calls it
        parts = []
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.keyword):
                child = child.value
            if isinstance(child, ast.expr):
                parts += self.masked(child)
        return parts

    def _masked_comprehension(self, node: ast.expr) -> ast.expr:
        """The comprehension's loops, asking the probes of every item: nothing is filtered
        by a check, so the program answers at least everything the grader will ask."""
        generators = []
        checks: list[ast.expr] = []
        for gen in node.generators:  # type: ignore[attr-defined]
            keep = [self.value(c) for c in gen.ifs if not self.depends(c)]
            checks += [p for c in gen.ifs if self.depends(c) for p in self.masked(c)]
            generators.append(ast.comprehension(gen.target, self.value(gen.iter), keep, 0))
        items = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]  # type: ignore[attr-defined]
        parts = checks + [p for e in items for p in self.masked(e)]
        elt = ast.Tuple(parts, ast.Load()) if parts else ast.Constant(None)
        return ast.ListComp(elt, generators)


def _only_checks(stmt: ast.stmt) -> None:
    """A branch of a check may raise, assert, print or call; it may not bind or jump."""
    for n in ast.walk(stmt):
        if isinstance(n, (ast.Break, ast.Continue, ast.Return, ast.alias, ast.ExceptHandler)):
            raise _NotBlind
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            raise _NotBlind
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            raise _NotBlind


def _drop_dead_stores(tree: ast.Module) -> None:
    """Remove assignments of test values that nothing in the program half reads (`want = 3`)."""
    while True:
        read = {
            n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        dropped = False
        for node in ast.walk(tree):
            for name in ("body", "orelse", "finalbody"):
                stmts = getattr(node, name, None)
                if not isinstance(stmts, list) or not stmts or not isinstance(stmts[0], ast.stmt):
                    continue
                kept = [s for s in stmts if not _dead(s, read)]
                if len(kept) != len(stmts):
                    setattr(node, name, kept or ([ast.Pass()] if name == "body" else []))
                    dropped = True
        if not dropped:
            return


def _dead(stmt: ast.stmt, read: set[str]) -> bool:
    """An assignment of plain test data to names nothing reads."""
    if isinstance(stmt, ast.Assign):
        targets, value = stmt.targets, stmt.value
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets, value = [stmt.target], stmt.value
    else:
        return False
    if not all(_plain_target(t) for t in targets):
        return False
    if any(n in read for t in targets for n in _target_names(t)):
        return False
    # a call could run test code that asks probes: only plain data goes
    return not any(isinstance(n, (ast.Call, ast.Lambda)) for n in ast.walk(value))


# -- entry points ---------------------------------------------------------------------------


def task_builtins(question: str) -> frozenset[str]:
    """Builtin names the question writes as code (`sorted(xs)`): the task may ask for them.

    Only these may the candidate's code redefine for its tests; any other builtin a test uses
    is the real one in the grader (else `def abs(x): return 0` would pass
    `assert abs(area(1) - 3.14159) < 1e-4`).
    """
    found = {a or b for a, b in _CODE_NAME.findall(question)}
    return frozenset(found & BUILTIN_NAMES)


def top_level_names(code: str) -> frozenset[str]:
    """Names the candidate's code binds at module level (it may redefine a builtin)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return frozenset()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            names.update(node.names)
    for stmt in tree.body:
        for node in _module_level(stmt):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[0])
    return frozenset(names)


def _module_level(stmt: ast.AST):  # noqa: ANN202
    """The nodes of a module-level statement outside any function or class body."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(node))


@lru_cache(maxsize=4096)
def split_test(test: str, shadowed: frozenset[str] = frozenset()) -> SplitTest:
    """Split one statement test; `shadowed`: builtins the candidate's code redefines.

    Raises `TestShapeError` (saying what to change) for a test this cannot check.
    """
    shadowed = shadowed & BUILTIN_NAMES
    # each half is transformed from a tree of its own (the transforms edit trees in place)
    grader = _Analysis(test, shadowed)
    if not grader.probes:
        raise TestShapeError("it uses no name the program defines, so it checks nothing")
    probes = tuple(ast.unparse(p) for p in grader.probes)
    program: ast.AST
    try:
        program, blind = _Blind(_Analysis(test, shadowed)).program(), True
    except _NotBlind:
        whole = _Analysis(test, shadowed)
        program, blind = _Replace(whole, thunks=True).visit(whole.tree), False
    return SplitTest(
        source=test,
        program=_unparse(program),
        grader=_unparse(_Replace(grader, thunks=False).visit(grader.tree)),
        probes=probes,
        blind=blind,
    )


def validate_test(test: str, task_names: frozenset[str] = frozenset()) -> None:
    """Raise `TestShapeError` if no candidate code could make `test` checkable.

    A task may ask for a function named like a builtin (`task_names`, from `task_builtins`):
    `assert sorted([2, 1]) == [1, 2]` counts as checkable when the task is to write `sorted`.
    """
    try:
        split_test(test)
    except TestShapeError as first:
        try:
            split_test(test, task_names)
        except TestShapeError:
            raise first from None


def _unparse(tree: ast.AST) -> str:
    return ast.unparse(ast.fix_missing_locations(tree))
