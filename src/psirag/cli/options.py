"""Every option that more than one command takes, declared once, and the argument types.

A command module calls ``add_llm_options(p, ...)``, ``add_index_argument(p)`` and so on instead
of spelling the flag out; choices come from the config's ``Literal`` types and defaults from the
config and settings dataclasses, so a new value or default changes one place. Bad values stop at
parsing with a usage message (exit 2): an :class:`argparse.ArgumentTypeError` becomes
``psirag CMD: error: argument --x: ...``, so ``--batch-size -1`` never reaches code that would
fail later with a ``ValueError`` traceback (the dataclasses check the same bounds again for
callers of the Python API). Only light modules are imported here: ``psirag --help`` and
``psirag search`` must start fast.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from psirag.config import (
    EXACT_DENSE_LEAVES,
    AbstractMode,
    IndexConfig,
    ProfileName,
    RoutingMode,
    SearchConfig,
    profile_config,
)
from psirag.devices import DEVICE_ENV, DEVICE_FORMS, parse_device
from psirag.errors import InputError
from psirag.http import HttpPolicy
from psirag.types import first_surrogate

Parser = argparse.ArgumentParser | argparse._ArgumentGroup

LLM_ENV = "PSIRAG_LLM"
"""Environment variable read when ``--llm`` is not given (ask, chat, summarize, eval, serve)."""


# ---------------------------------------------------------------------------- argument types
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


def _above_zero(value: str, expected: str, must: str) -> float:
    """``value`` as a number above 0; the errors say ``expected X, got ...`` and ``must be
    ..., got ...`` in the caller's words."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be {must}, got {value}")
    return number


def positive_float(value: str) -> float:
    """A number of seconds (or another amount) above 0."""
    return _above_zero(value, "a number", "positive")


def positive_seconds(value: str) -> float:
    return _above_zero(value, "seconds", "more than 0 seconds")


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


def max_children(value: str) -> int | None:
    """``--max-children``: a cap of at least 2, or none."""
    if value.lower() in ("none", "0", "off"):
        return None
    number = int(value)
    if number < 2:
        raise argparse.ArgumentTypeError("--max-children must be at least 2, or 'none'")
    return number


def tree_neighbors(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("--tree-neighbors must be at least 1")
    return number


def bucket_size(value: str) -> int:
    """``--tree-bucket-size``: at least two chunks per bucket."""
    number = int(value)
    if number < 2:
        raise argparse.ArgumentTypeError("--tree-bucket-size must be at least 2")
    return number


def parse_max_retrievals(value: str) -> int | str:
    """argparse type of ``--max-retrievals``: a count (0 or more) or ``auto``."""
    raw = value.strip().lower()
    if raw == "auto":
        return "auto"
    try:
        n = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number (0 or more) or 'auto', got {value!r}"
        ) from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {n}")
    return n


# ---------------------------------------------------------------------------- the index
def add_index_argument(p: Parser) -> None:
    """The positional index folder of every command that reads or changes an index."""
    p.add_argument("index", metavar="DIR", help="index folder (from psirag index)")


SERVER_KEY_ENV = "PSIRAG_API_KEY"
"""The key a client of a running ``psirag serve`` sends when ``--api-key`` is not given."""


def add_server_options(p: Parser) -> None:
    """``--server URL`` and ``--api-key KEY``: send a write to a running ``psirag serve``
    instead of loading the index here (the server applies it to the index in its memory)."""
    p.add_argument(
        "--server",
        metavar="URL",
        default=None,
        help="send the change to the psirag server at URL (which serves DIR) instead of "
        "loading the index here; it waits for the server's job and prints its summary",
    )
    p.add_argument(
        "--api-key",
        metavar="KEY",
        default=None,
        help=f"the server's API key with --server (default ${SERVER_KEY_ENV})",
    )


def device_name(value: str) -> str:
    """A device for local models (:func:`psirag.devices.parse_device`)."""
    try:
        return parse_device(value, "--device")
    except InputError as exc:
        message = f"unknown device {value!r}; expected {DEVICE_FORMS}"
        raise argparse.ArgumentTypeError(message) from exc


def _add_device_option(p: Parser) -> None:
    """``--device`` beside each ``--embedder``: where a local model runs (not saved)."""
    p.add_argument(
        "--device",
        type=device_name,
        default=None,
        metavar="DEVICE",
        help=f"where a local model runs: {DEVICE_FORMS} (default ${DEVICE_ENV}, else cpu); "
        "any but cpu runs it with torch (psirag[torch])",
    )


def add_build_embedder_option(p: Parser) -> None:
    """``--embedder SPEC`` and ``--device`` of the commands that build an index (index, eval)."""
    from psirag.config import DEFAULT_EMBEDDER

    p.add_argument(
        "--embedder",
        default=DEFAULT_EMBEDDER,
        metavar="SPEC",
        help="minilm (default), st:/path/to/model, openai:http://host/v1#model",
    )
    _add_device_option(p)


def add_query_embedder_option(p: Parser) -> None:
    """``--embedder SPEC`` for commands that query a saved index (search, ask, summarize, serve)."""
    from psirag.embed.endpoints import ALLOW_ENV

    p.add_argument(
        "--embedder",
        metavar="SPEC",
        default=None,
        help="query embedder (default: the index's own); an index built on an openai:<url> "
        f"endpoint needs this (or ${ALLOW_ENV}) to confirm where queries go",
    )
    _add_device_option(p)


def add_update_embedder_option(p: Parser) -> None:
    """``--embedder SPEC`` for commands that add text to a saved index (add, sync)."""
    p.add_argument(
        "--embedder",
        metavar="SPEC",
        help="embedder for the new text; must be the index's own (default: it)",
    )
    _add_device_option(p)


def add_abstracts_option(p: Parser, *, default: AbstractMode | None, help: str) -> None:
    p.add_argument("--abstracts", choices=get_args(AbstractMode), default=default, help=help)


def add_routing_option(p: Parser, *, default: RoutingMode | None, help: str) -> None:
    p.add_argument("--routing", choices=get_args(RoutingMode), default=default, help=help)


def add_max_children_option(p: Parser, *, help: str) -> None:
    p.add_argument(
        "--max-children",
        type=max_children,
        default=IndexConfig.max_children,
        metavar="N",
        help=help,
    )


def add_tree_mode_options(p: Parser) -> None:
    """``--tree-mode``, ``--tree-neighbors`` and ``--tree-bucket-size``, shared by ``psirag
    index`` and ``psirag eval``; the mode choices are the config's ``TreeMode`` values."""
    from psirag.tree.modes import TREE_MODES

    p.add_argument(
        "--tree-mode",
        choices=TREE_MODES,
        default=IndexConfig.tree_mode,
        help="exact: the paper's walk over all chunk pairs (an n x n matrix in memory); knn: "
        "each chunk's nearest neighbours plus the best joins between the pieces, O(n·k) memory; "
        "ann: the same from an HNSW graph, no O(n²) step (pip install 'psirag[ann]'); "
        "bucketed: one tree per k-means bucket, merged on top (paper App. E.1); auto (default): "
        "exact up to 30k chunks when the matrix fits in half the free memory, else knn up to "
        "30k, else bucketed",
    )
    p.add_argument(
        "--tree-neighbors",
        type=tree_neighbors,
        default=IndexConfig.tree_neighbors,
        metavar="K",
        help="neighbours per chunk in the knn and ann tree modes "
        f"(default {IndexConfig.tree_neighbors})",
    )
    p.add_argument(
        "--tree-bucket-size",
        type=bucket_size,
        default=IndexConfig.tree_bucket_size,
        metavar="N",
        help="most chunks per bucket in the bucketed tree mode "
        f"(default {IndexConfig.tree_bucket_size})",
    )


# ---------------------------------------------------------------------------- searching
def add_profile_option(p: Parser) -> None:
    """``--profile NAME``: the search preset (config.PROFILES) that other search flags refine."""
    p.add_argument(
        "--profile",
        choices=get_args(ProfileName),
        default="default",
        help="search preset: default (tree + BM25, wide beam, identical texts merged; on an "
        f"index of at most {EXACT_DENSE_LEAVES:,} leaves an exact flat scan stands in for the "
        "tree search), tree (the default with the tree search at every size) or paper (the "
        "paper's tree + BM25, beam 40)",
    )


def profile_from(args: argparse.Namespace) -> SearchConfig:
    return profile_config(getattr(args, "profile", "default"))


# ---------------------------------------------------------------------------- LLM and HTTP
def add_llm_options(p: Parser, *, help: str, cache: str | None = "--cache") -> None:
    """``--llm SPEC`` (what it is for, in ``help``) and its reply cache: ``--cache`` (off by
    default) for the commands that answer, ``--llm-cache`` (a default file, so a killed build
    resumes) for those that write abstracts, None for none."""
    p.add_argument("--llm", metavar="SPEC", default=None, help=help)
    if cache == "--cache":
        p.add_argument(
            "--cache", metavar="PATH", default=None, help="SQLite file caching LLM replies (off)"
        )
    elif cache == "--llm-cache":
        p.add_argument(
            "--llm-cache",
            metavar="PATH",
            default=None,
            help="SQLite response cache (default ~/.cache/psirag/llm-cache.sqlite); "
            "a killed build resumes from it",
        )


def add_http_options(p: Parser) -> None:
    """``--timeout`` and ``--retries`` for every command that calls an LLM or embedding server."""
    defaults = HttpPolicy()
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=defaults.timeout,
        metavar="SECONDS",
        help="overall limit on each LLM or embedding server call, retries and waits included "
        f"(default {defaults.timeout:g})",
    )
    p.add_argument(
        "--retries",
        type=nonnegative_int,
        default=defaults.retries,
        metavar="N",
        help="extra attempts after a timeout, a dropped connection, HTTP 429 or 5xx, with "
        f"backoff; a server's Retry-After is waited up to {defaults.max_wait:g} s "
        f"(default {defaults.retries})",
    )


def http_policy_from(args: argparse.Namespace) -> HttpPolicy:
    """The policy the parsed ``--timeout``/``--retries`` ask for (defaults where absent)."""
    defaults = HttpPolicy()
    return HttpPolicy(
        timeout=getattr(args, "timeout", defaults.timeout),
        retries=getattr(args, "retries", defaults.retries),
    )


# ---------------------------------------------------------------------------- the agent
def add_max_retrievals_option(p: Parser, *, default: int | str, help: str) -> None:
    p.add_argument(
        "--max-retrievals", type=parse_max_retrievals, default=default, metavar="N|auto", help=help
    )


def add_answer_check_option(p: Parser, *, help: str) -> None:
    p.add_argument("--no-answer-check", dest="answer_check", action="store_false", help=help)


def add_names_check_option(p: Parser, *, help: str) -> None:
    from psirag.agent.loop import NamesCheck

    p.add_argument("--names-check", choices=get_args(NamesCheck), default="lookup", help=help)


# ---------------------------------------------------------------------------- settings classes
@dataclass(frozen=True)
class Flag:
    """How one field of a settings dataclass appears on the command line; its default is the
    field's. ``to_field`` turns the parsed value into the field's (a list into a tuple)."""

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    action: str | None = None
    to_field: Callable[[Any], Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def add_settings_options(
    p: Parser, cls: type, flags: dict[str, Flag], names: Sequence[str]
) -> None:
    """One option per field in ``names`` of the dataclass ``cls`` (dest: the field's name,
    default: its default; ``{default}`` in a help is filled with it, format spec and all)."""
    defaults: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        factory: Any = f.default_factory
        defaults[f.name] = factory() if f.default is dataclasses.MISSING else f.default
    for name in names:
        flag = flags[name]
        default = defaults[name]
        kwargs: dict[str, Any] = {"dest": name, **flag.extra}
        if flag.action is not None:
            kwargs["action"] = flag.action
        if flag.action == "append":
            kwargs["default"] = list(default)
        elif flag.action != "store_true":
            kwargs["default"] = default
        if flag.type is not None:
            kwargs["type"] = flag.type
        if flag.metavar is not None:
            kwargs["metavar"] = flag.metavar
        p.add_argument(flag.name, help=flag.help.format(default=default), **kwargs)


def settings_values(
    args: argparse.Namespace, flags: dict[str, Flag], names: Sequence[str]
) -> dict[str, Any]:
    """The fields ``names`` as the parsed options give them, for ``cls(**values)``."""
    values: dict[str, Any] = {}
    for name in names:
        value = getattr(args, name)
        convert = flags[name].to_field
        values[name] = convert(value) if convert is not None else value
    return values


__all__ = [
    "LLM_ENV",
    "SERVER_KEY_ENV",
    "Flag",
    "add_abstracts_option",
    "add_answer_check_option",
    "add_build_embedder_option",
    "add_http_options",
    "add_index_argument",
    "add_llm_options",
    "add_max_children_option",
    "add_max_retrievals_option",
    "add_names_check_option",
    "add_profile_option",
    "add_query_embedder_option",
    "add_routing_option",
    "add_server_options",
    "add_settings_options",
    "add_tree_mode_options",
    "add_update_embedder_option",
    "bucket_size",
    "device_name",
    "http_policy_from",
    "max_children",
    "nonnegative_int",
    "parse_max_retrievals",
    "positive_float",
    "positive_int",
    "profile_from",
    "settings_values",
    "text",
    "tree_neighbors",
]
