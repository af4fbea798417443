# The names of `gemkit.llm`, listed once: `__init__.py` imports each on first use.
from gemkit.llm.chat_policy import LLMPolicy as LLMPolicy
from gemkit.llm.chat_policy import hermes_tool_calls as hermes_tool_calls
from gemkit.llm.client import ChatResponse as ChatResponse
from gemkit.llm.client import Choice as Choice
from gemkit.llm.client import LLMClient as LLMClient
from gemkit.llm.client import LLMConfigError as LLMConfigError
from gemkit.llm.client import LLMError as LLMError
from gemkit.llm.client import Message as Message
from gemkit.llm.client import ToolCall as ToolCall
from gemkit.llm.client import Usage as Usage
from gemkit.llm.token_counters import HeuristicTokenCounter as HeuristicTokenCounter
from gemkit.llm.token_counters import HFTokenCounter as HFTokenCounter
from gemkit.llm.token_counters import TokenCounter as TokenCounter
from gemkit.llm.token_counters import as_counter as as_counter
