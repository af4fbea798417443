"""The difficulty filter: keep the items a model solves sometimes, with tools, in several turns.

A synthesized item teaches a policy something only if the policy can solve it with its tools
some of the time, not always, and not without them. For every item of a QA run (`qa.jsonl`,
played as `qa:Synth` with search and access over its corpus) or a task run (`tasks.jsonl`,
played as a `toolworld:` env over its databases), a model makes `k` tool-free attempts and
`k` tool-using attempts through the same envs a trainer plays; an item is kept when

- its tool-using accuracy is above 0 and below `max_accuracy` (by default 16 attempts, drop
  0/16 and >= 50%),
- its tool-free accuracy is at most `max_closed_book` (a question a model answers from memory
  needs no search), and
- every tool-using attempt that solved it took at least `min_tool_turns` tool turns.

A filter run is a run-store folder (`gemkit.runstore`), resumable like the other runs:

    OUT/run.json        the settings (dataset, model, k, thresholds, sampling, seed)
    OUT/attempts.jsonl  one line per finished attempt: item, mode, attempt, correct, tool turns
    OUT/errors.jsonl    attempts that ended in an infrastructure error (run again on resume)
    OUT/verdicts.jsonl  one line per item: its accuracies, tool turns, and kept or why not
    OUT/qa.jsonl | OUT/tasks.jsonl   the kept records, unchanged (with the corpus / databases
                        linked), so OUT is itself a dataset every reader of the source reads

Attempt j of item i in a mode is played with a seed drawn from (seed, i, mode, j) only, so a
killed run resumed plays what an uninterrupted one plays.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gemkit.core import areset_of, astep_of
from gemkit.episode_shape import TOOL_FORMATS, chat_policy, chat_wrappers, wrapped
from gemkit.errors import GemkitError
from gemkit.records.qa import QARecord
from gemkit.records.tasks import TaskRecord
from gemkit.rollout import Episode, run_episode
from gemkit.runstore import RecordFile, RunStore, read_lines

log = logging.getLogger(__name__)

ATTEMPTS_FILE = "attempts.jsonl"
ERRORS_FILE = "errors.jsonl"
VERDICTS_FILE = "verdicts.jsonl"
MODES = ("closed_book", "tools")
SYSTEM = {
    "closed_book": "Answer from what you know; no tools are available.",
    "tools": "Use the tools to find what you need, then give your final answer.",
}


#: what a filter says when no tool-using attempt solved any item
NOTHING_SOLVED = (
    "no tool-using attempt solved any of the %d items with %s: the filter cannot judge "
    "difficulty (every item is dropped as never solved); it needs a model that solves some "
    "items with the tools, or check that the attempts reach the tools (attempts.jsonl)"
)


class FilterError(GemkitError):
    """A difficulty filter asked for something it cannot do (no dataset, bad thresholds)."""


@dataclass
class FilterConfig:
    """What to filter, with which model, and the keep rule (saved as the run's settings)."""

    source: str
    out: str
    llm_url: str
    model: str
    k: int = 16
    max_accuracy: float = 0.5
    max_closed_book: float = 0.0
    min_tool_turns: int = 2
    temperature: float = 1.0
    max_tokens: int = 1024
    max_steps: int = 32
    #: how the tools reach the model, as in `gemkit eval` (`text` or `native`)
    tool_format: str = "text"
    seed: int = 0
    concurrency: int = 8
    limit: int | None = None  # only the first `limit` items
    timeout: float | None = None  # seconds the model server has per request (LLMClient's)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise FilterError(f"--k must be >= 1 attempts per mode, got {self.k}")
        if not 0 < self.max_accuracy <= 1:
            raise FilterError(f"--max-accuracy must be in (0, 1], got {self.max_accuracy}")
        if not 0 <= self.max_closed_book <= 1:
            raise FilterError(f"--max-closed-book must be in [0, 1], got {self.max_closed_book}")
        if self.min_tool_turns < 0:
            raise FilterError(f"--min-tool-turns must be >= 0, got {self.min_tool_turns}")
        if self.concurrency < 1:
            raise FilterError(f"--concurrency must be >= 1, got {self.concurrency}")
        if self.tool_format not in TOOL_FORMATS:
            raise FilterError(
                f"--tool-format must be one of {', '.join(TOOL_FORMATS)}, got {self.tool_format!r}"
            )

    def settings(self) -> dict[str, Any]:
        """What decides the output (a resumed run must share it)."""
        d = asdict(self)
        # a larger limit extends a run; the timeout does not change what a model answers
        for key in ("out", "llm_url", "concurrency", "limit", "timeout"):
            d.pop(key)
        d["source"] = str(Path(self.source).expanduser().resolve())
        return d


# -- datasets -----------------------------------------------------------------------------------


@dataclass
class Dataset:
    """The items of a QA or task run, and how to make the env that plays them."""

    kind: str  # "qa" or "tasks"
    folder: Path
    records: list[dict[str, Any]]
    make_env: Callable[[bool], Any] = field(repr=False)

    @property
    def records_file(self) -> str:
        """The name the kept records are written under."""
        return "qa.jsonl" if self.kind == "qa" else "tasks.jsonl"

    @property
    def linked(self) -> list[str]:
        """What the records refer to beside them (linked into the output folder)."""
        return ["corpus.jsonl"] if self.kind == "qa" else ["db"]


def open_dataset(source: str | os.PathLike[str]) -> Dataset:
    """A `gemkit synth qa` or `gemkit synth tasks` folder (or its qa.jsonl / tasks.jsonl)."""
    path = Path(source).expanduser()
    folder = path if path.is_dir() else path.parent
    for kind, name, model in (("qa", "qa.jsonl", QARecord), ("tasks", "tasks.jsonl", TaskRecord)):
        file = folder / name
        if (path.is_dir() and file.is_file()) or path.name == name:
            if not file.is_file():
                break
            records = []
            for n, raw in read_lines(file):
                model.parse(raw, f"{file}, line {n}")  # a bad line is named, never played
                records.append(raw)
            return Dataset(kind, folder, records, _env_maker(kind, folder))
    raise FilterError(
        f"{str(path)!r} is not a dataset to filter: expected a folder made by `gemkit synth qa` "
        "(with qa.jsonl and corpus.jsonl) or `gemkit synth tasks` (with tasks.jsonl), or one "
        "of those files"
    )


def _env_maker(kind: str, folder: Path) -> Callable[[bool], Any]:
    def make(tools: bool) -> Any:
        if kind == "qa":
            from gemkit.envs.qa.synthesized import synthesized_env

            return synthesized_env(folder, reward="em", tools=tools)
        from gemkit.envs.toolworld.env import ToolWorldEnv, make_toolworld

        return make_toolworld(path=folder) if tools else ToolWorldEnv(path=folder)

    return make


class Pinned:
    """An env whose every reset plays one item (`options={"index": i}`), for `run_episode`."""

    def __init__(self, env: Any, index: int):
        self.env = env
        self.index = index

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> Any:
        """Reset to the pinned item."""
        return await areset_of(self.env, seed=seed, options={"index": self.index})

    async def astep(self, action: Any) -> Any:
        """Step the env."""
        return await astep_of(self.env, action)


# -- attempts and verdicts ------------------------------------------------------------------------


def attempt_key(item: int, mode: str, j: int) -> str:
    """The resume key of attempt `j` of item `item` in `mode`."""
    return f"{item}#{mode}#{j}"


def attempt_seed(seed: int, item: int, mode: str, j: int) -> int:
    """The episode seed of one attempt: a function of (seed, item, mode, attempt) only."""
    return int(np.random.SeedSequence([seed, item, MODES.index(mode), j]).generate_state(1)[0])


def attempt_record(item: int, item_id: str, mode: str, j: int, episode: Episode) -> dict[str, Any]:
    """What one finished attempt says: correct or not, and how many turns called a tool."""
    last = episode.turns[-1].info if episode.turns else {}
    return {
        "key": attempt_key(item, mode, j),
        "item": item,
        "id": item_id,
        "mode": mode,
        "attempt": j,
        "correct": bool(last.get("success")) and episode.error is None,
        "tool_turns": sum(1 for t in episode.turns if t.info.get("tool_calls")),
        "turns": len(episode.turns),
    }


def verdict(
    item: int, item_id: str, attempts: list[dict[str, Any]], config: FilterConfig
) -> dict[str, Any]:
    """Whether an item is kept, from its `2k` attempts (see the module docstring)."""
    tools = [a for a in attempts if a["mode"] == "tools"]
    closed = [a for a in attempts if a["mode"] == "closed_book"]
    acc = sum(a["correct"] for a in tools) / max(1, len(tools))
    closed_acc = sum(a["correct"] for a in closed) / max(1, len(closed))
    solved_turns = [a["tool_turns"] for a in tools if a["correct"]]
    reason = ""
    if acc == 0:
        reason = f"no tool-using attempt solved it (0/{len(tools)})"
    elif acc >= config.max_accuracy:
        reason = f"tool-using accuracy {acc:.2f} is at least {config.max_accuracy}"
    elif closed_acc > config.max_closed_book:
        reason = f"tool-free accuracy {closed_acc:.2f} is over {config.max_closed_book}"
    elif min(solved_turns) < config.min_tool_turns:
        reason = (
            f"solved in {min(solved_turns)} tool turn(s); at least {config.min_tool_turns} "
            "are asked for"
        )
    return {
        "item": item,
        "id": item_id,
        "kept": not reason,
        "reason": reason,
        "tool_accuracy": round(acc, 4),
        "closed_book_accuracy": round(closed_acc, 4),
        "min_tool_turns": min(solved_turns) if solved_turns else None,
        "mean_tool_turns": round(float(np.mean([a["tool_turns"] for a in tools])), 2)
        if tools
        else None,
    }


def _check_attempt(raw: dict[str, Any], where: str) -> None:
    if not isinstance(raw.get("key"), str) or raw.get("mode") not in MODES:
        raise FilterError(f"{where}: not a filter attempt (needs a key and a mode)")


ATTEMPTS = RecordFile(ATTEMPTS_FILE, key=lambda r: r["key"], check=_check_attempt)
ERRORS = RecordFile(ERRORS_FILE, key=lambda r: r["key"], check=_check_attempt, settles=False)
VERDICTS = RecordFile(VERDICTS_FILE, key=lambda r: r["item"])


@dataclass
class FilterSummary:
    """What a filter run found: items, kept, and why the others were dropped.

    `solved` counts the items some tool-using attempt solved: with none solved the filter
    cannot tell hard from impossible (the model is too weak for this data, or the attempts
    could not use the tools), and `judged` is False.
    """

    items: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    attempts_played: int = 0
    attempts_resumed: int = 0
    solved: int = 0
    verdicts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def judged(self) -> bool:
        """Whether the model solved anything, so its accuracies say how hard each item is."""
        return self.solved > 0 or self.items == 0


def drop_kind(reason: str) -> str:
    """The short name of why an item was dropped ("too easy", "never solved", ...)."""
    for kind in ("no tool-using", "tool-using accuracy", "tool-free", "solved in"):
        if reason.startswith(kind):
            return {
                "no tool-using": "never solved",
                "tool-using accuracy": "too easy",
                "tool-free": "solved without tools",
                "solved in": "one tool turn",
            }[kind]
    return "other"


def open_store(config: FilterConfig, files: list[RecordFile]) -> RunStore:
    """The run folder of a filter run (the one place its durable writing is decided)."""
    return RunStore(
        config.out,
        "filter",
        config.settings(),
        files,
        info={"llm_url": config.llm_url, "concurrency": config.concurrency, "limit": config.limit},
        failures=ERRORS_FILE,
        resume_hint="run the same gemkit filter command with --resume",
    )


async def _play_all(
    config: FilterConfig, data: Dataset, todo: list[tuple[int, str, int]], store: RunStore
) -> int:
    from gemkit.llm import LLMClient

    client = LLMClient(
        base_url=config.llm_url, model=config.model, max_retries=3, timeout=config.timeout
    )
    pools: dict[str, asyncio.Queue[Any]] = {}
    for mode in MODES:
        pools[mode] = asyncio.Queue()
        for _ in range(min(config.concurrency, max(1, len(todo)))):
            pools[mode].put_nowait(None)  # an env is made on first use, then reused
    played = 0

    async def one(item: int, mode: str, j: int) -> None:
        nonlocal played
        env = await pools[mode].get()
        try:
            if env is None:
                env = await asyncio.to_thread(make_env, data, mode, config.tool_format)
            policy = chat_policy(
                client, config.tool_format, temperature=config.temperature,
                max_tokens=config.max_tokens,
            )  # fmt: skip
            seed = attempt_seed(config.seed, item, mode, j)
            episode = await run_episode(
                Pinned(env, item), policy, env_id=data.kind, seed=seed, max_steps=config.max_steps
            )
        finally:
            pools[mode].put_nowait(env)
        record = attempt_record(item, str(data.records[item].get("id", item)), mode, j, episode)
        if episode.error is not None and _is_infrastructure(episode.error):
            store.fail({**record, "error": episode.error}, episode.error)
            return
        store.append(ATTEMPTS_FILE, record)
        played += 1

    try:
        await asyncio.gather(*(one(*t) for t in todo))
    finally:
        await client.close()
    return played


def make_env(data: Dataset, mode: str, tool_format: str = "text") -> Any:
    """An env of the dataset in `mode`, played in the shape `gemkit eval` plays a model in
    (`gemkit.episode_shape`): a chat whose tool results are `tool` messages, the tools
    offered once (as text, or natively as `tools=`), the mode's system prompt first."""
    env = data.make_env(mode == "tools")
    return wrapped(env, chat_wrappers(tool_format, system_prompt=SYSTEM[mode]))


def _is_infrastructure(error: str) -> bool:
    # the model server failing is not the item's difficulty: retried on resume
    return error.split(":", 1)[0] in {
        "LLMError", "TimeoutError", "ConnectionError", "ClientConnectorError",
        "ServerDisconnectedError",
    }  # fmt: skip


def run_filter(config: FilterConfig) -> FilterSummary:
    """Play every attempt not yet on disk, then write the verdicts and the kept records."""
    data = open_dataset(config.source)
    n_items = len(data.records) if config.limit is None else min(config.limit, len(data.records))
    summary = FilterSummary(items=n_items)
    with open_store(config, [ATTEMPTS, ERRORS, VERDICTS]) as store:
        done = {r["key"] for r in store.records(ATTEMPTS_FILE)}
        summary.attempts_resumed = len(done)
        todo = [
            (i, mode, j)
            for i in range(n_items)
            for mode in MODES
            for j in range(config.k)
            if attempt_key(i, mode, j) not in done
        ]
        summary.attempts_played = asyncio.run(_play_all(config, data, todo, store))
        by_item: dict[int, list[dict[str, Any]]] = {}
        for a in store.records(ATTEMPTS_FILE):
            by_item.setdefault(a["item"], []).append(a)
        missing = [i for i in range(n_items) if len(by_item.get(i, ())) < 2 * config.k]
        if missing:
            raise FilterError(
                f"{len(missing)} items still lack attempts (the model server failed); run the "
                "same gemkit filter command with --resume"
            )
        written = {v["item"] for v in store.records(VERDICTS_FILE)}
        for i in range(n_items):
            v = verdict(i, str(data.records[i].get("id", i)), by_item[i], config)
            if i not in written:
                store.append(VERDICTS_FILE, v)
            summary.verdicts.append(v)
        kept = [data.records[v["item"]] for v in summary.verdicts if v["kept"]]
        summary.kept = len(kept)
        summary.solved = sum(v["tool_accuracy"] > 0 for v in summary.verdicts)
        if not summary.judged:
            log.warning(NOTHING_SOLVED, len(summary.verdicts), config.model)
        for v in summary.verdicts:
            if not v["kept"]:
                kind = drop_kind(v["reason"])
                summary.dropped[kind] = summary.dropped.get(kind, 0) + 1
        with store.replacing(data.records_file) as tmp, tmp.open("w", encoding="utf-8") as f:
            f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
            f.flush()
            os.fsync(f.fileno())
        for name in data.linked:
            link, target = Path(config.out) / name, (data.folder / name).resolve()
            if target.exists() and not link.exists() and not link.is_symlink():
                link.symlink_to(target)
        store.write_json(
            "summary.json",
            {k: v for k, v in asdict(summary).items() if k != "verdicts"}
            | {"judged": summary.judged},
        )
    return summary
