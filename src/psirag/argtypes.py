"""Typed command-line arguments: bad values stop at parsing with a usage message (exit 2).

``argparse`` calls these as ``type=``; an :class:`argparse.ArgumentTypeError` becomes
``psirag CMD: error: argument --x: ...``, so ``--batch-size -1`` or ``--max-tokens 0`` never
reaches code that would fail later with a ``ValueError`` traceback. The config dataclasses and
the agent check the same bounds again for callers of the Python API.
"""

from __future__ import annotations

import argparse

_SURROGATES = range(0xD800, 0xE000)


def _integer(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None


def positive_int(value: str) -> int:
    """An integer of at least 1."""
    number = _integer(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {number}")
    return number


def nonnegative_int(value: str) -> int:
    """An integer of at least 0."""
    number = _integer(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {number}")
    return number


def first_surrogate(text: str) -> int | None:
    """Position of the first lone surrogate in ``text`` (a byte that was not UTF-8, as Python
    decodes such command-line bytes, or a ``\\ud800`` escape in JSON), or None."""
    for position, char in enumerate(text):
        if ord(char) in _SURROGATES:
            return position
    return None


def text(value: str) -> str:
    """Text that can be tokenized: a command-line argument holding bytes that are not UTF-8
    (which Python keeps as lone surrogates) is refused, naming the position."""
    position = first_surrogate(value)
    if position is not None:
        code = ord(value[position])
        byte = f"byte 0x{code - 0xDC00:02x}" if code >= 0xDC80 else f"U+{code:04X}"
        raise argparse.ArgumentTypeError(
            f"holds a {byte} at character {position} that is not UTF-8 text; pass the text in UTF-8"
        )
    return value


__all__ = ["first_surrogate", "nonnegative_int", "positive_int", "text"]
