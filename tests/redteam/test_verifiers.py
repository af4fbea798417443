"""Attacks on the verifiers of the game, toy, multi-agent, reasoning-gym and toolworld envs.

A policy that wants the reward without the work tries what these tests try: retrying until
the env's feedback gives the answer away, stalling a lost game into a draw, typing digits
`int()` chokes on, answers that list every candidate, junk that a lenient scorer pays a
little for, plans that are empty or name nothing real (vacuously "meeting" every rule), and
steps after the episode ended. Each attack must earn nothing, and the honest play next to
it must still earn the reward.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import gemkit
from gemkit.envs.games.sudoku import Sudoku, SudokuExpert, conflict, parse_grid
from gemkit.envs.multiagent.kuhn_poker import KuhnPoker
from gemkit.envs.multiagent.tictactoe import TicTacToe
from gemkit.envs.toolworld.env import make_toolworld
from gemkit.synth.tasks import Database, get_category, synthesize
from gemkit.synth.tasks.run import make_record

needs_rg = pytest.mark.skipif(
    importlib.util.find_spec("reasoning_gym") is None,
    reason="reasoning-gym is an optional extra (pip install gemkit[rg])",
)

# -- games ----------------------------------------------------------------------------------


def guess_and_retry(env: Sudoku, obs: str) -> tuple[bool, int]:
    """Write the first digit that clashes with nothing; on a rejection, try the next one."""
    rejected: set[tuple[int, int, int]] = set()
    grid = parse_grid(obs, env.size)
    for _ in range(env.max_turns):
        grid = parse_grid(obs, env.size) or grid
        r, c, v = next(
            (r, c, v)
            for r in range(env.size)
            for c in range(env.size)
            if not grid[r][c]
            for v in range(1, env.size + 1)
            if (r, c, v) not in rejected and not conflict(grid, r, c, v)
        )
        obs, _, terminated, truncated, info = env.step(f"\\boxed{{{r + 1} {c + 1} {v}}}")
        if info.get("invalid") or info.get("mistake"):
            rejected.add((r, c, v))
        if terminated or truncated:
            return bool(info["success"]), len(rejected)
    return False, len(rejected)


def test_guessing_sudoku_digits_until_one_is_accepted_does_not_solve_hard_grids():
    # the env answers "not the solution's digit" for every wrong guess: with free retries
    # that is the answer key, cell by cell
    won = 0
    for seed in range(12):
        env = gemkit.make("game:Sudoku-v0-hard").unwrapped
        won += guess_and_retry(env, env.reset(seed=seed)[0])[0]
    assert won <= 2, f"guess-and-retry solved {won} of 12 hard grids"


def test_deduction_still_solves_hard_sudoku_with_no_mistake():
    env, expert = gemkit.make("game:Sudoku-v0-hard"), SudokuExpert(size=9)
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        for _ in range(80):
            obs, _, terminated, _, info = env.step(expert.choose(obs))
            assert not info.get("mistake") and not info.get("invalid")
            if terminated:
                break
        assert info["success"]


def test_the_last_allowed_sudoku_mistake_loses_the_game():
    env = Sudoku(9, 40, max_turns=80, max_mistakes=2)
    env.reset(seed=1)
    wrong = [
        (r, c, v)
        for r in range(9)
        for c in range(9)
        for v in range(1, 10)
        if not env.grid[r][c] and v != env.solution[r][c] and conflict(env.grid, r, c, v) is None
    ]
    (r1, c1, v1), (r2, c2, v2) = wrong[0], wrong[1]
    obs, reward, terminated, _, info = env.step(f"\\boxed{{{r1 + 1} {c1 + 1} {v1}}}")
    assert info["mistake"] and not terminated and reward < 0 and "1 of 2" in obs
    assert env.grid[r1][c1] == 0
    obs, reward, terminated, _, info = env.step(f"\\boxed{{{r2 + 1} {c2 + 1} {v2}}}")
    assert terminated and not info["success"] and "you lose" in obs


SECRETS = {
    "game:Wordle-v0-hard": lambda env: env.target,
    "game:Mastermind-v0-hard": lambda env: " ".join(map(str, env.code)),
    "game:Hangman-v0-hard": lambda env: env.word,
    "toy:Doors-v0": lambda env: f"behind {env.prize}",
}


@pytest.mark.parametrize("env_id", sorted(SECRETS))
def test_no_observation_info_or_render_shows_the_secret_before_the_end(env_id):
    for seed in range(30):
        env = gemkit.make(env_id)
        policy = gemkit.make_policy("random", env_id, seed=seed)
        obs, info = env.reset(seed=seed)
        game = env.unwrapped
        secret = SECRETS[env_id](game)
        example = game.move_format() if hasattr(game, "move_format") else ""
        seen = f"{info}\n{game.render()}"  # the intro's rules and example are not the state
        for _ in range(100):
            assert secret not in seen.replace(example, ""), f"{env_id} seed {seed}: {secret!r}"
            obs, _, terminated, truncated, info = env.step(policy.choose(obs))
            if terminated or truncated:
                break
            seen = f"{obs}\n{info}\n{game.render()}"


#: id -> an action that names every possible answer at once
EVERY_ANSWER = {
    "game:GuessTheNumber-v0-easy": "\\boxed{" + " ".join(map(str, range(1, 21))) + "}",
    "game:Mastermind-v0-easy": "\\boxed{" + " ".join("1234" * 16) + "}",
    "game:Hangman-v0-easy": "\\boxed{abcdefghijklmnopqrstuvwxyz}",
    "game:Wordle-v0-easy": "\\boxed{crane slate adieu}",
    "game:Minesweeper-v0-easy": "\\boxed{reveal 1 1 reveal 1 2 reveal 1 3}",
    "toy:Doors-v0": "abcd",
}


@pytest.mark.parametrize("env_id", sorted(EVERY_ANSWER))
def test_an_action_naming_every_answer_earns_nothing(env_id):
    for seed in range(20):
        env = gemkit.make(env_id)
        env.reset(seed=seed)
        _, reward, _, _, info = env.step(EVERY_ANSWER[env_id])
        assert reward <= 0.0 and not info.get("success")


def test_a_box_per_candidate_counts_only_the_last_box():
    env = gemkit.make("game:GuessTheNumber-v0-easy")
    for seed in range(20):
        env.reset(seed=seed)
        target = env.unwrapped.target
        _, reward, *_ = env.step("".join(f"\\boxed{{{n}}}" for n in range(1, 21)))
        assert reward == (1.0 if target == 20 else 0.0)


FINISHED = ["game:GuessTheNumber-v0-easy", "game:LightsOut-v0-easy", "toy:Doors-v0"]


@pytest.mark.parametrize("env_id", FINISHED)
def test_a_won_game_pays_no_second_time(env_id):
    env, expert = gemkit.make(env_id), gemkit.spec(env_id).make_expert()
    obs, _ = env.reset(seed=4)
    for _ in range(50):
        action = expert.choose(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    assert info["success"]
    for _ in range(3):  # the winning move again, and again
        _, reward, terminated, _, _ = env.step(action)
        assert reward == 0.0 and terminated


# -- multi-agent ----------------------------------------------------------------------------

HOSTILE = [
    "\\boxed{\u00b9}",  # a superscript one: str.isdigit() says yes, int() raises
    "\\boxed{" + "9" * 5000 + "}",  # over int()'s digit limit
    "\\boxed{\u0665}",  # an Arabic-Indic five
    "\\boxed{05}",
    "\\boxed{-0}",
    "\\boxed{\u00a0}",
]


@pytest.mark.parametrize(
    "env_id",
    [
        "multiagent:TicTacToe-v0-vs_minimax",
        "multiagent:KuhnPoker-v0-vs_nash",
        "multiagent:RockPaperScissors-v0-vs_nash",
        "toy:Doors-v0",
        "toy:Copy-v0",
    ],
)
def test_hostile_digits_and_non_text_actions_get_a_message_not_an_exception(env_id):
    env = gemkit.make(env_id)
    for action in [*HOSTILE, None, 5, {"content": None}, ["\\boxed{1}"]]:
        env.reset(seed=0)
        obs, reward, *_ = env.step(action)
        assert isinstance(obs, str) and obs and reward <= 0.0


def stall_then_end(env, staller: str, other: str) -> dict[str, float]:
    """`staller` sends junk whenever on turn, the other agent plays `other`; total rewards."""
    totals = dict.fromkeys(env.possible_agents, 0.0)
    while env.agents:
        on_turn = env.current_agents[0]
        action = "I think, therefore I stall" if on_turn == staller else other
        _, rewards, *_ = env.step({on_turn: action})
        for a, r in rewards.items():
            totals[a] += r
    return totals


def test_stalling_a_lost_poker_hand_costs_more_than_folding_it():
    # player_1 bets; player_0 holds the J: folding loses 1 chip, stalling used to void the hand
    env = KuhnPoker(max_turns=10, invalid_penalty=0.02)
    env.reset(options={"cards": ("J", "K")})
    env.step({"player_0": "\\boxed{check}"})
    env.step({"player_1": "\\boxed{bet}"})
    totals = stall_then_end(env, "player_0", "\\boxed{call}")
    assert totals["player_0"] < -1.0, "stalling beat folding (-1)"
    assert totals["player_1"] >= 1.0


def test_stalling_a_lost_tictactoe_game_is_a_forfeit_not_a_draw():
    env = TicTacToe(max_turns=12, invalid_penalty=0.01)
    env.reset(seed=0)
    for action in ({"x": "\\boxed{1}"}, {"o": "\\boxed{4}"}, {"x": "\\boxed{2}"}):
        env.step(action)  # X threatens 3; O, facing the loss, stalls
    totals = stall_then_end(env, "o", "\\boxed{9}")
    assert totals["o"] <= -1.0 and totals["x"] >= 1.0


def test_a_game_cut_by_the_turn_limit_with_no_staller_is_void():
    env = TicTacToe(max_turns=10, invalid_penalty=0.1)
    env.reset(seed=0)
    moves = ["pass", "\\boxed{1}", "pass", "\\boxed{2}", "\\boxed{5}", "\\boxed{3}"]
    moves += ["\\boxed{7}", "\\boxed{4}", "\\boxed{6}", "\\boxed{8}"]
    for m in moves:
        *_, truncated, infos = env.step({env.current_agents[0]: m})
    assert env.agents == [] and all(truncated.values())
    assert not infos["x"]["success"] and not infos["o"]["success"]


def test_a_customer_service_chat_that_changes_nothing_earns_nothing():
    # every goal changes some order, so ending the chat politely is never the goal's state
    env = gemkit.make("multiagent:CustomerService-v0-vs_user")
    for seed in range(20):
        env.reset(seed=seed)
        for _ in range(30):
            _, reward, terminated, truncated, info = env.step("All done, goodbye!")
            if terminated or truncated:
                break
        assert reward == 0.0 and not info["success"] and info["mismatch"]


# -- reasoning-gym --------------------------------------------------------------------------

#: datasets whose upstream scorer pays something to any text that reaches it (0.1.19)
JUNK_PAYERS = [
    "advanced_geometry", "color_cube_rotation", "cryptarithm", "emoji_mystery",
    "figlet_font", "fraction_simplification", "palindrome_generation", "propositional_logic",
    "rubiks_cube", "sentence_reordering", "spell_backward", "tsumego",
]  # fmt: skip
JUNK = ["a", "?", "[]", "none", "x"]


@needs_rg
@pytest.mark.parametrize("name", JUNK_PAYERS)
def test_junk_answers_earn_nothing_from_reasoning_gym(name):
    from gemkit.envs.reasoning_gym.env import reference_answer

    env = gemkit.make(f"rg:{name}", size=20)
    for index in range(2):
        for junk in JUNK:
            env.reset(options={"index": index})
            if junk == reference_answer(env.unwrapped.entry):
                continue
            _, reward, terminated, _, info = env.step(f"\\boxed{{{junk}}}")
            assert terminated and reward == 0.0, (junk, info.get("score"))
    env.reset(options={"index": 0})
    answer = reference_answer(env.unwrapped.entry)
    assert env.step(f"<answer>{answer}</answer>")[1] == 1.0


@needs_rg
@pytest.mark.parametrize("name", ["cryptarithm", "propositional_logic", "advanced_geometry"])
def test_partial_credit_pays_nothing_for_the_format_bonus_alone(name):
    env = gemkit.make(f"rg:{name}", size=20, partial_credit=True)
    for index in range(2):
        for junk in JUNK:
            env.reset(options={"index": index})
            assert env.step(f"\\boxed{{{junk}}}")[1] == 0.0


@needs_rg
@pytest.mark.parametrize("name", ["leg_counting", "basic_arithmetic", "count_primes"])
def test_listing_every_candidate_number_earns_nothing(name):
    # the default scorer paid len(answer) / len(text) for text holding the answer
    for partial in (False, True):
        env = gemkit.make(f"rg:{name}", size=20, partial_credit=partial)
        for index in range(3):
            env.reset(options={"index": index})
            answer = env.unwrapped.entry["answer"]
            hedge = " ".join(str(n) for n in range(int(answer) - 5, int(answer) + 6))
            assert env.step(f"\\boxed{{{hedge}}}")[1] == 0.0


@needs_rg
def test_a_scorer_that_accepts_anything_no_longer_pays_anything():
    env = gemkit.make("rg:game_of_life_halting", size=20)
    for index in range(4):
        env.reset(options={"index": index})
        right = str(env.unwrapped.entry["answer"])
        wrong = {"True": "False", "False": "True"}[right]
        for junk in ("banana", wrong, "maybe"):
            env.reset(options={"index": index})
            assert env.step(f"\\boxed{{{junk}}}")[1] == 0.0
        env.reset(options={"index": index})
        assert env.step(f"\\boxed{{{right}}}")[1] == 1.0


@needs_rg
def test_an_answer_accepted_for_questions_with_other_answers_is_a_hedge():
    from reasoning_gym.dataset import ProceduralDataset

    from gemkit.envs.reasoning_gym.scoring import reward

    class Residues(ProceduralDataset):
        """`n mod 7`, scored the lenient way: right when any listed number is the answer."""

        def __getitem__(self, i: int) -> dict:
            return {"question": f"What is {i + 10} mod 7?", "answer": str((i + 10) % 7)}

        def score_answer(self, answer, entry) -> float:
            return float(entry["answer"] in answer.split())

    data = Residues(config=None, seed=0, size=50)
    for index in range(10):
        entry = data[index]
        assert reward(data, entry["answer"], entry, index, "residues", False)[0] == 1.0
        every = " ".join(map(str, range(7)))
        value, raw, why = reward(data, every, entry, index, "residues", False)
        assert raw == 1.0 and value == 0.0 and "another question" in why


# -- toolworld / synthesized tasks ------------------------------------------------------------

CATEGORIES = ["trip_planning", "meeting_scheduling", "shopping_basket"]


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, Path]]:
    """One synthesized level-3 task per category, as a record and its folder."""
    out = {}
    for name in CATEGORIES:
        root = tmp_path_factory.mktemp(name)
        cat = get_category(name)
        syn = synthesize(cat, root / "db.sqlite", np.random.default_rng([5, len(name)]), 3)
        assert syn is not None
        out[name] = (make_record(cat, syn, f"{name}-0", "db.sqlite", [5]), root)
    return out


@pytest.fixture
def env_of(worlds: dict):
    """`env_of(name, **kwargs) -> (env, record)`: a reset env of that world, closed after."""
    made = []

    def make(name: str, **kwargs):
        record, root = worlds[name]
        env = make_toolworld(records=[record], root=root, **kwargs)
        env.reset(options={"index": 0})
        made.append(env)
        return env, record

    yield make
    for env in made:
        env.close()


JUNK_ANSWERS = ["", "I could not find a plan.", "[]", "{}", "null", "[1, 2, 3]", "[{}]", '"x"']


@pytest.mark.parametrize("name", CATEGORIES)
@pytest.mark.parametrize("junk", JUNK_ANSWERS)
def test_junk_answers_earn_no_partial_credit(env_of, name, junk):
    env, _ = env_of(name, partial_credit=True)
    _, reward, terminated, _, info = env.step(junk)
    assert terminated and reward == 0.0 and not info["success"], info["failed_constraints"]


def rename_everything(answer):
    """The reference answer with every name changed to one the database lacks."""
    if isinstance(answer, list) and answer and isinstance(answer[0], str):
        return [f"{a} Deluxe" for a in answer]
    return [
        {k: (v if k in ("time", "day", "hour") else f"{v} Deluxe") for k, v in d.items()}
        for d in answer
    ]


@pytest.mark.parametrize("name", CATEGORIES)
def test_answers_that_name_nothing_real_or_miss_parts_earn_no_partial_credit(env_of, name):
    _, record = env_of(name)
    ref = record.reference_answer
    for attack in (rename_everything(ref), ref[:1], ref[1:] if len(ref) > 1 else []):
        env, _ = env_of(name, partial_credit=True)
        _, reward, terminated, _, info = env.step(json.dumps(attack))
        assert terminated and reward == 0.0, (attack, info["failed_constraints"])
    env, _ = env_of(name, partial_credit=True)
    assert env.step(json.dumps(ref))[1] == 1.0  # the honest answer still scores


@pytest.mark.parametrize("name", CATEGORIES)
def test_case_and_whitespace_pass_but_duplicates_never_do(env_of, name):
    # a name is compared after case and whitespace normalisation (a model's "krakow" is
    # Krakow), so a duplicate that differs only in case is still a duplicate
    _, record = env_of(name)
    ref = record.reference_answer
    if name == "shopping_basket":
        variants = [[ref[0].lower(), *ref[1:]], [f"  {ref[0].upper()} ", *ref[1:]]]
        attacks = [[ref[0], *ref], [*ref, ref[-1]], [*ref, ref[-1].upper()]]
    elif name == "trip_planning":
        upper = [dict(d) for d in ref]
        upper[0]["city"] = upper[0]["city"].upper()
        padded = [dict(d) for d in ref]
        padded[-1]["hotel"] = f" {padded[-1]['hotel'].lower()}  "
        variants = [upper, padded]
        same = [dict(d) for d in ref]
        same[0]["evening_restaurant"] = same[0]["afternoon_restaurant"]
        same_case = [dict(d) for d in ref]
        same_case[0]["evening_restaurant"] = same_case[0]["afternoon_restaurant"].upper()
        attacks = [same, same_case, [*ref, ref[-1]]]
    else:
        variants = [[{**ref[0], "room": ref[0]["room"].lower()}, *ref[1:]]]
        attacks = [[*ref, ref[0]], [*ref, {**ref[0], "meeting": ref[0]["meeting"].upper()}]]
    for variant in variants:
        env, _ = env_of(name)
        assert env.step(json.dumps(variant))[1] == 1.0, variant
    for attack in attacks:
        env, _ = env_of(name)
        assert env.step(json.dumps(attack))[1] == 0.0, attack


@pytest.mark.parametrize("hour", [True, 10.0, "10", None, 10**40, -1])
def test_a_meeting_hour_must_be_a_whole_number_of_the_day(env_of, hour):
    _, record = env_of("meeting_scheduling")
    schedule = [dict(m) for m in record.reference_answer]
    schedule[0]["hour"] = hour
    env, _ = env_of("meeting_scheduling", partial_credit=True)
    _, reward, _, _, info = env.step(json.dumps(schedule))
    assert reward < 1.0 and not info["success"]


@pytest.mark.parametrize("name", CATEGORIES)
def test_the_episode_is_over_after_the_verdict(env_of, name):
    env, record = env_of(name)
    _, reward, terminated, _, _ = env.step("no plan")
    assert terminated and reward == 0.0
    key = {"trip_planning": "plan", "meeting_scheduling": "schedule"}.get(name, "basket")
    call = {"name": "submit_result", "arguments": {key: record.reference_answer}}
    for action in (
        f"<tool_call>{json.dumps(call)}</tool_call>",
        json.dumps(record.reference_answer),
    ):
        obs, reward, terminated, _, info = env.step(action)
        assert reward == 0.0 and terminated and not info["success"], obs


@pytest.mark.parametrize("name", CATEGORIES)
def test_the_agent_cannot_write_the_database_the_verifier_reads(worlds, name):
    record, root = worlds[name]
    db = Database(root / record.database)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        db.query("DELETE FROM " + db.query("SELECT name FROM sqlite_master LIMIT 1")[0]["name"])
    db.close()
