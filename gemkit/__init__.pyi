# The public API of `gemkit`, listed once: `gemkit/__init__.py` imports each name on first use.
from gemkit.core import ActionWrapper as ActionWrapper
from gemkit.core import Env as Env
from gemkit.core import ObservationWrapper as ObservationWrapper
from gemkit.core import RewardWrapper as RewardWrapper
from gemkit.core import TextSpace as TextSpace
from gemkit.core import Wrapper as Wrapper
from gemkit.errors import GemkitError as GemkitError
from gemkit.errors import UnknownEnvError as UnknownEnvError
from gemkit.llm.chat_policy import LLMPolicy as LLMPolicy
from gemkit.llm.client import LLMClient as LLMClient
from gemkit.policy import Policy as Policy
from gemkit.policy import RandomPolicy as RandomPolicy
from gemkit.policy import ScriptedPolicy as ScriptedPolicy
from gemkit.registry import EnvSpec as EnvSpec
from gemkit.registry import list_envs as list_envs
from gemkit.registry import make as make
from gemkit.registry import make_policy as make_policy
from gemkit.registry import make_vec as make_vec
from gemkit.registry import register as register
from gemkit.registry import spec as spec
from gemkit.tools.base import Tool as Tool
from gemkit.tools.base import ToolResult as ToolResult
from gemkit.tools.function import tool as tool
from gemkit.tools.wrapper import ToolEnvWrapper as ToolEnvWrapper
from gemkit.vector import AsyncVectorEnv as AsyncVectorEnv
from gemkit.vector import ProcessVectorEnv as ProcessVectorEnv
from gemkit.vector import SyncVectorEnv as SyncVectorEnv
from gemkit.vector import VectorEnv as VectorEnv
from gemkit.wrappers.history import ChatHistory as ChatHistory

__version__: str
