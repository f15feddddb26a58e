"""The scripted OpenAI-compatible server on 127.0.0.1 and the scripts the tests give it.

There is one server class, :class:`psirag.llm.testing.FakeOpenAIServer` (chat and embeddings,
recorded requests, failure modes); it stays in the package because the benchmarks drive it too.
:class:`ScriptedServer` adds the conveniences of the agent tests (a list of replies, a responder
to switch to, the messages of a recorded request); :class:`ScriptedLLM` is the responder of the
server tests.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

from psirag.http import HttpPolicy
from psirag.llm import LLMClient, OpenAIChat
from psirag.llm.testing import EMBED_DIM, FakeOpenAIServer, Reply, bag_of_words, echo_prompt

NO_RETRY = HttpPolicy(retries=0)
"""A scripted server that runs out of replies answers 500: fail at once, not after retries."""


class ScriptedServer(FakeOpenAIServer):
    """Replies with ``respond(body)`` when set, else replays ``script`` one reply per request
    (a 500 once the script runs out), and records the requests."""

    def __init__(self) -> None:
        self.replies: list[str] = []
        self.respond: Callable[[dict[str, Any]], str] | None = None
        super().__init__(self._reply)

    def _reply(self, body: dict[str, Any]) -> str | None:
        if self.respond is not None:
            return self.respond(body)
        return self.replies.pop(0) if self.replies else None

    @property
    def spec(self) -> str:
        return f"openai:{self.base_url}#scripted"

    def script(self, *replies: str) -> None:  # type: ignore[override]
        self.replies = list(replies)

    def last_user(self, i: int) -> str:
        """The last user message of request ``i``: the turn the model was answering."""
        users = [m["content"] for m in self.requests[i]["messages"] if m["role"] == "user"]
        return users[-1]

    def user(self, i: int) -> str:
        """The user message of request ``i`` (the last one, for the reader's conversation)."""
        return self.last_user(i)

    def system(self, i: int) -> str:
        return self.requests[i]["messages"][0]["content"]


def client_for(server: FakeOpenAIServer, **chat_options: Any) -> LLMClient:
    """An LLM client of the scripted server that never retries."""
    return LLMClient(OpenAIChat(server.base_url, "scripted", http=NO_RETRY, **chat_options), None)


LLM_SECRET = "sk-test-NEVER-SHOW-7f3a9c"
"""The LLM's API key given to the server process: it must appear in no response and no log."""

RETRIEVE_REPLY = (
    "Thought: Etna is a volcano; I need to know where it is.\nRetrieve: Mount Etna Sicily"
)
ANSWER_REPLY = (
    "Thought: The documents say Mount Etna is on the east coast of Sicily.\nAnswer: Sicily"
)
SUMMARY_REPLY = "Volcanoes such as Etna and Vesuvius erupt lava and ash."


def cite_sicily(messages: list[dict[str, Any]]) -> str:
    """:data:`ANSWER_REPLY` ending with the labels of the documents of the last user turn
    that say "Sicily", as a model cites its support (none: no labels)."""
    users = [str(m.get("content", "")) for m in messages if m.get("role") == "user"]
    blocks = re.split(r"(?m)^\[(\d+)\] ", users[-1] if users else "")
    labels = [blocks[i] for i in range(1, len(blocks) - 1, 2) if "Sicily" in blocks[i + 1]]
    return ANSWER_REPLY + "".join(f" [{n}]" for n in labels[:2])


class ScriptedLLM:
    """Replies of the fake OpenAI server for the agent and the summarizer, with an optional
    delay and a count of calls in flight (to check the server's concurrency cap)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.delay = 0.0

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body.get("messages") or []
        text = "\n".join(str(m.get("content", "")) for m in messages)
        if "slowly" in text:  # for the timeout tests; not counted in flight
            time.sleep(6.0)
            return ANSWER_REPLY
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:
                time.sleep(self.delay)
            if "Excerpts:" in text:
                return SUMMARY_REPLY
            if RETRIEVE_REPLY.splitlines()[1] in text:
                return cite_sicily(messages)
            return RETRIEVE_REPLY
        finally:
            with self.lock:
                self.in_flight -= 1


__all__ = [
    "ANSWER_REPLY",
    "EMBED_DIM",
    "LLM_SECRET",
    "NO_RETRY",
    "RETRIEVE_REPLY",
    "SUMMARY_REPLY",
    "FakeOpenAIServer",
    "Reply",
    "ScriptedLLM",
    "ScriptedServer",
    "bag_of_words",
    "cite_sicily",
    "client_for",
    "echo_prompt",
]
