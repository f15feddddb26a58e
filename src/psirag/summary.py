"""The summary of a saved index: what ``psirag inspect --json`` prints under "index" and what
``GET /index`` serves. It sits below the CLI and the server so neither imports the other."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from psirag.tree.shape import FAN_OUT_EDGES, fan_out_bucket, shape_summary

if TYPE_CHECKING:
    from psirag.index import Index


def inspect_summary(index: Index, folder: str | Path, *, verify: bool = False) -> dict[str, Any]:
    """What ``psirag inspect --json`` prints under "index" (also served by ``GET /index``)."""
    from psirag.storage import IndexStore

    manifest = index.describe()
    storage = IndexStore(folder).describe()
    storage["verified"] = "sha256" if verify else "sizes"
    drift = index.drift() if callable(getattr(index, "drift", None)) else None
    return _payload(folder, storage, drift, manifest, shape_summary(index.tree))


def saved_summary(folder: str | Path, *, verify: bool = False) -> tuple[dict[str, Any], str] | None:
    """:func:`inspect_summary` of a saved index from its manifest alone (files checked by size,
    or by sha256 with ``verify``), and the root's abstract (or ""); None for an index saved
    before the manifest kept the tree's shape (load it and use :func:`inspect_summary`)."""
    from psirag.living import drift_of_lineage
    from psirag.storage import IndexReader, IndexStore

    with IndexReader(folder, verify="full" if verify else "size") as reader:
        manifest = reader.manifest
    shape = manifest.get("shape")
    counts = manifest.get("counts")
    if not isinstance(shape, dict) or not isinstance(counts, dict) or "fan_out" not in shape:
        return None
    storage = IndexStore(folder).describe()
    storage["verified"] = "sha256" if verify else "sizes"
    drift = drift_of_lineage(manifest.get("lineage") or {}, int(counts.get("chunks", 0)))
    root_text = shape.get("root_text")
    payload = _payload(folder, storage, drift, manifest, shape)
    return payload, root_text if isinstance(root_text, str) else ""


def _payload(
    folder: str | Path,
    storage: dict[str, Any],
    drift: dict[str, Any] | None,
    manifest: dict[str, Any],
    shape: dict[str, Any],
) -> dict[str, Any]:
    return {
        "index": str(folder),
        "storage": storage,
        "drift": drift,
        "embedder": manifest["embedder"],
        "config": manifest["config"],
        **manifest["counts"],
        "roots": list(shape["roots"]),
        "fan_out": shape["fan_out"],
    }


__all__ = ["FAN_OUT_EDGES", "fan_out_bucket", "inspect_summary", "saved_summary"]
