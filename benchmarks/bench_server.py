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
the query micro-batch add over one process embedding queries one after another.

With ``--workers N`` the server runs as ``psirag serve --workers N`` (N processes on one port);
the memory is then given per process (the supervising parent and each worker), RSS and PSS
(proportional set size: pages shared by the workers, such as the memory-mapped index, counted
once in all).

Usage: nice -n 10 python benchmarks/bench_server.py --index DIR [--workers 2] (an index of 2Wiki
built with the default MiniLM embedder; without --index one is built under bench-out/ first)
"""

from __future__ import annotations

import argparse
import http.client
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

    def __init__(self, index: Path, workers: int = 1) -> None:
        self.port = free_port()
        self.workers = workers
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
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
    port: int, queries: list[str], clients: int, total: int, *, cold: bool = False, tag: str = ""
) -> dict[str, Any]:
    """``clients`` threads share ``total`` requests (the same count each), all started at once.
    ``cold``: each request's text is new (question + `` #tag-client-i``), so none is cached."""
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
                    query = f"{query} #{tag}-{c}-{i}"
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
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
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
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, help="a saved 2Wiki index (MiniLM)")
    ap.add_argument("--queries", type=int, default=200, help="2Wiki questions used (200)")
    ap.add_argument("--quick", action="store_true", help="a tenth of the requests (a smoke run)")
    ap.add_argument("--workers", type=int, default=1, help="psirag serve --workers N (1)")
    ap.add_argument("--out", default=None, help="result file (server.json; server_workersN.json)")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    index_dir = ensure_index(args.index)
    _, queries, _ = two_wiki_queries(args.queries)
    scale = 0.1 if args.quick else 1.0
    info = machine_info()

    from psirag.index import Index

    index = Index.load(index_dir)
    index.search("warm up the model")
    server = Server(index_dir, args.workers)
    try:
        time.sleep(2.0)  # every worker has loaded (the first /health answered from one)
        idle_memory = server.memory()
        rss_loaded = server.rss_mib()
        client = Client(server.port)
        for q in queries[:WARMUP]:
            client.search(q)
            index.search(q)
        client.close()
        # Side by side: in-process Index.search and one client of the server, alternating in
        # blocks over the same queries (query embedding included in both).
        inproc: list[float] = []
        embed_only: list[float] = []
        served: list[float] = []
        per_block = max(1, int(len(queries) * scale) // BASELINE_BLOCKS)
        for b in range(BASELINE_BLOCKS):
            # texts never sent before, so that the server's query-vector cache does not help it
            block = [f"{q} #base" for q in queries[b * per_block : (b + 1) * per_block]]
            for q in block:  # Index.search, in its two parts: embed, then search_vector
                t0 = time.perf_counter()
                vector = index.embed_query(q)
                t1 = time.perf_counter()
                index.search_vector(vector, q)
                t2 = time.perf_counter()
                inproc.append(t2 - t0)
                embed_only.append(t1 - t0)
            client = Client(server.port)  # uvicorn closes a connection idle for 5 s
            client.search(block[0])
            for q in block:
                served.append(client.search(q))
            client.close()
        levels = []
        rss_peak = rss_loaded
        for cold in (True, False):
            for clients in LEVELS:
                total = max(clients, int(REQUESTS[clients] * scale))
                cpu0 = server.cpu_s()
                with HealthProbe(server.port) as health:
                    level = load_level(
                        server.port, queries, clients, total, cold=cold, tag=f"c{clients}"
                    )
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
                    f"/health max {level['health']['max_ms']} ms",
                    flush=True,
                )
        idle_after = server.memory()
    finally:
        server.stop()
    base, over = stats_ms(inproc), stats_ms(served)
    result = {
        "index": index_dir.name,
        "chunks": index.tree.n_leaves,
        "queries": len(queries),
        "protocol": (
            f"psirag serve (uvicorn, {args.workers} process(es)) on 127.0.0.1, POST /search "
            "k=5 with the default SearchConfig and real MiniLM query embedding; clients are "
            "http.client keep-alive connections in threads of the benchmark process (same 2 "
            f"cores); {WARMUP} warm-up requests; baseline: in-process Index.search alternating "
            f"with one server client in {BASELINE_BLOCKS} blocks over the same queries"
        ),
        "baseline": {
            "in_process_ms": base,
            "in_process_embedding_ms": stats_ms(embed_only),
            "server_1_client_ms": over,
            "overhead_ratio_p50": round(over["p50"] / base["p50"], 2),
            "overhead_ratio_p95": round(over["p95"] / base["p95"], 2),
            "overhead_ms_p50": round(over["p50"] - base["p50"], 2),
        },
        "levels": levels,
        "ratio_rps_32_cold_vs_in_process_loop": round(
            next(lv for lv in levels if lv["clients"] == 32 and lv["cache"] == "cold")[
                "throughput_rps"
            ]
            / (1000.0 / base["mean"]),
            2,
        ),
        "in_process_loop_rps": round(1000.0 / base["mean"], 1),
        "goal": {
            "p95_ms_at_32": GOAL_P95_MS,
            "met": next(lv for lv in levels if lv["clients"] == 32 and lv["cache"] == "cold")[
                "latency_ms"
            ]["p95"]
            <= GOAL_P95_MS,
        },
        "server_rss_mib": {"after_load": round(rss_loaded, 1), "peak_sampled": round(rss_peak, 1)},
        "workers": args.workers,
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
        f"in-process p50 {base['p50']:.1f} ms, server (1 client) p50 {over['p50']:.1f} ms "
        f"(x{result['baseline']['overhead_ratio_p50']}); server RSS {rss_loaded:.0f} MiB; "
        f"wrote {path}"
    )


if __name__ == "__main__":
    main()
