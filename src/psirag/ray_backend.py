"""An index build's batch work on a Ray cluster (``psirag index --ray``, the ``psirag[ray]`` extra).

Three kinds of work leave the driver, each a drop-in for one local step of
:mod:`psirag.pipeline` (:class:`psirag.pipeline.BatchBackend`), so a Ray build is the same
pipeline and gives the same index:

- leaf embedding, with Ray Data: the chunk texts, each carrying its row number, go through
  ``map_batches`` into a pool of actors; each actor loads the embedder once from its spec
  (:func:`psirag.embed.load_embedder`), and the driver puts the rows back in order by row number;
- the bucketed tree mode's per-bucket trees (:func:`psirag.tree.bucket.build_bucket`), one Ray
  task per bucket; the merge runs on the driver as in a local build;
- LLM abstracts, layer by layer (parents after their children: :func:`llm_abstracts` is
  unchanged), one actor call per node. The driver keeps the one response cache: it answers what
  it can from the cache, sends only the misses to the actors, and stores each answer the moment
  it arrives. Workers never open the SQLite file, so a real cluster needs no shared filesystem
  (SQLite's locking is unreliable on network filesystems), and a crash or a rerun still never
  pays twice for a finished call.

A worker killed mid-job is replaced: Ray Data restarts a dead embedding actor and retries its
batch (its default, without a limit); an LLM actor restarts and its calls are retried
(``max_restarts``/``max_task_retries``) and a bucket task is retried (``max_retries``), at most
:attr:`RayOptions.retries` times each. Ray is imported only here, only when asked for.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from psirag.errors import ClusterError, PsiragError

if TYPE_CHECKING:
    from psirag.http import HttpPolicy
    from psirag.llm.base import ChatModel, ChatResult, GenerationParams, Message
    from psirag.llm.client import LLMClient
    from psirag.tree.bucket import BucketJob, BucketRunner

RAY_INSTALL_HINT = "pip install 'psirag[ray]'"
PROBE_SECONDS = 3.0
"""How long the cluster's address may take to accept a TCP connection (ray.init itself would
wait for minutes on a wrong address)."""


def require_ray() -> ModuleType:
    """Import ray, or say which extra provides it (a psirag error: no traceback)."""
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise ClusterError(
            f"--ray needs Ray with Ray Data, which is not installed ({exc}): {RAY_INSTALL_HINT}"
        ) from exc
    return ray


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide the batch work runs."""

    address: str | None = None
    """``host:port`` of a running cluster's GCS (``ray start --head`` prints it),
    ``ray://host:10001`` (Ray Client) or ``auto``; None: ``RAY_ADDRESS`` if set, else a new local
    cluster on this machine (stopped again at the end)."""
    num_cpus: int | None = None
    """CPUs of a new local cluster (default: all of this machine's)."""
    embed_actors: int | None = None
    """Embedding actors, one model each (default: the cluster's CPUs)."""
    embed_rows: int = 256
    """Chunk texts per Ray Data batch sent to an actor."""
    llm_actors: int = 1
    """LLM actors, each making up to the client's ``max_concurrency`` calls at once."""
    retries: int = 3
    """Restarts of a dead LLM actor, and retries of a bucket task or an LLM call whose worker
    died (Ray Data restarts embedding actors itself)."""
    temp_dir: str | None = None
    """Session folder of a new local cluster (Ray's default: /tmp/ray)."""


def _probe(address: str) -> None:
    """Fail fast, with a clear message, when nothing listens at ``address``."""
    target = address.removeprefix("ray://").rstrip("/")
    if target in ("auto", "local", ""):
        return
    host, sep, port_text = target.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ClusterError(
            f"Ray address {address!r} is not host:port, ray://host:port or auto; "
            "`ray start --head` prints the address to use"
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port_text)), PROBE_SECONDS):
            pass
    except OSError as exc:
        raise ClusterError(
            f"cannot reach the Ray cluster at {address} ({exc.strerror or exc}); start one with "
            "`ray start --head` or fix --ray ADDRESS / RAY_ADDRESS (nothing was written)"
        ) from exc


class EmbedActor:
    """One Ray Data actor: the embedder, loaded once from its spec, embeds batches of rows."""

    def __init__(self, spec: str, batch_size: int | None, http: HttpPolicy | None) -> None:
        from psirag.embed import load_embedder

        self.embedder = load_embedder(spec, batch_size=batch_size, http=http)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        texts = [str(t) for t in batch["text"]]
        vectors = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        truncated = np.zeros(len(texts), dtype=np.int64)
        if len(texts):
            truncated[0] = int(getattr(self.embedder, "last_truncated", 0) or 0)
        return {
            "row": np.asarray(batch["row"], dtype=np.int64),
            "vector": vectors,
            "truncated": truncated,
        }


class ChatWorker:
    """One LLM actor: the chat model, built once; answers are returned, never cached here."""

    def __init__(self, factory: Callable[[], ChatModel]) -> None:
        self.model = factory()

    def chat(
        self, messages: list[Message], params: GenerationParams
    ) -> tuple[ChatResult | None, str, float]:
        """``(result, "", seconds)``, or ``(None, message, seconds)`` for a failed call (an
        exception object may not survive pickling; its message does)."""
        from psirag.llm.errors import LLMError

        start = time.perf_counter()
        try:
            result = self.model.chat(messages, params)
        except LLMError as exc:
            return None, f"{type(exc).__name__}: {exc}", time.perf_counter() - start
        return result, "", time.perf_counter() - start


@dataclass(frozen=True)
class _ChatModelSpec:
    """A picklable recipe for the workers' chat model: the spec and HTTP policy of the driver's."""

    spec: str
    http: HttpPolicy | None

    def __call__(self) -> ChatModel:
        from psirag.llm import load_chat_model

        return load_chat_model(self.spec, http=self.http)


class RayBackend:
    """Connects to (or starts) a Ray cluster and runs a build's batch work on it.

    ``embedder_spec``: what every embedding actor loads (the driver's embedder spec, so vectors
    match a local build). ``llm_spec``: the chat model spec the LLM actors build (or
    ``chat_model_factory``, a picklable callable). ``embed_actor``: the actor class (a subclass
    may wrap :class:`EmbedActor`). Use as a context manager, or call :meth:`connect` first and
    :meth:`close` at the end.
    """

    def __init__(
        self,
        embedder_spec: str,
        *,
        batch_size: int | None = None,
        http: HttpPolicy | None = None,
        llm_spec: str | None = None,
        chat_model_factory: Callable[[], ChatModel] | None = None,
        options: RayOptions | None = None,
        embed_actor: type[EmbedActor] = EmbedActor,
        progress: bool = False,
    ) -> None:
        self.embedder_spec = embedder_spec
        self.batch_size = batch_size
        self.http = http
        self.options = options or RayOptions()
        if self.options.retries < 0:
            raise ClusterError(f"Ray retries must be at least 0, got {self.options.retries}")
        self.chat_model_factory = chat_model_factory or (
            _ChatModelSpec(llm_spec, http) if llm_spec else None
        )
        self.embed_actor = embed_actor
        self.progress = progress
        self._ray: ModuleType | None = None
        self._started = False
        self._chat_actors: list[Any] = []

    # ------------------------------------------------------------------ the cluster
    def connect(self) -> RayBackend:
        """Join the cluster (or start a local one). Raises :class:`ClusterError`, having
        written nothing, when Ray is missing or the address does not answer."""
        address = self.options.address or os.environ.get("RAY_ADDRESS") or None
        if address:
            _probe(address)
        ray = require_ray()
        self._ray = ray
        if ray.is_initialized():  # a cluster this process already joined (tests, notebooks)
            return self
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            kwargs["address"] = address
        else:
            kwargs["num_cpus"] = self.options.num_cpus
            if self.options.temp_dir:
                kwargs["_temp_dir"] = self.options.temp_dir
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            where = address or "a new local cluster"
            raise ClusterError(f"cannot start Ray on {where}: {exc}") from exc
        self._started = True
        return self

    def close(self) -> None:
        """Stop the LLM actors, and the local cluster if this backend started it."""
        ray = self._ray
        if ray is None:
            return
        for actor in self._chat_actors:
            with contextlib.suppress(Exception):  # already gone with its cluster
                ray.kill(actor)
        self._chat_actors = []
        if self._started:
            ray.shutdown()
            self._started = False

    def __enter__(self) -> RayBackend:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require(self) -> ModuleType:
        if self._ray is None:
            self.connect()
        assert self._ray is not None
        return self._ray

    def _quiet_data(self) -> None:
        """Ray Data's progress bars only with ``progress``; its INFO lines never (they would
        drown the build's own report)."""
        ray = self._require()
        ray.data.DataContext.get_current().enable_progress_bars = self.progress
        logging.getLogger("ray.data").setLevel(logging.WARNING)

    def _cluster_cpus(self) -> int:
        ray = self._require()
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    # ------------------------------------------------------------------ embedding
    def embed_texts(self, texts: Sequence[str]) -> tuple[np.ndarray, int]:
        """Raw vectors of ``texts`` in input order (by the row numbers they carry through Ray
        Data), and how many texts the model truncated."""
        ray = self._require()
        self._quiet_data()
        n = len(texts)
        if n == 0:
            return np.zeros((0, 0), dtype=np.float32), 0
        rows = max(1, self.options.embed_rows)
        actors = self.options.embed_actors or self._cluster_cpus()
        actors = max(1, min(actors, -(-n // rows)))
        dataset = ray.data.from_items(
            [{"row": i, "text": t} for i, t in enumerate(texts)],
            override_num_blocks=max(1, min(-(-n // rows), 4 * actors)),
        )
        embedded = dataset.map_batches(
            self.embed_actor,
            fn_constructor_kwargs={
                "spec": self.embedder_spec,
                "batch_size": self.batch_size,
                "http": self.http,
            },
            batch_size=rows,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=actors),
            num_cpus=1,
        )
        got_rows: list[np.ndarray] = []
        got_vectors: list[np.ndarray] = []
        truncated = 0
        try:
            for batch in embedded.iter_batches(batch_size=None, batch_format="numpy"):
                got_rows.append(np.asarray(batch["row"], dtype=np.int64))
                got_vectors.append(np.asarray(batch["vector"], dtype=np.float32))
                truncated += int(np.asarray(batch["truncated"]).sum())
        except PsiragError:
            raise
        except Exception as exc:
            cause = _user_error(exc)
            if isinstance(cause, PsiragError):
                raise cause from exc
            raise ClusterError(f"Ray embedding job failed: {_first_line(exc)}") from exc
        order = np.concatenate(got_rows)
        vectors = np.concatenate(got_vectors)
        sort = np.argsort(order, kind="stable")
        if not np.array_equal(order[sort], np.arange(n)):
            raise ClusterError(
                f"Ray embedding returned {order.size} rows for {n} chunks (lost or duplicated)"
            )
        return vectors[sort], truncated

    # ------------------------------------------------------------------ bucket trees
    def bucket_runner(self) -> BucketRunner:
        """Builds each bucket's tree as a Ray task, at most two per CPU in flight, in job order."""
        return self._run_buckets

    def _run_buckets(self, jobs: Sequence[BucketJob]) -> list[tuple[np.ndarray, np.ndarray]]:
        ray = self._require()
        from psirag.tree.bucket import build_bucket

        task = ray.remote(num_cpus=1, max_retries=self.options.retries)(build_bucket)
        window = 2 * self._cluster_cpus()
        refs: list[Any] = []
        results: list[tuple[np.ndarray, np.ndarray]] = []
        try:
            for i in range(len(jobs)):
                refs.append(task.remote(jobs[i]))
                if len(refs) - len(results) >= window:
                    results.append(ray.get(refs[len(results)]))
            while len(results) < len(refs):
                results.append(ray.get(refs[len(results)]))
        except Exception as exc:
            raise ClusterError(f"Ray bucket-tree task failed: {_first_line(exc)}") from exc
        return results

    # ------------------------------------------------------------------ LLM abstracts
    def llm_client(self, llm: LLMClient) -> LLMClient:
        """``llm`` (same cache, same counters) with its cache misses sent to LLM actors."""
        if self.chat_model_factory is None:
            raise ClusterError(
                "LLM abstracts on Ray need the LLM spec (llm_spec=) so that workers can build "
                "the model"
            )
        return llm.with_runner(self._run_calls_for(llm.max_concurrency))

    def _actors(self, concurrency: int) -> list[Any]:
        ray = self._require()
        if not self._chat_actors:
            retries = self.options.retries
            actor = ray.remote(
                num_cpus=0,
                max_restarts=retries,
                max_task_retries=retries,
                max_concurrency=max(1, concurrency),
            )(ChatWorker)
            count = max(1, self.options.llm_actors)
            self._chat_actors = [actor.remote(self.chat_model_factory) for _ in range(count)]
        return self._chat_actors

    def _run_calls_for(
        self, concurrency: int
    ) -> Callable[
        [Sequence[list[Message]], GenerationParams], Iterator[tuple[int, ChatResult, float]]
    ]:
        def run(
            calls: Sequence[list[Message]], params: GenerationParams
        ) -> Iterator[tuple[int, ChatResult, float]]:
            from psirag.llm.errors import LLMError

            ray = self._require()
            actors = self._actors(concurrency)
            window = max(1, concurrency) * len(actors)
            position: dict[Any, int] = {}
            pending: list[Any] = []
            nxt = 0
            failure: Exception | None = None
            try:
                # On the first failure no new call starts, the calls in flight finish and their
                # answers are still yielded (so cached), then the failure is raised: as the
                # local chat_many does, a rerun pays only for what had not finished.
                while pending or (failure is None and nxt < len(calls)):
                    while failure is None and nxt < len(calls) and len(pending) < window:
                        ref = actors[nxt % len(actors)].chat.remote(calls[nxt], params)
                        position[ref] = nxt
                        pending.append(ref)
                        nxt += 1
                    done, pending = ray.wait(pending, num_returns=1)
                    for ref in done:
                        try:
                            result, error, seconds = ray.get(ref)
                        except Exception as exc:
                            failure = failure or ClusterError(
                                f"Ray LLM call failed after {self.options.retries} retries: "
                                f"{_first_line(exc)}"
                            )
                            continue
                        if result is None:
                            failure = failure or LLMError(error)
                            continue
                        yield position.pop(ref), result, seconds
            finally:
                for ref in pending:  # interrupted: calls not yet answered are dropped
                    with contextlib.suppress(Exception):
                        ray.cancel(ref)
            if failure is not None:
                raise failure

        return run


def _user_error(exc: BaseException) -> BaseException | None:
    """The psirag error a Ray job raised in a worker, when there is one in the chain."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, PsiragError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


__all__ = [
    "RAY_INSTALL_HINT",
    "ChatWorker",
    "EmbedActor",
    "RayBackend",
    "RayOptions",
    "require_ray",
]
