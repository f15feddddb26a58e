"""Spec string -> embedder: the one place that knows every backend.

Kept apart from :mod:`psirag.embed.base` (which the backends import) so that no import cycle
exists, and so that a backend's heavy libraries load only when its spec is asked for: plain
``minilm`` never imports torch.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from psirag.devices import default_device, parse_device
from psirag.embed.base import (
    ACCEPTED_SPECS,
    DEFAULT_BATCH_SIZES,
    MINILM_NAME,
    MPNET_NAME,
    Embedder,
    default_batch_size,
    minilm_path,
    mpnet_path,
    psirag_cache_dir,
)
from psirag.errors import EmbeddingError, InputError

if TYPE_CHECKING:
    from psirag.http import HttpPolicy

MINILM_SPECS = ("minilm", "minilm-torch", "minilm-onnx", "minilm-onnx-int8")

_ONNX_FAILED: dict[str, str] = {}
"""Why ONNX could not run, per cache location, so that a process falls back (and warns) once."""


def default_minilm_backend(device: str = "cpu") -> str:
    """What plain ``minilm`` runs on: ONNX Runtime fp32 on CPU when onnxruntime imports.

    It gives torch's vectors (cosine >= 0.99999 on all of 2Wiki) and embedder id, faster and
    without torch. The graph is written once from the installed model's weights into the cache
    folder; should that fail, :func:`load_embedder` falls back to torch with one warning when
    psirag[torch] is installed. ``minilm-torch`` names torch; a GPU device stays on torch.
    This function is the one switch.
    """
    if device != "cpu" or importlib.util.find_spec("onnxruntime") is None:
        return "torch"
    return "onnx"


def _torch_embedder(
    folder: Path, spec: str, batch_size: int | None, device: str, name: str | None = None
) -> Embedder:
    from psirag.embed import sentence_transformers as st_module

    st_module.require_torch_extra(f"embedder {spec!r}")
    return st_module.SentenceTransformerEmbedder(
        folder,
        batch_size=batch_size or default_batch_size("torch", device),
        device=device,
        name=name or (MINILM_NAME if spec.startswith("minilm") else None),
        spec=spec,
    )


def _load_minilm(spec: str, batch_size: int | None, device: str) -> Embedder:
    """``minilm`` and its named backends; the default falls back to torch if ONNX fails."""
    backend = default_minilm_backend(device) if spec == "minilm" else spec[len("minilm-") :]
    if backend.startswith("onnx") and device != "cpu":
        raise InputError(
            f"embedder {spec!r} runs on the CPU only (ONNX Runtime), not on device {device!r}; "
            "use --embedder minilm or minilm-torch there (psirag[torch]), or --device cpu"
        )
    folder = minilm_path()
    if backend.startswith("onnx"):
        from psirag.embed import onnx as onnx_module
        from psirag.embed import sentence_transformers as st_module

        key = str(onnx_module.cache_dir())
        if spec != "minilm" or key not in _ONNX_FAILED:
            try:
                return onnx_module.OnnxEmbedder(
                    folder,
                    batch_size=batch_size or DEFAULT_BATCH_SIZES["onnx"],
                    precision="int8" if backend == "onnx-int8" else "fp32",
                    name=MINILM_NAME,
                    spec=spec,
                )
            except (EmbeddingError, InputError, OSError) as exc:
                if spec != "minilm" or not st_module.torch_extra_installed():
                    if isinstance(exc, InputError):
                        raise
                    raise EmbeddingError(f"cannot run {spec}: {exc}") from exc
                # plain minilm: torch gives the same vectors and id, only slower
                _ONNX_FAILED[key] = str(exc)
                print(
                    f"psirag: warning: ONNX MiniLM unavailable ({exc}); embedding with torch "
                    "instead (same vectors, slower; --embedder minilm-torch skips this try)",
                    file=sys.stderr,
                    flush=True,
                )
    return _torch_embedder(folder, spec, batch_size, device)


class _Prefetch:
    """A local embedder loading in a daemon thread (ONNX Runtime builds its session without
    holding the GIL), so that a command loads its index and the model at the same time."""

    def __init__(self, spec: str, batch_size: int | None) -> None:
        self._result: Embedder | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(spec, batch_size), name="psirag-embedder", daemon=True
        )
        self._thread.start()

    def _run(self, spec: str, batch_size: int | None) -> None:
        try:
            self._result = _load_minilm(spec, batch_size, "cpu")
        except BaseException as exc:  # handed to the caller of load_embedder, as if loaded there
            self._error = exc

    def result(self) -> Embedder:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


_PREFETCHED: dict[tuple[str, int | None, str], _Prefetch] = {}
"""Keyed by spec, batch size and cache folder: a model prefetched under another cache setting
is not handed out."""
_PREFETCH_LOCK = threading.Lock()


def prefetch_embedder(spec: str, batch_size: int | None = None) -> bool:
    """Start loading a local MiniLM embedder (``minilm``, ``minilm-onnx``...) in the background;
    the next :func:`load_embedder` of the same spec and batch size on CPU takes it. Other specs
    (torch models, endpoints) are not prefetched: False. Nothing is sent anywhere."""
    spec = spec.strip()
    if spec not in MINILM_SPECS or spec == "minilm-torch" or default_device() != "cpu":
        return False
    if spec == "minilm" and default_minilm_backend() != "onnx":
        return False
    with _PREFETCH_LOCK:
        key = (spec, batch_size, str(psirag_cache_dir()))
        if key not in _PREFETCHED:
            _PREFETCHED[key] = _Prefetch(spec, batch_size)
    return True


def _take_prefetched(spec: str, batch_size: int | None) -> _Prefetch | None:
    with _PREFETCH_LOCK:
        return _PREFETCHED.pop((spec, batch_size, str(psirag_cache_dir())), None)


def discard_prefetched() -> None:
    """Forget prefetched embedders nobody took (the command ended without embedding), so that
    a later load in the same process builds its own under the settings of that time."""
    with _PREFETCH_LOCK:
        _PREFETCHED.clear()


def _parse_openai(spec: str) -> tuple[str, str]:
    rest = spec[len("openai:") :]
    url, sep, model = rest.partition("#")
    url, model = url.strip().rstrip("/"), model.strip()
    if not sep or not model or not re.match(r"^https?://[^/\s]+", url):
        raise InputError(f"cannot read embedder spec {spec!r}; " + ACCEPTED_SPECS)
    return url, model


def load_embedder(
    spec: str,
    *,
    batch_size: int | None = None,
    device: str | None = None,
    http: HttpPolicy | None = None,
) -> Embedder:
    """Build the embedder a spec names, touching no network except an explicit openai: URL
    (called under ``http``, default :class:`psirag.http.HttpPolicy`). ``batch_size`` None: the
    backend's own default (:data:`DEFAULT_BATCH_SIZES`). ``device`` None: the process's
    (:func:`psirag.devices.default_device`: ``--device``, ``$PSIRAG_DEVICE``, else ``cpu``); an
    endpoint ignores it. A spec read from an index goes through
    :func:`psirag.embed.endpoints.load_index_embedder` instead."""
    device = default_device() if device is None else parse_device(device)
    spec = spec.strip()
    if spec in MINILM_SPECS:
        pending = _take_prefetched(spec, batch_size) if device == "cpu" else None
        return pending.result() if pending is not None else _load_minilm(spec, batch_size, device)
    if spec == "mpnet":  # sentence-transformers for now; an ONNX graph for MPNet is not written
        return _torch_embedder(mpnet_path(), spec, batch_size, device, MPNET_NAME)
    if spec.startswith("st:"):
        raw = spec[3:].strip()
        path = Path(raw).expanduser()
        if not raw or not path.is_dir():
            raise InputError(f"embedder model folder {raw!r} does not exist; " + ACCEPTED_SPECS)
        return _torch_embedder(path, spec, batch_size, device)
    if spec.startswith("openai:"):
        url, model = _parse_openai(spec)
        from psirag.embed.openai_compat import OpenAIEmbedder

        return OpenAIEmbedder(
            url, model, batch_size=batch_size or DEFAULT_BATCH_SIZES["openai"], spec=spec, http=http
        )
    raise InputError(f"unknown embedder {spec!r}; " + ACCEPTED_SPECS)


__all__ = [
    "MINILM_SPECS",
    "default_minilm_backend",
    "discard_prefetched",
    "load_embedder",
    "prefetch_embedder",
]
