"""Every category: tools over its database, a solution that verifies at every level, a verifier
that names the broken rule, valid answers that get rarer as tasks harden, and a `toolworld:` id."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest

from gemkit.envs.toolworld.baselines import parse_meeting_prompt, parse_shop_prompt
from gemkit.envs.toolworld.meeting_scheduling import office_facts as _facts
from gemkit.registry import spec
from gemkit.synth.tasks import CATEGORIES, Database, get_category, synthesize
from gemkit.synth.tasks.run import make_record

ENV_IDS = {
    "trip_planning": "toolworld:TripPlanning-v0",
    "meeting_scheduling": "toolworld:MeetingScheduling-v0",
    "shopping_basket": "toolworld:ShoppingBasket-v0",
}


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    root = tmp_path_factory.mktemp("cats")
    out = {}
    for name in ("meeting_scheduling", "shopping_basket"):
        cat = get_category(name)
        runs = []
        for i in range(3):
            path = root / f"{name}-{i}.sqlite"
            syn = synthesize(cat, path, np.random.default_rng([21, i]), 5)
            assert syn is not None
            runs.append((syn, Database(path)))
        out[name] = runs
    return out


def test_every_category_has_a_toolworld_id():
    assert set(CATEGORIES) == set(ENV_IDS)
    for env_id in ENV_IDS.values():
        assert spec(env_id).family == "toolworld"


@pytest.mark.parametrize("name", ["meeting_scheduling", "shopping_basket"])
def test_reference_solution_verifies_at_every_level(synthesized, name):
    cat = get_category(name)
    for syn, db in synthesized[name]:
        for entry in syn.history:
            task = cat.make_task(entry["spec"], entry["level"], [])
            assert cat.verify(db, task, cat.solve(db, task)).passed
        assert syn.task.level >= 3


@pytest.mark.parametrize("name", ["meeting_scheduling", "shopping_basket"])
def test_hardening_makes_valid_answers_rarer(synthesized, name):
    for syn, _ in synthesized[name]:
        for before, after in itertools.pairwise(syn.history):
            assert after["valid_fraction"] < before["valid_fraction"]


@pytest.mark.parametrize("name", ["meeting_scheduling", "shopping_basket"])
def test_prompts_carry_the_full_spec(synthesized, name):
    parse = parse_meeting_prompt if name == "meeting_scheduling" else parse_shop_prompt
    for syn, _ in synthesized[name]:
        parsed = parse(syn.task.prompt)
        spec = syn.task.spec
        assert parsed["rules"] == spec["rules"] or name == "shopping_basket"
        if name == "shopping_basket":
            assert parsed["categories"] == spec["categories"]
            assert parsed["budget"] == pytest.approx(spec["budget"])


def test_meeting_double_booking_and_busy_attendee_are_named(synthesized):
    cat = get_category("meeting_scheduling")
    syn, db = synthesized["meeting_scheduling"][0]
    plan = copy.deepcopy(syn.reference_answer)
    plan[1].update(day=plan[0]["day"], hour=plan[0]["hour"], room=plan[0]["room"])
    verdict = cat.verify(db, syn.task, plan)
    assert "no_double_booking" in verdict.failed
    facts = _facts(db)
    person = syn.task.spec["meetings"][0]["attendees"][0]
    day = next(d for d in facts["busy"][person] if facts["busy"][person][d])
    plan = copy.deepcopy(syn.reference_answer)
    plan[0].update(day=day, hour=facts["busy"][person][day][0])
    verdict = cat.verify(db, syn.task, plan)
    assert any(v.startswith(f"attendees_free: {person} is busy") for v in verdict.violations)


def test_meeting_count_matches_brute_force(synthesized):
    cat = get_category("meeting_scheduling")
    syn, db = max(synthesized["meeting_scheduling"], key=lambda t: len(t[0].task.spec["rules"]))
    spec = copy.deepcopy(syn.task.spec)  # the hardest rules, on a grid small enough to enumerate
    spec["meetings"] = spec["meetings"][:2]
    task = cat.make_task(spec, 1, [])
    rooms = list(_facts(db)["rooms"])
    grid = [
        {"day": d, "hour": h, "room": r} for d in spec["days"] for h in spec["hours"] for r in rooms
    ]
    passed = sum(
        cat.verify(
            db,
            task,
            [{"meeting": m["name"], **o} for m, o in zip(spec["meetings"], combo, strict=True)],
        ).passed
        for combo in itertools.product(grid, repeat=len(spec["meetings"]))
    )
    assert passed == cat.count_solutions(db, task)
    assert spec["rules"] and passed > 0


def test_shopping_budget_and_diet_are_named(synthesized):
    cat = get_category("shopping_basket")
    syn, db = synthesized["shopping_basket"][0]
    spec = {**syn.history[0]["spec"], "budget": 0.5, "rules": [{"type": "diet", "tag": "vegan"}]}
    task = cat.make_task(spec, 2, [])
    rows = db.query("SELECT name, category, vegan FROM products WHERE stock > 0")
    basket = []
    for c in spec["categories"]:
        animal = [r for r in rows if r["category"] == c and not r["vegan"]]
        basket.append((animal or [r for r in rows if r["category"] == c])[0]["name"])
    verdict = cat.verify(db, task, basket)
    assert "budget" in verdict.failed
    assert any(v.startswith("budget: the basket costs") for v in verdict.violations)
    if any(not r["vegan"] for r in rows if r["name"] in basket):
        assert "diet" in verdict.failed
    verdict = cat.verify(db, task, basket[:-1])
    assert "one_per_category" in verdict.failed


@pytest.mark.parametrize("name", ["meeting_scheduling", "shopping_basket"])
def test_env_plays_an_episode_with_the_baseline(synthesized, name, tmp_path):
    from gemkit.envs.toolworld.baselines import baseline_for
    from gemkit.envs.toolworld.env import make_toolworld

    cat = get_category(name)
    syn, db = synthesized[name][0]
    record = make_record(cat, syn, "t0", db.path.name, [0, 0])
    env = make_toolworld(name, records=[record], root=db.path.parent)
    policy = baseline_for(name, seed=0)
    obs, _ = env.reset(seed=0)
    for _ in range(6):
        obs, reward, terminated, truncated, info = env.step(policy.choose(obs))
        if terminated or truncated:
            break
    assert terminated and info["success"] == (reward == 1.0)
    assert info["success"] or info["violations"]
