"""QA synthesis: seed questions grown by inject/fuzz edits and kept only when verified.

    from gemkit.synth.qa import RunConfig, run
    stats = run("out/", RunConfig(n=100, world_size=10_000, seed=0))

See docs/synth-qa.md for the record format and the three verification stages.
"""

from gemkit.synth.qa.agent import AgentConfig, QAState, RuleAgent, make_seed
from gemkit.synth.qa.logic import FactIndex, question_text
from gemkit.synth.qa.run import RunConfig, RunStats, Synthesizer, export_dataset, read_records, run

__all__ = [
    "AgentConfig",
    "FactIndex",
    "QAState",
    "RuleAgent",
    "RunConfig",
    "RunStats",
    "Synthesizer",
    "export_dataset",
    "make_seed",
    "question_text",
    "read_records",
    "run",
]
