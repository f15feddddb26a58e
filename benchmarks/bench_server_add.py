"""Adding one document to a running server against doing it from the command line (issue 24
item 7): ``psirag serve`` applies the write to the index it holds in memory, where ``psirag
add`` loads the index, adds and saves.

A synthetic index of ``--chunks`` one-chunk records (``_common.synthetic_texts``) is built with
a fast hashed bag-of-words embedder (embedding stays out of the figures) and the default
``IndexConfig`` (keyword abstracts, BM25, default tree mode). Then, each ``--repeats`` times,
one new 8-paragraph document is added:

- ``in_memory``: ``Index.add`` on a loaded index (the floor: no load, no save), each time on
  the loaded index, and ``in_memory_chained``: each add on the previous add's result;
- ``server_api``: ``POST /documents`` to a ``psirag serve`` child (same embedder) and waiting
  for its job (``GET /jobs/{id}?wait=30``; a server without ``?wait`` is polled every 10 ms)
  until done (in-memory add + save + publish; the served index is not reloaded). Each job's
  phase timings (``server_api_phases_each``: request, queued, lock, update, save, unlock,
  prepare, publish, jobs file, run and its CPU seconds, as the job record says them) come with
  the client's side: the POST's round trip and how long after the job finished it saw it done;
- ``server_cli``: ``psirag add --server URL FILE`` in a fresh process (the above plus the
  client's start-up and upload);
- ``cli_local``: ``psirag add INDEX FILE`` in a fresh process (start-up, load, add, save),
  its embedder swapped for the hash one through the command's embedder seam.

Each saved update also reports the bytes it wrote (new inodes under the index folder). With the
server, a 1% add (``POST /sync`` of ``chunks // 100`` one-chunk records) and a one-document
removal (``DELETE /documents/17``) are timed once each after the adds.

``--index DIR`` builds nothing: it measures on a copy of an index saved before with the hash
embedder (e.g. ``bench_living_scale.py --build-only --save DIR``; the copy goes under
``$BENCH_TMP`` or the system's temporary folder, and ``DIR`` is left as it is).

``--src DIR`` measures other sources (an old commit's) with this same script, side by side;
``--server-only`` leaves out the in-process rows.

Usage: nice python benchmarks/bench_server_add.py [--chunks 20000] [--repeats 3] [--index DIR]
       [--no-bulk] [--src DIR --label NAME] [--server-only] [--out NAME.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from _common import process_memory_mib
from bench_living_scale import (  # the same fast embedder and corpus, one copy
    LoopbackHashEmbedder,
    _inodes,
    corpus,
    corpus_vocab,
)

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(HERE), env.get("PYTHONPATH", "")])
    env.pop("PSIRAG_API_KEY", None)
    return env


def _new_document(vocab: list[list[str]], k: int) -> str:
    rng = np.random.default_rng(1000 + k)
    topic = vocab[k % len(vocab)]
    return "\n\n".join(
        " ".join(rng.choice(topic, 12).tolist() + rng.choice(vocab[-1], 8).tolist()) + "."
        for _ in range(8)
    )


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=60) as r:
        body: dict[str, Any] = json.loads(r.read())
        return body


def _post_and_wait(url: str, text: str, doc_id: str) -> dict[str, Any]:
    return _send_and_wait(url, "POST", "/documents", {"text": text, "id": doc_id})


def _send_and_wait(
    url: str, method: str, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Send a write (``POST /documents``, ``POST /sync``, ``DELETE /documents/ID``) and poll
    its job until it is done."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{url}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
    )
    t0 = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as r:
        job = json.loads(r.read())["job"]
    posted = time.perf_counter() - t0
    while job["status"] not in ("done", "failed"):
        asked = time.perf_counter()
        job = _get(f"{url}/jobs/{job['id']}?wait=30")  # a server without ?wait answers at once
        if job["status"] not in ("done", "failed") and time.perf_counter() - asked < 0.005:
            time.sleep(0.01)
    seen = time.time()
    if job["status"] != "done":
        raise RuntimeError(f"job failed: {job['error']}")
    # the client's side of the round trip: the POST's answer, and how long after the job
    # finished (the server's clock: the same machine) the client saw it done
    client = {"post_s": round(posted, 4)}
    if job.get("finished") is not None:
        client["seen_after_finish_s"] = round(seen - float(job["finished"]), 4)
    job["client"] = client
    if "timings" in job:  # again: the jobs file is written after the job reads done
        job["timings"] = _get(f"{url}/jobs/{job['id']}").get("timings", job["timings"])
    return job


def _written(folder: Path, seen: dict[int, int]) -> int:
    """Bytes of the files under ``folder`` that are not among the inodes ``seen``."""
    return sum(size for ino, size in _inodes(folder).items() if ino not in seen)


def _timed_run(command: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(command, check=True, env=_env(), capture_output=True, timeout=1800)
    return time.perf_counter() - t0


def _summary(seconds: list[float]) -> dict[str, float]:
    """Median and minimum; with the first (after a start or a load: cold) apart from the
    steady rest."""
    out = {"median_s": round(statistics.median(seconds), 3), "min_s": round(min(seconds), 3)}
    if len(seconds) > 1:
        out["first_s"] = round(seconds[0], 3)
        out["steady_median_s"] = round(statistics.median(seconds[1:]), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--index",
        type=Path,
        default=None,
        help="no build: measure on a copy of this saved index (--chunks is then its size)",
    )
    parser.add_argument(
        "--no-bulk",
        action="store_true",
        help="skip the 1%% sync (at 1M chunks it rescores abstracts for minutes)",
    )
    parser.add_argument(
        "--src",
        type=Path,
        default=None,
        help="the psirag sources to measure (the server, the CLI and this process; default: "
        "this tree's), e.g. an old commit's `git archive <commit> src | tar -x -C DIR`",
    )
    parser.add_argument(
        "--label", default=None, help="names --src in the results (no machine paths there)"
    )
    parser.add_argument(
        "--server-only",
        action="store_true",
        help="only the server's rows (no in-memory adds, no `psirag add INDEX FILE`): at 1M "
        "chunks the in-process rows hold a second copy of the index in memory",
    )
    parser.add_argument(
        "--first-after",
        type=float,
        default=0.0,
        help="seconds to wait after the server answers /health before the first add (0: at "
        "once, while its warm-up may still run; the results say whether it had finished)",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="before the server starts, drop the index copy's pages from the page cache "
        "(posix_fadvise DONTNEED on its files: no other file is touched), as after a reboot "
        "or when other work has evicted them; the server's loads and first add then read "
        "from disk",
    )
    parser.add_argument(
        "--residency",
        action="store_true",
        help="record how much of each index file is in the page cache (`fincore`) when the "
        "first add is sent and when it is done: with --cold, what the warm-up read and what "
        "the first add still read from disk",
    )
    parser.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an option for the server's `psirag serve` (repeatable; e.g. "
        "--serve-arg=--read-ahead-share --serve-arg=0)",
    )
    parser.add_argument("--out", default=None, help="results file name (default server_add_N)")
    args = parser.parse_args()
    if args.src is not None:
        global SRC
        SRC = args.src.resolve()
        if not (SRC / "psirag" / "__init__.py").exists():
            parser.error(f"--src {args.src}: no psirag package there")
    if args.index is not None and not (args.index / "manifest.json").exists():
        parser.error(f"--index {args.index}: no saved index there (no manifest.json)")
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(SRC))
    from _common import copy_index, machine_info, synthetic_texts, write_result

    from psirag import Index, IndexConfig
    from psirag.ingest import Document

    out: dict[str, Any] = {"chunks": args.chunks, "repeats": args.repeats}
    if args.label or args.src is not None:
        out["src"] = args.label or args.src.name
    if args.serve_arg:
        out["serve_args"] = args.serve_arg
    with tempfile.TemporaryDirectory(
        prefix="psirag-bench-server-", dir=os.environ.get("BENCH_TMP")
    ) as tmp:
        folder = Path(tmp) / "index"
        t0 = time.perf_counter()
        if args.index is None:
            labels = np.random.default_rng(0).integers(0, max(8, args.chunks // 250), args.chunks)
            texts, vocab = synthetic_texts(labels, seed=0)
            docs = [Document(str(i), "", t, is_record=True) for i, t in enumerate(texts)]
            del texts
            Index.build(docs, IndexConfig(), embedder=LoopbackHashEmbedder()).save(folder)
            del docs
            out["build_and_save_s"] = round(time.perf_counter() - t0, 2)
            print(f"built {args.chunks:,} chunks in {out['build_and_save_s']} s", flush=True)
        else:
            copy_index(args.index, folder, sync=False)
            out["index"] = args.index.name  # no path of this machine in results
            out["copy_s"] = round(time.perf_counter() - t0, 2)
            # the copy's pages are written back now, not under the timed adds (at 1M chunks
            # 5.6 GB of writeback slowed the first adds and their saves' fsyncs)
            t0 = time.perf_counter()
            os.sync()
            out["sync_s"] = round(time.perf_counter() - t0, 2)
        # compiled once here, so that no server start pays for compiling edited modules
        for where in (SRC, HERE):
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(where)], check=False)

        t0 = time.perf_counter()
        loaded = Index.load(folder, embedder=LoopbackHashEmbedder())
        out["load_s"] = round(time.perf_counter() - t0, 3)
        if args.index is not None:
            args.chunks = out["chunks"] = loaded.data.tree.n_leaves
            vocab = corpus_vocab(args.chunks)[1]
        memory = []
        for k in range(0 if args.server_only else args.repeats):
            t0 = time.perf_counter()
            summary = Index.from_data(loaded.data, embedder=LoopbackHashEmbedder()).add(
                [_new_document(vocab, k)], texts=True
            )
            memory.append(time.perf_counter() - t0)
        if not args.server_only:
            out["in_memory"] = _summary(memory)
            out["in_memory_stages"] = {k: round(v, 3) for k, v in summary.seconds.items()}
            chained, index = [], Index.from_data(loaded.data, embedder=LoopbackHashEmbedder())
            for k in range(args.repeats):  # each add on the previous one's result, as a server
                t0 = time.perf_counter()
                summary = index.add([_new_document(vocab, 50 + k)], texts=True)
                chained.append(time.perf_counter() - t0)
            out["in_memory_chained"] = _summary(chained)
            out["in_memory_chained_stages"] = {k: round(v, 3) for k, v in summary.seconds.items()}
            del index
        del loaded

        if args.cold:
            out["cold"] = _evict(folder)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(folder), str(port), *args.serve_arg],
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 600
            while True:
                try:
                    _get(f"{url}/health")
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the benchmark server did not start") from None
                    time.sleep(0.2)
            started = time.perf_counter()
            if args.first_after:
                time.sleep(args.first_after)
            # the server's warm-up as the first add finds it (servers that report it)
            out["warm_up_at_first_add"] = _get(f"{url}/index").get("warm_up")
            out["first_add_after_s"] = round(time.perf_counter() - started, 2)
            out["server_memory_at_first_add"] = process_memory_mib(server.pid)
            out["loadavg_at_first_add"] = [round(x, 2) for x in os.getloadavg()]
            resident = [_resident(folder)] if args.residency else []
            api, job_seconds, api_bytes, phases = [], [], [], []
            for k in range(args.repeats):
                seen = _inodes(folder)
                t0 = time.perf_counter()
                job = _post_and_wait(url, _new_document(vocab, 100 + k), f"api-{k}")
                api.append(time.perf_counter() - t0)
                api_bytes.append(_written(folder, seen))
                job_seconds.append(job["result"]["update"]["seconds"])
                phases.append({**job.get("timings", {}), **job["client"]})
                assert job["result"]["loaded_from_disk"] is False
                if args.residency and k == 0:
                    resident.append(_resident(folder))
            if resident:
                out["resident_at_first_add"] = _residency_rows(*resident)
            out["server_api"] = {**_summary(api), "bytes_written": api_bytes}
            out["server_api_stages"] = job_seconds[-1]
            out["server_api_stages_each"] = job_seconds
            out["server_api_phases_each"] = phases  # the job's timings (newer servers only)
            cli_server, cli_server_bytes = [], []
            for k in range(args.repeats):
                path = Path(tmp) / f"via-server-{k}.txt"
                path.write_text(_new_document(vocab, 200 + k), encoding="utf-8")
                command = ["-m", "psirag.cli", "add", str(folder), str(path), "--server", url]
                seen = _inodes(folder)
                cli_server.append(_timed_run([sys.executable, *command, "-q"]))
                cli_server_bytes.append(_written(folder, seen))
            out["server_cli"] = {**_summary(cli_server), "bytes_written": cli_server_bytes}
            # 1% of the chunks as new one-chunk records in one sync, then one removal
            more = corpus(max(1, args.chunks // 100), seed=11)[0]
            records = [
                {"id": f"delta-{k}", "text": t, "is_record": True} for k, t in enumerate(more)
            ]
            writes: list[tuple[str, str, str, Any]] = [
                ("server_api_add_1pct", "POST", "/sync", {"documents": records}),
                ("server_api_remove_1_doc", "DELETE", "/documents/17", None),
            ]
            for name, method, route, body in writes[1:] if args.no_bulk else writes:
                seen = _inodes(folder)
                t0 = time.perf_counter()
                job = _send_and_wait(url, method, route, body)
                out[name] = {
                    "seconds": round(time.perf_counter() - t0, 3),
                    "bytes_written": _written(folder, seen),
                    "stages": job["result"]["update"]["seconds"],
                    "phases": {**job.get("timings", {}), **job["client"]},
                }
            out["server_index_loads"] = _get(f"{url}/index")["index_loads"]
        finally:
            server.terminate()
            server.wait(timeout=30)

        local, local_bytes = [], []
        for k in range(0 if args.server_only else args.repeats):
            path = Path(tmp) / f"local-{k}.txt"
            path.write_text(_new_document(vocab, 300 + k), encoding="utf-8")
            seen = _inodes(folder)
            local.append(_timed_run([sys.executable, __file__, "--cli", str(folder), str(path)]))
            local_bytes.append(_written(folder, seen))
        if local:
            out["cli_local"] = {**_summary(local), "bytes_written": local_bytes}
    out["machine"] = machine_info()
    print(json.dumps(out, indent=2))
    write_result(args.out or f"server_add_{args.chunks}.json", out)


def _evict(folder: Path) -> dict[str, float]:
    """Ask the kernel to drop the cached pages of every file under ``folder`` (written back
    first by the caller's sync); what stays cached after is the kernel's choice."""
    t0 = time.perf_counter()
    n = 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            n += 1
    return {"files": n, "evict_s": round(time.perf_counter() - t0, 3)}


def _resident(folder: Path) -> dict[str, int]:
    """Bytes of each file under ``folder`` (by its path there) in the page cache, as
    ``fincore`` says (empty where it is not installed)."""
    files = []
    # os.walk passes over a folder removed under it (a retired generation's trash folder, which
    # the server deletes meanwhile); rglob raised there
    for where, folders, names in os.walk(folder):
        folders[:] = [name for name in folders if not name.startswith(".trash-")]
        for name in names:
            path = os.path.join(where, name)
            try:
                if os.path.isfile(path) and os.stat(path).st_size > 0:
                    files.append(path)
            except OSError:
                continue
    files.sort()
    if shutil.which("fincore") is None or not files:
        return {}
    got = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES,FILE", *files],
        capture_output=True,
        text=True,
        check=False,
    )
    out = {}
    for line in got.stdout.splitlines():
        res, _, name = line.partition(" ")
        out[str(Path(name).relative_to(folder))] = int(res)
    return out


def _residency_rows(before: dict[str, int], after: dict[str, int] | None = None) -> Any:
    """Per file under the index: MB in the page cache when the first add was sent and when it
    was done (files with less than 1 MB cached both times are left out)."""
    rows = {}
    for name, res in before.items():
        row = {"cached_mb_before": round(res / 1e6, 1)}
        if after is not None and name in after:
            row["cached_mb_after"] = round(after[name] / 1e6, 1)
        if max(row.values()) >= 1.0:
            rows[name] = row
    return rows


def _serve(folder: str, port: str, *more: str) -> int:
    """The benchmark's server: the real ``psirag serve`` with the hash embedder."""
    from psirag.cli import build_parser
    from psirag.cli.serve import run_serve

    argv = ["serve", folder, "--port", port, "--host", "127.0.0.1", "--log-level", "warning"]
    argv += list(more)
    return run_serve(build_parser().parse_args(argv), embedder=LoopbackHashEmbedder())


def _cli_add(folder: str, path: str) -> int:
    """``psirag add`` with the hash embedder behind the command's embedder seam."""
    from psirag.cli import living_cmds, main

    living_cmds.load_embedder_for = lambda *a, **k: LoopbackHashEmbedder()  # type: ignore[assignment]
    return main(["add", folder, path, "-q"])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        sys.exit(_serve(*sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == "--cli":
        sys.exit(_cli_add(sys.argv[2], sys.argv[3]))
    main()
