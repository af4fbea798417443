"""One-way architecture: core <- envs <- synth, typed records between them, no reaching in.

Each test is a way the layout could rot (a hidden import against the direction, a cycle, a
registry that names its families, an env that starts synthesis, a record whose keys drift,
a wrapper ending an episode through another object's state) and shows it cannot.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gemkit
from gemkit.core import Env
from gemkit.records.base import RecordError
from gemkit.records.qa import QARecord
from gemkit.testing.imports import (
    build_graph,
    cycles,
    package_cycles,
    package_of,
    ring,
    violations,
)
from gemkit.tools.base import ToolResult
from gemkit.tools.function import tool
from gemkit.tools.wrapper import ToolEnvWrapper

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def graph():
    return build_graph(ROOT)


# -- the import graph -------------------------------------------------------------------------


def test_no_import_points_against_the_direction(graph):
    bad = violations(graph)
    assert not bad, "imports against core <- envs <- synth <- cli:\n" + "\n".join(map(str, bad))


def test_no_import_cycle(graph):
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_cycle_between_packages(graph):
    found = package_cycles(graph)
    edges = [
        str(e)
        for c in found
        for e in graph.edges
        if {package_of(e.source), package_of(e.target)} <= set(c)
        and package_of(e.source) != package_of(e.target)
        and e.kind != "typing"
    ]
    assert not found, "packages that import each other:\n" + "\n".join(edges)


def test_the_checker_finds_a_cycle_between_packages_that_is_no_module_cycle(tmp_path):
    # gemkit.a.x -> gemkit.b.y and gemkit.b.z -> gemkit.a.w: no module imports itself back
    root = _tree(
        tmp_path,
        {
            "gemkit/a/__init__.py": "",
            "gemkit/a/x.py": "from gemkit.b import y\n",
            "gemkit/a/w.py": "",
            "gemkit/b/__init__.py": "",
            "gemkit/b/y.py": "",
            "gemkit/b/z.py": "def f():\n    from gemkit.a import w\n",
        },
    )
    graph = build_graph(root)
    assert not cycles(graph)
    assert package_cycles(graph) == [["gemkit.a", "gemkit.b"]]


def test_the_graph_sees_every_folder_and_function_level_imports(graph):
    # a checker that reads nothing passes everything: prove it reads the three folders
    assert {ring(m) for m in graph.modules} == {"core", "envs", "synth", "cli"}
    kinds = {e.kind for e in graph.edges}
    assert {"import", "lazy", "string"} <= kinds
    assert any(
        e.source == "gemkit.synth.tasks.run" and e.target.startswith("gemkit.envs.")
        for e in graph.edges
    )


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in {
        "gemkit/__init__.py": "",
        "envs/__init__.py": "",
        "synth/__init__.py": "",
        **files,
    }.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


@pytest.mark.parametrize(
    "files,edge",
    [
        # an env family that starts synthesis from inside a function
        (
            {
                "envs/fam/__init__.py": "",
                "envs/fam/env.py": "def make():\n    from gemkit.synth.run import go\n    go()\n",
                "synth/run.py": "def go(): ...\n",
            },
            ("gemkit.envs.fam.env", "gemkit.synth.run"),
        ),
        # a core registry that names a family module in a string
        (
            {
                "gemkit/registry.py": 'FAMILIES = {"fam": "gemkit.envs.fam"}\n',
                "envs/fam/__init__.py": "",
            },
            ("gemkit.registry", "gemkit.envs.fam"),
        ),
        # a core module that prints with the CLI's console
        (
            {
                "gemkit/server.py": "def run():\n    from gemkit.cli.console import console\n",
                "gemkit/cli/__init__.py": "",
                "gemkit/cli/console.py": "console = None\n",
            },
            ("gemkit.server", "gemkit.cli.console"),
        ),
    ],
)
def test_the_checker_finds_a_planted_edge_against_the_direction(tmp_path, files, edge):
    found = [(e.source, e.target) for e in violations(build_graph(_tree(tmp_path, files)))]
    assert edge in found


def test_the_checker_finds_a_planted_cycle_through_a_lazy_import(tmp_path):
    files = {
        "gemkit/policy.py": "def make():\n    from gemkit.llm.policy import LLMPolicy\n",
        "gemkit/llm/__init__.py": "",
        "gemkit/llm/policy.py": "from gemkit.policy import make\n",
    }
    assert cycles(build_graph(_tree(tmp_path, files))) == [["gemkit.llm.policy", "gemkit.policy"]]


def test_the_registry_finds_every_family_through_entry_points():
    from gemkit import registry

    names = {ep.name for ep in registry._entry_points() if registry._own(ep)}
    families = {s.family for s in gemkit.list_envs()}  # other tests may add a family of theirs
    own = {n.partition(".")[0] for n in names}
    assert {
        "game", "math", "code", "qa", "rg", "toolworld", "terminal", "multiagent", "toy", "gem",
        "textarena", "textworld", "twx", "scienceworld", "openenv", "verifiers", "skyrl",
        "nemo_gym",
    } == own  # fmt: skip
    assert own <= families
    assert "BUILTIN_FAMILIES" not in vars(gemkit.registry)


def test_a_stale_egg_info_in_the_working_directory_does_not_hide_the_families(tmp_path):
    # a checkout's old gemkit.egg-info comes first on sys.path when Python runs from the
    # repository: the installed entries must still be found
    stale = tmp_path / "gemkit.egg-info"
    stale.mkdir()
    (stale / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: gemkit\nVersion: 0.1.0\n")
    (stale / "entry_points.txt").write_text("[console_scripts]\ngemkit = gemkit.cli:main\n")
    code = "import gemkit; print(len(gemkit.list_envs('game')) > 0)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr


def test_an_install_without_the_family_entry_points_says_to_reinstall(monkeypatch):
    # an editable install from before this layout has no gemkit.envs entries of its own
    import importlib.metadata

    from gemkit import registry
    from gemkit.errors import RegistrationError

    monkeypatch.setattr(registry, "_entries", None)
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [])
    with pytest.raises(RegistrationError, match=r"run `pip install -e \.`"):
        registry.spec("nofamily:Nothing-v0")


def test_making_or_playing_a_toolworld_env_on_records_imports_no_synth(tmp_path):
    # the env side of a tuple is enough to play it; synth stays unloaded
    from gemkit.synth.tasks.builtin_sets import builtin_dir

    folder = builtin_dir("shopping_basket", n=1, seed=3)
    code = textwrap.dedent(
        f"""
        import sys
        from gemkit.envs.toolworld.env import make_toolworld
        env = make_toolworld(path={str(folder)!r})
        obs, info = env.reset(seed=0)
        print(obs[:20], [m for m in sys.modules if m.startswith("gemkit.synth")])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("[]"), out.stdout


# -- the built-in sets are made by synth, never inside an env ----------------------------------


def test_a_builtin_set_made_while_a_rollout_loop_runs(tmp_path, monkeypatch):
    # before: the env made the set inside arun_episodes' loop, and pass@k's asyncio.run
    # failed ("cannot be called from a running event loop"): every episode was an error
    from gemkit.rollout import run_episodes

    monkeypatch.setenv("GEMKIT_CACHE_DIR", str(tmp_path))
    env_id = "toolworld:ShoppingBasket-v0"
    episodes = run_episodes(
        env_id,
        lambda: gemkit.make_policy("expert", env_id, seed=0),
        2,
        make_kwargs={"builtin_n": 2},
    )
    assert [e.error for e in episodes] == [None, None]
    assert all(e.num_turns > 0 for e in episodes)
    assert len(list((tmp_path / "toolworld").glob("shopping_basket-*/tasks.jsonl"))) == 1


def test_gemkit_run_on_an_empty_cache_plays_the_builtin_set(tmp_path):
    env = {"GEMKIT_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-m", "gemkit", "run", "toolworld:TripPlanning-v0", "-n", "2",
         "--policy", "expert", "--out", str(tmp_path / "eps")],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "RuntimeError" not in out.stdout + out.stderr
    lines = (tmp_path / "eps" / "episodes.jsonl").read_text().splitlines()  # a run folder
    assert [json.loads(x)["error"] for x in lines] == [None, None]


# -- records ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def task_folder(tmp_path_factory):
    from gemkit.synth.tasks.run import RunConfig, run_synthesis

    out = tmp_path_factory.mktemp("tasks")
    # no pass@k filter: the fixture needs one record, not the baseline's luck on it
    run_synthesis(RunConfig(category="shopping_basket", n=1, out=out, k=0, seed=2, export=False))
    return out


def _rewrite(folder: Path, change) -> None:
    path = folder / "tasks.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(change(r)) + "\n" for r in rows))


def test_a_renamed_key_in_a_task_record_fails_when_loaded_not_mid_episode(task_folder, tmp_path):
    # before: a record with `task.prompt` renamed loaded fine and raised KeyError at reset
    from gemkit.envs.toolworld.env import ToolWorldError, make_toolworld

    folder = tmp_path / "renamed"
    folder.mkdir()
    (folder / "db").symlink_to(task_folder / "db")
    (folder / "tasks.jsonl").write_text((task_folder / "tasks.jsonl").read_text())

    def rename(r):
        r["task"]["text"] = r["task"].pop("prompt")
        return r

    _rewrite(folder, rename)
    with pytest.raises(
        ToolWorldError,
        match=r"tasks.jsonl, line 1: not a task record: field 'task.prompt': missing",
    ):
        make_toolworld(path=folder)


def test_a_record_of_another_schema_version_is_refused_with_a_clear_message(task_folder, tmp_path):
    from gemkit.envs.toolworld.env import ToolWorldError, make_toolworld

    folder = tmp_path / "v9"
    folder.mkdir()
    (folder / "db").symlink_to(task_folder / "db")
    (folder / "tasks.jsonl").write_text((task_folder / "tasks.jsonl").read_text())
    _rewrite(folder, lambda r: {**r, "schema_version": 9})
    with pytest.raises(
        ToolWorldError, match="a task record of schema version 9; this gemkit reads version 1 and 2"
    ):
        make_toolworld(path=folder)


def test_a_record_of_another_kind_is_named_as_such(task_folder):
    line = (task_folder / "tasks.jsonl").read_text().splitlines()[0]
    with pytest.raises(
        RecordError, match="qa.jsonl, line 1: not a QA record: field 'question': missing"
    ):
        QARecord.parse(json.loads(line), "qa.jsonl, line 1")


def test_a_qa_run_folder_with_a_task_record_says_so(tmp_path, task_folder):
    from gemkit.envs.qa.synthesized import load_synth_records
    from gemkit.errors import GemkitError

    (tmp_path / "qa.jsonl").write_text((task_folder / "tasks.jsonl").read_text())
    with pytest.raises(GemkitError, match="qa.jsonl, line 1: not a QA record"):
        load_synth_records(tmp_path)


# -- a tool ends the episode through the contract -----------------------------------------------


class Grader(Env):
    """Grades the answer it is given; nothing else reaches into it."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.graded: list = []
        return "Submit the list [1, 2].", {}

    def step(self, action):
        self.graded.append(action)
        ok = action == [1, 2]
        return ("Correct." if ok else "Wrong."), float(ok), True, False, {"success": ok}


@tool
def submit(answer: list[int]) -> ToolResult:
    """Submit the final answer; this ends the task."""
    return ToolResult.final_answer(answer, "Received.")


def test_a_tools_final_answer_is_graded_by_the_inner_env():
    env = ToolEnvWrapper(Grader(), [submit])
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(
        '<tool_call>{"name": "submit", "arguments": {"answer": [1, 2]}}</tool_call>'
    )
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert obs.endswith("Received.\n\nCorrect.") and env.unwrapped.graded == [[1, 2]]


def test_a_final_answer_in_a_batch_runs_the_other_calls_first_and_ends_once():
    env = ToolEnvWrapper(Grader(), [submit])
    env.reset(seed=0)
    calls = [{"name": "submit", "arguments": {"answer": a}} for a in ([9], [1, 2])]
    action = "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)
    _, reward, terminated, _, info = env.step(action)
    # the last answer given is the one graded, once
    assert env.unwrapped.graded == [[1, 2]] and (reward, terminated) == (1.0, True)
    assert info["tool_calls"] == 2
