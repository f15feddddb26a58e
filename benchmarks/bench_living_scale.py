"""The living index at scale (issue 24): what adding and removing one document costs at 20k,
200k (and, given the time, 1M) chunks, against the build.

The corpus is synthetic (``_common.synthetic_texts``: pseudo-word passages, 60% of each
passage's words from its topic's vocabulary, a few capitalised names per passage so keyword
abstracts see entities), one record per chunk. The embedder is a fast deterministic hashed bag
of words (a fixed random vector per word, summed and normalised: passages of one topic get
similar vectors), so embedding is not in the figures. The default ``IndexConfig`` is used:
keyword abstracts, BM25 and the default tree mode.

Each size runs in a fresh child process (its peak RSS is its own): build, add one document
(8 passages of a topic, chunked by the index's settings) in memory, remove one document in
memory, then save / load / add / save through the ``Index`` API (what ``psirag add`` does) and
the bytes that save wrote. Per-stage seconds are the update summary's own timers. ``--src``
runs the same script against another checkout's sources (``git archive <commit> src | tar -x``),
for an old-versus-new table in one run.

``--build-only`` stops after the build (the 1M memory figure). Every run samples the build's
RSS every 50 ms and reports each stage's peak (``build_stage_peak_mib``: the stages' own timers
cut the samples into stages; "other" is what falls between them).

Usage: nice python benchmarks/bench_living_scale.py [--sizes 20000 200000] [--src DIR]
       [--label new] [--out living_scale.json] [--build-only]
(``BENCH_SAVES_ONLY=1``: only the build and the saves, loads and bytes written: no in-memory
update timings. ``BENCH_SEARCH_DELTA=1``: also the default profile's search latency and the
``hnsw`` list's recall@10 before and after a 1% add, loaded from disk.) Bytes written under
``hnsw/`` (the HNSW graph, with ``psirag[hnsw]`` installed) are reported on their own; each
saved update also reports the bytes the save passed to write() and read() (``write_call_bytes``,
``read_call_bytes``: files written and then swapped for a hard link, and base files read to
compare, show there and not in the new inodes) and its CPU seconds. After
the CLI-like add, a second add and a removal go through load + save too, and ``psirag compact``
(where the sources have it) is timed with the bytes it writes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent

N_TOPICS_PER_10K = 40
DIM = 64


class LoopbackHashEmbedder:
    """Hashed bag of words with a fixed random unit vector per word (seeded by the word's
    hash): deterministic, no model, ~1 µs a word."""

    spec = "bench:hash"
    max_tokens = None
    last_truncated = 0
    id = f"bench:hash-{DIM}"

    def __init__(self) -> None:
        self._vectors: dict[str, np.ndarray] = {}

    @property
    def dim(self) -> int:
        return DIM

    def _word(self, word: str) -> np.ndarray:
        got = self._vectors.get(word)
        if got is None:
            seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
            got = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
            self._vectors[word] = got
        return got

    def embed(
        self, texts: Sequence[str], *, progress: bool = False, desc: str = "embedding"
    ) -> np.ndarray:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i] += self._word(word.strip(".,"))
            out[i, 0] += 0.01
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def count_truncated(self, texts: Sequence[str]) -> int:
        return 0


def corpus(n: int, seed: int = 0) -> tuple[list[str], list[int], list[list[str]]]:
    """``n`` passages with their topic labels and each topic's vocabulary."""
    sys.path.insert(0, str(HERE))
    from _common import synthetic_texts

    topics = max(8, n * N_TOPICS_PER_10K // 10_000)
    labels = np.random.default_rng(seed).integers(0, topics, n)
    texts, vocab = synthetic_texts(labels, seed=seed)
    rng = np.random.default_rng(seed + 7)
    names = [w.capitalize() for w in vocab[0][:40]] + [w.capitalize() for w in vocab[-1][:40]]
    out = []
    for i, text in enumerate(texts):
        # a name (a topic word capitalised) in two passages of three: entities for the abstracts
        if i % 3:
            topic_words = vocab[int(labels[i])]
            name = " ".join(w.capitalize() for w in rng.choice(topic_words, 2).tolist())
            text = f"{name} {text}. {names[i % len(names)]} said"
        out.append(text)
    return out, labels.tolist(), vocab


def corpus_vocab(n: int, seed: int = 0) -> tuple[int, list[list[str]]]:
    """The first passage's topic and the topics' vocabularies of :func:`corpus` (``n``,
    ``seed``), without making its passages (what an update of a saved index needs)."""
    sys.path.insert(0, str(HERE))
    from _common import pseudo_words

    topics = max(8, n * N_TOPICS_PER_10K // 10_000)
    labels = np.random.default_rng(seed).integers(0, topics, n)
    clusters = int(labels.max()) + 1
    pool = pseudo_words(clusters * 60 + 2_000, np.random.default_rng(seed + 1))
    return int(labels[0]), [pool[2_000 + 60 * c : 2_000 + 60 * (c + 1)] for c in range(clusters)]


def new_document(topic: int, vocab: list[list[str]], doc_id: str = "new-doc") -> Any:
    """The benchmark's one new document: 8 passages of ``topic`` (chunked by the index's
    settings)."""
    from psirag.ingest import Document

    rng = np.random.default_rng(99)
    text = "\n\n".join(
        " ".join(rng.choice(vocab[topic], 12).tolist() + rng.choice(vocab[-1], 8).tolist()) + "."
        for _ in range(8)
    )
    return Document(doc_id, "", text, is_record=False)


def _du(folder: Path) -> int:
    """Bytes of every file under ``folder``."""
    total = 0
    for root, _, files in os.walk(folder):
        for f in files:
            total += (Path(root) / f).stat().st_size
    return total


def _inodes(folder: Path) -> dict[int, int]:
    """Size per inode under ``folder``: a save's new inodes are the bytes it wrote (a hard
    link to the base generation's file is no new inode)."""
    got: dict[int, int] = {}
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".trash-")]  # retired, being deleted
        for f in files:
            try:
                st = (Path(root) / f).stat()
            except FileNotFoundError:  # a server's background deletion took it meanwhile
                continue
            got[st.st_ino] = st.st_size
    return got


def _largest_new(folder: Path, seen: dict[int, int], k: int = 10) -> list[list[Any]]:
    """The ``k`` largest files (path under the generation, bytes) a save wrote."""
    got = []
    for root, _, files in os.walk(folder):
        for f in files:
            p = Path(root) / f
            st = p.stat()
            if st.st_ino not in seen:
                got.append([p.relative_to(folder).as_posix().split("/", 2)[-1], st.st_size])
    return sorted(got, key=lambda r: -r[1])[:k]


def _io_bytes() -> tuple[int, int]:
    """Bytes this process has passed to write() and read() so far (Linux ``/proc/self/io``
    wchar / rchar; (0, 0) elsewhere): a save's files written and then replaced by a hard link
    count here, not in the new inodes, and so do the base files it reads to compare."""
    try:
        fields = dict(
            line.split(":") for line in Path("/proc/self/io").read_text().splitlines() if line
        )
        return int(fields["wchar"]), int(fields["rchar"])
    except (OSError, KeyError, ValueError):
        return 0, 0


def _graph_new_bytes(folder: Path, seen: dict[int, int]) -> int:
    """Bytes a save wrote under the generations' ``hnsw/`` folders (the HNSW graph): new
    inodes only, so a base graph hard-linked from the generation before counts nothing."""
    got: dict[int, int] = {}
    for p in folder.rglob("hnsw/*"):
        st = p.stat()
        if p.is_file() and st.st_ino not in seen:
            got[st.st_ino] = st.st_size
    return sum(got.values())


def _search_check(index: Any, queries: list[str]) -> dict[str, Any]:
    """The default profile's search latency (p50/p95 ms, one thread) and, where the index has
    an HNSW graph, its ``hnsw`` list's recall@10 against the exact ``dense`` list's top 10."""
    from psirag import SearchConfig

    ms = []
    for q in queries:
        t0 = time.perf_counter()
        index.search(q)
        ms.append(1000 * (time.perf_counter() - t0))
    out: dict[str, Any] = {
        "default_p50_ms": round(float(np.percentile(ms, 50)), 2),
        "default_p95_ms": round(float(np.percentile(ms, 95)), 2),
        "graph": index.data.leaf_graph is not None,
    }
    if index.data.leaf_graph is not None:
        hits = []
        for q in queries:
            got = {p.leaf for p in index.search(q, config=SearchConfig(lists=("hnsw",), k=10))}
            want = {p.leaf for p in index.search(q, config=SearchConfig(lists=("dense",), k=10))}
            hits.append(len(got & want) / max(1, len(want)))
        out["hnsw_recall_at_10"] = round(float(np.mean(hits)), 4)
    return out


def _compact(folder: Path) -> dict[str, Any] | None:
    """``psirag compact``'s time and bytes written (None: sources without it)."""
    try:
        from psirag.living import compact_saved  # type: ignore[attr-defined]
    except ImportError:
        return None
    seen = _inodes(folder)
    t0 = time.perf_counter()
    compact_saved(folder)
    return {
        "seconds": round(time.perf_counter() - t0, 3),
        "bytes_written": sum(s for i, s in _inodes(folder).items() if i not in seen),
    }


def _role(pid: int, own: bytes) -> str:
    """What a build's process is, from its command line: ``graph`` (the HNSW child), ``bm25``
    (the term counts' child), ``fork`` (a forked copy of the build process: the second
    abstracts scorer), else the program's name."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "gone"
    if b"graph_process" in cmd:
        return "graph"
    if b"bm25_process" in cmd:
        return "bm25"
    if cmd == own:
        return "fork"
    return Path(cmd.split(b"\0")[0].decode(errors="replace")).name or "other"


def _machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (every core; /proc/stat), 0 without it."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return 0.0
    # user nice system idle iowait irq softirq steal: all but idle and iowait
    busy = sum(int(first[i]) for i in (1, 2, 3, 6, 7, 8) if i < len(first))
    return busy / os.sysconf("SC_CLK_TCK")


class RssSampler:
    """This process's RSS every ``every`` seconds on a daemon thread, as (time, MiB) pairs;
    beside it the RSS with the child processes, and every ``cpu_every`` seconds the CPU seconds
    of this process and each descendant. The PSS summed over this process and every descendant
    is read every ``pss_every`` seconds by a detached process at the lowest priority
    (``_pss_watch.py``: reading smaps_rollup walks a process's page tables, about 55 ms of CPU
    for a 5 GiB build; on this thread once a second it took 5-12% of a core from the build)."""

    def __init__(self, every: float = 0.05, pss_every: float = 0.5, cpu_every: float = 1.0) -> None:
        from _common import children_rss_mib, cpu_seconds, current_rss_mib
        from _pss_watch import descendant_pids

        self.samples: list[tuple[float, float]] = []
        self.with_children: list[float] = []
        """This process's RSS plus its child processes' (the build's HNSW graph process)."""
        self.pss: list[tuple[float, float, int]] = []
        """(time, summed PSS in MiB, processes) over this process and every descendant."""
        self.pss_cpu = 0.0
        """CPU seconds the PSS reader used (its own process, not the build's)."""
        self.cpu: list[tuple[float, dict[int, float]]] = []
        """(time, {pid: CPU seconds so far}) for this process and every descendant."""
        self.roles: dict[int, str] = {}
        self.machine: list[float] = []
        """Busy CPU seconds of the whole machine (every process, others' too) at each CPU
        sample."""
        self._stop = threading.Event()
        me = os.getpid()
        own = Path("/proc/self/cmdline").read_bytes()
        self.roles[me] = "build"
        self._dir = Path(tempfile.mkdtemp(prefix="bench-pss-"))
        watch = [sys.executable, str(HERE / "_pss_watch.py"), str(me)]
        watch += [str(self._dir / "pss.txt"), str(self._dir / "stop"), str(pss_every)]
        # detached (its parent, the shell, exits at once): not one of this build's descendants
        subprocess.run(["sh", "-c", " ".join(f"'{a}'" for a in watch) + " &"], check=True)

        self.own_cpu = 0.0
        """CPU seconds the sampling thread itself used (part of the build process's CPU)."""

        def run() -> None:
            next_cpu = 0.0
            t_cpu = time.thread_time()
            while not self._stop.is_set():
                now = time.perf_counter()
                mib = current_rss_mib()
                self.samples.append((now, mib))
                self.with_children.append(mib + children_rss_mib())
                if now >= next_cpu:
                    next_cpu = now + cpu_every
                    row = {}
                    for pid in [me, *descendant_pids(me)]:
                        secs = cpu_seconds(pid)
                        if secs is None:
                            continue
                        row[pid] = secs
                        if pid not in self.roles:
                            self.roles[pid] = _role(pid, own)
                    self.cpu.append((now, row))
                    self.machine.append(_machine_busy_seconds())
                self.own_cpu = time.thread_time() - t_cpu
                self._stop.wait(every)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        (self._dir / "stop").touch()
        out = self._dir / "pss.txt"
        deadline = time.perf_counter() + 10
        while time.perf_counter() < deadline:
            text = out.read_text() if out.exists() else ""
            if "cpu " in text:
                break
            time.sleep(0.1)
        for line in text.splitlines():
            parts = line.split()
            if parts[0] == "cpu":
                self.pss_cpu = float(parts[1])
            elif len(parts) == 3:
                self.pss.append((float(parts[0]), float(parts[1]), int(parts[2])))
        shutil.rmtree(self._dir, ignore_errors=True)

    def stage_peaks(self, start: float, seconds: dict[str, float]) -> dict[str, float]:
        """Peak RSS per stage, the stages laid end to end from ``start`` by their timers in
        build order (a stage's untimed gaps count as "other"; a ``*_thread`` timer, a stage
        run on a background thread beside the others, is not laid out)."""
        bounds = self._bounds(start, seconds)
        peaks: dict[str, float] = {}
        for at, mib in self.samples:
            if at < start:
                continue
            name = next((b[0] for b in bounds if b[1] <= at < b[2]), "other")
            peaks[name] = max(peaks.get(name, 0.0), mib)
        return {k: round(v, 1) for k, v in peaks.items()}

    def _bounds(self, start: float, seconds: dict[str, float]) -> list[tuple[str, float, float]]:
        bounds = []
        t = start
        for name, secs in seconds.items():
            if name.endswith("_thread"):
                continue
            bounds.append((name, t, t + secs))
            t += secs
        return bounds

    def stage_pss_peaks(self, start: float, seconds: dict[str, float]) -> dict[str, float]:
        """Peak summed PSS per stage, cut as :meth:`stage_peaks` cuts the RSS samples."""
        bounds = self._bounds(start, seconds)
        peaks: dict[str, float] = {}
        for at, mib, _ in self.pss:
            if at < start:
                continue
            name = next((b[0] for b in bounds if b[1] <= at < b[2]), "other")
            peaks[name] = max(peaks.get(name, 0.0), mib)
        return {k: round(v, 1) for k, v in peaks.items()}

    def stage_cpu(self, start: float, seconds: dict[str, float]) -> dict[str, dict[str, float]]:
        """CPU seconds per stage and per process role (``build``, ``fork``, ``graph``,
        ``bm25``, ...), from the per-second samples: each process's CPU between two samples
        goes to the stage holding the interval's middle. A process's last second before it
        exits is lost (up to one second per child). ``wall`` is the stage's seconds and
        ``busy`` the cores used on average (of ``os.cpu_count()``); ``machine_busy`` the cores
        every process of the machine used on average (the build's and others' work)."""
        bounds = self._bounds(start, seconds)
        table: dict[str, dict[str, float]] = {}
        machine: dict[str, float] = {}
        prev: dict[int, float] | None = None
        prev_at = start
        for i, (at, row) in enumerate(self.cpu):
            if (
                prev is None or at < start
            ):  # the first sample: the CPU used before it is not the build's
                prev, prev_at = row, at
                continue
            mid = (prev_at + at) / 2
            name = next((b[0] for b in bounds if b[1] <= mid < b[2]), "other")
            cell = table.setdefault(name, {})
            if i < len(self.machine):
                machine[name] = machine.get(name, 0.0) + self.machine[i] - self.machine[i - 1]
            for pid, secs in row.items():
                used = secs - prev.get(pid, 0.0)  # a new child: all of its CPU so far
                role = self.roles.get(pid, "other")
                cell[role] = cell.get(role, 0.0) + max(used, 0.0)
            prev, prev_at = row, at
        for name, a, b in bounds:
            cell = table.setdefault(name, {})
            cell["wall"] = b - a
        for cell in table.values():
            wall = cell.get("wall")
            cpu = sum(v for k, v in cell.items() if k != "wall")
            cell["cpu"] = cpu
            if wall:
                cell["busy"] = cpu / wall
        for name, cell in table.items():
            if cell.get("wall") and name in machine:  # every process's, the build's included
                cell["machine_busy"] = machine[name] / cell["wall"]
        return {k: {r: round(v, 2) for r, v in c.items()} for k, c in table.items()}


def worker(n: int, build_only: bool = False, save_to: Path | None = None) -> dict[str, Any]:
    from _common import current_rss_mib, peak_rss_mib

    from psirag import Index, IndexConfig
    from psirag.eval.harness import single_thread_blas
    from psirag.ingest import Document

    texts, labels, vocab = corpus(n)
    docs = [Document(str(i), "", t, is_record=True) for i, t in enumerate(texts)]
    new_doc = new_document(int(labels[0]), vocab)
    new_text = new_doc.text
    emb = LoopbackHashEmbedder()
    out: dict[str, Any] = {"n": n}
    before = current_rss_mib()
    del texts
    with single_thread_blas():
        # BENCH_NO_SAMPLER=1: no sampling thread and no PSS reader (together about 70 CPU
        # seconds of a 1M build on 2 cores), for a build time without the instruments; the
        # build process's own peak (VmHWM) is still read
        sampler = None if os.environ.get("BENCH_NO_SAMPLER") == "1" else RssSampler()
        t0 = time.perf_counter()
        index = Index.build(docs, IndexConfig(), embedder=emb)
        out["build_seconds"] = round(time.perf_counter() - t0, 3)
        out["build_stages"] = {k: round(v, 3) for k, v in index.stats.seconds.items()}
        out["peak_rss_build_mib"] = round(peak_rss_mib(), 1)
        if sampler is None:
            out["samplers"] = "off"
        else:
            sampler.stop()
            # sampled (every 50 ms): this process and its children together
            children = max(sampler.with_children, default=0)
            out["peak_rss_build_with_children_mib"] = round(children, 1)
            out["rss_before_mib"] = round(before, 1)
            out["build_stage_peak_mib"] = sampler.stage_peaks(t0, index.stats.seconds)
            # PSS (a copy-on-write page shared with a forked child counts once) summed over this
            # process and every descendant, read every 0.5 s by a detached low-priority process
            # (it lags when both cores are busy): the build's real footprint
            out["peak_pss_build_with_descendants_mib"] = round(
                max((m for _, m, _ in sampler.pss), default=0), 1
            )
            out["build_stage_peak_pss_mib"] = sampler.stage_pss_peaks(t0, index.stats.seconds)
            out["build_stage_cpu_seconds"] = sampler.stage_cpu(t0, index.stats.seconds)
            out["sampler_cpu_seconds"] = round(sampler.own_cpu, 2)
            out["pss_reader_cpu_seconds"] = round(sampler.pss_cpu, 2)
            log = os.environ.get("BENCH_CPU_LOG")
            if log:  # the raw samples, for a per-second look
                Path(log).write_text(
                    json.dumps(
                        {
                            "t0": t0,
                            "roles": {str(k): v for k, v in sampler.roles.items()},
                            "cpu": [[a, {str(k): v for k, v in r.items()}] for a, r in sampler.cpu],
                            "machine": sampler.machine,
                            "pss": sampler.pss,
                            "rss": sampler.samples,
                            "stages": index.stats.seconds,
                        }
                    )
                )
        out["rss_after_build_mib"] = round(current_rss_mib(), 1)
        if build_only:
            out["peak_rss_mib"] = round(peak_rss_mib(), 1)
            if save_to is not None:  # kept for --index runs (the build's peak is above)
                t0 = time.perf_counter()
                index.save(save_to)
                out["save_seconds"] = round(time.perf_counter() - t0, 3)
                out["index_bytes"] = _du(save_to)
                out["saved_to"] = save_to.name  # its name only: no path of this machine
                out["peak_rss_with_save_mib"] = round(peak_rss_mib(), 1)
            return out
        in_memory = os.environ.get("BENCH_SAVES_ONLY") != "1"
        # the saved path first, as a user runs it: `psirag index`, then `psirag add` (load +
        # add + save) and so on; the in-memory updates below would otherwise have used up the
        # built table's counts (a phrase table hands them to the table it is added to)
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
            folder = Path(tmp) / "ix"
            t0 = time.perf_counter()
            index.save(folder)
            out["save_seconds"] = round(time.perf_counter() - t0, 3)
            out["index_bytes"] = _du(folder)
            t0 = time.perf_counter()
            ix = Index.load(folder, embedder=emb)
            t1 = time.perf_counter()
            ix.add([new_doc])
            t2 = time.perf_counter()
            seen = _inodes(folder)
            io0, cpu0 = _io_bytes(), time.process_time()
            ix.save(folder)
            t3 = time.perf_counter()
            io1, cpu1 = _io_bytes(), time.process_time()
            written = sum(s for i, s in _inodes(folder).items() if i not in seen)
            out["cli_like_add_1_doc"] = {
                "load_seconds": round(t1 - t0, 3),
                "add_seconds": round(t2 - t1, 3),
                "save_seconds": round(t3 - t2, 3),
                "save_cpu_seconds": round(cpu1 - cpu0, 3),
                "bytes_written": written,
                "write_call_bytes": io1[0] - io0[0],
                "read_call_bytes": io1[1] - io0[1],
                "graph_bytes_written": _graph_new_bytes(folder, seen),
                "largest_files": _largest_new(folder, seen),
            }
            # what the next saves write: another add (on the saved add), a removal
            for name, act in (
                (
                    "cli_like_add_again",
                    lambda ix: ix.add(
                        [
                            new_doc.__class__(
                                "again-doc", "", new_text.replace(".", " again."), is_record=False
                            )
                        ]
                    ),
                ),
                ("cli_like_remove_1_doc", lambda ix: ix.remove(["17"])),
            ):
                t0 = time.perf_counter()
                ix = Index.load(folder, embedder=emb)
                act(ix)
                seen = _inodes(folder)
                t1 = time.perf_counter()
                io0, cpu0 = _io_bytes(), time.process_time()
                ix.save(folder)
                t2 = time.perf_counter()
                io1, cpu1 = _io_bytes(), time.process_time()
                out[name] = {
                    "load_add_seconds": round(t1 - t0, 3),
                    "save_seconds": round(t2 - t1, 3),
                    "save_cpu_seconds": round(cpu1 - cpu0, 3),
                    "bytes_written": sum(s for i, s in _inodes(folder).items() if i not in seen),
                    "write_call_bytes": io1[0] - io0[0],
                    "read_call_bytes": io1[1] - io0[1],
                    "graph_bytes_written": _graph_new_bytes(folder, seen),
                    "largest_files": _largest_new(folder, seen),
                }
            compact = _compact(folder)
            if compact is not None:
                out["compact"] = compact
            if os.environ.get("BENCH_SEARCH_DELTA") == "1":
                # the default profile's search before and after 1% of the chunks arrive as
                # new documents (with the log-structured graph: a 1% delta, scanned exactly)
                # queries from the indexed topics' words and from the new documents' (30 each)
                more_texts, _, more_vocab = corpus(max(1, n // 100), seed=11)
                qrng = np.random.default_rng(7)
                queries = [
                    " ".join(qrng.choice(words[int(qrng.integers(len(words)))], 4).tolist())
                    for words in (vocab, more_vocab)
                    for _ in range(30)
                ]
                ix = Index.load(folder, embedder=emb)
                check: dict[str, Any] = {"before": _search_check(ix, queries)}
                more = [
                    Document(f"delta-{k}", "", t, is_record=True) for k, t in enumerate(more_texts)
                ]
                t0 = time.perf_counter()
                ix.add(more)
                check["add_1pct_seconds"] = round(time.perf_counter() - t0, 3)
                graph = ix.data.leaf_graph
                check["delta_leaves"] = int(getattr(graph, "n_delta", 0) or 0)
                seen = _inodes(folder)
                ix.save(folder)
                check["save_bytes_written"] = sum(
                    s for i, s in _inodes(folder).items() if i not in seen
                )
                check["save_graph_bytes_written"] = _graph_new_bytes(folder, seen)
                ix = Index.load(folder, embedder=emb)
                check["after_1pct"] = _search_check(ix, queries)
                out["search_1pct_delta"] = check
        base = index.data
        for name, act in (
            ("add_1_doc", lambda ix: ix.add([new_doc])),
            ("remove_1_doc", lambda ix: ix.remove(["17"])),
        ):
            if not in_memory:
                break
            runs = []
            for _ in range(2):
                ix = Index.from_data(base, embedder=emb)
                t0 = time.perf_counter()
                summary = act(ix)
                total = time.perf_counter() - t0
                runs.append((total, summary))
            total, summary = min(runs, key=lambda r: r[0])
            out[name] = {
                "seconds": round(total, 3),
                "stages": {k: round(v, 3) for k, v in summary.seconds.items()},
                "chunks": summary.chunks_added + summary.chunks_removed,
                "nodes_refreshed": summary.nodes_refreshed,
            }
        # a running process adds one document after another (each reuses what the one
        # before left: the phrase layout's spare room, the BM25 segments)
        updated = Index.from_data(base, embedder=emb)
        if in_memory:
            updated.add([new_doc])
        steady = []
        for k in range(4 if in_memory else 0):
            doc = Document(f"next-{k}", "", new_text.replace(".", f" extra{k}."), is_record=False)
            t0 = time.perf_counter()
            summary = updated.add([doc])
            steady.append((time.perf_counter() - t0, summary))
        steady.sort(key=lambda r: r[0])
        if steady:
            total, summary = steady[len(steady) // 2]
            out["add_1_doc_steady"] = {
                "seconds": round(total, 3),
                "all_seconds": sorted(round(t, 3) for t, _ in steady),
                "stages": {k: round(v, 3) for k, v in summary.seconds.items()},
            }
        # BM25 is scored at query time from counts now: what a query costs, after the adds
        qrng = np.random.default_rng(5)
        queries = [
            " ".join(qrng.choice(vocab[int(qrng.integers(len(vocab)))], 3).tolist())
            for _ in range(40)
        ]
        ms = []
        for q in queries if in_memory else []:
            t0 = time.perf_counter()
            updated.sparse.search(q, k=10)
            ms.append(1000 * (time.perf_counter() - t0))
        if ms:
            out["bm25_query_ms"] = {
                "p50": round(float(np.percentile(ms, 50)), 2),
                "p95": round(float(np.percentile(ms, 95)), 2),
            }
    out["peak_rss_mib"] = round(peak_rss_mib(), 1)
    return out


def _saved_update(folder: Path, emb: Any, act: Any) -> dict[str, Any]:
    """What ``psirag add`` / ``remove`` does to the index in ``folder``: load, ``act``, save;
    seconds of each and the bytes the save wrote (new inodes)."""
    from psirag import Index

    t0 = time.perf_counter()
    ix = Index.load(folder, embedder=emb)
    t1 = time.perf_counter()
    act(ix)
    t2 = time.perf_counter()
    seen = _inodes(folder)
    ix.save(folder)
    t3 = time.perf_counter()
    return {
        "load_seconds": round(t1 - t0, 3),
        "update_seconds": round(t2 - t1, 3),
        "save_seconds": round(t3 - t2, 3),
        "total_seconds": round(t3 - t0, 3),
        "bytes_written": sum(s for i, s in _inodes(folder).items() if i not in seen),
        "graph_bytes_written": _graph_new_bytes(folder, seen),
        "largest_files": _largest_new(folder, seen),
    }


def reuse_worker(source: Path) -> dict[str, Any]:
    """The update figures on an index saved before (``--index DIR``, e.g. one ``--build-only
    --save DIR`` made), on a copy of it so that ``DIR`` stays as it was: the load; adding one
    document, 1% of the chunks as new documents and removing one document, in memory (each on
    the loaded index) and saved (load + update + save, what the CLI does, with bytes written).
    The new documents are made from the vocabularies of :func:`corpus` at the index's size."""
    from _common import copy_index, current_rss_mib, peak_rss_mib

    from psirag import Index
    from psirag.eval.harness import single_thread_blas
    from psirag.ingest import Document

    emb = LoopbackHashEmbedder()
    out: dict[str, Any] = {"index": source.name}  # no path of this machine in results
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp, single_thread_blas():
        folder = Path(tmp) / "ix"
        t0 = time.perf_counter()
        copy_index(source, folder, sync=False)
        out["copy_seconds"] = round(time.perf_counter() - t0, 1)
        out["index_bytes"] = _du(folder)
        t0 = time.perf_counter()
        base = Index.load(folder, embedder=emb)
        out["load_seconds"] = round(time.perf_counter() - t0, 3)
        n = base.data.tree.n_leaves
        out["n"] = n
        topic, vocab = corpus_vocab(n)
        new_doc = new_document(topic, vocab)
        more_texts, _, _ = corpus(max(1, n // 100), seed=11)
        more = [Document(f"delta-{k}", "", t, is_record=True) for k, t in enumerate(more_texts)]
        removed = "17"
        actions = (
            ("add_1_doc", lambda ix: ix.add([new_doc])),
            ("add_1pct", lambda ix: ix.add(more)),
            ("remove_1_doc", lambda ix: ix.remove([removed])),
        )
        for name, act in actions:
            ix = Index.from_data(base.data, embedder=emb)
            rss = current_rss_mib()
            t0 = time.perf_counter()
            summary = act(ix)
            out[f"in_memory_{name}"] = {
                "seconds": round(time.perf_counter() - t0, 3),
                "stages": {k: round(v, 3) for k, v in summary.seconds.items()},
                "chunks": summary.chunks_added + summary.chunks_removed,
                "rss_before_mib": round(rss),
                "rss_after_mib": round(current_rss_mib()),
            }
            print(name, json.dumps(out[f"in_memory_{name}"]), file=sys.stderr, flush=True)
            del ix, summary
        del base
        for name, act in actions:
            out[f"saved_{name}"] = _saved_update(folder, emb, act)
            print(name, json.dumps(out[f"saved_{name}"]), file=sys.stderr, flush=True)
        compact = _compact(folder)
        if compact is not None:
            out["compact"] = compact
    out["peak_rss_mib"] = round(peak_rss_mib(), 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[20_000, 200_000])
    p.add_argument("--src", type=Path, default=None, help="sources to run (default: this repo)")
    p.add_argument("--label", default="new")
    p.add_argument("--out", default="living_scale.json")
    p.add_argument("--build-only", action="store_true", help="stop after the build")
    p.add_argument(
        "--save",
        type=Path,
        default=None,
        help="with --build-only and one size: save the built index to this new folder",
    )
    p.add_argument(
        "--index",
        type=Path,
        default=None,
        help="no build: the update figures on a copy of this saved index (--sizes is ignored)",
    )
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        if args.index is not None:
            print(json.dumps(reuse_worker(args.index)))
        else:
            print(json.dumps(worker(args.worker, args.build_only, args.save)))
        return
    if args.save is not None and (not args.build_only or len(args.sizes) != 1):
        p.error("--save needs --build-only and one size")
    if args.save is not None and args.save.exists():
        p.error(f"--save {args.save}: the folder exists; give a new one")
    if args.index is not None and not (args.index / "manifest.json").exists():
        p.error(f"--index {args.index}: no saved index there (no manifest.json)")
    src = (args.src or HERE.parent / "src").resolve()
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE}", "OMP_NUM_THREADS": "1"}
    rows = []
    for n in [0] if args.index is not None else args.sizes:
        t0 = time.perf_counter()
        extra = ["--build-only"] if args.build_only else []
        extra += ["--save", str(args.save.resolve())] if args.save is not None else []
        extra += ["--index", str(args.index.resolve())] if args.index is not None else []
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--worker", str(n), *extra],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"size {n} failed (exit {done.returncode})")
        row = json.loads(done.stdout.strip().splitlines()[-1])
        row["wall_seconds"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(row), flush=True)
        rows.append(row)
    result: dict[str, Any] = {"label": args.label, "src": str(src.name), "rows": rows}
    adds = {r["n"]: r["add_1_doc"]["seconds"] for r in rows if "add_1_doc" in r}
    if 20_000 in adds and 200_000 in adds:
        result["add_1_doc_ratio_200k_20k"] = round(adds[200_000] / adds[20_000], 2)
    sys.path.insert(0, str(HERE))
    from _common import machine_info

    result["machine"] = machine_info()
    target = HERE / "results" / args.out if "/" not in args.out else Path(args.out)
    old = json.loads(target.read_text()) if target.exists() else {}
    old[args.label] = result
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(old, indent=1) + "\n")
    shutil.move(tmp, target)
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
