"""``psirag add``, ``psirag remove``, ``psirag sync`` and ``psirag compact``: change a saved
index in place.

Each command takes the index's writer lock first (a second writer gets IndexLockedError at
once), reads the current generation, applies the update (:mod:`psirag.living`) and writes the
next generation, published by one atomic rename; a failure or a kill anywhere leaves the last
published generation as it was. A command that changes nothing writes nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, get_args

from psirag.cli.common import abstract_llm
from psirag.cli.common import eprint as _eprint
from psirag.cli.options import (
    add_http_options,
    add_index_argument,
    add_llm_options,
    add_server_options,
    add_update_embedder_option,
    http_policy_from,
)
from psirag.errors import EmbedderMismatchError, InputError

if TYPE_CHECKING:
    from psirag.index import Index
    from psirag.living import UpdateSummary

UPDATE_SCHEMA = "psirag.update-summary/1"


def load_embedder_for(spec: str, batch_size: int | None = None, http: Any = None) -> Any:
    """The embedder a spec names (a seam for tests, which use a hashing embedder)."""
    from psirag.embed import load_embedder

    return load_embedder(spec, batch_size=batch_size, http=http)


def register(sub: Any) -> None:
    """Add the four commands to the ``psirag`` parser."""
    from psirag.tree.update import InsertRule

    def common(p: argparse.ArgumentParser, *, embeds: bool = True) -> None:
        if embeds:
            add_update_embedder_option(p)
            p.add_argument(
                "--insert",
                choices=get_args(InsertRule),
                default="auto",
                help="how new chunks enter the tree (README: Updating an index)",
            )
            p.add_argument(
                "--skip-bad-files", action="store_true", help="skip unreadable files, warned"
            )
        add_llm_options(
            p, help="LLM for llm-* abstracts (default: the index's)", cache="--llm-cache"
        )
        p.add_argument(
            "--rebuild",
            action="store_true",
            help="after the change, rebuild the tree, abstracts and BM25 over every chunk "
            "(no re-embedding): what the drift rule asks for",
        )
        p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
        p.add_argument("--json", action="store_true", help=f"print JSON ({UPDATE_SCHEMA})")
        add_http_options(p)

    p = sub.add_parser("add", help="add files or folders of documents to an index")
    add_index_argument(p)
    p.add_argument("paths", nargs="+", metavar="PATH")
    common(p)
    add_server_options(p)
    p.set_defaults(func=run_add)

    p = sub.add_parser("remove", help="remove documents from an index by id")
    add_index_argument(p)
    p.add_argument(
        "--doc", action="extend", nargs="+", required=True, metavar="ID", help="document id"
    )
    common(p, embeds=False)
    add_server_options(p)
    p.set_defaults(func=run_remove)

    p = sub.add_parser(
        "sync", help="make an index mirror files and folders (add new, re-index changed, drop gone)"
    )
    add_index_argument(p)
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--dry-run", action="store_true", help="list what would change; change nothing")
    p.add_argument(
        "--allow-remove-all",
        action="store_true",
        help="let a sync remove every document of the index (it then rebuilds from the files)",
    )
    common(p)
    add_server_options(p)
    p.set_defaults(func=run_sync)

    p = sub.add_parser(
        "compact",
        help="rewrite an index's segments as one each (drops removed rows; migrates old formats)",
    )
    add_index_argument(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_compact)


def run_compact(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    """``psirag compact INDEX``: see :func:`psirag.living.compact_saved`."""
    from psirag.living import compact_saved

    out = stdout or sys.stdout
    done = compact_saved(args.index)
    if args.json:
        print(
            json.dumps(
                {
                    "generation": done.generation,
                    "seconds": round(done.seconds, 3),
                    "bytes_before": done.bytes_before,
                    "bytes_after": done.bytes_after,
                }
            ),
            file=out,
        )
    else:
        print(
            f"compacted {args.index}: generation {done.generation}, "
            f"{done.bytes_before / 2**20:,.1f} MiB -> {done.bytes_after / 2**20:,.1f} MiB "
            f"in {done.seconds:.1f} s",
            file=out,
        )
    return 0


# ---------------------------------------------------------------------------- helpers
def _embedder(index: Any, spec: str | None, args: argparse.Namespace | None = None) -> Any:
    from psirag.trust import embedder_spec

    config = index.config
    http = http_policy_from(args) if args is not None else None
    embedder = load_embedder_for(embedder_spec(config.embedder, spec), config.batch_size, http)
    if embedder.id != index.embedder_id:
        raise EmbedderMismatchError(
            f"{spec or config.embedder!r} embeds as {embedder.id!r} but this index was built "
            f"with {index.embedder_id!r}; new text must be embedded by the index's own model "
            f"({config.embedder!r}), or rebuild the index with the new one"
        )
    index.embedder = embedder
    return embedder


def _llm(index: Any, args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from psirag.trust import llm_spec

    config = index.config
    if not config.abstracts.startswith("llm-"):
        return None
    return abstract_llm(
        replace(config, llm=llm_spec(config.llm, args.llm)), args.llm_cache, http_policy_from(args)
    )


@dataclass
class _Run:
    """One update command's LLM client (closed when the command ends) and sync plan."""

    args: argparse.Namespace
    llm: Any = None
    plan: dict[str, Any] | None = None

    def open_llm(self, index: Index) -> Any:
        self.llm = _llm(index, self.args)
        return self.llm


def _update(
    args: argparse.Namespace,
    change: Callable[[Index, _Run], UpdateSummary],
    started: float,
    out: TextIO,
) -> int:
    """The command's ``change`` through :meth:`Index.update_saved` (lock, load the generation
    on disk, change, save, publish), with ``--rebuild`` after it, then the report."""
    from psirag.index import Index
    from psirag.living import rebuild_data

    run = _Run(args)
    dry_run = bool(getattr(args, "dry_run", False))

    def apply(index: Index) -> UpdateSummary:
        summary = change(index, run)
        if getattr(args, "rebuild", False) and not dry_run:
            t0 = time.perf_counter()
            data, rebuilt = rebuild_data(
                index.data, index.embedder_or_none(), llm=run.llm, progress=not args.quiet
            )
            index.replace_data(data)
            summary = summary.merge(rebuilt)
            summary.seconds["rebuild"] = time.perf_counter() - t0
        return summary

    try:
        index, done = Index.update_saved(args.index, apply, save=not dry_run)
    finally:
        if run.llm is not None:
            run.llm.close()
    summary = done.summary
    generation = done.generation
    if generation is not None:
        summary.seconds["save"] = done.save_seconds
    if generation is not None and done.from_legacy:
        _eprint(f"{args.index} was in format 1; it is now written in format 2 (migrated)")
    return _report(args, summary.to_dict(), generation, index.drift(), run.plan, started, out)


def _report(
    args: argparse.Namespace,
    summary: dict[str, Any],
    generation: int | None,
    drift: dict[str, Any],
    plan: dict[str, Any] | None,
    started: float,
    out: TextIO,
    *,
    server: str | None = None,
) -> int:
    """What an update did (``summary``: :meth:`UpdateSummary.to_dict`), the same whether it
    ran here or on a server."""
    total = time.perf_counter() - started
    for skipped in summary["skipped"][:20]:
        _eprint(f"already indexed, skipped: {skipped}")
    for old, new in list(summary["renamed"].items())[:20]:
        _eprint(f"document id {old!r} is taken by another document: added as {new!r}")
    if summary["tree"].get("trees_added"):
        _eprint(f"tree-per-document index: {summary['tree']['trees_added']} new tree(s)")
    payload = {
        "schema": UPDATE_SCHEMA,
        "index": str(args.index),
        "generation": generation,
        "dry_run": bool(getattr(args, "dry_run", False)),
        **({"server": server} if server is not None else {}),
        **({"plan": plan} if plan is not None else {}),
        **summary,
        "total_seconds": round(total, 3),
        "drift": drift,
    }
    if args.json:
        print(json.dumps(payload, indent=2, ensure_ascii=False), file=out)
        return 0
    if plan is not None:
        verb = "would" if payload["dry_run"] else "will"
        for key in ("new", "changed", "gone"):
            files = plan[key]
            print(f"{key:>8} files: {len(files):,} ({verb} be {_VERB[key]})", file=out)
            for f in files[:10]:
                print(f"           {f}", file=out)
            if len(files) > 10:
                print(f"           ... and {len(files) - 10} more", file=out)
        if payload["dry_run"]:
            print("dry run: nothing changed", file=out)
            return 0
    changed = summary["documents_added"] or summary["documents_removed"]
    via = f" through {server}" if server is not None else ""
    if not (changed or summary["full_rebuild"]):
        print(f"nothing changed in {args.index}{via}", file=out)
    else:
        print(f"updated {args.index}{via} (generation {generation})", file=out)
    s = summary
    print(
        f"  documents: +{s['documents_added']:,} added, -{s['documents_removed']:,} removed, "
        f"{s['documents_skipped']:,} already indexed (skipped)",
        file=out,
    )
    print(f"  chunks:    +{s['chunks_added']:,} / -{s['chunks_removed']:,}", file=out)
    print(f"  nodes refreshed: {s['nodes_refreshed']:,}", file=out)
    if s["llm_calls"] or s["llm_cached"]:
        print(f"  LLM calls: {s['llm_calls']:,} paid, {s['llm_cached']:,} from the cache", file=out)
    stages = ", ".join(f"{k} {v:.2f}s" for k, v in s["seconds"].items())
    print(f"  seconds:   {stages} (total {total:.2f}s)", file=out)
    due = "yes: run again with --rebuild" if drift["rebuild_due"] else "no"
    print(
        f"  drift:     {drift['leaves_added']:,} leaves added, {drift['leaves_removed']:,} "
        f"removed since the last full build of {drift['built_leaves']:,} (churn "
        f"{drift['churn']:.0%}, rebuild at {drift['max_churn']:.0%}); rebuild due: {due}",
        file=out,
    )
    return 0


_VERB = {"new": "added", "changed": "re-indexed", "gone": "removed"}


# ---------------------------------------------------------------------------- commands
def run_add(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    started = time.perf_counter()
    if args.server:
        return _remote_add(args, started, out)
    for p in args.paths:
        if not Path(p).exists():
            raise InputError(f"{p}: no such file or folder; check the path")

    def change(index: Index, run: _Run) -> UpdateSummary:
        embedder = _embedder(index, args.embedder, args)
        return index.add(
            args.paths,
            progress=not args.quiet,
            llm=run.open_llm(index),
            embedder=embedder,
            on_bad_file="skip" if args.skip_bad_files else "fail",
            rule=args.insert,
            report=_eprint,
        )

    return _update(args, change, started, out)


def run_remove(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    started = time.perf_counter()
    if args.server:
        return _remote_remove(args, started, out)

    def change(index: Index, run: _Run) -> UpdateSummary:
        if index.config.routing != "leaf_mean":
            _embedder(index, None, args)
        return index.remove(args.doc, llm=run.open_llm(index), progress=not args.quiet)

    return _update(args, change, started, out)


# ---------------------------------------------------------------------------- --server
def _server_client(args: argparse.Namespace) -> Any:
    """The client of ``--server``, after refusing the options only a local update has."""
    from psirag.cli.remote import ServerClient

    local_only = [
        flag
        for flag, given in (
            ("--rebuild", args.rebuild),
            ("--embedder", getattr(args, "embedder", None)),
            ("--llm", args.llm),
            ("--insert", getattr(args, "insert", "auto") != "auto"),
        )
        if given
    ]
    if local_only:
        raise InputError(
            f"{', '.join(local_only)} cannot go through --server (the server uses its own "
            "models and rules); run the command without --server to use them"
        )
    client = ServerClient(args.server, args.api_key)
    client.check_serves(args.index)
    return client


def _remote_add(args: argparse.Namespace, started: float, out: TextIO) -> int:
    """``psirag add --server``: upload the files (the server reads them with ``psirag add``'s
    loaders), wait for the job, print the same summary as a local add."""
    from psirag.cli.remote import files_under

    files = files_under(args.paths)
    client = _server_client(args)
    answer = client.upload(files)
    rejected = answer.get("rejected") or []
    for refused in rejected:
        _eprint(f"psirag: {refused.get('file')}: {refused.get('error')}")
    job = client.wait(answer["job"])
    code = _remote_report(args, [job], started, out, client.url)
    if rejected and not args.skip_bad_files:
        _eprint(
            f"psirag: error: the server refused {len(rejected)} file(s) (above); the others "
            "were added. Fix or leave them out, or pass --skip-bad-files"
        )
        return 1
    return code


def _remote_remove(args: argparse.Namespace, started: float, out: TextIO) -> int:
    """``psirag remove --server``: one server job per document, waited for in turn."""
    client = _server_client(args)
    jobs = [client.wait(client.remove(doc)["job"]) for doc in dict.fromkeys(args.doc)]
    return _remote_report(args, jobs, started, out, client.url)


def _remote_sync(
    args: argparse.Namespace,
    files: dict[str, str],
    documents: Callable[[Sequence[str]], Any],
    started: float,
    out: TextIO,
) -> int:
    """``psirag sync --server``: the plan from the server's sources (as a local sync makes it),
    the new and changed files read here by the same loaders and named the same way, sent with
    the ids to remove as one server job, so the server keeps each file's path and sha256."""
    from psirag.living import UpdateSummary
    from psirag.server.uploads import document_to_json

    client = _server_client(args)
    served = client.sources()
    plan = SyncPlan.of(served["sources"], files)
    if args.dry_run or not (plan.remove or plan.new or plan.changed):
        nothing = UpdateSummary().to_dict()
        return _report(
            args, nothing, None, served["drift"], plan.to_dict(), started, out, server=client.url
        )
    total = int(served["documents"])
    if len(set(plan.remove)) >= total:
        raise InputError(
            f"this sync would remove all {total:,} documents of {args.index}; an index cannot "
            "be emptied through --server, nothing was changed. Check the paths, or run the "
            "sync without --server (with --allow-remove-all it rebuilds from the files)"
        )
    read = documents(plan.new + plan.changed) if plan.new or plan.changed else []
    job = client.wait(client.sync(plan.remove, [document_to_json(d) for d in read])["job"])
    result = job["result"]
    return _report(
        args,
        result["update"],
        result.get("saved_generation"),
        result["drift"],
        plan.to_dict(),
        started,
        out,
        server=client.url,
    )


def _remote_report(
    args: argparse.Namespace, jobs: list[dict[str, Any]], started: float, out: TextIO, url: str
) -> int:
    from psirag.living import UpdateSummary

    results = [job["result"] for job in jobs]
    summary = UpdateSummary().to_dict()
    for result in results:
        summary = _merged(summary, result["update"])
    last = results[-1]
    return _report(
        args, summary, last.get("saved_generation"), last["drift"], None, started, out, server=url
    )


def _merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two :meth:`UpdateSummary.to_dict` as one (a remove of several documents)."""
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, bool):
            out[key] = bool(a.get(key)) or value
        elif isinstance(value, (int, float)):
            out[key] = a.get(key, 0) + value
        elif isinstance(value, list):
            out[key] = [*a.get(key, []), *value]
        elif isinstance(value, dict):
            merged = dict(a.get(key, {}))
            for k, v in value.items():
                merged[k] = merged.get(k, 0) + v if isinstance(v, (int, float)) else v
            out[key] = merged
    return out


def scan_files(
    paths: Sequence[str], names: dict[str, tuple[Path, str]] | None = None
) -> dict[str, str]:
    """Every supported file under ``paths`` (resolved) with the sha256 of its bytes; ``names``
    gets each one's path as found and the document id ``psirag index`` would give it."""
    from psirag.ingest.loaders import SUFFIXES, _walk
    from psirag.ingest.naming import document_id

    found: dict[str, str] = {}
    for given in paths:
        p = Path(given)
        if not p.exists():
            raise InputError(f"{p}: no such file or folder; check the path")
        files = _walk(p, _eprint)[0] if p.is_dir() else [p]
        for f in files:
            if f.suffix.lower() not in SUFFIXES:
                raise InputError(f"{f}: unsupported file type {f.suffix!r}")
            r = f.resolve()
            if names is not None:
                names.setdefault(str(r), (f, document_id(p, f)))
            try:
                found[str(r)] = hashlib.sha256(r.read_bytes()).hexdigest()
            except OSError as exc:
                raise InputError(f"{f}: cannot be read ({exc.strerror or exc}); check it") from exc
    return found


@dataclass(frozen=True)
class SyncPlan:
    """What a sync changes: files ``new``, ``changed`` (re-indexed) and ``gone`` (resolved
    paths, sorted), the document ids to remove (those of gone and changed files) and those of
    the gone files alone."""

    new: list[str]
    changed: list[str]
    gone: list[str]
    remove: list[str]
    gone_documents: list[str]

    @classmethod
    def of(cls, sources: dict[str, dict[str, Any]], files: dict[str, str]) -> SyncPlan:
        """Compare the index's sources (document id -> ``{"path", "sha256"}``) with the files
        found (path -> sha256)."""
        by_path: dict[str, list[str]] = {}
        for doc, src in sources.items():
            if src.get("path"):
                by_path.setdefault(src["path"], []).append(doc)
        indexed_sha = {sources[d[0]]["path"]: sources[d[0]].get("sha256") for d in by_path.values()}
        new = sorted(f for f in files if f not in by_path)
        changed = sorted(f for f in files if f in by_path and indexed_sha[f] != files[f])
        gone = sorted(f for f in by_path if f not in files)
        remove = [d for f in gone + changed for d in by_path[f]]
        return cls(new, changed, gone, remove, [d for f in gone for d in by_path[f]])

    def to_dict(self) -> dict[str, Any]:
        return {"new": self.new, "changed": self.changed, "gone": self.gone}


def run_sync(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    from psirag.living import UpdateSummary, rebuild_from_files

    out = stdout or sys.stdout
    started = time.perf_counter()
    names: dict[str, tuple[Path, str]] = {}
    files = scan_files(args.paths, names)
    from psirag.ingest.naming import load_named

    def documents(found: Sequence[str]) -> Any:
        """The files, named as ``psirag index`` names them (a link by its own name)."""
        skip = "skip" if args.skip_bad_files else "fail"
        return load_named([names[f] for f in found], on_bad_file=skip, warn=_eprint)

    if args.server:
        return _remote_sync(args, files, documents, started, out)

    def change(index: Index, run: _Run) -> UpdateSummary:
        plan = SyncPlan.of(index.data.sources, files)
        new, changed = plan.new, plan.changed
        run.plan = plan.to_dict()
        to_remove = plan.remove
        if args.dry_run:
            return UpdateSummary()
        found = index.data.document_index  # by the document keys: no list of every id
        if to_remove and len(found.present(to_remove)) == found.count:
            all_gone = len(found.present(plan.gone_documents)) == found.count
            if all_gone and not args.allow_remove_all:
                raise InputError(
                    f"this sync would remove all {found.count:,} documents of "
                    f"{args.index} (none of its files is among {', '.join(args.paths)}); "
                    "nothing was changed. Check the paths, or pass --allow-remove-all"
                )
            if not files:
                raise InputError(
                    f"{', '.join(args.paths)} hold no supported files; an index cannot be empty"
                )
            embedder = _embedder(index, args.embedder, args)
            data, summary = rebuild_from_files(
                index.data,
                documents(sorted(files)),
                embedder,
                llm=run.open_llm(index),
                progress=not args.quiet,
            )
            index.replace_data(data)
            return summary
        if not (to_remove or new or changed):
            return UpdateSummary()
        if new or changed or index.config.routing != "leaf_mean":
            _embedder(index, args.embedder, args)
        return index.update(
            to_remove,
            documents(new + changed) if new or changed else None,
            progress=not args.quiet,
            llm=run.open_llm(index),
            on_bad_file="skip" if args.skip_bad_files else "fail",
            rule=args.insert,
            report=_eprint,
        )

    return _update(args, change, started, out)
