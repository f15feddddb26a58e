"""LLM-written abstracts (paper App. C.3): summative or keyword, bottom-up, one layer at a time.

A layer-1 node is abstracted from its leaves' texts, a higher node from its children's abstracts,
so a layer is only started once the layer below is finished; within a layer, calls run
concurrently through :meth:`LLMClient.chat_many`. Every call goes through the client's SQLite
cache, so a build killed halfway resumes by re-running: finished abstracts come back from the
cache and only the rest are paid for.

An input that does not fit the model's context is cut evenly across the children (each child
keeps an equal share of the room; short children keep all of their text and leave their unused
share to the others) and the cut is recorded in the returned stats. Nothing is ever truncated
silently, by us or by a server.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from psirag.errors import InputError
from psirag.llm.base import GenerationParams
from psirag.llm.client import LLMClient
from psirag.prompts import (
    MAX_KEYWORDS,
    PROMPT_VERSION,
    SUMMARY_MAX_WORDS,
    keyword_prompt,
    summary_prompt,
)
from psirag.tree.model import Tree

AbstractKind = Literal["summary", "keywords"]

SUMMARY_PARAMS = GenerationParams(max_tokens=200, temperature=0.0, repeat_penalty=1.3)
"""Hard cap of 200 generated tokens for a <= 100-word summary (SPEC 1.6; penalty as paper C.2)."""
KEYWORD_PARAMS = GenerationParams(max_tokens=64, temperature=0.0, repeat_penalty=1.1)
"""Hard cap of 64 generated tokens for <= 20 phrases; a milder penalty, since phrases of a list
legitimately share words."""

STAGE = "abstracts"
TOKENS_PER_MESSAGE = 8
"""Chat-template tokens around each message (role markers, separators); generous for ChatML."""
MIN_TOKENS_PER_CHILD = 16
CUT_MARK = " …"

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.IGNORECASE | re.DOTALL)
_DECOR = "*_#`>\"' \t"
_SUMMARY_LABEL = re.compile(r"^[\s*_#>`]*(?:summary|abstract)[\s*_`]*:[\s*_`]*", re.IGNORECASE)
_KEYWORD_LABEL = re.compile(
    r"^[\s*_#>`]*(?:[\w ]{0,30}?\b)?(?:key ?words?|key ?phrases?|phrases|tags)[\s*_`]*:[\s*_`]*",
    re.IGNORECASE,
)
_FILLER = re.compile(
    r"^[\s*_]*(?:sure|certainly|of course|okay|ok)\s*[,!.:]\s*"
    r"|^[\s*_]*(?:here\s+(?:is|are)|below\s+(?:is|are)|the\s+following\s+(?:is|are))\b"
    r"[^\n]*?\b(?:summar\w*|key ?words?|key ?phrases?|phrases|list|abstract)\b[^\n]*?(?::|\n|$)\s*",
    re.IGNORECASE,
)
_BULLET = re.compile(r"^\s*(?:[-*•·]+|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
_MAX_PHRASE_WORDS = 10


def _strip_preamble(text: str, label: re.Pattern[str]) -> str:
    """Drop hidden reasoning, polite lead-ins and a leading label, in whatever order they come."""
    text = _THINK.sub("", text or "").strip()
    for _ in range(4):
        before = text
        text = _FILLER.sub("", text, count=1).strip()
        text = label.sub("", text, count=1).strip()
        if text == before:
            break
    return text


def clean_summary(text: str, *, truncated: bool = False) -> str:
    """One plain paragraph without "Summary:" or filler. A reply cut by the token cap loses its
    unfinished last sentence (when a finished one remains)."""
    body = _strip_preamble(text, _SUMMARY_LABEL)
    body = " ".join(body.split()).strip(" *_`")
    if truncated:
        ends = [m.end() for m in _SENTENCE_END.finditer(body)]
        if ends and ends[-1] < len(body) and ends[-1] >= len(body) // 3:
            body = body[: ends[-1]]
    return body


def clean_keywords(text: str, *, max_keywords: int = MAX_KEYWORDS, truncated: bool = False) -> str:
    """Comma-separated phrases: labels, bullets and filler removed, duplicates dropped (ignoring
    case), at most ``max_keywords``. A reply cut by the token cap loses its last, unfinished
    phrase."""
    body = _strip_preamble(text, _KEYWORD_LABEL)
    pieces: list[str] = []
    for line in body.splitlines():
        line = _KEYWORD_LABEL.sub("", _BULLET.sub("", line), count=1)
        pieces.extend(re.split(r"[,;，]", line))
    if truncated and len(pieces) > 1 and not body.rstrip().endswith((",", ";")):
        pieces = pieces[:-1]
    seen: set[str] = set()
    phrases: list[str] = []
    for piece in pieces:
        phrase = " ".join(_BULLET.sub("", piece).split()).strip(_DECOR).rstrip(".").strip(_DECOR)
        if not phrase or len(phrase.split()) > _MAX_PHRASE_WORDS:
            continue
        key = phrase.casefold()
        if key in seen or key in {"etc", "and more"}:
            continue
        seen.add(key)
        phrases.append(phrase)
        if len(phrases) >= max_keywords:
            break
    return ", ".join(phrases)


def _word_ends(text: str) -> list[int]:
    return [m.end() for m in re.finditer(r"\S+", text)]


def cut_to_tokens(text: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """The longest whole-word prefix of ``text`` that, with the cut mark, fits ``max_tokens``."""
    if count(text) <= max_tokens:
        return text
    ends = _word_ends(text)
    lo, hi = 0, len(ends)  # invariant: prefix of `lo` words fits (0 words always "fits")
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[: ends[mid - 1]] + CUT_MARK) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return (text[: ends[lo - 1]] if lo else "") + CUT_MARK


def fit_evenly(
    texts: Sequence[str], budget: int, count: Callable[[str], int]
) -> tuple[list[str], dict[str, int] | None]:
    """Make ``texts`` fit ``budget`` tokens in total by giving every text an equal share (water
    filling: texts shorter than their share keep everything and pass the rest on). Returns the
    texts and, when anything was cut, a record of the cut."""
    sizes = [count(t) for t in texts]
    total = sum(sizes)
    if total <= budget:
        return list(texts), None
    remaining = budget
    cap = 0
    order = sorted(range(len(texts)), key=lambda i: sizes[i])
    for rank, i in enumerate(order):
        share = remaining // (len(texts) - rank)
        if sizes[i] <= share:
            remaining -= sizes[i]
        else:
            cap = share
            break
    pairs = zip(texts, sizes, strict=True)
    out = [t if s <= cap else cut_to_tokens(t, cap, count) for t, s in pairs]
    after = sum(count(t) for t in out)
    return out, {
        "children": len(texts),
        "children_cut": sum(1 for s in sizes if s > cap),
        "tokens_before": total,
        "tokens_after": after,
        "cap_per_child": cap,
    }


def _first_line(text: str) -> str:
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    return " ".join(line.split(",")[0].split()[:8])


def _fallback(kind: AbstractKind, texts: Sequence[str], max_keywords: int) -> str:
    """Used (and recorded) when the model returns nothing usable: titles or first sentences."""
    if kind == "keywords":
        return clean_keywords(", ".join(_first_line(t) for t in texts), max_keywords=max_keywords)
    words: list[str] = []
    for text in texts:
        flat = " ".join(text.split())
        m = _SENTENCE_END.search(flat)
        words.extend((flat[: m.end()] if m else flat).split())
        if len(words) >= SUMMARY_MAX_WORDS:
            break
    return " ".join(words[:SUMMARY_MAX_WORDS])


def llm_abstracts(
    tree: Tree,
    leaf_texts: Sequence[str],
    client: LLMClient,
    *,
    kind: AbstractKind,
    context_tokens: int = 4096,
    count_tokens: Callable[[str], int] | None = None,
    progress: bool = False,
    max_keywords: int = MAX_KEYWORDS,
    summary_words: int = SUMMARY_MAX_WORDS,
    nodes: Sequence[int] | None = None,
    current: Sequence[str] | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """Write an abstract for every abstract node of ``tree``, bottom-up; or, for an index
    update, for the abstract ``nodes`` given only (parents after children, whatever their order
    here), reading the other children's abstracts from ``current`` (one per node id, as this
    returns), whose entries the result keeps for every node not rewritten.

    Returns ``(abstracts, stats)``: ``abstracts[node]`` for every node id (``""`` for leaves,
    whose text is ``leaf_texts``), and stats with counts of paid and cached calls, the cuts made
    to fit ``context_tokens`` (node, children, tokens before/after, per-child cap), nodes whose
    reply hit the token cap, nodes that fell back to titles/first sentences because the reply was
    empty, and nodes with a single abstract child that simply inherit its abstract.
    ``count_tokens`` defaults to the model's tokenizer, or a high estimate for HTTP models.
    """
    if kind not in ("summary", "keywords"):
        raise InputError(f"kind must be 'summary' or 'keywords', got {kind!r}")
    if len(leaf_texts) != tree.n_leaves:
        raise InputError(f"{len(leaf_texts)} leaf texts for a tree of {tree.n_leaves} leaves")
    if current is not None and len(current) != tree.n_nodes:
        raise InputError(f"{len(current)} current abstracts for a tree of {tree.n_nodes} nodes")
    todo = np.flatnonzero(tree.layer > 0) if nodes is None else np.asarray(nodes, dtype=np.int64)
    if todo.size and (
        todo.min() < 0 or todo.max() >= tree.n_nodes or (tree.layer[todo] == 0).any()
    ):
        raise InputError("nodes must be abstract nodes of the tree (layer 1 and above)")
    count = count_tokens or client.count_tokens
    params = SUMMARY_PARAMS if kind == "summary" else KEYWORD_PARAMS

    def make_prompt(texts: Sequence[str]) -> list[dict[str, str]]:
        if kind == "summary":
            return summary_prompt(texts, summary_words)
        return keyword_prompt(texts, max_keywords)

    empty = make_prompt([])
    overhead = sum(count(m["content"]) + TOKENS_PER_MESSAGE for m in empty)
    per_child = count("[00] ") + 2
    margin = 16 + context_tokens // 32
    budget = context_tokens - params.max_tokens - overhead - margin

    start = time.perf_counter()
    layers = tree.layer
    abstracts = list(current) if current is not None else [""] * tree.n_nodes
    wanted = np.zeros(tree.n_nodes, dtype=bool)
    wanted[todo] = True
    stats: dict[str, Any] = {
        "kind": kind,
        "prompt_version": PROMPT_VERSION,
        "model": client.model.id,
        "context_tokens": context_tokens,
        "input_budget_tokens": budget,
        "nodes": int(np.count_nonzero(wanted)),
        "calls": 0,
        "cached": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "inherited": 0,
        "cut_nodes": 0,
        "cuts": [],
        "length_capped": [],
        "fallback": [],
        "seconds": 0.0,
    }
    for layer in range(1, tree.depth + 1):
        jobs: list[tuple[int, list[str], list[dict[str, str]]]] = []
        for node in np.flatnonzero((layers == layer) & wanted).tolist():
            kids = [int(c) for c in tree.children(node)]
            if len(kids) == 1 and layers[kids[0]] > 0:
                abstracts[node] = abstracts[kids[0]]
                stats["inherited"] += 1
                continue
            texts = [leaf_texts[c] if layers[c] == 0 else abstracts[c] for c in kids]
            room = budget - per_child * len(texts)
            if room < MIN_TOKENS_PER_CHILD * len(texts):
                raise InputError(
                    f"node {node} has {len(texts)} children, too many to fit a "
                    f"{context_tokens}-token context with at least {MIN_TOKENS_PER_CHILD} tokens "
                    "each; raise context_tokens or lower max_children"
                )
            fitted, cut = fit_evenly(texts, room, count)
            if cut is not None:
                stats["cut_nodes"] += 1
                stats["cuts"].append({"node": node, "layer": layer, **cut})
            jobs.append((node, fitted, make_prompt(fitted)))
        if not jobs:
            continue
        results = client.chat_many([j[2] for j in jobs], params, stage=STAGE, progress=progress)
        for (node, fitted, _), result in zip(jobs, results, strict=True):
            stats["cached" if result.cached else "calls"] += 1
            stats["prompt_tokens"] += result.prompt_tokens
            stats["completion_tokens"] += result.completion_tokens
            capped = result.finish_reason == "length"
            if capped:
                stats["length_capped"].append(node)
            if kind == "summary":
                text = clean_summary(result.text, truncated=capped)
            else:
                text = clean_keywords(result.text, max_keywords=max_keywords, truncated=capped)
            if not text:
                text = _fallback(kind, fitted, max_keywords)
                stats["fallback"].append(node)
            abstracts[node] = text
    stats["seconds"] = time.perf_counter() - start
    return abstracts, stats


__all__ = [
    "KEYWORD_PARAMS",
    "SUMMARY_PARAMS",
    "clean_keywords",
    "clean_summary",
    "cut_to_tokens",
    "fit_evenly",
    "llm_abstracts",
]
