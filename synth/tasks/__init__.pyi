# The names of `gemkit.synth.tasks`, listed once: `__init__.py` imports each on first use.
from gemkit.envs.toolworld.category import Category as Category
from gemkit.envs.toolworld.category import Database as Database
from gemkit.envs.toolworld.category import Task as Task
from gemkit.envs.toolworld.category import Verdict as Verdict
from gemkit.synth.tasks.base import Synthesized as Synthesized
from gemkit.synth.tasks.base import TaskGenerator as TaskGenerator
from gemkit.synth.tasks.base import TaskSynthesisError as TaskSynthesisError
from gemkit.synth.tasks.base import synthesize as synthesize
from gemkit.synth.tasks.generators import CATEGORIES as CATEGORIES
from gemkit.synth.tasks.generators import get_category as get_category
from gemkit.synth.tasks.generators import register_category as register_category
