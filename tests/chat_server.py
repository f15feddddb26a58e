"""Old import path of the scripted server, kept so that tests written against it still run.

There is one scripted OpenAI-compatible server, :class:`psirag.llm.testing.FakeOpenAIServer`
(chat and embeddings, failure modes); import it from there.
"""

from psirag.llm.testing import FakeOpenAIServer as ChatServer

__all__ = ["ChatServer"]
