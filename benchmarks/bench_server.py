"""``psirag serve`` under load: search latency and throughput at 1, 8, 32 and 128 concurrent
clients on the 2Wiki index, with the query-vector cache cold (every request a text never seen
before: the 2Wiki question plus a request number, so each one is embedded) and warm (the same
pool of questions over and over), the server's overhead against an in-process
``Index.search`` (same queries, same run, query embedding included on both sides), ``/health``
answering during each level, and the server's memory.

Loopback only, bounded: a fixed number of requests per level, then the server is stopped.
Clients use keep-alive connections from ``http.client`` (the lightest client in the standard
library), in threads of this process; on a 2-core machine they share the cores with the server,
so the numbers include the cost of generating the load.

The headline ratio: server requests per second at 32 clients (cold) over a single in-process
loop of ``Index.search`` on the same queries (embedding included), i.e. what concurrency and
the query micro-batch add over one process embedding queries one after another. The loop runs
twice, alternating in blocks: with BLAS's default threads (what a library caller gets) and with
one BLAS thread (what the server runs, and the faster loop); the ratio is given over each.

Every text that must miss the cache (the baseline's and the cold levels') is a question plus
`` #NNNNNN``, a six-digit serial never used before, so cold requests and the baseline embed
texts of the same length. The warm levels come after every question was sent once (untimed; with
workers, once on each of 4N connections, so every worker's own cache holds them).
The server's CPU per request comes with the benchmark process's own (the clients': they run
on the same cores).

With ``--workers N`` the server runs as ``psirag serve --workers N`` (N processes on one port);
the memory is then given per process (the supervising parent and each worker), RSS and PSS
(proportional set size: pages shared by the workers, such as the memory-mapped index, counted
once in all).

Usage: nice -n 10 python benchmarks/bench_server.py --index DIR [--workers 2] [--src DIR] (an
index of 2Wiki built with the default MiniLM embedder; without --index one is built under
bench-out/ first; --src: the server runs another checkout's sources, for a side-by-side run)
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import OUT, ROOT, documents, machine_info, two_wiki_queries, write_result

LEVELS = (1, 8, 32, 128)
REQUESTS = {1: 200, 8: 400, 32: 640, 128: 1280}
"""Requests timed at each concurrency level (after the warm-up)."""
WARMUP = 30
BASELINE_BLOCKS = 4
"""In-process and server (1 client) alternate in this many blocks over the same queries."""
GOAL_P95_MS = 150.0
SERIALS = itertools.count(100_000)
"""Suffixes of texts that must miss the query-vector cache: all six digits, so all the same
length in tokens (a cold text is as long as a baseline one)."""


def unseen(query: str) -> str:
    """``query`` made new to the server's cache, a fixed number of tokens longer."""
    return f"{query} #{next(SERIALS)}"


def blas_threads(limit: int | None) -> contextlib.AbstractContextManager[object]:
    """BLAS limited to ``limit`` threads (None: as it is) for the block; needs threadpoolctl."""
    if limit is None:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=limit, user_api="blas")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_index(folder: Path | None) -> Path:
    """The given index, or a 2Wiki index built once under bench-out/ (MiniLM, the defaults)."""
    if folder is not None:
        return folder
    target = OUT / "index-2wikimultihopqa"
    if not (target / "manifest.json").is_file():
        from psirag.index import Index

        corpus, _, _ = two_wiki_queries(1)
        Index.build(documents(corpus), progress=True).save(target)
    return target


class Server:
    """``psirag serve`` (the real command) in a subprocess on 127.0.0.1."""

    def __init__(self, index: Path, workers: int = 1, src: Path | None = None) -> None:
        self.port = free_port()
        self.workers = workers
        env = dict(os.environ)
        code = str(src or ROOT / "src")
        env["PYTHONPATH"] = os.pathsep.join([code, env.get("PYTHONPATH", "")])
        env.pop("PSIRAG_API_KEY", None)
        self.log = open(OUT / "bench_server.log", "wb")  # noqa: SIM115 - closed in stop()
        command = [sys.executable, "-m", "psirag.cli", "serve", str(index)]
        command += ["--port", str(self.port), "--no-mcp", "--log-level", "warning"]
        if workers > 1:
            command += ["--workers", str(workers)]
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited; see {OUT / 'bench_server.log'}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
            except OSError:
                time.sleep(0.2)
        raise SystemExit("the server did not start within 300 s")

    def processes(self) -> list[Any]:
        """The server's processes: the command's, then its workers (with --workers)."""
        import psutil

        main = psutil.Process(self.proc.pid)
        return [main, *main.children()]

    def rss_mib(self) -> float:
        """Resident memory of all the server's processes together (shared pages counted in
        each: an upper bound with workers)."""
        return sum(p.memory_info().rss for p in self.processes()) / 2**20

    def memory(self) -> dict[str, Any]:
        """RSS and PSS (MiB) of each process: ``main`` (with workers: the supervisor) and each
        worker; PSS shares the pages the processes share among them."""
        rows = []
        for i, p in enumerate(self.processes()):
            info = p.memory_full_info()
            rows.append(
                {
                    "process": "main" if i == 0 else f"worker {i}",
                    "rss_mib": round(info.rss / 2**20, 1),
                    "pss_mib": round(getattr(info, "pss", 0) / 2**20, 1),
                }
            )
        return {
            "processes": rows,
            "total_rss_mib": round(sum(r["rss_mib"] for r in rows), 1),
            "total_pss_mib": round(sum(r["pss_mib"] for r in rows), 1),
        }

    def cpu_s(self) -> float:
        """CPU seconds the server's processes have used (all their threads): unlike wall time,
        this barely depends on what else runs on the machine."""
        total = 0.0
        for p in self.processes():
            times = p.cpu_times()
            total += float(times.user + times.system)
        return total

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class Client:
    """One keep-alive connection; ``search`` returns the seconds one request took."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def search(self, query: str) -> float:
        body = json.dumps({"query": query, "k": 5})
        t0 = time.perf_counter()
        self.conn.request("POST", "/search", body, {"Content-Type": "application/json"})
        response = self.conn.getresponse()
        data = response.read()
        elapsed = time.perf_counter() - t0
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {data[:200]!r}")
        if len(json.loads(data)["passages"]) != 5:
            raise RuntimeError("a search returned fewer than 5 passages")
        return elapsed

    def close(self) -> None:
        self.conn.close()


class HealthProbe:
    """``GET /health`` every 100 ms on its own connection while a level runs: the slowest answer
    and the failures, to show that liveness keeps answering under load."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.times: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            t0 = time.perf_counter()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                conn.request("GET", "/health")
                ok = conn.getresponse().status == 200
                conn.close()
            except (OSError, http.client.HTTPException):
                ok = False
            if ok:
                self.times.append(time.perf_counter() - t0)
            else:
                self.failures += 1

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float]:
        ms = [1000 * t for t in self.times] or [0.0]
        return {"probes": len(self.times), "failures": self.failures, "max_ms": round(max(ms), 1)}


def stats_ms(seconds: list[float]) -> dict[str, float]:
    a = np.asarray(seconds) * 1000
    return {
        "p50": round(float(np.percentile(a, 50)), 2),
        "p95": round(float(np.percentile(a, 95)), 2),
        "p99": round(float(np.percentile(a, 99)), 2),
        "mean": round(float(a.mean()), 2),
        "max": round(float(a.max()), 2),
    }


def load_level(
    port: int, queries: list[str], clients: int, total: int, *, cold: bool = False
) -> dict[str, Any]:
    """``clients`` threads share ``total`` requests (the same count each), all started at once.
    ``cold``: each request's text is new (question + an unused serial), so none is cached."""
    per = total // clients
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []
    barrier = threading.Barrier(clients + 1)

    def run(c: int) -> None:
        client = Client(port)
        barrier.wait()
        try:
            for i in range(per):
                query = queries[(c * 7919 + i) % len(queries)]
                if cold:
                    query = unseen(query)
                try:
                    latencies[c].append(client.search(query))
                except (OSError, RuntimeError, http.client.HTTPException) as exc:
                    errors.append(str(exc))
                    client.close()
                    client = Client(port)
        finally:
            client.close()

    threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0, cpu0 = time.perf_counter(), time.process_time()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    client_cpu = time.process_time() - cpu0
    flat = [x for lat in latencies for x in lat]
    return {
        "clients": clients,
        "cache": "cold" if cold else "warm",
        "requests": len(flat) + len(errors),
        "errors": len(errors),
        "error_samples": errors[:5],
        "wall_s": round(wall, 3),
        "throughput_rps": round(len(flat) / wall, 1),
        "latency_ms": stats_ms(flat),
        "client_cpu_ms_per_request": round(1000 * client_cpu / max(1, len(flat) + len(errors)), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, help="a saved 2Wiki index (MiniLM)")
    ap.add_argument("--queries", type=int, default=200, help="2Wiki questions used (200)")
    ap.add_argument("--quick", action="store_true", help="a tenth of the requests (a smoke run)")
    ap.add_argument("--workers", type=int, default=1, help="psirag serve --workers N (1)")
    ap.add_argument("--out", default=None, help="result file (server.json; server_workersN.json)")
    ap.add_argument("--src", type=Path, default=None, help="the server's sources (this checkout's)")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    index_dir = ensure_index(args.index)
    _, queries, _ = two_wiki_queries(args.queries)
    scale = 0.1 if args.quick else 1.0
    info = machine_info()

    from psirag.index import Index

    index = Index.load(index_dir)
    index.search("warm up the model")
    server = Server(index_dir, args.workers, args.src)
    try:
        time.sleep(2.0)  # every worker has loaded (the first /health answered from one)
        idle_memory = server.memory()
        rss_loaded = server.rss_mib()
        client = Client(server.port)
        for q in queries[:WARMUP]:
            client.search(q)
            index.search(q)
        client.close()
        # Side by side: in-process Index.search (BLAS as it is, then one BLAS thread) and one
        # client of the server, alternating in blocks over the same queries (query embedding
        # included in all three).
        loops: dict[str, dict[str, list[float]]] = {
            name: {"total": [], "embed": [], "cpu": []} for name in ("default_blas", "one_blas")
        }
        served: list[float] = []
        per_block = max(1, int(len(queries) * scale) // BASELINE_BLOCKS)
        for b in range(BASELINE_BLOCKS):
            plain = queries[b * per_block : (b + 1) * per_block]
            for name, limit in (("default_blas", None), ("one_blas", 1)):
                with blas_threads(limit):
                    for q in map(unseen, plain):  # Index.search in its two parts
                        t0, c0 = time.perf_counter(), time.process_time()
                        vector = index.embed_query(q)
                        t1 = time.perf_counter()
                        index.search_vector(vector, q)
                        loops[name]["total"].append(time.perf_counter() - t0)
                        loops[name]["embed"].append(t1 - t0)
                        loops[name]["cpu"].append(time.process_time() - c0)
            client = Client(server.port)  # uvicorn closes a connection idle for 5 s
            client.search(unseen(plain[0]))
            for q in map(unseen, plain):  # texts the server never saw: its cache cannot help
                served.append(client.search(q))
            client.close()
        levels = []
        rss_peak = rss_loaded
        for cold in (True, False):
            if not cold:  # the warm levels find every question's vector cached, on every
                # worker (each has its own cache, and the kernel picks a worker per connection:
                # with 2 workers, 8 connections miss one of them with odds 2 in 256)
                for _ in range(1 if args.workers == 1 else 4 * args.workers):
                    client = Client(server.port)
                    for q in queries:
                        client.search(q)
                    client.close()
            for clients in LEVELS:
                total = max(clients, int(REQUESTS[clients] * scale))
                cpu0 = server.cpu_s()
                with HealthProbe(server.port) as health:
                    level = load_level(server.port, queries, clients, total, cold=cold)
                level["health"] = health.summary()
                level["server_cpu_ms_per_request"] = round(
                    1000 * (server.cpu_s() - cpu0) / max(1, level["requests"]), 2
                )
                rss_peak = max(rss_peak, server.rss_mib())
                levels.append(level)
                lat = level["latency_ms"]
                print(
                    f"{level['cache']} {clients:>3} clients: p50 {lat['p50']:.1f} ms, "
                    f"p95 {lat['p95']:.1f} ms, p99 {lat['p99']:.1f} ms, "
                    f"{level['throughput_rps']:.0f} req/s, {level['errors']} errors, "
                    f"/health max {level['health']['max_ms']} ms, CPU ms/req server "
                    f"{level['server_cpu_ms_per_request']} + clients "
                    f"{level['client_cpu_ms_per_request']}",
                    flush=True,
                )
        idle_after = server.memory()
    finally:
        server.stop()
    base, over = stats_ms(loops["default_blas"]["total"]), stats_ms(served)
    one = stats_ms(loops["one_blas"]["total"])
    cold32 = next(lv for lv in levels if lv["clients"] == 32 and lv["cache"] == "cold")
    loop_rps = {name: 1000.0 / stats_ms(loop["total"])["mean"] for name, loop in loops.items()}
    result = {
        "index": index_dir.name,
        "chunks": index.tree.n_leaves,
        "queries": len(queries),
        "protocol": (
            f"psirag serve (uvicorn, {args.workers} process(es)) on 127.0.0.1, POST /search "
            "k=5 with the default SearchConfig and real MiniLM query embedding; clients are "
            "http.client keep-alive connections in threads of the benchmark process (same 2 "
            f"cores); {WARMUP} warm-up requests; baseline: in-process Index.search (BLAS "
            f"default, then one BLAS thread) alternating with one server client in "
            f"{BASELINE_BLOCKS} blocks over the same queries; cache-missing texts are question "
            "+ ' #' + a new 6-digit serial; warm levels after every question was sent once"
        ),
        "baseline": {
            "in_process_ms": base,
            "in_process_embedding_ms": stats_ms(loops["default_blas"]["embed"]),
            "in_process_cpu_ms": stats_ms(loops["default_blas"]["cpu"]),
            "in_process_one_blas_thread_ms": one,
            "in_process_one_blas_thread_embedding_ms": stats_ms(loops["one_blas"]["embed"]),
            "in_process_one_blas_thread_cpu_ms": stats_ms(loops["one_blas"]["cpu"]),
            "server_1_client_ms": over,
            "overhead_ratio_p50": round(over["p50"] / base["p50"], 2),
            "overhead_ratio_p95": round(over["p95"] / base["p95"], 2),
            "overhead_ms_p50": round(over["p50"] - base["p50"], 2),
        },
        "levels": levels,
        "ratio_rps_32_cold_vs_in_process_loop": round(
            cold32["throughput_rps"] / loop_rps["default_blas"], 2
        ),
        "ratio_rps_32_cold_vs_in_process_loop_one_blas_thread": round(
            cold32["throughput_rps"] / loop_rps["one_blas"], 2
        ),
        "in_process_loop_rps": round(loop_rps["default_blas"], 1),
        "in_process_loop_one_blas_thread_rps": round(loop_rps["one_blas"], 1),
        "goal": {
            "ratio": 3.0,
            "p95_ms_at_32": GOAL_P95_MS,
            "met": cold32["latency_ms"]["p95"] <= GOAL_P95_MS
            and max(loop_rps.values()) * 3.0 <= cold32["throughput_rps"]
            and all(lv["errors"] == 0 for lv in levels),
        },
        "server_rss_mib": {"after_load": round(rss_loaded, 1), "peak_sampled": round(rss_peak, 1)},
        "workers": args.workers,
        "server_src": f"{args.src.parent.name}/{args.src.name}" if args.src else "this checkout",
        "memory_idle_after_load": idle_memory,
        "memory_idle_after_load_levels": idle_after,
        "quick": bool(args.quick),
        "machine": info,
    }
    name = args.out or (
        "server.json" if args.workers == 1 else f"server_workers{args.workers}.json"
    )
    path = write_result(name, result)
    print(
        f"in-process p50 {base['p50']:.1f} ms ({loop_rps['default_blas']:.0f} q/s; one BLAS "
        f"thread {one['p50']:.1f} ms, {loop_rps['one_blas']:.0f} q/s), server (1 client) p50 "
        f"{over['p50']:.1f} ms (x{result['baseline']['overhead_ratio_p50']}); ratio at 32 cold "
        f"clients {result['ratio_rps_32_cold_vs_in_process_loop']} "
        f"({result['ratio_rps_32_cold_vs_in_process_loop_one_blas_thread']} over the one-thread "
        f"loop); server RSS {rss_loaded:.0f} MiB; wrote {path}"
    )


if __name__ == "__main__":
    main()
