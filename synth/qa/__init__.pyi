# The names of `gemkit.synth.qa`, listed once: `__init__.py` imports each on first use.
from gemkit.synth.qa.agent import AgentConfig as AgentConfig
from gemkit.synth.qa.agent import QAState as QAState
from gemkit.synth.qa.agent import RuleAgent as RuleAgent
from gemkit.synth.qa.agent import make_seed as make_seed
from gemkit.synth.qa.logic import FactIndex as FactIndex
from gemkit.synth.qa.logic import question_text as question_text
from gemkit.synth.qa.run import RunConfig as RunConfig
from gemkit.synth.qa.run import RunStats as RunStats
from gemkit.synth.qa.run import Synthesizer as Synthesizer
from gemkit.synth.qa.run import export_dataset as export_dataset
from gemkit.synth.qa.run import read_records as read_records
from gemkit.synth.qa.run import run as run
