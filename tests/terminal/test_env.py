"""The terminal env: the bash tool loop, submission, turn and time limits, output cuts, suite."""

from __future__ import annotations

import asyncio
import copy
import json

import pytest

import gemkit
from gemkit.envs.terminal.backends import choose_backend
from gemkit.envs.terminal.env import TerminalEnv, TerminalExpert, make_terminal
from gemkit.envs.terminal.task import TaskError, builtin_tasks
from gemkit.envs.terminal.terminal import TerminalError, truncation_marker
from gemkit.rollout import run_episode


def test_the_expert_solves_a_task_through_make_and_the_bash_tool(backend):
    env = gemkit.make("terminal:CsvTotals-v0", backend=backend)
    try:
        episode = asyncio.run(run_episode(env, TerminalExpert("CsvTotals"), seed=0))
    finally:
        env.close()
    assert episode.error is None
    first, last = episode.turns[0], episode.turns[-1]
    assert first.info["tool_results"][0]["name"] == "bash"
    assert "[exit status 0]" in first.info["tool_results"][0]["content"]
    assert (last.reward, last.terminated, last.info["pass_fraction"]) == (1.0, True, 1.0)
    assert [t["passed"] for t in last.info["test_results"]] == [True, True]


def test_the_first_observation_states_the_task_the_rules_and_the_tool(bwrap_backend):
    env = gemkit.make("terminal:CountWords-v0", backend=bwrap_backend)
    try:
        obs, info = env.reset(seed=0)
    finally:
        env.close()
    assert "/work/words.txt" in obs and "no network" in obs and '"name": "bash"' in obs
    assert info["task"] == "CountWords" and info["backend"] == bwrap_backend


def test_a_hermes_tool_call_runs_and_a_final_answer_runs_the_tests(bwrap_backend):
    env = make_terminal("CountWords", backend=bwrap_backend)
    try:
        env.reset(seed=0)
        call = {"name": "bash", "arguments": {"command": "wc -w < words.txt"}}
        obs, reward, terminated, truncated, info = env.step(
            f"<tool_call>{json.dumps(call)}</tool_call>"
        )
        assert "\n17\n" in obs and not (terminated or truncated) and reward == 0.0
        obs, reward, terminated, truncated, info = env.step("I am done: submit")
    finally:
        env.close()
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert "Tests: 0/2 passed." in obs and "FAIL counts.txt exists" in obs
    assert [t["passed"] for t in info["test_results"]] == [False, False]


def test_partial_credit_rewards_the_pass_fraction(bwrap_backend):
    env = TerminalEnv("CountWords", backend=bwrap_backend, partial_credit=True)
    try:
        env.reset()
        env.run_command("echo wrong > counts.txt")
        _, reward, _, _, info = env.step("submit")
    finally:
        env.close()
    assert reward == info["pass_fraction"] == 0.5


def test_running_out_of_turns_ends_the_episode_and_still_runs_the_tests(bwrap_backend):
    task = builtin_tasks()["CountWords"]
    env = make_terminal("CountWords", backend=bwrap_backend, max_turns=2)
    try:
        env.reset()
        _, _, terminated, truncated, _ = env.step("<bash>ls</bash>")
        assert not (terminated or truncated)
        obs, reward, terminated, truncated, info = env.step(f"<bash>{task.solution}</bash>")
    finally:
        env.close()
    assert (terminated, truncated, reward, info["success"]) == (False, True, 1.0, True)
    assert "Turns used up" in obs


def test_long_output_is_cut_with_a_marker_that_gives_the_full_size(backend):
    env = make_terminal("CountWords", backend=backend, max_output=100)
    try:
        env.reset()
        obs, *_ = env.step("<bash>seq 1 10000</bash>")
    finally:
        env.close()
    assert truncation_marker(48894, 100) in obs
    assert obs.count("\n") < 50


def test_a_command_past_its_time_limit_is_stopped_and_the_terminal_still_works(backend):
    env = make_terminal("CountWords", backend=backend, command_timeout=1)
    try:
        env.reset()
        obs, *_ = env.step("<bash>sleep 3 & sleep 30; echo never</bash>")
        assert "[stopped: the command ran past the 1 s limit]" in obs and "never" not in obs
        assert "[exit status 0]" in env.step("<bash>echo still here</bash>")[0]
        left = env.unwrapped.run_command("ps -e -o args 2>/dev/null || ps -o args")
    finally:
        env.close()
    # the command's background processes were killed too
    assert "sleep 3" not in left.output and "sleep 30" not in left.output


def test_a_failing_command_shows_its_exit_status_and_output(bwrap_backend):
    env = make_terminal("CountWords", backend=bwrap_backend)
    try:
        env.reset()
        obs, _, _, _, info = env.step("<bash>cat missing.txt</bash>")
    finally:
        env.close()
    assert "missing.txt" in obs and "[exit status 1]" in obs
    assert info["tool_results"][0]["is_error"] is True


def test_an_empty_command_gets_a_message_saying_what_to_pass(bwrap_backend):
    env = make_terminal("CountWords", backend=bwrap_backend)
    try:
        env.reset()
        obs, *_ = env.step(
            '<tool_call>{"name": "bash", "arguments": {"command": "  "}}</tool_call>'
        )
    finally:
        env.close()
    assert "no command given" in obs


def test_each_reset_starts_from_the_task_files_again(backend):
    env = TerminalEnv("CountWords", backend=backend)
    try:
        env.reset()
        env.run_command("rm words.txt && echo junk > extra")
        env.reset()
        listing = env.run_command("ls").output.split()
    finally:
        env.close()
    assert listing == ["words.txt"]


def test_the_suite_draws_tasks_from_the_seed(bwrap_backend):
    env = gemkit.make("terminal:Suite-v0", backend=bwrap_backend)
    try:
        drawn = [env.reset(seed=s)[1]["task"] for s in range(8)]
        again = [env.reset(seed=s)[1]["task"] for s in range(8)]
        chosen = env.reset(options={"task": "FixDateSed"})[1]["task"]
    finally:
        env.close()
    assert drawn == again and len(set(drawn)) > 2
    assert chosen == "FixDateSed"


def test_the_suite_expert_solves_whichever_task_is_drawn(bwrap_backend):
    env = gemkit.make("terminal:Suite-v0", backend=bwrap_backend)
    expert = gemkit.spec("terminal:Suite-v0").make_expert()
    try:
        rewards = [asyncio.run(run_episode(env, expert, seed=s)).total_reward for s in range(3)]
    finally:
        env.close()
    assert rewards == [1.0, 1.0, 1.0]


def test_an_unknown_task_lists_the_tasks(bwrap_backend):
    env = TerminalEnv(backend=bwrap_backend)
    with pytest.raises(TaskError, match="choose from .*CountWords"):
        env.reset(options={"task": "Nope"})
    with pytest.raises(TaskError, match="no terminal task 'Nope'; tasks: .*CountWords"):
        TerminalEnv("Nope")


def test_an_unknown_backend_names_the_choices():
    with pytest.raises(TerminalError, match="expected 'docker', 'bwrap' or 'auto'"):
        choose_backend("podman")


def test_a_clone_between_episodes_plays_its_own_terminal(bwrap_backend):
    env = make_terminal("CountWords", backend=bwrap_backend)
    twin = env.clone()
    try:
        env.reset(seed=1)
        twin.reset(seed=1)
        env.step("<bash>echo mine > mark</bash>")
        obs, *_ = twin.step("<bash>ls</bash>")
    finally:
        env.close()
        twin.close()
    assert "mark" not in obs and "words.txt" in obs


def test_cloning_in_an_episode_says_why_it_cannot(bwrap_backend):
    env = TerminalEnv("CountWords", backend=bwrap_backend)
    try:
        env.reset()
        with pytest.raises(TerminalError, match="cannot be cloned"):
            copy.deepcopy(env)
    finally:
        env.close()


def test_envs_in_an_async_vector_each_solve_their_drawn_task(backend):
    vec = gemkit.make_vec("terminal:Suite-v0", 3, backend=backend)
    try:
        _, infos = vec.reset(seed=0)
        tasks = [builtin_tasks()[i["task"]] for i in infos]
        vec.step([f"<bash>{t.solution}</bash>" for t in tasks])
        _, rewards, terminated, _, _ = vec.step(["submit"] * 3)
    finally:
        vec.close()
    assert list(rewards) == [1.0, 1.0, 1.0] and all(terminated)
