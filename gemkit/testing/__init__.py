"""Test helpers users can import too: a scripted and a replay OpenAI-protocol server.

`gemkit.testing.imports` reads the import graph of the three source folders and checks the
one-way rule (core <- envs <- synth <- cli); it is imported on its own, not from here.
"""

from gemkit.testing.openai_server import Fault, RecordedRequest, Reply, ScriptedOpenAIServer
from gemkit.testing.replay import Exchange, Replay, ReplayOpenAIServer, load_exchanges

__all__ = [
    "Exchange",
    "Fault",
    "RecordedRequest",
    "Replay",
    "ReplayOpenAIServer",
    "Reply",
    "ScriptedOpenAIServer",
    "load_exchanges",
]
