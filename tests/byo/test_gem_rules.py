"""`game:*-gem` variants reproduce GEM's rules and rewards, checked move for move against GEM."""

from __future__ import annotations

import numpy as np
import pytest

import gemkit
from gemkit.envs.gem.variants import VARIANTS

try:  # only the comparisons need GEM; the rules' own tests run without it
    import gem
    from gem.envs.registration import ENV_REGISTRY
except ImportError:
    gem = ENV_REGISTRY = None
needs_gem = pytest.mark.skipif(
    gem is None, reason="needs GEM to compare with: pip install 'gemkit[gem]'"
)

#: gemkit constructor argument -> GEM's
GEM_NAMES = {
    "low": "min_number",
    "high": "max_number",
    "max_turns": "max_turns",
    "code_length": "code_length",
    "num_numbers": "num_numbers",
}


def _actions(rng: np.random.Generator, env) -> list[str]:
    """Moves a policy might write: legal, out of range, repeated, junk, several boxes."""
    legal = [env.random_action(rng) for _ in range(6)]
    junk = [
        "no move",
        "\\boxed{}",
        "\\boxed{0}",
        "\\boxed{-3}",
        "\\boxed{99}",
        "\\boxed{1 1}",
        "\\boxed{9 9 9 9}",
        "\\boxed{" + "9" * 5000 + "}",
        "\\boxed{1} then \\boxed{2}",
    ]
    pool = legal * 3 + legal[:2] + junk  # legal[:2] again: repeated guesses
    return [pool[int(i)] for i in rng.integers(0, len(pool), size=40)]


def _align(mine, theirs) -> None:
    """Give GEM's env the secret gemkit drew (the two draw from different generators)."""
    if hasattr(mine, "target"):
        theirs.game_number = mine.target
    else:
        theirs.game_code = list(mine.code)


@needs_gem
@pytest.mark.parametrize(
    "gem_id", [f"game:{name}-v0-{level}" for name, _, levels in VARIANTS for level in levels]
)
def test_levels_are_gems(gem_id):
    name, level = gem_id.split(":")[1].split("-v0-")
    ours = gemkit.spec(f"{gem_id}-gem").kwargs
    theirs = ENV_REGISTRY[gem_id].kwargs
    assert {GEM_NAMES[k]: v for k, v in ours.items()}.items() <= theirs.items()
    assert theirs.get("duplicate_numbers", False) is False


@needs_gem
@pytest.mark.parametrize(
    "gem_id", [f"game:{name}-v0-{level}" for name, _, levels in VARIANTS for level in levels]
)
def test_every_move_scores_and_ends_as_in_gem(gem_id):
    rng = np.random.default_rng(0)
    mine = gemkit.make(f"{gem_id}-gem").unwrapped
    theirs = gem.make(gem_id)
    steps = ends = 0
    for episode in range(150):
        mine.reset(seed=episode)
        theirs.reset(seed=episode)
        _align(mine, theirs)
        for action in _actions(rng, mine):
            _, r1, te1, tr1, info = mine.step(action)
            _, r2, te2, tr2, _ = theirs.step(action)
            assert (r1, te1, tr1) == pytest.approx((float(r2), te2, tr2)), (episode, action)
            steps += 1
            if te1 or tr1:
                ends += 1
                won = te1 and not tr1 and r1 != -0.1  # GEM ends only a won game early
                assert info["success"] == won
                break
    assert ends == 150 and steps > 300  # every episode ended, through many kinds of moves


def test_gem_rules_differ_from_gemkits_own_game():
    ours, gems = (
        gemkit.make("game:GuessTheNumber-v0-easy"),
        gemkit.make("game:GuessTheNumber-v0-easy-gem"),
    )
    ours.reset(seed=0)
    gems.reset(seed=0)
    # no move: gemkit's game answers and goes on; GEM's rules end the episode at -0.1
    assert ours.step("no move")[1:4] == (-0.1, False, False)
    assert gems.step("no move")[1:4] == (-0.1, True, False)


def test_winning_mastermind_adds_up_to_one():
    env = gemkit.make("game:Mastermind-v0-hard-gem")
    env.reset(seed=3)
    code = env.unwrapped.code
    first = [code[0], *[d for d in range(1, 9) if d not in code][:3]]
    rewards = [env.step("\\boxed{" + " ".join(map(str, first)) + "}")[1]]
    rewards.append(env.step("\\boxed{" + " ".join(map(str, code)) + "}")[1])
    assert rewards == [0.25, 0.75] and sum(rewards) == 1.0
