"""Test helpers users can import too: a scripted OpenAI-protocol server."""

from gemkit.testing.openai_server import Fault, RecordedRequest, Reply, ScriptedOpenAIServer

__all__ = ["Fault", "RecordedRequest", "Reply", "ScriptedOpenAIServer"]
