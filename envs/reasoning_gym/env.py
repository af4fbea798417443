"""`ReasoningGymEnv`: one reasoning-gym item per episode, scored by the dataset's own verifier."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from gemkit.answers import extract_answer
from gemkit.core import Env, ResetResult, StepResult
from gemkit.envs.reasoning_gym.items import item_at
from gemkit.envs.reasoning_gym.safety import refusal
from gemkit.envs.reasoning_gym.scoring import reference_answer, reward
from gemkit.errors import GemkitError
from gemkit.items import pick_index

#: default number of distinct items per env; items are generated on demand by index
DEFAULT_SIZE = 100_000
#: datasets that build every item up front, or cap their size, get a smaller default
EAGER_SIZES = {"acre": 500, "word_ladder": 20_000}
ANSWER_FORMAT = "Give your final answer inside \\boxed{} or <answer></answer>."


class ReasoningGymMissing(GemkitError, ImportError):
    """reasoning-gym is not installed."""


class ReasoningGymConfigError(GemkitError, ValueError):
    """A dataset configuration reasoning-gym rejects."""


class _Shared:
    """Holds a dataset that clones share: items are generated from (seed, index) alone."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __deepcopy__(self, memo: dict[int, Any]) -> _Shared:
        return self


def _import_reasoning_gym() -> Any:
    try:
        import reasoning_gym
    except ImportError as e:
        raise ReasoningGymMissing(
            f"rg: envs need the reasoning-gym package ({e}); install it with "
            "`pip install gemkit[rg]`"
        ) from None
    return reasoning_gym


def _dataset_names(datasets: Sequence[Any]) -> list[str]:
    return [d if isinstance(d, str) else dict(d).get("name", "") for d in datasets]


def _composite_specs(datasets: Sequence[Any]) -> list[Any]:
    from reasoning_gym.composite import DatasetSpec

    specs = []
    for d in datasets:
        d = {"name": d} if isinstance(d, str) else dict(d)
        config = dict(d.get("config") or {})
        specs.append(
            DatasetSpec(name=d.get("name", ""), weight=d.get("weight", 1.0), config=config)
        )
    return specs


@functools.lru_cache(maxsize=32)
def _build(name: str, config_json: str) -> Any:
    """One dataset per (name, config), shared by every env in the process (some load files)."""
    rg = _import_reasoning_gym()
    config = json.loads(config_json)
    if name == "composite":
        datasets = config.pop("datasets", None)
        if not datasets:
            raise ReasoningGymConfigError(
                "rg:composite mixes datasets: pass datasets=, e.g. "
                "gemkit.make('rg:composite', datasets=['leg_counting', "
                "{'name': 'basic_arithmetic', 'weight': 2, 'config': {}}])"
            )
        config["datasets"] = _composite_specs(datasets)
    try:
        return rg.create_dataset(name, **config)
    except (TypeError, AssertionError, ValueError) as e:
        raise ReasoningGymConfigError(
            f"reasoning-gym rejected the config of {name!r} {json.loads(config_json)}: {e}"
        ) from None


class ReasoningGymEnv(Env):
    """A single-turn reasoning-gym task: the item's question, rewarded by `score_answer`.

    `name` is a reasoning-gym dataset; `dataset_seed` and `size` fix the set of items (item
    `i` is always the same problem), and other keyword arguments go to the dataset's config.
    Each reset draws an item index with `self.np_random` (or takes `options={"index": i}`).
    The reward is 1.0 for an answer the dataset's scorer accepts that is specific to this
    item (see `scoring`: junk, hedges and catch-all answers earn nothing), else 0.0; with
    `partial_credit=True`, a rejected answer earns what its upstream score owes to this item:
    the score above what the item's own question text earns, less the most the answer earns
    so on two decoy items (0 on average for an answer that does not depend on the item, and
    below 0 for one closer to another item's answer). `info["score"]` is the upstream score,
    `info["success"]` a reward of 1.
    """

    def __init__(
        self,
        name: str,
        *,
        dataset_seed: int = 0,
        size: int | None = None,
        partial_credit: bool = False,
        **config: Any,
    ):
        if size is None:
            # a composite asks each member for the same index, so its smallest member bounds it
            members = _dataset_names(config.get("datasets") or ()) if name == "composite" else []
            size = min(EAGER_SIZES.get(n, DEFAULT_SIZE) for n in [name, *members])
        self.name = name
        self.size = size
        self.partial_credit = partial_credit
        try:  # the JSON text keys the cache that shares one dataset per config
            key = json.dumps({"seed": dataset_seed, "size": size, **config}, sort_keys=True)
        except TypeError as e:
            raise ReasoningGymConfigError(
                f"rg:{name} config values must be numbers, strings, lists or dicts ({e})"
            ) from None
        self._data = _Shared(_build(name, key))
        self.entry: dict[str, Any] | None = None
        self.index = -1
        self.done = False

    @property
    def dataset(self) -> Any:
        """The reasoning-gym `ProceduralDataset` behind this env."""
        return self._data.dataset

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Draw an item (or take `options["index"]`); the observation is its question."""
        super().reset(seed=seed)
        self.index = pick_index(options, self.size, self.np_random, seed)
        self.entry = item_at(self.dataset, self.index)
        self.done = False
        obs = f"{self.entry['question']}\n\n{ANSWER_FORMAT}"
        return obs, {"index": self.index, "dataset": self.name}

    def step(self, action: str) -> StepResult:
        """Score the answer in `action` with the dataset's verifier; the episode ends."""
        info: dict[str, Any]
        if self.entry is None or self.done:
            info = {"success": False, "invalid": True}
            return "The episode is over; call reset() for a new task.", 0.0, True, False, info
        self.done = True
        parsed = extract_answer(action) if isinstance(action, str) else None
        info = {
            "answer": reference_answer(self.entry),
            "parsed": parsed,
            "index": self.index,
            "dataset": self.name,
        }
        if not parsed:
            info.update(success=False, invalid=True, score=0.0)
            return f"No answer found. {ANSWER_FORMAT}", 0.0, True, False, info
        source = (self.entry.get("metadata") or {}).get("source_dataset", self.name)
        refused = refusal(str(source), parsed)
        if refused:
            info.update(success=False, score=0.0, refused=refused)
            text = f"Incorrect: the answer was not scored because it contains {refused}."
            return f"{text} Answer in the format the task asks for.", 0.0, True, False, info
        value, score, why = reward(
            self.dataset, parsed, self.entry, self.index, self.name, self.partial_credit
        )
        info.update(success=value >= 1.0, score=score)
        if why:
            info["unspecific"] = why
            text = f"Not accepted: {why}."
        else:
            text = "Correct." if value >= 1.0 else f"Incorrect (score {value:.2f})."
        return text, value, True, False, info

    def render(self) -> str | None:
        """The current question."""
        return None if self.entry is None else str(self.entry["question"])
