"""Sentence-aware chunking: pure functions over strings, no I/O and no tokenizer downloads.

SPEC 1.1: chunks of about ``max_tokens`` tokens, cut at sentence ends and never mid-sentence,
keeping punctuation and line breaks. Every chunk is a character span of the original text, so a
leaf can always be traced back to where it came from. All functions run in time roughly linear in
the length of the text, so a pathological input (megabytes on one line) cannot stall a build.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from psirag.errors import InputError

TokenCounter = Callable[[str], int]

WORD_PIECE_CHARS = 10
"""Characters per estimated word piece: a longer run of letters/digits counts as several tokens,
as a word-piece tokenizer would split it, so a huge word without spaces still exceeds a budget."""

_TOKEN = re.compile(rf"\w{{1,{WORD_PIECE_CHARS}}}|[^\w\s]")

_CLOSERS = "\"'\u2019\u201d\u00bb)\\]}"
# A sentence ends after a run of . ! ? (plus closing quotes/brackets) that is followed by
# whitespace, or at a blank line. Runs are matched possessively and the "followed by whitespace"
# test is done by the caller, so each run is scanned once even in megabytes of punctuation.
_BOUNDARY = re.compile(
    rf"(?P<end>[.!?]++[{_CLOSERS}]*+)"  # candidate sentence end: keep the punctuation
    r"|\n[^\S\n]*\n"  # paragraph break: a line holding only whitespace
)
_PROBE_CHARS_PER_TOKEN = 64
"""Sentences longer than this many characters per budget token are first probed by a prefix."""

_NON_SPACE = re.compile(r"\S")
_LAST_SPACE = re.compile(r".*\s", re.DOTALL)


def count_tokens(text: str) -> int:
    """Estimate word-piece tokens without a tokenizer: words (split every 10 characters) plus
    punctuation marks. Close to MiniLM's count on English prose, and cheap."""
    return len(_TOKEN.findall(text))


def _strip_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """Shrink ``[start, end)`` to exclude surrounding whitespace; None if nothing is left."""
    m = _NON_SPACE.search(text, start, end)
    if m is None:
        return None
    start = m.start()
    while text[end - 1].isspace():
        end -= 1
    return start, end


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of ``text``, without surrounding whitespace.

    A sentence ends after ``.``, ``!`` or ``?`` (with any closing quotes or brackets) followed by
    whitespace, or at a blank line. A single newline is not a boundary, because hard-wrapped text
    breaks lines in mid-sentence.
    """
    spans: list[tuple[int, int]] = []
    start = 0
    n = len(text)
    for m in _BOUNDARY.finditer(text):
        if m.group("end") is None:
            end = m.start()
        elif m.end() < n and text[m.end()].isspace():
            end = m.end()
        else:
            continue  # "3.14", "e.g.x", "?!" at the very end: no boundary (or the text's own end)
        span = _strip_span(text, start, end)
        if span is not None:
            spans.append(span)
        start = m.end()
    span = _strip_span(text, start, len(text))
    if span is not None:
        spans.append(span)
    return spans


def _cut_at_space(text: str, start: int, cut: int, end: int) -> int:
    """Move ``cut`` back to the last whitespace after ``start`` so no word is cut; keep ``cut`` if
    the piece is one single word (it must then be cut by characters)."""
    if cut >= end or text[cut - 1].isspace() or text[cut].isspace():
        return cut
    m = _LAST_SPACE.match(text, start, cut)
    return cut if m is None else m.end() - 1


def _split_long(
    text: str, start: int, end: int, max_tokens: int, count: TokenCounter, chars_per_token: float
) -> Iterator[tuple[int, int, int]]:
    """Split one sentence longer than ``max_tokens`` into ``(start, end, tokens)`` pieces within
    budget, at whitespace where possible, else by characters.

    Each piece's length is guessed from the local characters-per-token ratio and corrected by a
    few measurements, so the cost is a small multiple of one ``count`` over the sentence, whatever
    the number of words (counting word by word would be a million calls on a 5 MB line).
    """
    pos = start
    while pos < end:
        m = _NON_SPACE.search(text, pos, end)
        if m is None:
            return
        pos = m.start()
        fit: tuple[int, int] | None = None  # longest measured piece within budget: (end, tokens)
        too_long = end - pos + 1  # shortest measured length over budget
        length = max(1, int(max_tokens * chars_per_token))
        for _ in range(8):
            length = min(length, end - pos)
            cut = _cut_at_space(text, pos, pos + length, end)
            stripped = _strip_span(text, pos, cut)
            assert stripped is not None  # text[pos] is not whitespace
            piece_end = stripped[1]
            n = count(text[pos:piece_end])
            if n <= max_tokens:
                if fit is None or piece_end > fit[0]:
                    fit = (piece_end, n)
                if pos + length >= end or n >= max_tokens * 0.9:
                    break
                grown = int((piece_end - pos) * max_tokens / max(n, 1))
                length = max(length + 1, min(grown, too_long - 1))
                if length >= too_long:
                    break
            else:
                too_long = min(too_long, cut - pos)
                shrunk = int((piece_end - pos) * max_tokens / n)
                length = max(1, min(shrunk, too_long - 1))
                if fit is not None and pos + length <= fit[0]:
                    break
        while fit is None:  # only for odd counters: keep halving, one character always goes
            length = max(1, length // 2)
            piece = _strip_span(text, pos, pos + length)
            assert piece is not None
            n = count(text[pos : piece[1]])
            if n <= max_tokens or length == 1:
                fit = (piece[1], n)
        piece_end_pos, n = fit
        chars_per_token = max((piece_end_pos - pos) / max(n, 1), 1e-3)
        yield pos, piece_end_pos, n
        pos = piece_end_pos


def chunk_spans(
    text: str, max_tokens: int = 100, count: TokenCounter = count_tokens
) -> list[tuple[int, int]]:
    """Character spans of chunks of ``text``: whole sentences packed greedily up to ``max_tokens``.

    A sentence is cut only if it alone exceeds the budget: at whitespace, and a single word
    longer than the budget by characters. The budget is checked on the sum of the pieces'
    counts, which equals the count of the joined text for whitespace-separated estimates like
    :func:`count_tokens` (and over-estimates it where a word was cut).
    """
    if max_tokens < 1:
        raise InputError(f"max_tokens must be positive, got {max_tokens}")
    probe = max_tokens * _PROBE_CHARS_PER_TOKEN
    pieces: list[tuple[int, int, int]] = []
    for start, end in sentence_spans(text):
        if end - start > probe:
            # A huge sentence: a prefix usually proves it too long, sparing a count of all of it.
            n = count(text[start : start + probe])
            if n > max_tokens:
                pieces.extend(_split_long(text, start, end, max_tokens, count, probe / n))
                continue
        n = count(text[start:end])
        if n <= max_tokens:
            pieces.append((start, end, n))
        else:
            ratio = (end - start) / n
            pieces.extend(_split_long(text, start, end, max_tokens, count, ratio))

    chunks: list[tuple[int, int]] = []
    cur_start = cur_end = cur_tokens = -1
    for start, end, n in pieces:
        if cur_start >= 0 and cur_tokens + n <= max_tokens:
            cur_end, cur_tokens = end, cur_tokens + n
            continue
        if cur_start >= 0:
            chunks.append((cur_start, cur_end))
        cur_start, cur_end, cur_tokens = start, end, n
    if cur_start >= 0:
        chunks.append((cur_start, cur_end))
    return chunks


__all__ = ["WORD_PIECE_CHARS", "TokenCounter", "chunk_spans", "count_tokens", "sentence_spans"]
