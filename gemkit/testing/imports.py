"""The import graph of gemkit's three source folders, and the rules it must follow.

The layout (docs/architecture.md) is three rings, with data flowing one way:

    gemkit core  <-  gemkit.envs  <-  gemkit.synth        (and gemkit.cli above all three)

A module may import its own ring and the rings inside it: the core imports only the core,
an env family imports the core and other envs, synth imports all three, and only the CLI
(`gemkit/cli/`, `gemkit/__main__.py`) may import the CLI. The graph is read from the source
with `ast`, function-level imports included (a lazy import is still a dependency), and so
are the `"module:attr"` strings a registry resolves later: a core module that names
`"gemkit.envs.games"` depends on it as surely as one that imports it. Cycles are found over
the imports that run (those under `if TYPE_CHECKING:` never do).

`python docs/img/architecture.py` draws the ring-level graph from the same data.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: source folder -> the package it is imported as (setup.py maps them the same way)
ROOTS = {"gemkit": "gemkit", "envs": "gemkit.envs", "synth": "gemkit.synth"}
#: ring -> the rings it may import
ALLOWED = {
    "core": {"core"},
    "envs": {"core", "envs"},
    "synth": {"core", "envs", "synth"},
    "cli": {"core", "envs", "synth", "cli"},
}
RINGS = ("core", "envs", "synth", "cli")
#: a string naming a module to import later: "pkg.module:attr", or a module below a ring root
_MODULE_STRING = re.compile(r"^gemkit(?:\.\w+)+:[\w.]+$|^gemkit\.\w+(?:\.\w+)+$")


@dataclass(frozen=True)
class Edge:
    """One dependency: `source` imports (or names) `target` at `path:line`."""

    source: str
    target: str
    path: str
    line: int
    kind: str  # "import", "lazy" (inside a function), "typing" (TYPE_CHECKING) or "string"

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.source} -> {self.target} ({self.kind})"


@dataclass
class Graph:
    """Modules (name -> file) and the edges between them."""

    modules: dict[str, Path] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)


def ring(module: str) -> str:
    """The ring of a module name: `core`, `envs`, `synth` or `cli`."""
    second = module.split(".")[1:2]
    if second in (["cli"], ["__main__"]):
        return "cli"
    if second in (["envs"], ["synth"]):
        return second[0]
    return "core"


def module_files(root: Path) -> dict[str, Path]:
    """Every module of the three folders under the repository `root`, by import name."""
    out: dict[str, Path] = {}
    for folder, package in ROOTS.items():
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("").parts
            parts = [p for p in rel if p != "__init__"] if rel[-1] == "__init__" else list(rel)
            if any(not p.isidentifier() for p in parts):
                continue  # data folders, scripts with dashes: not importable modules
            out[".".join([package, *parts])] = path
    return out


def _lazy_exports(path: Path) -> dict[str, str]:
    """Name -> module of a package's lazy exports, read from its `__init__.pyi` stub."""
    stub = path.with_suffix(".pyi")
    if path.name != "__init__.py" or not stub.exists():
        return {}
    out: dict[str, str] = {}
    for node in ast.parse(stub.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                out[alias.asname or alias.name] = node.module
    return out


def _under_type_checking(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for child in node.body:
                    ids |= {id(n) for n in ast.walk(child)}
    return ids


def _docstrings(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                ids.add(id(value))
    return ids


def _in_function(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            ids |= {id(n) for n in ast.walk(node) if n is not node}
    return ids


def _resolve(
    name: str, modules: dict[str, Path], lazy: dict[str, dict[str, str]], attr: str | None = None
) -> str | None:
    """The module an import of `name` (and `attr` from it) really loads, or None if outside."""
    if not name.startswith("gemkit"):
        return None
    if attr is not None:
        if f"{name}.{attr}" in modules:
            return f"{name}.{attr}"
        target = lazy.get(name, {}).get(attr)
        if target is not None:
            return target
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def build_graph(root: Path) -> Graph:
    """The import graph of the repository at `root` (imports, lazy imports, module strings)."""
    modules = module_files(root)
    lazy = {m: _lazy_exports(p) for m, p in modules.items()}
    graph = Graph(modules=modules)
    for module, path in modules.items():
        graph.edges += _edges_of(module, path, str(path.relative_to(root)), modules, lazy)
    return graph


def _edges_of(
    module: str, path: Path, rel: str, modules: dict[str, Path], lazy: dict[str, dict[str, str]]
) -> list[Edge]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    typing_ids, doc_ids, func_ids = (
        _under_type_checking(tree),
        _docstrings(tree),
        _in_function(tree),
    )
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str | None, ast.AST, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(_resolve(a.name, modules, lazy), node, "import") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            found += [(_resolve(source, modules, lazy, a.name), node, "import") for a in node.names]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in doc_ids
            and _MODULE_STRING.match(node.value)
        ):
            found.append((_resolve(node.value.partition(":")[0], modules, lazy), node, "string"))
    edges = []
    for target, node, kind in found:
        if target is None or target == module:
            continue
        if kind == "import" and id(node) in typing_ids:
            kind = "typing"
        elif kind == "import" and id(node) in func_ids:
            kind = "lazy"
        edges.append(Edge(module, target, rel, getattr(node, "lineno", 0), kind))
    return edges


def violations(graph: Graph) -> list[Edge]:
    """Edges that point against the direction core <- envs <- synth (<- cli)."""
    return [e for e in graph.edges if ring(e.target) not in ALLOWED[ring(e.source)]]


def cycles(graph: Graph, kinds: Iterable[str] = ("import", "lazy", "string")) -> list[list[str]]:
    """Groups of modules that import each other (strongly connected, two or more), sorted.

    A package that imports its own submodules is not a cycle by itself: the edge from a
    submodule up to the package it lives in is how Python imports any submodule.
    """
    wanted = set(kinds)
    succ: dict[str, set[str]] = {m: set() for m in graph.modules}
    for e in graph.edges:
        if e.kind in wanted and not e.source.startswith(e.target + "."):
            succ.setdefault(e.source, set()).add(e.target)
    return sorted(sorted(c) for c in _components(succ) if len(c) > 1)


def package_of(module: str) -> str:
    """The package a module belongs to for the package-cycle rule: a folder of `gemkit/`, or
    a top-level module of it (`gemkit.llm`, `gemkit.registry`), an env family, a synth
    pipeline (`gemkit.envs.games`, `gemkit.synth.qa`)."""
    parts = module.split(".")
    depth = 3 if len(parts) >= 3 and parts[1] in ("envs", "synth") else 2
    return ".".join(parts[:depth])


def package_cycles(
    graph: Graph, kinds: Iterable[str] = ("import", "lazy", "string")
) -> list[list[str]]:
    """Groups of packages (`package_of`) that import each other, sorted.

    Module cycles are not the only tangle: `a.x` importing `b.y` while `b.z` imports `a.w`
    is no module cycle, yet neither package can be read, tested or moved without the other.
    An import of a ring's own root package (`gemkit`, `gemkit.envs`) from inside it is not
    counted, as in `cycles`.
    """
    wanted = set(kinds)
    succ: dict[str, set[str]] = {package_of(m): set() for m in graph.modules}
    for e in graph.edges:
        source, target = package_of(e.source), package_of(e.target)
        if e.kind not in wanted or source == target or e.source.startswith(e.target + "."):
            continue
        succ[source].add(target)
    return sorted(sorted(c) for c in _components(succ) if len(c) > 1)


def _components(succ: dict[str, set[str]]) -> Iterator[list[str]]:
    # Tarjan's algorithm, iterative (the graph is a few hundred modules deep at most)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for start in sorted(succ):
        if start in index:
            continue
        work = [(start, iter(sorted(succ.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(succ.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                yield component
