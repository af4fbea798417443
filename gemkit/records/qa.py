"""`QARecord`: one synthesized, verified question (`gemkit synth qa`, read by `qa:Synth-v0`)."""

from __future__ import annotations

from typing import ClassVar, Literal

from gemkit.records.base import Json, Part, Record


class Sentence(Part):
    """A supporting sentence and the corpus doc it is found in."""

    doc_id: str
    text: str


class Edit(Part):
    """One accepted edit: `inject` (an entity replaced by a fact about it) or `fuzz`."""

    op: Literal["inject", "fuzz"]
    before: str
    after: str
    fact: Sentence | None = None


class RejectedEdit(Part):
    """An edit a check refused, with the stage that refused it and why."""

    op: str
    before: str
    after: str
    fact: Sentence | None = None
    stage: str
    reason: str
    question: str | None = None


class Seed(Part):
    """The seed question the record was grown from."""

    question: str
    answer: str


class TextCheck(Part):
    """Whether the question's text says what its logical form says."""

    passed: bool
    asked_type: str | None = None
    problems: list[str] = []
    reason: str = ""


class Quality(Part):
    """Stage 1: one bounded question that does not give its answer away, grounded facts."""

    passed: bool
    reason: str = ""
    answer_leaked: bool | None = None
    one_question: bool | None = None
    chars: int | None = None
    words: int | None = None
    #: what makes the text hard to read (`gemkit.synth.qa.readability`; None: not checked)
    hard_to_read: list[str] | None = None
    text: TextCheck | None = None
    grounded: str | None = None
    ungrounded: list[str] = []
    answer_follows: bool | None = None


class ClosedBookGuesses(Part):
    """What the offline closed-book baselines guessed."""

    popular: list[str] = []
    lexical: list[str] = []
    prior: list[str] = []


class ModelClosedBook(Part):
    """A model's closed-book answers (LLM and outside-corpus modes)."""

    samples: list[str] = []
    correct: int | None = None


class Difficulty(Part):
    """Stage 2: closed-book solvers fail, a tool-using solver succeeds."""

    passed: bool
    reason: str = ""
    closed_book_correct: int = 0
    closed_book_tries: int = 0
    closed_book_guesses: ClosedBookGuesses | None = None
    llm_closed_book: ModelClosedBook | None = None
    tool_solver_success: bool | None = None
    tool_calls: int = 0


class Uniqueness(Part):
    """Stage 3: exactly one answer fits the question."""

    passed: bool
    reason: str = ""
    candidates: int | None = None
    #: clauses the question could lose and still fit its answer alone (None: not checked)
    droppable: list[str] | None = None
    #: blurred values that every entity of their type fits (None: not checked)
    vacuous_blurs: list[str] | None = None
    checked: list[str] | None = None
    also_fit: list[str] | None = None


class Shortcut(Part):
    """Stage 4: no sub-question of fewer hops identifies the answer; a tool call per hop."""

    passed: bool
    reason: str = ""
    hops: int | None = None
    #: entities fitting the strongest sub-question of fewer hops (None: no fact store)
    sub_question_candidates: int | None = None
    #: entities fitting the top-level clauses alone (every nested hop dropped)
    one_hop_candidates: int | None = None
    min_tool_calls: int | None = None
    #: whether one search for the question's text returned the answer's article first
    one_search_hit: bool | None = None


class Verification(Part):
    """The verification stages' verdicts and figures (no `shortcut` in version-1 records)."""

    quality: Quality
    difficulty: Difficulty
    uniqueness: Uniqueness
    shortcut: Shortcut | None = None


class QARecord(Record):
    """A kept question with its answer, evidence, edit history and verification."""

    KIND = "QA"
    #: 2 added the shortcut stage and the question's construction; 3 the readability of the
    #: text and the clauses that do no work; versions 1 and 2 still read
    VERSION = 3
    READS: ClassVar[tuple[int, ...]] = (1, 2)

    schema_version: int = 3

    id: str
    question: str
    answer: str
    answer_aliases: list[str] = []
    supporting_facts: list[Sentence]
    edits: list[Edit] = []
    n_inject: int
    n_fuzz: int
    verification: Verification
    seed: Seed
    corpus: str
    #: the constraints the question states, a nested tree (`gemkit.synth.qa.logic`)
    logical_form: Json = None
    answer_type: str | None = None
    rejected_edits: list[RejectedEdit] = []
    #: the work item the record came from (a run's item k is seeded by (seed, k))
    k: int
    #: how the question is built ("which", "who", "lead_in", ...; "model" for a model's text)
    construction: str | None = None

    def golds(self) -> list[str]:
        """The answer followed by its aliases."""
        return [self.answer, *self.answer_aliases]
