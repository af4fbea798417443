"""Resumable QA synthesis runs: work item k comes from (seed, k); records are appended as they
are made, so a killed run restarts where it stopped with no duplicate and no lost record.

Layout of a run folder (a run-store folder, `gemkit.runstore`):

    DIR/run.json        the settings (a resumed run must use the same ones)
    DIR/corpus.jsonl    the corpus the records cite
    DIR/qa.jsonl        kept records, one JSON object per line (append + fsync per record)
    DIR/rejected.jsonl  rejected work items with the stage that rejected them
    DIR/failed.jsonl    work items the model server failed (down, timing out): run again on
                        resume; `MAX_FAILURES` in a row stop the run
    DIR/dataset/        a Hugging Face `datasets` folder of qa.jsonl, written at the end
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing as mp
import os
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gemkit.errors import GemkitError
from gemkit.records.base import RecordError
from gemkit.records.qa import QARecord
from gemkit.records.splits import SPLITS, TEST_FRACTION, answer_split, first_of_each, normalized
from gemkit.runstore import (
    MAX_FAILURES,
    RecordFile,
    RunStore,
    RunStoreError,
    is_storage_error,
    read_lines,
    storage_error,
)
from gemkit.synth.qa.agent import (
    AgentConfig,
    QAState,
    RuleAgent,
    make_seed,
    verify_state,
    world_refs,
)
from gemkit.synth.qa.logic import FactIndex
from gemkit.synth.qa.solver import ClosedBook, ToolSolver
from gemkit.synth.qa.verify import IDLE_CLAUSE
from gemkit.synth.qa.verify import STAGES as VERIFY_STAGES
from gemkit.synth.world import World, build_world

logger = logging.getLogger(__name__)

#: every stage a work item can end at, in order: each kept or rejected item is counted once
STAGES = ("seed", "edits", *VERIFY_STAGES, "duplicate", "error")
#: new records a run keeps before its table gives a rate per minute (fewer say little)
MIN_RATE_RECORDS = 100


@dataclass
class RunConfig:
    """Everything that decides which records a run makes (saved as run.json)."""

    n: int = 100
    world_size: int = 10_000
    seed: int = 0
    min_inject: int = 4
    min_fuzz: int = 2
    llm_url: str | None = None
    model: str | None = None
    corpus: str | None = None
    seeds: str | None = None
    closed_book_samples: int = 3
    max_items_factor: int = 20  # give up after n * factor work items
    timeout: float | None = None  # seconds the model server has per request (LLMClient's)

    def identity(self) -> dict[str, Any]:
        """The settings a resumed run must share with the first one (the manifest's).

        `n` may grow and the endpoint may move (`llm_url` is kept as `info`); whether a model
        writes the edits, and which, is part of the identity.
        """
        d = asdict(self)
        for free in ("n", "max_items_factor", "llm_url", "timeout"):
            d.pop(free)
        d["llm"] = bool(self.llm_url)
        return d


@dataclass
class RunStats:
    """Totals of a run (including the records a resumed run found on disk)."""

    kept: int = 0
    items: int = 0
    rejected: Counter[str] = field(default_factory=Counter)  # final stage -> items
    edit_rejections: Counter[str] = field(default_factory=Counter)  # stage -> rejected edits
    #: edits refused because the clause they added did no work (counted in edit_rejections)
    idle_edits: int = 0
    n_inject: list[int] = field(default_factory=list)
    n_fuzz: list[int] = field(default_factory=list)
    tool_calls: list[int] = field(default_factory=list)
    closed_book_correct: int = 0
    closed_book_tries: int = 0
    #: kept records whose every clause was checked for work (those with a logical form)
    clauses_checked: int = 0
    #: kept records with a clause the answer does not need, or a blur that excludes nothing
    idle_clauses: int = 0
    vacuous_blurs: int = 0
    #: kept records whose text reads as hard (a clause inside another, a verb twice, ...)
    hard_to_read: int = 0
    seconds: float = 0.0
    resumed: int = 0  # kept records found on disk when the run started
    resumed_items: int = 0  # work items (kept or rejected) found on disk
    failed: int = 0  # work items the model server failed this run (retried on resume)

    @property
    def new(self) -> int:
        """Records kept by this run (not found on disk)."""
        return self.kept - self.resumed

    def kept_per_minute(self, min_records: int | None = None) -> float | None:
        """This run's rate: records it kept per minute of its own time (None: it kept fewer
        than `min_records`, by default `MIN_RATE_RECORDS`, too few for a rate, as a resumed
        run that found its work done)."""
        least = MIN_RATE_RECORDS if min_records is None else min_records
        if self.seconds <= 0 or self.new < max(1, least):
            return None
        return 60 * self.new / self.seconds

    def add(self, outcome: dict[str, Any]) -> None:
        """Count one work item's outcome (a record, or a rejection)."""
        self.items += 1
        for e in outcome.get("rejected_edits", ()):
            self.edit_rejections[e["stage"]] += 1
            self.idle_edits += str(e.get("reason", "")).startswith(IDLE_CLAUSE)
        verification = outcome.get("verification") or {}
        diff = verification.get("difficulty") or {}
        self.closed_book_correct += int(diff.get("closed_book_correct") or 0)
        self.closed_book_tries += int(diff.get("closed_book_tries") or 0)
        if outcome.get("rejected_stage"):
            self.rejected[outcome["rejected_stage"]] += 1
            return
        self.kept += 1
        self.n_inject.append(outcome["n_inject"])
        self.n_fuzz.append(outcome["n_fuzz"])
        self.tool_calls.append(diff.get("tool_calls", 0))
        unique = verification.get("uniqueness") or {}
        if unique.get("droppable") is not None:
            self.clauses_checked += 1
            self.idle_clauses += bool(unique["droppable"])
            self.vacuous_blurs += bool(unique.get("vacuous_blurs"))
        self.hard_to_read += bool((verification.get("quality") or {}).get("hard_to_read"))

    def summary(self) -> dict[str, Any]:
        """Means and rates for tables and benchmarks."""

        def mean(xs: list[int]) -> float:
            return float(np.mean(xs)) if xs else 0.0

        return {
            "kept": self.kept,
            "items": self.items,
            "rejected": {stage: self.rejected[stage] for stage in STAGES if self.rejected[stage]}
            | {k: v for k, v in self.rejected.items() if k not in STAGES},
            "edit_rejections": dict(self.edit_rejections),
            "idle_edits": self.idle_edits,
            "accepted_edits": {"inject": sum(self.n_inject), "fuzz": sum(self.n_fuzz)},
            "mean_inject": round(mean(self.n_inject), 3),
            "mean_fuzz": round(mean(self.n_fuzz), 3),
            "mean_tool_calls": round(mean(self.tool_calls), 2),
            "closed_book_accuracy": round(self.closed_book_correct / self.closed_book_tries, 4)
            if self.closed_book_tries
            else 0.0,
            "clauses_checked": self.clauses_checked,
            "idle_clauses": self.idle_clauses,
            "vacuous_blurs": self.vacuous_blurs,
            "hard_to_read": self.hard_to_read,
        }


# -- one work item ------------------------------------------------------------------------------


class InlineBackend:
    """A `SearchIndex` queried on the calling thread.

    A synthesis worker runs one item at a time, so the thread hop of the default backend
    (which keeps an event loop serving many episodes responsive) would only add latency.
    """

    def __init__(self, index: Any):
        self.index = index

    async def search(self, query: str, topk: int) -> list[dict[str, Any]]:
        """The docs for `query`, best first."""
        docs: list[dict[str, Any]] = self.index.search(query, topk)
        return docs

    async def access(self, url_or_id: str) -> dict[str, Any] | None:
        """The full doc at `url_or_id`, or None."""
        doc: dict[str, Any] | None = self.index.access(url_or_id)
        return doc

    async def close(self) -> None:
        """Nothing to release."""


class Synthesizer:
    """Makes the record of work item k: seed, edits, verification (one per process)."""

    def __init__(
        self, world: World | None, corpus: Path, config: RunConfig, index_dir: Path | None = None
    ):
        from gemkit.search.index import SearchIndex
        from gemkit.tools.search import AccessTool, SearchTool

        self.world = world
        self.config = config
        self.corpus_name = str(config.corpus or "world")
        self.index = SearchIndex.open(corpus, cache_dir=index_dir)
        self.search = SearchTool(backend=InlineBackend(self.index))
        self.access = AccessTool(backend=self.search.backend)
        self.agent_config = AgentConfig(
            min_inject=config.min_inject,
            min_fuzz=config.min_fuzz,
            closed_book_samples=config.closed_book_samples,
        )
        self.seeds: list[dict[str, Any]] | None = None
        if config.seeds:
            from gemkit.synth.qa.outside import read_seeds

            self.seeds = read_seeds(config.seeds)
        else:
            assert world is not None
            self.facts = FactIndex.of_world(world)
            self.closed_book = ClosedBook(world, samples=config.closed_book_samples)
            self.solver = ToolSolver(
                self.search, self.access, max_calls=self.agent_config.solver_max_calls
            )
        self.agent = self._make_agent()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _make_agent(self) -> Any:
        if self.seeds is not None:
            from gemkit.llm import LLMClient
            from gemkit.synth.qa.outside import OutsideAgent

            client = LLMClient(
                base_url=self.config.llm_url,
                model=self.config.model,
                max_retries=3,
                timeout=self.config.timeout,
            )
            return OutsideAgent(self.search, self.access, client, self.doc_text, self.agent_config)
        assert self.world is not None  # a run without outside seeds has its world
        if self.config.llm_url:
            from gemkit.synth.qa.llm import LLMAgent

            return LLMAgent(
                self.world,
                self.search,
                self.config.llm_url,
                self.config.model,
                self.agent_config,
                timeout=self.config.timeout,
            )
        return RuleAgent(self.world, self.search, self.agent_config)

    def doc_text(self, doc_id: str) -> str | None:
        """The text of a corpus doc, read from the index (so any corpus works)."""
        doc = self.index.access(doc_id)
        return None if doc is None else doc["text"]

    def item_rng(self, k: int) -> np.random.Generator:
        """The generator of work item k: a function of (seed, k) only."""
        return np.random.default_rng([self.config.seed, 0xA5, k])

    def record_id(self, k: int) -> str:
        """The deterministic id of work item k."""
        return f"qa-{self.config.seed}-{k:07d}"

    async def amake(self, k: int) -> dict[str, Any]:
        """Work item k, from seed to verdict: a record, or a rejection with its stage."""
        rng = self.item_rng(k)
        rid = self.record_id(k)
        if self.seeds is not None:
            return await self._amake_outside(k, rid, rng)
        assert self.world is not None  # a run without outside seeds has its world
        state = make_seed(self.world, self.facts, rng)
        if state is None:
            return {
                "id": rid,
                "k": k,
                "rejected_stage": "seed",
                "reason": "no unique seed question",
            }
        await self.agent.grow(state, rng)
        if state.n_inject < self.config.min_inject or state.n_fuzz < self.config.min_fuzz:
            return self._rejection(
                rid,
                k,
                state,
                "edits",
                f"only {state.n_inject} injections and {state.n_fuzz} fuzzes passed",
            )
        verification = await self.verify(state, rng)
        for stage in VERIFY_STAGES:
            if not verification[stage]["passed"]:
                return self._rejection(
                    rid, k, state, stage, verification[stage]["reason"], verification
                )
        return self.record(rid, k, state, verification)

    async def _amake_outside(self, k: int, rid: str, rng: np.random.Generator) -> dict[str, Any]:
        from gemkit.synth.qa.outside import OutsideState

        assert self.seeds is not None
        seed = self.seeds[k % len(self.seeds)]
        aliases = [seed["answer"], *seed["aliases"]]
        state = OutsideState(
            seed["question"],
            seed["answer"],
            aliases,
            {"question": seed["question"], "answer": seed["answer"]},
        )
        await self.agent.grow(state, rng)
        if state.n_inject < self.config.min_inject or state.n_fuzz < self.config.min_fuzz:
            return self._rejection(
                rid,
                k,
                state,
                "edits",
                f"only {state.n_inject} injections and {state.n_fuzz} fuzzes passed",
            )
        verification = await self.agent.verify(state)
        for stage in VERIFY_STAGES:
            if not verification[stage]["passed"]:
                return self._rejection(
                    rid, k, state, stage, verification[stage]["reason"], verification
                )
        return self.record(rid, k, state, verification)

    async def verify(self, state: QAState, rng: np.random.Generator) -> dict[str, Any]:
        """The three stages (the LLM agent adds its closed-book samples to difficulty)."""
        assert self.world is not None  # only a run without outside seeds verifies a state
        v = await verify_state(state, self.world, self.doc_text, self.closed_book, self.solver, rng)
        extra = getattr(self.agent, "closed_book", None)
        if extra is not None:
            v["difficulty"] = await extra(state, v["difficulty"])
        return v

    def make(self, k: int) -> dict[str, Any]:
        """`amake` on this process's event loop."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(self.amake(k))

    def close(self) -> None:
        """Close the model client's HTTP session (if any) and this process's event loop."""
        if self._loop is None:
            return
        client = getattr(self.agent, "client", None)
        if client is not None:
            self._loop.run_until_complete(client.close())
        self._loop.close()
        self._loop = None

    def record(self, rid: str, k: int, state: Any, verification: dict[str, Any]) -> dict[str, Any]:
        """The record of a kept question, checked against `QARecord` (what `qa:Synth` reads)."""
        return QARecord(
            id=rid,
            question=state.question,
            answer=state.answer,
            answer_aliases=[a for a in state.aliases if a != state.answer],
            supporting_facts=[{"doc_id": s["doc_id"], "text": s["text"]} for s in state.support],
            edits=[
                {"op": e["op"], "before": e["before"], "after": e["after"], "fact": e["fact"]}
                for e in state.edits
            ],
            n_inject=state.n_inject,
            n_fuzz=state.n_fuzz,
            verification=verification,
            seed=state.seed,
            corpus=self.corpus_name,
            logical_form=state.lf,
            answer_type=state.lf["type"] if state.lf else None,
            rejected_edits=state.rejected,
            k=k,
            construction=getattr(state, "construction", "model"),  # outside: the model's text
        ).to_json()

    @staticmethod
    def _rejection(
        rid: str,
        k: int,
        state: Any,
        stage: str,
        reason: str,
        verification: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        return {
            "id": rid,
            "k": k,
            "rejected_stage": stage,
            "reason": reason,
            "question": state.question,
            "answer": state.answer,
            "n_inject": state.n_inject,
            "n_fuzz": state.n_fuzz,
            "rejected_edits": state.rejected,
            "verification": verification,
        }


# -- worker processes ---------------------------------------------------------------------------

_WORKER: Synthesizer | None = None


def _init_worker(world: World | None, corpus: str, config: RunConfig, index_dir: str) -> None:
    global _WORKER
    if world is None and not config.corpus:
        world = build_world(config.world_size, config.seed)
    _WORKER = Synthesizer(world, Path(corpus), config, Path(index_dir))


def _work(k: int) -> dict[str, Any]:
    assert _WORKER is not None
    try:
        return _WORKER.make(k)
    except Exception as e:
        if is_infrastructure_error(e):  # not the item's fault: tried again on resume
            logger.warning("work item %d: %s", k, e)
            return {"id": _WORKER.record_id(k), "k": k, "failed": f"{type(e).__name__}: {e}"}
        # one broken item must not sink the run: it is logged as rejected
        logger.exception("work item %d failed", k)
        return {"id": _WORKER.record_id(k), "k": k, "rejected_stage": "error", "reason": repr(e)}


def is_infrastructure_error(e: BaseException) -> bool:
    """Whether a work item failed because the model server did (down, timing out, refusing
    every request), not because of the item: a 400-like answer to one request is the item's."""
    from gemkit.llm.client import LLMError

    if isinstance(e, LLMError):
        status = getattr(e, "status", None)
        return status is None or status in (401, 403, 404, 408, 429) or status >= 500
    return isinstance(e, (TimeoutError, ConnectionError))


# -- the run ------------------------------------------------------------------------------------


def _check_qa(raw: dict[str, Any], where: str) -> None:
    QARecord.parse(raw, where)


def _check_item(raw: dict[str, Any], where: str) -> None:
    if not isinstance(raw.get("k"), int):
        raise RunStoreError(f"{where}: not a work item of a QA run (expected an integer 'k')")


QA_FILE, REJECTED_FILE, FAILED_FILE = "qa.jsonl", "rejected.jsonl", "failed.jsonl"
QA = RecordFile(QA_FILE, key=lambda r: r["k"], check=_check_qa)
REJECTED = RecordFile(REJECTED_FILE, key=lambda r: r["k"], check=_check_item)
FAILED = RecordFile(FAILED_FILE, key=lambda r: r["k"], check=_check_item, settles=False)


def open_store(out: Path, config: RunConfig, max_failures: int = MAX_FAILURES) -> RunStore:
    """The run's folder (opened by `with`: its lock taken, manifest and record files checked)."""
    return RunStore(
        out,
        "synth qa",
        config.identity(),
        [QA, REJECTED, FAILED],
        info={
            "n": config.n,
            "max_items_factor": config.max_items_factor,
            "llm_url": config.llm_url,
            "timeout": config.timeout,
        },
        failures=FAILED_FILE,
        max_failures=max_failures,
    )


def prepare(out: Path, config: RunConfig) -> tuple[World | None, Path]:
    """Check the settings and the folder, build the world, and write (or reuse) the corpus."""
    check_config(config)
    with open_store(out, config) as store:
        return _prepare(store, config)


def _prepare(store: RunStore, config: RunConfig) -> tuple[World | None, Path]:
    corpus = store.folder / "corpus.jsonl"
    if config.corpus:
        # an outside corpus may be a whole Wikipedia dump: link it rather than copy it
        source = Path(config.corpus).expanduser().resolve()
        if not os.path.lexists(corpus):
            try:
                corpus.symlink_to(source)
            except OSError:
                with store.replacing("corpus.jsonl") as tmp:
                    shutil.copyfile(source, tmp)
        return None, corpus
    world = build_world(config.world_size, config.seed)
    if corpus.is_symlink():
        raise RunStoreError(f"{corpus} is a link; this run writes its own corpus there")
    if not corpus.exists():
        with store.replacing("corpus.jsonl") as tmp:  # a killed write leaves no half corpus
            world.write_corpus(tmp)
    return world, corpus


def check_config(config: RunConfig) -> None:
    """Refuse settings that cannot work together, saying what to pass instead."""
    if (config.corpus or config.seeds) and not config.llm_url:
        raise GemkitError(
            "--corpus and --seeds need a model: add --llm URL --model NAME "
            "(the offline agent works on the procedural world only)"
        )
    if config.corpus and not config.seeds:
        raise GemkitError(
            '--corpus needs --seeds FILE: a JSONL of {"question", "answer"} seed '
            "questions about that corpus"
        )
    if config.corpus and not Path(config.corpus).expanduser().is_file():
        raise GemkitError(
            f"corpus {config.corpus!r} does not exist; expected a JSONL file with one "
            '{"id", "title", "text", "url"} object per line'
        )
    if config.seeds:
        from gemkit.synth.qa.outside import read_seeds

        read_seeds(config.seeds)


def run(
    out: str | os.PathLike[str],
    config: RunConfig,
    *,
    workers: int = 1,
    on_item: Callable[[dict[str, Any], RunStats], None] | None = None,
    export: bool = True,
    executor: str = "process",
    ray_address: str | None = None,
    on_start: Callable[[RunStats], None] | None = None,
    max_failures: int = MAX_FAILURES,
    test_fraction: float = TEST_FRACTION,
) -> RunStats:
    """Make records until `config.n` are kept; resume from what `out` already holds.

    A folder made with other settings, or in use by another run, is refused before anything
    in it changes. Work items the model server fails go to `failed.jsonl` and run again on
    resume; `max_failures` of them in a row stop the run (`RunStopped`). `on_start(stats)` is
    called with the totals found on disk. `executor="ray"` spreads the work items over a Ray
    cluster (`ray_address`, or `RAY_ADDRESS`, or a local one); on several machines `out` must
    be on a shared filesystem. The `datasets` export is split by answer, `test_fraction` of
    them in `test` (`export_dataset`).
    """
    check_config(config)
    out = Path(out)
    with open_store(out, config, max_failures) as store:
        try:
            return _run(
                store,
                config,
                workers,
                on_item,
                export,
                executor,
                ray_address,
                on_start,
                test_fraction,
            )
        except Exception as e:
            if is_storage_error(e):
                raise storage_error(e, out) from None
            raise


def _run(
    store: RunStore,
    config: RunConfig,
    workers: int,
    on_item: Callable[[dict[str, Any], RunStats], None] | None,
    export: bool,
    executor: str,
    ray_address: str | None,
    on_start: Callable[[RunStats], None] | None,
    test_fraction: float = TEST_FRACTION,
) -> RunStats:
    import time

    start = time.perf_counter()
    world, corpus = _prepare(store, config)
    index_dir = store.folder / ".index"
    if index_dir.is_symlink():  # the index is written there: never through a link
        raise RunStoreError(f"{index_dir} is a link; remove it (it is a cache) and run again")
    stats = RunStats()
    done: set[int] = set()
    for rec in store.records(QA_FILE) + store.records(REJECTED_FILE):
        done.add(rec["k"])
        stats.add(rec)
    asked = {normalized(r["question"]): r["id"] for r in store.records(QA_FILE)}
    stats.resumed, stats.resumed_items = stats.kept, stats.items
    if on_start is not None:
        on_start(stats)
    # Build the index once here, so workers only open it.
    from gemkit.search.index import SearchIndex

    SearchIndex.open(corpus, cache_dir=index_dir)
    limit = config.n * config.max_items_factor
    todo = (k for k in range(limit) if k not in done)
    outcomes = (
        _ray_outcomes(todo, corpus, config, index_dir, workers, stats, ray_address)
        if executor == "ray"
        else _outcomes(todo, world, corpus, config, index_dir, workers, stats, config.n)
    )
    for outcome in outcomes:
        if stats.kept >= config.n:
            break
        if outcome.get("failed"):
            stats.failed += 1
            store.fail(outcome, f"work item {outcome['k']}: {outcome['failed']}")
            continue
        if not outcome.get("rejected_stage"):
            outcome = _unless_asked(outcome, asked)
        store.append(REJECTED_FILE if outcome.get("rejected_stage") else QA_FILE, outcome)
        stats.add(outcome)
        if on_item is not None:
            on_item(outcome, stats)
    stats.seconds = time.perf_counter() - start
    if export:
        export_dataset(store.folder, store, test_fraction)
    return stats


def _unless_asked(outcome: dict[str, Any], asked: dict[str, str]) -> dict[str, Any]:
    """A record, or its rejection when a kept record asks the same question (normalised):
    two copies of one question would weigh it twice in training and sit on both sides of
    a split."""
    key = normalized(outcome["question"])
    if key in asked:
        return {
            **outcome,
            "rejected_stage": "duplicate",
            "reason": f"the same question as record {asked[key]}",
        }
    asked[key] = outcome["id"]
    return outcome


def _outcomes(
    todo: Iterator[int],
    world: World | None,
    corpus: Path,
    config: RunConfig,
    index_dir: Path,
    workers: int,
    stats: RunStats,
    n: int,
) -> Iterator[dict[str, Any]]:
    """Outcomes in k order (so the kept set does not depend on the number of workers)."""
    if workers <= 1:
        _init_worker(world, str(corpus), config, str(index_dir))
        assert _WORKER is not None
        try:
            for k in todo:
                if stats.kept >= n:
                    return
                yield _work(k)
        finally:
            _WORKER.close()
        return
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    shared = world if ctx.get_start_method() == "fork" else None
    if shared is not None and not config.seeds:
        # built once here, the lookups reach every forked worker for free
        FactIndex.of_world(shared)
        world_refs(shared)
    with ctx.Pool(workers, _init_worker, (shared, str(corpus), config, str(index_dir))) as pool:
        batch = workers * 16
        while stats.kept < n:
            ks = list(itertools.islice(todo, batch))
            if not ks:
                return
            for outcome in pool.imap(_work, ks, chunksize=4):
                yield outcome
                if stats.kept >= n:
                    break


def _ray_outcomes(
    todo: Iterator[int],
    corpus: Path,
    config: RunConfig,
    index_dir: Path,
    workers: int,
    stats: RunStats,
    address: str | None,
) -> Iterator[dict[str, Any]]:
    """Outcomes in k order from Ray tasks; each Ray worker builds its world once."""
    from gemkit.executor import get_executor

    init = (None, str(corpus), config, str(index_dir))
    with get_executor(
        "ray", workers, initializer=_init_worker, initargs=init, address=address
    ) as ex:
        for outcome in ex.map(_work, todo):
            yield outcome
            if stats.kept >= config.n:
                return


def read_records(out: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The kept records of a run folder, each checked against `QARecord` (its JSON form).

    Reading changes nothing: a torn last line (a run still writing, or killed) is skipped.
    """
    return [record.to_json() for record in _parse_records(out)]


def _parse_records(out: str | os.PathLike[str]) -> list[QARecord]:
    path = Path(out) / QA_FILE
    if not path.exists():
        return []
    out_records = []
    for n, raw in read_lines(path):
        try:
            out_records.append(QARecord.parse(raw, f"{path}, line {n}"))
        except RecordError as e:
            raise GemkitError(str(e)) from None
    return out_records


def export_dataset(
    out: str | os.PathLike[str],
    store: RunStore | None = None,
    test_fraction: float = TEST_FRACTION,
) -> Path:
    """Save qa.jsonl as a Hugging Face `datasets` folder at `out/dataset`: a `DatasetDict` of
    `train` and `test`, split by answer (no answer on both sides, `test_fraction` of them in
    `test`) with one record per normalised question (`gemkit.records.splits`).

    The columns are `QARecord`'s fields, nested as in qa.jsonl (supporting facts, edits,
    rejected edits, verification stages as structs and lists); only the logical form, a
    recursive tree, is JSON text. Within a run (`store`), the folder is written aside and
    renamed over the old one: a failed export leaves no partial folder.
    """
    from gemkit.records.export import save_splits

    out = Path(out)
    records = first_of_each(_parse_records(out), key=lambda r: r.question)
    sides = {
        name: [r for r in records if answer_split(r.answer, test_fraction) == name]
        for name in SPLITS
    }
    if store is None:
        return save_splits(sides, QARecord, out / "dataset")
    with store.replacing("dataset") as tmp:
        save_splits(sides, QARecord, tmp)
    return out / "dataset"
