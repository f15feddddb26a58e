"""Shared helpers for the benchmark scripts: data paths, embedding caches, machine facts,
synthetic corpora and latency statistics.

The embedding cache only spares re-embedding the same texts across benchmark runs (embedding
6,119 passages takes minutes on 2 cores); end-to-end timings are taken without it.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from psirag.eval.embedcache import CachingEmbedder, text_key

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("PSIRAG_DATA", ROOT.parent / "shared" / "data"))
OUT = Path(os.environ.get("PSIRAG_BENCH_OUT", ROOT / "bench-out"))
RESULTS = ROOT / "benchmarks" / "results"
MINILM_CACHE = OUT / "cache" / "embeddings-minilm.npz"
QUESTION_CACHE = OUT / "cache" / "retrieval-question-vectors.npz"
"""MiniLM vectors of the benchmark questions (as kept by bench_retrieval_variants.py --vectors)."""


def copy_index(index: Path, copy: Path, *, sync: bool = True) -> None:
    """Copy a saved index as it is on disk. ``cp -a`` keeps the hard links between its
    generations; ``shutil.copytree`` would give each generation its own copy of the files they
    share, and the save that retires the oldest one would then delete gigabytes, which an index
    saved in place never does. ``sync`` writes the copy out, so that a measured save's fsync does
    not wait behind it."""
    if shutil.which("cp") is not None and sys.platform.startswith("linux"):
        subprocess.run(["cp", "-a", str(index), str(copy)], check=True)
    else:
        shutil.copytree(index, copy, symlinks=True)
    if sync:
        os.sync()


def dataset(name: str) -> tuple[list[dict], list[dict]]:
    """The corpus and questions of ``DATA/name`` (corpus.json, questions.json)."""
    folder = DATA / name
    if not folder.is_dir():
        raise SystemExit(f"{folder} not found: set PSIRAG_DATA to the folder holding {name}/")
    corpus = json.loads((folder / "corpus.json").read_text(encoding="utf-8"))
    questions = json.loads((folder / "questions.json").read_text(encoding="utf-8"))
    return corpus, questions


def passage_text(record: dict) -> str:
    """The paper's retrieval unit: title + newline + text."""
    return f"{record['title']}\n{record['text']}" if record.get("title") else record["text"]


def documents(corpus: Sequence[dict]) -> list[Any]:
    """One psirag Document per 2Wiki record (each record is one leaf, as in the paper)."""
    from psirag.ingest import Document

    return [
        Document(str(r.get("idx", i)), r["title"], passage_text(r), is_record=True)
        for i, r in enumerate(corpus)
    ]


def recall(retrieved: Sequence[str], gold: set[str], k: int) -> float:
    """Share of the gold passages among the first ``k`` retrieved."""
    return len(gold & set(retrieved[:k])) / len(gold)


def run_worker(script: str, kind: str, size: int, repeats: int) -> dict[str, Any]:
    """Run ``script --worker KIND --size N --repeats R`` in a fresh interpreter (same nice
    value) and return the JSON of its last stdout line.

    Why a fresh process: each size's peak RSS must be its own, not the largest so far.
    """
    cmd = [sys.executable, script, "--worker", kind, "--size", str(size)]
    cmd += ["--repeats", str(repeats)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def src_worker(script: str, src: Path, args: Sequence[str]) -> dict[str, Any]:
    """``script --worker *args`` run with the sources ``src`` first on the import path, on one
    BLAS thread; its last line of output as JSON, ``src`` set to the name of the sources'
    folder (no path of this machine in results). Exits with the worker's error when it fails."""
    src = src.resolve()
    here = ROOT / "benchmarks"
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{here}", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(Path(script).resolve()), "--worker", *args],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{src} failed (exit {done.returncode})")
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    row["src"] = src.parent.name
    return row


def search_recall(
    index: Any,
    queries: Sequence[str],
    vectors: np.ndarray,
    golds: Sequence[set[str]],
    config: Any,
) -> dict[str, float]:
    """Recall@2 and @5 (in %) of ``index.search_vector`` with ``config`` over all queries."""
    r2 = r5 = 0.0
    for query, vec, gold in zip(queries, vectors, golds, strict=True):
        got = [p.text for p in index.search_vector(vec, query, config=config)]
        r2 += recall(got, gold, 2)
        r5 += recall(got, gold, 5)
    n = len(queries)
    return {"recall@2": round(100 * r2 / n, 2), "recall@5": round(100 * r5 / n, 2)}


def two_wiki_queries(limit: int | None = None) -> tuple[list[dict], list[str], list[set[str]]]:
    """2Wiki's corpus records, the first ``limit`` questions and their gold passage texts."""
    corpus, questions = dataset("2wikimultihopqa")
    questions = questions[:limit]
    golds = [{passage_text(corpus[i]) for i in q["supporting_passage_ids"]} for q in questions]
    return corpus, [q["question"] for q in questions], golds


def _proc_status_mib(field: str) -> float | None:
    """A memory field of /proc/self/status (``VmRSS``, ``VmHWM``) in MiB; None off Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def process_memory_mib(pid: int | str = "self") -> dict[str, int] | None:
    """A process's resident memory in MiB from ``/proc/<pid>/status``: ``VmRSS``, its
    anonymous and file-backed parts (``RssAnon``, ``RssFile``: an array mapped from a file
    counts there once read) and its high-water mark ``VmHWM``; None where there is none."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            out[key] = int(value.split()[0]) // 1024
    return out


def peak_rss_mib() -> float:
    """This process's peak resident set size so far.

    Read from /proc's VmHWM where there is one: ``ru_maxrss`` survives fork and exec on Linux,
    so a child started by a process holding a large index would report the parent's peak.
    """
    peak = _proc_status_mib("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    """This process's resident set size now (Linux /proc; 0 elsewhere)."""
    return _proc_status_mib("VmRSS") or 0.0


def children_rss_mib() -> float:
    """The resident set size of this process's child processes now, in MiB (Linux /proc; 0
    elsewhere or without /proc's children lists)."""
    total = 0.0
    try:
        tasks = list(Path("/proc/self/task").iterdir())
    except OSError:
        return 0.0
    for task in tasks:
        try:
            pids = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) / 1024
            except OSError:
                continue
    return total


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds process ``pid`` has used (/proc/<pid>/stat); None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine() -> str:
    """One-line machine summary (kept for the older results files)."""
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return float("nan")


def _version(module: str) -> str:
    try:
        return str(__import__(module).__version__)
    except (ImportError, AttributeError):
        return "-"


def machine_info() -> dict[str, Any]:
    """CPU model, cores, RAM, library versions, BLAS, load and this process's nice value."""
    blas = "-"
    try:
        from threadpoolctl import threadpool_info

        libs = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        if libs:
            blas = f"{libs[0].get('internal_api')} {libs[0].get('version')}"
    except ImportError:
        pass
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": _ram_gib(),
        "arch": platform.machine(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": _version("scipy"),
        "bm25s": _version("bm25s"),
        "blas": blas,
        "nice": os.nice(0),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def write_result(name: str, result: dict[str, Any]) -> Path:
    """Write ``result`` as benchmarks/results/<name>, adding the load average at the end (kept
    when the machine facts come from an earlier run whose rows the file still holds)."""
    if isinstance(result.get("machine"), dict):
        result["machine"].setdefault("loadavg_at_end", [round(x, 2) for x in os.getloadavg()])
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def minilm_cached() -> CachingEmbedder:
    """MiniLM with its vectors kept in OUT/cache/embeddings-minilm.npz across benchmark runs."""
    from psirag.embed import load_embedder

    (OUT / "cache").mkdir(parents=True, exist_ok=True)
    return CachingEmbedder(load_embedder("minilm"), MINILM_CACHE)


class CachedVectors:
    """A read-only embedder served from an embedding cache file: never loads a model.

    Follows psirag's ``Embedder`` protocol with the id recorded in the file, so an index built
    with it is an ordinary MiniLM index. A text missing from the file is an error (run a
    benchmark that embeds with :func:`minilm_cached` first). The file is never written.
    """

    def __init__(self, path: Path = MINILM_CACHE, spec: str = "minilm") -> None:
        if not path.exists():
            raise SystemExit(f"{path} not found: run benchmarks/bench_2wiki_retrieval.py once")
        with np.load(path, allow_pickle=False) as data:
            keys = data["keys"].tolist()
            vectors = np.asarray(data["vectors"], dtype=np.float32)
            self.id = str(data["embedder_id"]) if "embedder_id" in data.files else spec
        self.spec = spec
        self.path = path
        self.max_tokens: int | None = 256
        self.last_truncated = 0
        self._row = {k: i for i, k in enumerate(keys)}
        self._vectors = vectors

    @property
    def dim(self) -> int:
        return int(self._vectors.shape[1])

    def embed(
        self, texts: Sequence[str], *, progress: bool = False, desc: str = "embedding"
    ) -> np.ndarray:
        rows = []
        for t in texts:
            row = self._row.get(text_key(t))
            if row is None:
                raise KeyError(f"{t[:60]!r} is not in {self.path}")
            rows.append(row)
        return self._vectors[np.asarray(rows, dtype=np.int64)].reshape(len(rows), self.dim)

    def count_truncated(self, texts: Sequence[str]) -> int:
        return 0


def question_vectors(queries: Sequence[str], path: Path = QUESTION_CACHE) -> np.ndarray:
    """Torch MiniLM vectors of the questions: from ``path`` when it holds them all, else embedded
    now (the passage cache holds no questions)."""
    if path.exists():
        try:
            return CachedVectors(path).embed(queries)
        except KeyError:
            pass
    from psirag.embed import load_embedder

    return load_embedder("minilm-torch").embed(queries)


def two_wiki_index(
    corpus: Sequence[dict], embedder: Any | None = None, **config: Any
) -> tuple[Any, Any]:
    """Index over the given 2Wiki records with cached MiniLM vectors; returns (index, embedder)."""
    from psirag import Index, IndexConfig

    embedder = embedder or CachedVectors()
    index = Index.build(documents(corpus), IndexConfig(**config), embedder=embedder)
    return index, embedder


def latency_stats(ms: Sequence[float]) -> dict[str, float]:
    """p50, p95, mean and min of per-query milliseconds."""
    a = np.asarray(ms, dtype=np.float64)
    return {
        "p50": round(float(np.percentile(a, 50)), 3),
        "p95": round(float(np.percentile(a, 95)), 3),
        "mean": round(float(a.mean()), 3),
        "min": round(float(a.min()), 3),
        "n": int(a.size),
    }


def clustered(n: int, dim: int, clusters: int, seed: int = 0) -> np.ndarray:
    """Unit rows around ``clusters`` random centres (Gaussian noise 0.7 of the centre scale)."""
    return clustered_with_labels(n, dim, clusters, seed)[0]


def clustered_with_labels(
    n: int, dim: int, clusters: int, seed: int = 0, noise: float = 0.7
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`clustered` plus each row's cluster label; built in blocks to bound memory."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, dim)).astype(np.float32)
    labels = rng.integers(0, clusters, n)
    e = np.empty((n, dim), dtype=np.float32)
    for lo in range(0, n, 20_000):
        hi = min(lo + 20_000, n)
        block = centers[labels[lo:hi]] + noise * rng.normal(size=(hi - lo, dim)).astype(np.float32)
        e[lo:hi] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return e, labels


def pseudo_words(count: int, rng: np.random.Generator) -> list[str]:
    """``count`` distinct lowercase pseudo-words of 5-9 letters."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: dict[str, None] = {}
    while len(words) < count:
        size = int(rng.integers(5, 10))
        words["".join(rng.choice(letters, size))] = None
    return list(words)


def synthetic_texts(
    labels: np.ndarray,
    *,
    words_per_text: int = 30,
    vocab_per_cluster: int = 60,
    shared_vocab: int = 2_000,
    topical_share: float = 0.6,
    seed: int = 0,
) -> tuple[list[str], list[list[str]]]:
    """A text per row: ``topical_share`` of its words from its cluster's own vocabulary, the
    rest from a vocabulary shared by all clusters. Returns (texts, per-cluster vocabularies)."""
    rng = np.random.default_rng(seed + 1)
    clusters = int(labels.max()) + 1
    pool = pseudo_words(clusters * vocab_per_cluster + shared_vocab, rng)
    shared = np.array(pool[:shared_vocab])
    vocab = np.array(pool[shared_vocab:]).reshape(clusters, vocab_per_cluster)
    n = labels.size
    topical = rng.random((n, words_per_text)) < topical_share
    own_at = rng.integers(0, vocab_per_cluster, (n, words_per_text))
    common_at = rng.integers(0, shared_vocab, (n, words_per_text))
    texts: list[str] = []
    for lo in range(0, n, 50_000):  # string arrays a batch at a time (GiBs at 1M rows)
        rows = slice(lo, lo + 50_000)
        own = vocab[labels[rows, None], own_at[rows]]
        words = np.where(topical[rows], own, shared[common_at[rows]])
        texts.extend(" ".join(row) for row in words.tolist())
    return texts, vocab.tolist()
