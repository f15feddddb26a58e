"""The answer of a streamed ask or chat, sent while the model writes it.

The agent reads a model reply only once it is whole, and it may still turn down an answer it
has read: a check sends the model back to the documents, the last marker of a reply wins, an
over-long answer counts as none. So the answer text sent early is provisional, and the stream
says so when it was wrong. The rules (:class:`AnswerTap`):

- While the model call being written is recognisably an answer (a line that starts with
  ``Answer:``, the format the prompt asks for), its answer text is sent as it arrives, read as
  the agent reads it (:func:`psirag.agent.parsing.parse_reply`), less a tail that may still
  change: the last word (it may be half written, or a word that goes with the citation
  labels) and anything from a ``[`` or ``(`` on (the labels, which the reply renumbers).
- At the end of the episode, if the text sent so far is how the final reply starts, the rest of
  the reply follows: the streamed text is then exactly the reply that was not streamed.
- Otherwise (the agent called the model again after an answer had begun to stream, or the reply
  turned out not to be that answer), a *revision*: a marked break, then the whole final reply.
  The reply is the text after the last revision mark (:data:`REVISED`); the OpenAI chunk, the
  Ollama line and the ``/ask`` event that start a revision say so in a field of their own.
- An error after the answer began to stream ends the stream with the error, as before: the
  text sent early is then no answer.
"""

from __future__ import annotations

import re

from psirag.agent.loop import MAX_ANSWER_CHARS
from psirag.agent.parsing import parse_reply

REVISED = "\n\n(revised after checking the documents)\n\n"
"""Put in a chat's streamed text before the final reply when the answer streamed so far was
not the one the agent accepted: the reply is what follows the last such mark."""

_LABEL_START = re.compile(r"[\[(]")
_LAST_WORD = re.compile(r"\S+\s*$")
_TRAILING = " \t\n,;:.*_`\"'"


def settled_answer(reply: str, max_chars: int = MAX_ANSWER_CHARS) -> str | None:
    """The part of the answer in ``reply`` (a model reply, maybe still being written) that more
    text cannot change, as the agent would read it; None when ``reply`` is not (yet) an answer
    in the asked-for format."""
    parsed = parse_reply(reply)
    if parsed.action != "answer" or not parsed.well_formed:
        return None
    text = parsed.argument
    if len(text) > max_chars:
        return None  # the agent reads an over-long answer as no answer
    label = _LABEL_START.search(text)
    if label is not None:
        text = text[: label.start()]
    last = _LAST_WORD.search(text)
    if last is not None:
        text = text[: last.start()]
    return text.rstrip(_TRAILING)


class AnswerTap:
    """Follows one episode's live model output (``feed``) and says what answer text to send
    now, then (``finish``) how the final text follows what was sent."""

    def __init__(self, max_chars: int = MAX_ANSWER_CHARS) -> None:
        self.max_chars = max_chars
        self.call: int | None = None
        self.reply = ""
        """The model call's text so far."""
        self.sent = ""
        """The provisional answer text sent so far."""
        self.stale = False
        """The text sent is no longer the answer being written: nothing more is sent early."""

    def feed(self, call: int, piece: str) -> str:
        """A piece of model call ``call`` as written; returns the answer text to send now."""
        if call != self.call:
            self.call, self.reply = call, ""
            if self.sent:  # the agent asked the model again: that answer was not the last word
                self.stale = True
        self.reply += piece
        if self.stale:
            return ""
        settled = settled_answer(self.reply, self.max_chars)
        if settled is None or not settled.startswith(self.sent):
            self.stale = bool(self.sent)
            return ""
        new, self.sent = settled[len(self.sent) :], settled
        return new

    def finish(self, final: str) -> tuple[str, bool]:
        """What to send after the provisional text so that the stream ends with ``final``,
        and whether it is a revision (the whole of ``final``, after a revision mark)."""
        if final.startswith(self.sent):
            return final[len(self.sent) :], False
        return final, True


__all__ = ["REVISED", "AnswerTap", "settled_answer"]
