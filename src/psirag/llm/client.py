"""The one gate every LLM call passes through: cache, bounded concurrency, accounting.

Why one gate: an index build makes thousands of calls. With every call keyed into a persistent
SQLite cache, a crashed or interrupted build resumes for free (only unfinished calls are paid
again), and the per-stage counters say exactly what a run cost. Failed and empty answers are
never cached, so a bad moment of the server is not remembered as an answer. Deadlines and retries
belong to the backend's HTTP policy (:mod:`psirag.http`), so one rule holds for chat and
embeddings alike; the client counts the retries a backend reports.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from psirag.llm.base import (
    ChatModel,
    ChatResult,
    GenerationParams,
    Message,
    TokenSink,
    chat_streaming,
    token_counter,
)
from psirag.llm.errors import LLMError

CACHE_FORMAT = 1
"""Bumped when the key recipe or the table changes, so old entries are never misread."""


def cache_key(model_id: str, messages: Sequence[Message], params: GenerationParams) -> str:
    """sha256 over the model id, the exact messages and the sampling settings (never a key)."""
    payload = {
        "format": CACHE_FORMAT,
        "model": model_id,
        "messages": [dict(m) for m in messages],
        "params": {**asdict(params), "stop": list(params.stop)},
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """Persistent answers in SQLite (WAL), shared safely by threads here and other processes.

    One connection guarded by a lock serves this process's threads; WAL plus a busy timeout lets
    several processes read and write the same file. Each write is its own transaction, so a crash
    loses at most the call in flight.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            self.path, timeout=60, check_same_thread=False, isolation_level=None
        )
        with self._lock:
            self._conn.execute("PRAGMA busy_timeout = 60000")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS responses ("
                " key TEXT PRIMARY KEY,"
                " model TEXT NOT NULL,"
                " text TEXT NOT NULL,"
                " prompt_tokens INTEGER NOT NULL,"
                " completion_tokens INTEGER NOT NULL,"
                " finish_reason TEXT,"
                " created REAL NOT NULL)"
            )

    def get(self, key: str) -> ChatResult | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT text, prompt_tokens, completion_tokens, finish_reason"
                " FROM responses WHERE key = ?",
                (key,),
            ).fetchone()
        if row is None:
            return None
        return ChatResult(row[0], int(row[1]), int(row[2]), cached=True, finish_reason=row[3])

    def put(self, key: str, model_id: str, result: ChatResult) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    model_id,
                    result.text,
                    result.prompt_tokens,
                    result.completion_tokens,
                    result.finish_reason,
                    time.time(),
                ),
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


CallRunner = Callable[
    [Sequence[list[Message]], GenerationParams], Iterator[tuple[int, ChatResult, float]]
]
"""Runs model calls elsewhere (a Ray cluster): yields ``(position, result, seconds)`` for each of
the messages as each finishes, in any order; raises on the first failure."""


@dataclass
class _StageUsage:
    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    retries: int = 0
    failed: int = 0


class LLMClient:
    """Wraps a :class:`ChatModel` with a response cache and per-stage usage counters.

    ``chat(messages, params, stage)`` is the one way the agents, summaries and abstracts call a
    model; a bare ChatModel is wrapped with :func:`as_client`. Retries happen in the backend (an
    HTTP model retries under its :class:`psirag.http.HttpPolicy` and reports how many in
    ``ChatResult.extra["retries"]`` or ``LLMError.retries``). ``cache_path=None`` turns the cache
    off.
    """

    def __init__(
        self, model: ChatModel, cache_path: str | Path | None, max_concurrency: int = 4
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        self.model = model
        self.cache = ResponseCache(cache_path) if cache_path is not None else None
        self.max_concurrency = int(max_concurrency)
        self._usage: dict[str, _StageUsage] = {}
        self._usage_lock = threading.Lock()
        self.runner: CallRunner | None = None

    def with_runner(self, runner: CallRunner) -> LLMClient:
        """This client (same cache, same usage counters) with the calls that miss the cache run
        by ``runner`` (``chat_many`` only): the driver of a Ray build keeps the one cache and
        every answer is stored the moment it arrives, so a crash or rerun never pays twice."""
        view = copy.copy(self)
        view.runner = runner
        return view

    def __repr__(self) -> str:
        cache = str(self.cache.path) if self.cache else None
        return f"LLMClient(model={self.model.id!r}, cache={cache!r})"

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()

    @property
    def id(self) -> str:
        """The wrapped model's id, so a client can stand wherever a ChatModel is expected."""
        return self.model.id

    @property
    def context_tokens(self) -> int:
        return int(self.model.context_tokens)

    def count_tokens(self, text: str) -> int:
        """The model's own count where it has a tokenizer, else a high estimate."""
        return token_counter(self.model)(text)

    @property
    def usage(self) -> dict[str, dict[str, float]]:
        """Per stage: calls (paid, i.e. sent to the model), cached, tokens, seconds, retries,
        failed."""
        with self._usage_lock:
            return {stage: asdict(u) for stage, u in self._usage.items()}

    def _stage(self, stage: str) -> _StageUsage:
        # Caller holds _usage_lock.
        return self._usage.setdefault(stage, _StageUsage())

    def lookup(
        self, messages: list[Message], params: GenerationParams, stage: str = "agent"
    ) -> ChatResult | None:
        """The cached answer to this exact request (counted as cached), or None."""
        if self.cache is None:
            return None
        hit = self.cache.get(cache_key(self.model.id, messages, params))
        if hit is not None:
            with self._usage_lock:
                self._stage(stage).cached += 1
        return hit

    def record(
        self,
        messages: list[Message],
        params: GenerationParams,
        stage: str,
        result: ChatResult,
        seconds: float,
    ) -> None:
        """Count a paid call and keep its answer in the cache (unless it is empty)."""
        retries = result.extra.get("retries", 0)
        with self._usage_lock:
            u = self._stage(stage)
            u.calls += 1
            u.retries += retries if isinstance(retries, int) else 0
            u.prompt_tokens += result.prompt_tokens
            u.completion_tokens += result.completion_tokens
            u.seconds += seconds
        if self.cache is not None and result.text.strip():
            self.cache.put(cache_key(self.model.id, messages, params), self.model.id, result)

    def record_failure(self, stage: str, exc: LLMError, seconds: float) -> None:
        """Count a failed call."""
        with self._usage_lock:
            u = self._stage(stage)
            u.failed += 1
            u.retries += exc.retries
            u.seconds += seconds

    def chat(
        self, messages: list[Message], params: GenerationParams, stage: str = "agent"
    ) -> ChatResult:
        """One call: from the cache when this exact request was answered before, else the model."""
        hit = self.lookup(messages, params, stage)
        if hit is not None:
            return hit
        start = time.perf_counter()
        try:
            result = self.model.chat(messages, params)
        except LLMError as exc:
            self.record_failure(stage, exc, time.perf_counter() - start)
            raise
        self.record(messages, params, stage, result, time.perf_counter() - start)
        return result

    def chat_stream(
        self,
        messages: list[Message],
        params: GenerationParams,
        on_token: TokenSink,
        stage: str = "agent",
    ) -> ChatResult:
        """:meth:`chat` with the reply passed to ``on_token`` as the model writes it (a cached
        reply, or a model that does not stream, in one piece); the result is the same."""
        hit = self.lookup(messages, params, stage)
        if hit is not None:
            if hit.text:
                on_token(hit.text)
            return hit
        start = time.perf_counter()
        try:
            result = chat_streaming(self.model, messages, params, on_token)
        except LLMError as exc:
            self.record_failure(stage, exc, time.perf_counter() - start)
            raise
        self.record(messages, params, stage, result, time.perf_counter() - start)
        return result

    def chat_many(
        self,
        list_of_messages: Sequence[list[Message]],
        params: GenerationParams,
        stage: str = "agent",
        progress: bool = False,
    ) -> list[ChatResult]:
        """Many independent calls, at most ``max_concurrency`` at a time, results in input order.

        On the first failure, calls not yet started are cancelled, calls in flight finish (and are
        cached), then the error is raised: a re-run pays only for what did not finish.
        """
        n = len(list_of_messages)
        if n == 0:
            return []
        if self.runner is not None:
            return self._chat_many_remote(list_of_messages, params, stage, progress)
        results: list[ChatResult | None] = [None] * n
        error: BaseException | None = None
        pool = ThreadPoolExecutor(
            max_workers=min(self.max_concurrency, n), thread_name_prefix="psirag-llm"
        )
        bar = tqdm(total=n, desc=f"LLM {stage}", unit="call", disable=not progress, leave=False)
        abort = threading.Event()

        def task(messages: list[Message]) -> ChatResult | None:
            # Checked in the worker, so no call starts once one has failed, however fast the
            # workers are compared with the thread collecting results.
            if abort.is_set():
                return None
            try:
                return self.chat(messages, params, stage)
            except BaseException:
                abort.set()
                raise

        try:
            futures: dict[Future[ChatResult | None], int] = {
                pool.submit(task, messages): i for i, messages in enumerate(list_of_messages)
            }
            for future in as_completed(futures):
                if future.cancelled():
                    continue
                exc = future.exception()
                if exc is not None:
                    if error is None:
                        error = exc
                        for other in futures:
                            other.cancel()
                    continue
                results[futures[future]] = future.result()
                bar.update(1)
        except BaseException:
            abort.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        finally:
            bar.close()
        pool.shutdown(wait=True)
        if error is not None:
            raise error
        return [r for r in results if r is not None]

    def _chat_many_remote(
        self,
        list_of_messages: Sequence[list[Message]],
        params: GenerationParams,
        stage: str,
        progress: bool,
    ) -> list[ChatResult]:
        """chat_many through :attr:`runner`: cache hits here, misses there, each answer cached as
        it arrives (so calls finished before a failure are kept)."""
        assert self.runner is not None
        results: list[ChatResult | None] = [self.lookup(m, params, stage) for m in list_of_messages]
        misses = [i for i, r in enumerate(results) if r is None]
        bar = tqdm(
            total=len(misses), desc=f"LLM {stage}", unit="call", disable=not progress, leave=False
        )
        try:
            if misses:
                sent = [list_of_messages[i] for i in misses]
                for pos, result, seconds in self.runner(sent, params):
                    i = misses[pos]
                    self.record(list_of_messages[i], params, stage, result, seconds)
                    results[i] = result
                    bar.update(1)
        except LLMError as exc:
            self.record_failure(stage, exc, 0.0)
            raise
        finally:
            bar.close()
        if any(r is None for r in results):
            raise LLMError("the remote LLM runner returned fewer answers than calls sent")
        return [r for r in results if r is not None]


def as_client(llm: ChatModel) -> LLMClient:
    """The model itself when it is an :class:`LLMClient`, else a cache-less client around it, so
    every caller has one way to call: ``chat(messages, params, stage)``."""
    return llm if isinstance(llm, LLMClient) else LLMClient(llm, cache_path=None)


__all__ = ["CACHE_FORMAT", "CallRunner", "LLMClient", "ResponseCache", "as_client", "cache_key"]
