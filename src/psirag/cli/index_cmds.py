"""``psirag index``, ``search``, ``inspect`` and ``demo``.

Every command is a thin shell over the Python API (:class:`psirag.Index`). Problems the user can
fix are printed as one line on stderr with exit status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from psirag.cli.common import abstract_llm, eprint
from psirag.cli.options import (
    add_abstracts_option,
    add_build_embedder_option,
    add_http_options,
    add_index_argument,
    add_llm_options,
    add_max_children_option,
    add_profile_option,
    add_query_embedder_option,
    add_routing_option,
    add_tree_mode_options,
    http_policy_from,
    nonnegative_int,
    positive_int,
    profile_from,
    text,
)
from psirag.config import PROFILES, IndexConfig, SearchConfig
from psirag.errors import PsiragError
from psirag.schemas import INDEX_SCHEMA, INSPECT_SCHEMA, SEARCH_SCHEMA
from psirag.storage_format import ROOT_TEXT_CHARS
from psirag.summary import inspect_summary, saved_summary

if TYPE_CHECKING:
    from psirag.http import HttpPolicy


def register(sub: Any) -> None:
    """Add ``index``, ``search``, ``inspect`` and ``demo`` to the ``psirag`` parser."""
    p = sub.add_parser("index", help="chunk, embed and index a corpus into a folder")
    p.add_argument("paths", nargs="+", metavar="PATH", help=".txt/.md files, folders, .json/.jsonl")
    p.add_argument("--out", required=True, metavar="DIR", help="index folder to write")
    add_build_embedder_option(p)
    p.add_argument("--chunk-tokens", type=positive_int, default=IndexConfig.chunk_tokens)
    p.add_argument(
        "--split",
        action="store_true",
        help="split JSON records into ~chunk-tokens chunks (default: one leaf each)",
    )
    p.add_argument(
        "--tree-per-document",
        action="store_true",
        help="one tree per document (single-document setting) instead of one tree",
    )
    add_max_children_option(p, help="rebalancing bound on children per node ('none': off)")
    add_tree_mode_options(p)
    add_abstracts_option(
        p,
        default=IndexConfig.abstracts,
        help="LLM-free keywords (default), LLM summaries or keyword lists (need --llm), none",
    )
    add_llm_options(
        p,
        help="LLM for --abstracts llm-*: openai:<url>#<model>, llamacpp:<file>, local",
        cache="--llm-cache",
    )
    p.add_argument("--context-tokens", type=positive_int, default=IndexConfig.context_tokens)
    add_routing_option(
        p, default=IndexConfig.routing, help="routing embedding of inner nodes (see SPEC 1.6)"
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=IndexConfig.batch_size,
        help="texts per embedding batch (default: the backend's: ONNX MiniLM 8, torch 16)",
    )
    p.add_argument(
        "--skip-bad-files",
        action="store_true",
        help="skip unreadable or malformed files with a warning instead of failing",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run embedding, bucket trees and LLM abstracts on a Ray cluster (psirag[ray]): "
        "host:port of a running one, or no ADDRESS for RAY_ADDRESS or else a new local one",
    )
    p.add_argument(
        "--ray-cpus", type=positive_int, default=None, metavar="N", help="CPUs of a local --ray"
    )
    add_http_options(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run_index)

    p = sub.add_parser("search", help="hybrid tree + BM25 search of an index")
    add_index_argument(p)
    p.add_argument("query", type=text)
    _search_arguments(p)
    add_query_embedder_option(p)
    add_http_options(p)
    p.add_argument("--json", action="store_true", help=f"print JSON ({SEARCH_SCHEMA})")
    p.set_defaults(func=run_search)

    p = sub.add_parser("inspect", help="describe an index, or one node of its tree")
    add_index_argument(p)
    p.add_argument("--node", type=nonnegative_int, metavar="ID", help="show this node")
    p.add_argument(
        "--verify",
        action="store_true",
        help="check the sha256 of every file (default: sizes and the manifest's hash only)",
    )
    p.add_argument("--json", action="store_true", help=f"print JSON ({INSPECT_SCHEMA})")
    p.set_defaults(func=run_inspect)

    p = sub.add_parser("demo", help="index the Python language reference and search it")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="where to keep the demo index (default: ~/.cache/psirag/demo-index)",
    )
    p.add_argument("--rebuild", action="store_true", help="rebuild even if the index exists")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run_demo)


def _search_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-k", type=positive_int, default=SearchConfig.k, help="passages to return (default 5)"
    )
    add_profile_option(p)
    p.add_argument(
        "--beam",
        type=positive_int,
        default=None,
        help="nodes kept per tree layer (default: the profile's, "
        f"{PROFILES['default'].beam} or {PROFILES['paper'].beam})",
    )
    p.add_argument(
        "--candidates",
        type=positive_int,
        default=None,
        help="passages each retriever brings to fusion (default: the profile's, 10)",
    )
    p.add_argument(
        "--doc", action="append", metavar="ID", help="search only this document (repeatable)"
    )
    p.add_argument("--no-tree", action="store_true", help="BM25 only")
    p.add_argument(
        "--no-bm25",
        action="store_true",
        help="the dense list only (the tree search, or its exact flat stand-in on a small index)",
    )
    p.add_argument(
        "--lists",
        metavar="NAMES",
        help="the candidate lists to fuse, comma-separated, in fusion order (tree, dense, bm25, "
        "hnsw, or any registered list; default: the profile's, refined by --no-tree/--no-bm25)",
    )
    p.add_argument(
        "--reranker",
        metavar="PATH",
        help="local cross-encoder model folder: rerank the union instead of RRF",
    )


def search_config_from(args: argparse.Namespace) -> SearchConfig:
    base = profile_from(args)
    if getattr(args, "lists", None):
        from psirag.retrieval.lists import check_lists

        base = base.with_(lists=check_lists(args.lists))
    return base.with_(
        k=args.k,
        beam=base.beam if args.beam is None else args.beam,
        candidates=base.candidates if args.candidates is None else args.candidates,
        use_tree=base.use_tree and not args.no_tree,
        use_bm25=base.use_bm25 and not args.no_bm25,
        fusion="rerank" if args.reranker else base.fusion,
        reranker=args.reranker or base.reranker,
    )


# ---------------------------------------------------------------------------- index
def run_index(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    from psirag.embed import load_embedder
    from psirag.index import Index
    from psirag.storage import check_target

    out = stdout or sys.stdout
    check_target(args.out, args.paths)  # before the build: never hours of work, then a refusal
    config = IndexConfig(
        embedder=args.embedder,
        chunk_tokens=args.chunk_tokens,
        split_records=args.split,
        tree_per_document=args.tree_per_document,
        max_children=args.max_children,
        tree_mode=args.tree_mode,
        tree_neighbors=args.tree_neighbors,
        tree_bucket_size=args.tree_bucket_size,
        abstracts=args.abstracts,
        routing=args.routing,
        batch_size=args.batch_size,
        llm=args.llm,
        context_tokens=args.context_tokens,
    )
    progress = not args.quiet
    started = time.perf_counter()
    http = http_policy_from(args)
    batch = _ray_backend(args, config, http, progress)  # first: a bad address writes nothing
    try:
        embedder = load_embedder(config.embedder, batch_size=config.batch_size, http=http)
        llm = abstract_llm(config, args.llm_cache, http)
        try:
            index = Index.build(
                args.paths,
                config,
                embedder=embedder,
                progress=progress,
                report=eprint if progress else _warn_only,
                on_bad_file="skip" if args.skip_bad_files else "fail",
                llm=llm,
                batch=batch,
            )
        finally:
            if llm is not None:
                llm.close()
    finally:
        if batch is not None:
            batch.close()
    t0 = time.perf_counter()
    index.save(args.out)
    index.stats.seconds["save"] = time.perf_counter() - t0
    total = time.perf_counter() - started
    summary = {
        "schema": INDEX_SCHEMA,
        "index": str(args.out),
        **index.describe()["counts"],
        "tree_mode": index.stats.tree_mode,
        "seconds": {k: round(v, 3) for k, v in index.stats.seconds.items()},
        "total_seconds": round(total, 3),
        "llm_abstracts": index.stats.llm or None,
    }
    if args.json:
        print(json.dumps(summary, indent=2), file=out)
    else:
        print(f"indexed {summary['documents']:,} documents into {args.out}", file=out)
        print(f"  chunks:           {summary['chunks']:,}", file=out)
        print(f"  nodes per layer:  {_layers(summary['nodes_per_layer'])}", file=out)
        if summary["tree_mode"] == "knn":
            print(f"  tree mode:        knn ({config.tree_neighbors} neighbours)", file=out)
        if summary["truncated_chunks"]:
            print(f"  truncated chunks: {summary['truncated_chunks']:,}", file=out)
        if index.stats.llm:
            paid = index.stats.llm
            print(
                f"  LLM abstracts:     {paid['calls']:,} calls paid, {paid['cached']:,} from the "
                f"cache, {paid['cut_nodes']:,} inputs cut evenly to fit {paid['context_tokens']} "
                "tokens",
                file=out,
            )
        stages = ", ".join(f"{k} {v:.1f}s" for k, v in summary["seconds"].items())
        print(f"  seconds:          {stages} (total {total:.1f}s)", file=out)
    return 0


def _ray_backend(
    args: argparse.Namespace, config: IndexConfig, http: HttpPolicy, progress: bool
) -> Any:
    """The connected :class:`psirag.ray_backend.RayBackend` for ``--ray``, or None."""
    if getattr(args, "ray", None) is None:
        return None
    from psirag.ray_backend import RayBackend, RayOptions

    options = RayOptions(address=args.ray or None, num_cpus=args.ray_cpus)
    backend = RayBackend(
        config.embedder,
        batch_size=config.batch_size,
        http=http,
        llm_spec=config.llm,
        options=options,
        progress=progress,
    )
    return backend.connect()


def _warn_only(message: str) -> None:
    if message.startswith("warning") or "skipp" in message:
        eprint(message)


def _layers(sizes: Sequence[int]) -> str:
    return ", ".join(f"L{i}: {n:,}" for i, n in enumerate(sizes))


# ---------------------------------------------------------------------------- search
def run_search(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    from psirag.embed.endpoints import confirm_index_embedder, prefetch_index_embedder
    from psirag.embed.factory import discard_prefetched
    from psirag.index import Index

    out = stdout or sys.stdout
    config = search_config_from(args)
    if not args.embedder:
        prefetch_index_embedder(args.index)  # the model loads while the index does
    try:
        index = Index.load(args.index)
        confirm_index_embedder(index, args.embedder, http_policy_from(args))
        passages = index.search(args.query, config=config, docs=args.doc)
    finally:
        discard_prefetched()
    if args.json:
        payload = {
            "schema": SEARCH_SCHEMA,
            "query": args.query,
            "k": config.k,
            "passages": [p.to_dict() for p in passages],
        }
        print(json.dumps(payload, indent=2, ensure_ascii=False), file=out)
        return 0
    if not passages:
        print("no passages found", file=out)
    for rank, p in enumerate(passages, start=1):
        print_passage(p, rank, out)
    return 0


def print_passage(p: Any, rank: int, out: TextIO, width: int = 300) -> None:
    src = p.source
    title = f" {src.title!r}" if src.title else ""
    print(
        f"[{rank}] score {p.score:.4f}  doc {src.document}{title}  chunk {src.chunk}  "
        f"chars {src.start}-{src.end}  id {p.id}",
        file=out,
    )
    text = " ".join(p.text.split())
    print(f"    {text[:width]}{'...' if len(text) > width else ''}", file=out)


# ---------------------------------------------------------------------------- inspect
def run_inspect(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    from psirag.index import Index

    out = stdout or sys.stdout
    verify = bool(getattr(args, "verify", False))
    if args.node is None:
        # the manifest holds the summary (since format 3): nothing to load but the manifest
        saved = saved_summary(args.index, verify=verify)
        if saved is not None:
            return _print_summary(args, *saved, out=out)
    index = Index.load(args.index, verify="full" if verify else "size")
    tree = index.tree
    if args.node is not None:
        payload = _describe_node(index, args.node)
        if args.json:
            print(
                json.dumps(
                    {"schema": INSPECT_SCHEMA, "node": payload}, indent=2, ensure_ascii=False
                ),
                file=out,
            )
            return 0
        kind = "leaf" if payload["layer"] == 0 else "abstract node"
        print(
            f"node {payload['id']}: {kind} at layer {payload['layer']}, "
            f"parent {payload['parent']}, {payload['leaf_count']:,} leaves below",
            file=out,
        )
        if payload["layer"] == 0:
            print(f"  source: {payload['source']}", file=out)
        label = "text" if payload["layer"] == 0 else "abstract"
        print(f"  {label}: {payload['text']}", file=out)
        for child in payload["children"]:
            print(
                f"  child {child['id']} (layer {child['layer']}, {child['leaf_count']:,} "
                f"leaves): {child['preview']}",
                file=out,
            )
        return 0
    payload = inspect_summary(index, args.index, verify=verify)
    root_text = index.node_text(tree.root)[:ROOT_TEXT_CHARS] if tree.roots.size == 1 else ""
    return _print_summary(args, payload, root_text, out=out)


def _print_summary(
    args: argparse.Namespace, payload: dict[str, Any], root_text: str, *, out: TextIO
) -> int:
    if args.json:
        print(
            json.dumps({"schema": INSPECT_SCHEMA, "index": payload}, indent=2, ensure_ascii=False),
            file=out,
        )
        return 0
    print(f"index {args.index}", file=out)
    storage = payload["storage"]
    gen = storage.get("generation")
    print(
        f"  storage:         format {storage.get('format_version')}"
        + (f", generation {gen} (on disk: {storage['generations']})" if gen else "")
        + f"; files checked by {storage['verified']}",
        file=out,
    )
    print(
        f"  embedder:        {payload['embedder']['id']} (dim {payload['embedder']['dim']})",
        file=out,
    )
    print(f"  documents:       {payload['documents']:,}", file=out)
    print(f"  chunks (leaves): {payload['chunks']:,}", file=out)
    print(f"  trees:           {payload['trees']:,} (depth {payload['depth']})", file=out)
    print(f"  nodes per layer: {_layers(payload['nodes_per_layer'])}", file=out)
    fo = payload["fan_out"]
    print(f"  fan-out:         min {fo['min']}, mean {fo['mean']}, max {fo['max']}", file=out)
    peak = max(fo["histogram"].values(), default=1)
    for label, count in fo["histogram"].items():
        bar = "#" * max(1, round(40 * count / peak))
        print(f"    {label:>7} children: {count:6,} {bar}", file=out)
    if payload["trees"] == 1 and payload["roots"]:
        print(f"  root {payload['roots'][0]}: {root_text}", file=out)
    drift = payload["drift"]
    print(
        f"  drift:           {drift['updates']:,} updates since the last full build "
        f"(+{drift['leaves_added']:,} / -{drift['leaves_removed']:,} leaves of "
        f"{drift['built_leaves']:,}, churn {drift['churn']:.0%}); rebuild due: "
        + ("yes (psirag add/sync ... --rebuild)" if drift["rebuild_due"] else "no"),
        file=out,
    )
    print("  (psirag inspect DIR --node ID shows one node)", file=out)
    return 0


def _describe_node(index: Any, node: int) -> dict[str, Any]:
    from psirag.errors import InputError

    tree = index.tree
    if not 0 <= node < tree.n_nodes:
        raise InputError(f"node {node} does not exist: the index has nodes 0..{tree.n_nodes - 1}")
    children = tree.children(node).tolist()
    payload: dict[str, Any] = {
        "id": node,
        "layer": int(tree.layer[node]),
        "parent": int(tree.parent[node]),
        "leaf_count": int(tree.leaf_counts[node]),
        "text": index.node_text(node),
        "children": [
            {
                "id": c,
                "layer": int(tree.layer[c]),
                "leaf_count": int(tree.leaf_counts[c]),
                "preview": " ".join(index.node_text(c).split())[:120],
            }
            for c in children
        ],
    }
    if node < tree.n_leaves:
        payload["source"] = index.source(node).to_dict()
        payload["chunk_id"] = index.chunks[node].id
    return payload


# ---------------------------------------------------------------------------- demo
DEMO_QUERIES = (
    "How does the with statement call __enter__ and __exit__?",
    "What happens to default argument values when a function is defined?",
    "How do I catch several exceptions in one except clause?",
)


def demo_corpus() -> tuple[list[str], list[str]]:
    """The Python language reference that ships with every CPython (pydoc_data.topics)."""
    from pydoc_data.topics import topics

    names = sorted(topics)
    return [topics[n] for n in names], names


def run_demo(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    from psirag.index import Index
    from psirag.ingest import documents_from_strings
    from psirag.storage import MANIFEST, IndexStore

    out = stdout or sys.stdout
    folder = Path(args.out) if args.out else Path.home() / ".cache" / "psirag" / "demo-index"
    demo_llm_cache(folder)  # out of the index folder before a rebuild writes there
    if args.rebuild or not (folder / MANIFEST).is_file():
        IndexStore(folder).check_writable()
        texts, names = demo_corpus()
        print(
            f"psirag demo: indexing the Python language reference ({len(texts)} topics "
            f"from pydoc_data) with the embedded all-MiniLM-L6-v2 embedder",
            file=out,
        )
        docs = documents_from_strings(texts, titles=names, ids=names)
        index = Index.build(docs, progress=not args.quiet, report=eprint)
        index.save(folder)
        counts = index.describe()["counts"]
        stages = ", ".join(f"{k} {v:.1f}s" for k, v in index.stats.seconds.items())
        print(
            f"built {folder}: {counts['chunks']:,} chunks, layers "
            f"{_layers(counts['nodes_per_layer'])}; {stages}",
            file=out,
        )
    else:
        print(f"psirag demo: using the index in {folder} (--rebuild to build it again)", file=out)
        index = Index.load(folder)
    agent = _demo_agent(index, folder, out)
    for query in DEMO_QUERIES:
        print(f"\nQ: {query}", file=out)
        if agent is None:
            for rank, p in enumerate(index.search(query, k=3), start=1):
                print_passage(p, rank, out, width=240)
            continue
        result = agent.run(query)
        print(f"A: {result.answer}", file=out)
        print(f"   ({len(result.steps)} step(s); evidence:)", file=out)
        for rank, p in enumerate(result.evidence[:3], start=1):
            print_passage(p, rank, out, width=240)
    print(
        "\nEvidence comes from a dense list and BM25 fused by RRF (on an index this small the "
        "dense list is an exact scan; `psirag search --profile tree` searches the tree); each "
        "line names the topic (document), chunk and character span.",
        file=out,
    )
    if agent is None:
        print(
            'For answers written by an LLM: `psirag ask DIR "question" --llm '
            "openai:http://localhost:11434/v1#MODEL` (any OpenAI-compatible server), or "
            "install the local model: `pip install 'psirag[local]'`, then "
            "`scripts/get_local_model.sh` (see README).",
            file=out,
        )
    return 0


def demo_llm_cache(folder: Path) -> Path:
    """The demo's LLM response cache, beside its index folder (not in it: the index folder
    belongs to the index). One left inside by an older psirag is moved out."""
    cache = folder.with_name(folder.name + "-llm-cache.sqlite")
    old = folder / "llm-cache.sqlite"
    if old.is_file() and not cache.exists():
        os.replace(old, cache)
    return cache


def _demo_agent(index: Any, folder: Path, out: TextIO) -> Any:
    """The R&A agent on the local model when psirag[local] and the model are installed."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return None
    from psirag.agent import RetrieveAndAnswer
    from psirag.llm import LLMClient, load_chat_model

    try:
        model = load_chat_model("local")
    except PsiragError as exc:
        print(f"(llama-cpp-python is installed but the local model is not: {exc})", file=out)
        return None
    print(f"answering with the local model {model.id} (max 1 extra retrieval)", file=out)
    client = LLMClient(model, cache_path=demo_llm_cache(folder))
    return RetrieveAndAnswer(client, index.search, max_retrievals=1)
