"""POST /documents and DELETE /documents/{id} against a real ``psirag serve`` process: the
background job adds or removes through the living index, saves a new generation, and the
server answers from it; the saved index on disk agrees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx
from support import HashEmbedder
from support.processes import serve_new_index, wait_for_job

from psirag.index import Index
from psirag.storage import IndexStore


def _job(url: str, response: httpx.Response) -> dict[str, Any]:
    """The job ``response`` (a 202) started, once it has ended."""
    assert response.status_code == 202, response.text
    return wait_for_job(url, response.json()["job"]["id"])


def test_add_and_remove_documents_through_the_server(tmp_path: Path) -> None:
    folder, proc = serve_new_index(tmp_path, "--retries", "0")
    try:
        proc.wait_ready()
        url = proc.url
        text = "Glaciers of blue ice carve deep fjords along the cold northern coast."
        added = httpx.post(f"{url}/documents", json={"text": text, "id": "glaciers"}, timeout=30)
        job = _job(url, added)
        assert job["status"] == "done", job
        assert job["result"]["update"]["chunks_added"] >= 1
        # the served index was the generation on disk: changed in memory, not read again
        assert job["result"]["loaded_from_disk"] is False
        assert job["result"]["saved_generation"] == 2
        ids = [d["id"] for d in httpx.get(f"{url}/documents", timeout=30).json()["documents"]]
        assert ids[-1] == "glaciers" and len(ids) == 4
        hits = httpx.post(
            f"{url}/search", json={"query": "blue ice fjords", "k": 2}, timeout=30
        ).json()
        assert any(p["source"]["document"] == "glaciers" for p in hits["passages"]), hits
        assert IndexStore(folder).current() == 2
        on_disk = Index.load(folder, embedder=HashEmbedder())
        assert "glaciers" in on_disk.documents

        removed = _job(url, httpx.delete(f"{url}/documents/football", timeout=30))
        assert removed["status"] == "done", removed
        assert removed["result"]["update"]["documents_removed"] == 1
        assert removed["result"]["loaded_from_disk"] is False
        assert httpx.get(f"{url}/index", timeout=30).json()["index_loads"] == 1
        # what the server holds in memory answers as the saved generation does
        query = {"query": "blue ice volcano ash", "k": 5}
        served = httpx.post(f"{url}/search", json=query, timeout=30).json()["passages"]
        fresh = Index.load(folder, embedder=HashEmbedder()).search(query["query"], k=5)
        assert [(p["id"], round(p["score"], 5)) for p in served] == [
            (p.id, round(p.score, 5)) for p in fresh
        ]
        ids = [d["id"] for d in httpx.get(f"{url}/documents", timeout=30).json()["documents"]]
        assert "football" not in ids and "glaciers" in ids
        assert "football" not in Index.load(folder, embedder=HashEmbedder()).documents
        assert httpx.delete(f"{url}/documents/football", timeout=30).status_code == 404
    finally:
        proc.stop()


def test_a_server_write_keeps_a_write_made_beside_it(tmp_path: Path) -> None:
    """A write made outside the server (the CLI, another process) after it started is on disk
    only; the server's next write must build on it, not on the generation it serves."""
    folder, proc = serve_new_index(tmp_path, "--retries", "0")
    try:
        proc.wait_ready()
        beside = Index.load(folder, embedder=HashEmbedder())
        before = set(beside.documents)
        beside.add(["Dunes of red sand drift across the dry desert plateau."], texts=True)
        beside.save(folder)
        direct = set(beside.documents) - before
        assert len(direct) == 1
        text = "Glaciers of blue ice carve deep fjords along the cold northern coast."
        added = httpx.post(
            f"{proc.url}/documents", json={"text": text, "id": "glaciers"}, timeout=30
        )
        job = _job(proc.url, added)
        assert job["status"] == "done"
        # the POST already followed the folder to the other writer's generation (one load),
        # so the write built on that one in memory without reading the folder again
        assert job["result"]["loaded_from_disk"] is False
        assert httpx.get(f"{proc.url}/index", timeout=30).json()["index_loads"] == 2
        on_disk = set(Index.load(folder, embedder=HashEmbedder()).documents)
        assert direct <= on_disk and "glaciers" in on_disk and before <= on_disk
        served = {
            d["id"] for d in httpx.get(f"{proc.url}/documents", timeout=30).json()["documents"]
        }
        assert served == on_disk
    finally:
        proc.stop()
