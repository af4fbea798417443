"""A solution sees only its tools: no database, no files, no modules, no introspection."""

from __future__ import annotations

import sqlite3

import pytest

from gemkit.synth.tasks import get_category
from gemkit.synth.tasks.restrict import (
    SolutionViolation,
    ToolBudgetExceeded,
    ToolFacade,
    check_source,
    run_solution,
)


def _facade(tmp_path):
    db_file = tmp_path / "secret.sqlite"
    conn = sqlite3.connect(db_file)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES ('secret')")
    conn.commit()

    def get_all_cities() -> list[str]:
        """Reads the database: the facade must never hand `conn` to the solution."""
        return [r[0] for r in conn.execute("SELECT x FROM t")]

    return ToolFacade({"get_all_cities": get_all_cities})


ESCAPES = {
    "open": "def solve(tools, task):\n    return open('/etc/passwd').read()",
    "import": "import sqlite3\ndef solve(tools, task):\n    return 1",
    "from import": "from os import path\ndef solve(tools, task):\n    return 1",
    "__import__": "def solve(tools, task):\n    return __import__('sqlite3')",
    "class": "def solve(tools, task):\n    return tools.__class__",
    "globals": "def solve(tools, task):\n    return tools.get_all_cities.__globals__",
    "closure": "def solve(tools, task):\n    return tools.get_all_cities.__closure__",
    "dict": "def solve(tools, task):\n    return tools.__dict__",
    "getattr": "def solve(tools, task):\n    return getattr(tools, '__class__')",
    "format walk": "def solve(tools, task):\n    return '{0.__class__}'.format(tools)",
    "eval": "def solve(tools, task):\n    return eval('1')",
    "exec": "def solve(tools, task):\n    exec('x = 1')",
    "type": "def solve(tools, task):\n    return type(tools)",
    "vars": "def solve(tools, task):\n    return vars(tools)",
    "subclasses": "def solve(tools, task):\n    return ().__class__.__base__.__subclasses__()",
    "frame": "def solve(tools, task):\n    g = (i for i in [1])\n    return g.gi_frame",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_attempts_fail_the_run(tmp_path, name):
    with pytest.raises(SolutionViolation):
        run_solution(ESCAPES[name], _facade(tmp_path), {})


def test_builtins_without_import_even_if_the_check_is_bypassed(tmp_path):
    from gemkit.synth.tasks.restrict import safe_builtins

    table = safe_builtins()
    for name in ("open", "__import__", "eval", "exec", "getattr", "globals", "type", "compile"):
        assert name not in table


def test_a_solution_that_only_calls_tools_runs(tmp_path):
    source = "def solve(tools, task):\n    return sorted(tools.get_all_cities()) + [task['x']]"
    assert run_solution(source, _facade(tmp_path), {"x": 1}) == ["secret", 1]


def test_facade_is_read_only_and_counts_calls(tmp_path):
    facade = _facade(tmp_path)
    with pytest.raises(SolutionViolation):
        facade.get_all_cities = lambda: ["mine"]
    facade.get_all_cities()
    assert facade.calls() == 1


def test_tool_budget_stops_a_runaway_solution(tmp_path):
    facade = ToolFacade({"ping": lambda: 1}, max_calls=3)
    source = "def solve(tools, task):\n    while True:\n        tools.ping()"
    with pytest.raises(ToolBudgetExceeded):
        run_solution(source, facade, {})


def test_reference_solution_source_passes_the_check():
    source = get_category("trip_planning").solution_source()
    check_source(source)
    assert not any(line.startswith(("import ", "from ")) for line in source.splitlines())


def test_reference_solution_reads_the_database_only_through_tools(trip_tasks):
    syn, db = trip_tasks[0]
    cat = get_category("trip_planning")
    calls: list[str] = []
    real = cat.functions(lambda: db)

    def spy(name):
        def call(*args, **kwargs):
            calls.append(name)
            return real[name](*args, **kwargs)

        return call

    facade = ToolFacade({n: spy(n) for n in syn.task.tools if n != "submit_result"})
    answer = run_solution(cat.solution_source(), facade, {"spec": syn.task.spec})
    assert answer == syn.reference_answer
    assert calls and set(calls) <= set(syn.task.tools)
