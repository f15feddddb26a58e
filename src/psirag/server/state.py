"""What the server holds between requests: the index (swappable, following the folder), the
embedder (serialised and batched: :mod:`psirag.server.embedding`), the LLM (under a
concurrency cap) and the background writer, together in one :class:`ServerState` that the
routes get through :mod:`psirag.server.deps`.

Each request takes the index once (:meth:`IndexHolder.get`) and works on that object to the end.
A write builds and publishes a new object with :meth:`IndexHolder.publish`; requests already
running keep the generation they started with, and later requests see the new one.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from psirag import cancel
from psirag.errors import InputError
from psirag.server.admission import AskPool
from psirag.server.embedding import BatchingEmbedder, QueryVectorCache, prepare_index
from psirag.server.errors import LLMNotConfiguredError, PayloadTooLargeError, RequestTimeoutError
from psirag.server.jobs import JobRunner
from psirag.server.settings import ServerSettings

if TYPE_CHECKING:
    from starlette.requests import Request

    from psirag.embed import Embedder
    from psirag.hops import HopPredictor
    from psirag.index import Index
    from psirag.llm.client import LLMClient

T = TypeVar("T")
log = logging.getLogger("psirag.server")


@dataclass(frozen=True)
class Generation:
    """One published index object and its number: the generation on disk when known (so every
    worker gives the same), else counted in this process from 1."""

    number: int
    index: Index
    boot: str = ""
    """A token of this server: numbers restart, so an ETag names both (the workers of
    ``psirag serve --workers N`` share one)."""
    saved: int | None = None
    """The generation on disk this index was loaded from or saved as (None: a format-1 folder,
    or not known); when known, ``number`` is this number, the same in every worker."""

    @property
    def etag(self) -> str:
        """The HTTP entity tag of everything read from this generation."""
        return f'"g{self.number}-{self.boot}"'


PointerStamp = tuple[int, int, int, int]
"""What ``stat`` says of the index's pointer file (inode, size, mtime, ctime): a save replaces
the file, so a new generation changes it."""


class IndexHolder:
    """An atomically swapped reference to the index being served, which follows the index
    folder: when another writer (another worker of ``psirag serve --workers N``, or ``psirag
    add`` from the command line) publishes a generation, :meth:`latest` loads it and publishes
    it here. Checking costs one ``stat`` of the pointer file."""

    def __init__(
        self, index: Index, folder: Path, *, follow: bool = True, boot: str | None = None
    ) -> None:
        self.folder = folder
        self.follow = follow
        self._lock = threading.Lock()
        self._reload = threading.RLock()
        """Held while this process loads or writes a generation, so it does one at a time."""
        self._seen = self._stamp()
        self.boot = boot or secrets.token_hex(4)
        saved = _saved_generation(index, folder)
        self._current = Generation(saved or 1, index, self.boot, saved)
        self.loads = 1
        """Times this process read the index from disk: 1 at start-up, one more for each
        generation another process published (loaded by :meth:`refresh`, or by a write that
        found it on disk; a write on the served generation changes it in memory)."""

    def count_load(self) -> None:
        with self._lock:
            self.loads += 1

    def get(self) -> Generation:
        """The generation a request works on (a single attribute read: never half-swapped)."""
        return self._current

    def publish(self, index: Index, saved: int | None = None) -> Generation:
        """Make ``index`` the one new requests get; running requests keep theirs. A generation
        older on disk than the one served is ignored (never go back)."""
        with self._lock:
            current = self._current
            if saved is not None and current.saved is not None and saved < current.saved:
                return current
            if saved is not None and saved == current.saved:
                number = current.number  # the same data on disk (a write that changed nothing)
            elif saved is not None and saved > current.number:
                number = saved
            else:
                number = current.number + 1
            self._current = Generation(number, index, self.boot, saved)
            return self._current

    # ------------------------------------------------------------ following the folder
    def _stamp(self) -> PointerStamp | None:
        try:
            st = os.stat(self.folder / "manifest.json")
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def stale(self) -> bool:
        """True when the pointer file changed since this process last looked (cheap)."""
        return self.follow and self._stamp() != self._seen

    def latest(self) -> Generation:
        """The generation the folder's pointer names, loaded first if it is not the one served
        (blocking: call it from a worker thread, not the event loop)."""
        return self.refresh() if self.stale() else self._current

    def refresh(self) -> Generation:
        """Load and publish the generation the pointer names, if it is not the one served. A
        generation that fails to load is logged and skipped until the pointer changes again;
        the one served stays."""
        from psirag.index import Index
        from psirag.storage import IndexStore

        with self._reload:
            stamp = self._stamp()  # before reading the pointer: a later save changes it again
            if stamp == self._seen:
                return self._current
            current = self._current
            try:
                number = IndexStore(self.folder).current()
                if number is None or number == current.saved:
                    self._seen = stamp
                    return current
                index = Index.load(self.folder, embedder=current.index.embedder, generation=number)
                prepare_index(index)
            except Exception as exc:  # keep serving what we have; the log says why
                log.warning("could not load the new generation of %s: %s", self.folder, exc)
                self._seen = stamp
                return current
            self._seen = stamp
            self.count_load()
            log.info("serving generation %s of %s (published elsewhere)", number, self.folder)
            return self.publish(index, saved=number)

    def writing(self) -> threading.RLock:
        """Held by this process's writer around a save and its publish, so that a request
        does not load from disk the generation the writer is about to publish."""
        return self._reload


def _saved_generation(index: Index, folder: Path) -> int | None:
    """The generation on disk ``index`` was loaded from (its origin), else the pointer's."""
    origin = getattr(getattr(index, "data", None), "origin", None)
    number = getattr(origin, "generation", None)
    if isinstance(number, int):
        return number
    try:
        from psirag.storage import IndexStore

        return IndexStore(folder).current()
    except Exception:  # not an index folder (a test's holder): nothing to follow
        return None


class GatedLLM:
    """An LLM client whose calls from all requests together stay under ``limit`` at a time."""

    def __init__(self, client: LLMClient, limit: int) -> None:
        self.client = client
        self.limit = limit
        self._gate = threading.BoundedSemaphore(limit)

    @property
    def id(self) -> str:
        return str(self.client.id)

    @property
    def context_tokens(self) -> int:
        return int(self.client.context_tokens)

    def count_tokens(self, text: str) -> int:
        return int(self.client.count_tokens(text))

    def chat(self, messages: list[Any], params: Any, stage: str = "agent") -> Any:
        """One call, once a place under the cap is free; a cancelled ask (psirag.cancel)
        starts none, and gives up its wait for a place."""
        token = cancel.current()
        if token is None:
            with self._gate:
                return self.client.chat(messages, params, stage=stage)
        while not self._gate.acquire(timeout=0.2):
            token.check()
        try:
            token.check()
            return self.client.chat(messages, params, stage=stage)
        finally:
            self._gate.release()

    def chat_stream(
        self, messages: list[Any], params: Any, on_token: Any, stage: str = "agent"
    ) -> Any:
        with self._gate:
            return self.client.chat_stream(messages, params, on_token, stage=stage)

    @property
    def usage(self) -> dict[str, dict[str, float]]:
        return dict(self.client.usage)

    def close(self) -> None:
        self.client.close()


@dataclass
class ServerState:
    """Everything the routes share. ``holder.get()`` is the one way a request takes the index."""

    holder: IndexHolder
    settings: ServerSettings
    llm: GatedLLM | None
    jobs: JobRunner
    started: float = field(default_factory=time.time)
    asks: AskPool = field(init=False, repr=False)
    _hops: HopPredictor | None = field(default=None, repr=False)
    _hop_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.asks = AskPool(self.settings.max_asks, self.settings.ask_queue)

    async def llm_work(self, fn: Callable[[], T], request: Request | None = None) -> T:
        """``fn`` (LLM work: an agent run, a summary) in the ask pool under the per-request
        deadline: 503 when the pool is full, cancelled when the client goes away."""
        admission = self.asks.admit()
        try:
            return await admission.run(fn, timeout=self.settings.request_timeout, request=request)
        finally:
            admission.close()

    def budget(self, question: str, asked: int | str | None) -> int:
        """Retrievals after the first for ``question``: the request's count, or the server's
        default; ``auto`` asks the shipped hop model (loaded on first use, then shared)."""
        wanted = self.settings.max_retrievals if asked is None else asked
        if wanted != "auto":
            return int(wanted)
        with self._hop_lock:
            if self._hops is None:
                from psirag.hops import HopPredictor

                self._hops = HopPredictor(self._hop_embedder())
            predictor = self._hops
        return predictor.max_retrievals(question)

    def _hop_embedder(self) -> Embedder | None:
        """The index's query embedder when it is the one the hop model was trained on (one
        MiniLM in memory, not two); None lets the predictor load its own."""
        from psirag.hops import load_hop_model

        embedder = self.holder.get().index.embedder  # a BatchingEmbedder keeps its model's id
        return embedder if getattr(embedder, "id", None) == load_hop_model().embedder else None

    def need_llm(self) -> GatedLLM:
        if self.llm is None:
            raise LLMNotConfiguredError(
                "this server has no LLM: start it with --llm SPEC (or $PSIRAG_LLM) to answer "
                "questions; /search works without one"
            )
        return self.llm

    def check_length(self, text: str, what: str = "query") -> None:
        if len(text) > self.settings.max_query_chars:
            raise PayloadTooLargeError(
                f"the {what} has {len(text):,} characters, over the limit of "
                f"{self.settings.max_query_chars:,} (psirag serve --max-query-chars)"
            )

    def check_query(self, query: str, what: str = "query") -> str:
        self.check_length(query, what)
        if not query.strip():
            raise InputError(f"the {what} is empty; give a question or some keywords")
        return query

    def check_k(self, k: int) -> None:
        if k > self.settings.max_k:
            raise InputError(f"k is {k}, over this server's limit of {self.settings.max_k}")

    async def blocking(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a worker thread under the per-request deadline."""
        import anyio
        import anyio.to_thread

        timeout = self.settings.request_timeout
        try:
            with anyio.fail_after(timeout):
                return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
        except TimeoutError as exc:
            raise RequestTimeoutError(
                f"the request took longer than {timeout:g} s (psirag serve --request-timeout)"
            ) from exc


__all__ = [
    "BatchingEmbedder",
    "GatedLLM",
    "Generation",
    "IndexHolder",
    "LLMNotConfiguredError",
    "QueryVectorCache",
    "ServerState",
    "prepare_index",
]
