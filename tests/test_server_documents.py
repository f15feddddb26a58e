"""The served index while it changes: every read names its generation (field and ETag, 304 when
unchanged); uploads go through ``psirag add``'s loaders (a PDF made by fpdf2, HTML, text,
JSON/JSONL records) with per-file reasons; the document list is paged, sorted and filtered on
the server with a status per document; jobs outlive a restart (an interrupted one fails and can
be retried); tree labels tell siblings apart."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("pypdf")
pytest.importorskip("bs4")

from fastapi.testclient import TestClient
from support import HashEmbedder, build_index

from psirag.index import Index
from psirag.ingest import documents_from_strings
from psirag.server.app import create_app
from psirag.server.jobs import INTERRUPTED, JOBS_FILE, Job, JobRunner
from psirag.server.labels import distinctive
from psirag.server.uploads import UPLOAD_TYPES, document_to_json


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    build_index(tmp_path / "index")
    return tmp_path / "index"


@pytest.fixture
def client(folder: Path) -> Iterator[TestClient]:
    app = create_app(folder, index=Index.load(folder, embedder=HashEmbedder()), mcp=False)
    with TestClient(app) as c:
        yield c


def wait_job(client: TestClient, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job = client.get(f"/jobs/{job_id}").json()
        if job["status"] in ("done", "failed"):
            return dict(job)
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish")


def add_text(client: TestClient, doc_id: str, text: str) -> dict[str, Any]:
    response = client.post("/documents", json={"text": text, "id": doc_id})
    assert response.status_code == 202, response.text
    return wait_job(client, response.json()["job"]["id"])


def test_reads_name_their_generation_and_answer_304_while_it_holds(client: TestClient) -> None:
    reads = {
        "tree": lambda h: client.get("/tree?depth=2", headers=h),
        "node": lambda h: client.get("/nodes/0", headers=h),
        "documents": lambda h: client.get("/documents", headers=h),
        "generation": lambda h: client.get("/generation", headers=h),
    }
    tags = {}
    for name, read in reads.items():
        first = read({})
        assert first.status_code == 200 and first.json()["generation"] == 1, name
        assert first.headers["X-Psirag-Generation"] == "1"
        tags[name] = first.headers["ETag"]
        again = read({"If-None-Match": tags[name]})
        assert again.status_code == 304 and again.content == b"", name
        assert again.headers["ETag"] == tags[name]
    found = client.post("/search", json={"query": "volcano lava", "k": 2})
    assert found.json()["generation"] == 1 and found.headers["ETag"] == tags["generation"]

    assert (
        add_text(client, "glaciers", "Glaciers of blue ice carve deep fjords.")["status"] == "done"
    )
    for name, read in reads.items():
        fresh = read({"If-None-Match": tags[name]})  # the old tag no longer holds
        assert fresh.status_code == 200, name
        assert fresh.json()["generation"] == 2 and fresh.headers["ETag"] != tags[name]
    now = client.get("/generation").json()
    assert now["documents"] == 4 and now["chunks"] == client.get("/index").json()["chunks"]


def make_pdf(pages: list[str], title: str) -> bytes:
    """A real PDF written by the fpdf2 library, one paragraph per page."""
    fpdf = pytest.importorskip("fpdf")
    pdf = fpdf.FPDF()
    pdf.set_title(title)
    pdf.set_font("helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    return bytes(pdf.output())


PAGES = [
    "Mount Etna is an active volcano on the east coast of Sicily with frequent lava flows "
    "and ash clouds over Catania.",
    "Steel rails carry the night trains between the stations of the long green valley and "
    "the harbour town.",
    "Glaciers of blue ice move slowly down the cold northern mountains and carve deep fjords.",
]


def test_uploads_take_what_psirag_add_reads(client: TestClient) -> None:
    html = (
        "<html><head><title>Owl page</title><script>var hidden = 'scriptword';</script>"
        "</head><body><h1>Owls</h1><p>Barn owls hunt mice at night over the meadow.</p>"
        "</body></html>"
    )
    records = [{"title": "Bats", "text": "Bats find insects by echolocation at dusk."}]
    lines = [{"title": "Moles", "text": "Moles dig tunnels under the lawn."}, {"text": "Ants."}]
    files = [
        ("file", ("report.pdf", make_pdf(PAGES, "Field report"), "application/pdf")),
        ("file", ("owls.html", html.encode(), "text/html")),
        (
            "file",
            ("notes.txt", b"Tides rise twice a day under the pull of the moon.", "text/plain"),
        ),
        ("file", ("readme.md", b"# Kites\nKites fly on windy beaches.", "text/markdown")),
        ("file", ("animals.json", json.dumps(records).encode(), "application/json")),
        ("file", ("more.jsonl", "\n".join(map(json.dumps, lines)).encode(), "application/json")),
        ("file", ("broken.json", b'[{"text": "unfinished"', "application/json")),
        ("file", ("letter.docx", b"PK\x03\x04 not really", "application/octet-stream")),
    ]
    response = client.post("/documents", files=files)
    assert response.status_code == 202, response.text
    rejected = {r["file"]: r["error"] for r in response.json()["rejected"]}
    assert set(rejected) == {"broken.json", "letter.docx"}
    assert "broken.json" in rejected["broken.json"] and "malformed JSON" in rejected["broken.json"]
    assert "unsupported file type '.docx'" in rejected["letter.docx"]
    assert not any("psirag-upload" in e or "/tmp" in e for e in rejected.values())
    job = wait_job(client, response.json()["job"]["id"])
    assert job["status"] == "done", job
    docs = {d["id"]: d for d in client.get("/documents?limit=1000").json()["documents"]}
    assert docs["report.pdf"]["title"] == "Field report"
    assert docs["owls.html"]["title"] == "Owl page"
    assert docs["notes.txt"]["title"] == "notes" and docs["readme.md"]["title"] == "readme"
    assert docs["animals.json:0"]["title"] == "Bats"  # one document per record, as psirag add
    assert docs["more.jsonl:0"]["title"] == "Moles" and "more.jsonl:1" in docs

    pdf = client.post("/search", json={"query": "rails trains", "k": 20, "docs": ["report.pdf"]})
    passages = pdf.json()["passages"]
    assert {p["source"]["page"] for p in passages} == {1, 2, 3}  # page numbers in provenance
    assert not any("%PDF" in p["text"] or "endobj" in p["text"] for p in passages)
    owl = client.post("/search", json={"query": "owls", "k": 5, "docs": ["owls.html"]})
    text = " ".join(p["text"] for p in owl.json()["passages"])
    assert "Barn owls" in text and "<p>" not in text and "scriptword" not in text


def test_an_upload_with_no_usable_file_names_each_file(client: TestClient) -> None:
    files = [
        ("file", ("empty.txt", b"   ", "text/plain")),
        ("file", ("latin.txt", "caf\u00e9".encode("latin-1"), "text/plain")),
    ]
    response = client.post("/documents", files=files)
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "empty.txt: the file is empty" in message
    assert "latin.txt" in message and "not UTF-8" in message
    one = client.post(
        "/documents",
        files=[("file", ("a.json", b'[{"text": "x"}, {"text": "y"}]', "application/json"))],
        data={"id": "renamed"},
    )
    assert one.status_code == 400 and "'id' and 'title' name one document" in one.text
    named = client.post(
        "/documents",
        files=[("file", ("a.txt", b"Whales sing in the deep ocean.", "text/plain"))],
        data={"id": "whales", "title": "Whale song"},
    )
    assert wait_job(client, named.json()["job"]["id"])["status"] == "done"
    rows = client.get("/documents?q=whale").json()["documents"]
    assert [(r["id"], r["title"]) for r in rows] == [("whales", "Whale song")]


def test_the_document_list_pages_sorts_and_filters(client: TestClient) -> None:
    for i in range(7):
        add_text(client, f"note-{i}", f"Note number {i} about rivers and lakes {i}.")
    everything = client.get("/documents").json()
    assert everything["total"] == 10 and everything["counts"]["indexed"] == 10
    assert everything["upload_types"] == list(UPLOAD_TYPES)
    pages = [client.get(f"/documents?offset={o}&limit=3").json() for o in (0, 3, 6, 9)]
    assert [len(p["documents"]) for p in pages] == [3, 3, 3, 1]
    flat = [d["id"] for p in pages for d in p["documents"]]
    assert flat == [d["id"] for d in everything["documents"]]  # corpus order, nothing twice
    by_chunks = client.get("/documents?sort=chunks&order=desc").json()["documents"]
    counts = [d["chunks"] for d in by_chunks]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
    titles = [d["title"] for d in client.get("/documents?sort=title").json()["documents"]]
    assert titles == sorted(titles, key=str.lower)
    found = client.get("/documents?q=NOTE-&limit=2").json()
    assert found["total"] == 7 and len(found["documents"]) == 2
    assert client.get("/documents?status=failed").json()["total"] == 0
    for bad in ("sort=size", "order=up", "status=lost"):
        response = client.get(f"/documents?{bad}")
        assert response.status_code == 400, bad
        assert bad.split("=")[0] in response.json()["error"]["message"]


def test_pending_and_failed_documents_have_a_status(client: TestClient) -> None:
    jobs: JobRunner = client.app.state.psirag.jobs  # type: ignore[attr-defined]
    release = threading.Event()

    def stuck(job: Job) -> dict[str, Any]:
        release.wait(30)
        raise RuntimeError("the disk is full")

    doc = documents_from_strings(["Comets have icy tails."], titles=["Comets"], ids=["comets"])[0]
    job = jobs.submit(
        "add",
        stuck,
        documents=[{"id": "comets", "title": "Comets"}],
        payload=[document_to_json(doc)],
    )
    pending = client.get("/documents?status=pending").json()
    assert [(d["id"], d["action"], d["job"]) for d in pending["documents"]] == [
        ("comets", "add", job.id)
    ]
    release.set()
    assert wait_job(client, job.id)["status"] == "failed"
    failed = client.get("/documents?status=failed").json()["documents"]
    assert failed[0]["id"] == "comets" and "the disk is full" in failed[0]["error"]
    assert failed[0]["retryable"] is True
    retry = client.post(f"/jobs/{job.id}/retry")
    assert retry.status_code == 202 and retry.json()["job"]["retry_of"] == job.id
    assert wait_job(client, retry.json()["job"]["id"])["status"] == "done"
    row = client.get("/documents?q=comets").json()["documents"][0]
    assert row["status"] == "indexed" and row["chunks"] == 1
    again = client.post(f"/jobs/{retry.json()['job']['id']}/retry")
    assert again.status_code == 400 and "only a failed job" in again.text


def test_jobs_outlive_a_restart_and_an_interrupted_one_can_be_retried(folder: Path) -> None:
    """A writer stopped in the middle of a job (the job file says running); the next server
    shows it failed, never runs it by itself, and runs it again on request."""
    path = folder / JOBS_FILE
    first = JobRunner(path)
    started, hold = threading.Event(), threading.Event()

    def killed(job: Job) -> dict[str, Any]:
        started.set()
        hold.wait(30)
        return {}

    doc = documents_from_strings(["Kelp forests grow in cold seas."], ids=["kelp"])[0]
    running = first.submit(
        "add", killed, documents=[{"id": "kelp", "title": ""}], payload=[document_to_json(doc)]
    )
    assert started.wait(10)
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["jobs"][0]["status"] == "running"

    app = create_app(folder, index=Index.load(folder, embedder=HashEmbedder()), mcp=False)
    with TestClient(app) as client:
        job = client.get(f"/jobs/{running.id}").json()
        assert job["status"] == "failed" and job["error"] == INTERRUPTED and job["retryable"]
        assert "kelp" not in Index.load(folder, embedder=HashEmbedder()).documents  # not run
        row = client.get("/documents?status=failed").json()["documents"][0]
        assert row["id"] == "kelp" and row["error"] == INTERRUPTED
        retry = client.post(f"/jobs/{running.id}/retry").json()["job"]
        assert retry["id"] != running.id  # numbering goes on after the saved jobs
        assert wait_job(client, retry["id"])["status"] == "done"
        assert client.get("/documents?q=kelp").json()["documents"][0]["status"] == "indexed"
    first.path = None  # the first server is gone: its thread writes nothing more
    hold.set()
    on_disk = json.loads(path.read_text(encoding="utf-8"))
    assert [j["status"] for j in on_disk["jobs"]] == ["failed", "done"]
    assert on_disk["jobs"][1]["payload"] is None  # a done job keeps no copy of the text


def test_a_bad_jobs_file_is_set_aside(folder: Path) -> None:
    (folder / JOBS_FILE).write_text('{"schema": "psirag.jobs/1", "jobs": 5}', encoding="utf-8")
    runner = JobRunner(folder / JOBS_FILE)
    try:
        assert runner.all() == []
        assert (folder / (JOBS_FILE + ".bad")).exists()
    finally:
        runner.close()


def test_labels_tell_siblings_apart() -> None:
    abstracts = [
        "American, film, director, Duke, western, cowboy",
        "American, film, actress, musical, Broadway",
        "American, film, football, quarterback, stadium",
    ]
    labels = distinctive(abstracts, count=2)
    assert labels == ["director, Duke", "actress, musical", "football, quarterback"]
    assert distinctive(["lava, ash, Etna"]) == ["lava, ash, Etna"]  # an only child: its head
    assert distinctive(["", "x"]) == ["", "x"]


@pytest.mark.parametrize("collide", [False, True])
def test_node_documents_of_a_loaded_index_decode_only_the_named_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collide: bool
) -> None:
    """The tree view's documents come from the saved per-leaf document keys: a loaded index
    decodes one chunk per node it names, not every leaf's chunk. When two documents share
    a key (here all of them), the keys cannot tell them apart, and every leaf is read."""
    from support.counting import count_calls

    import psirag.document_keys as document_keys
    import psirag.storage_format as storage_format
    from psirag.server.views import node_document

    if collide:
        monkeypatch.setattr(document_keys, "document_key", lambda doc_id: 7)
    build_index(tmp_path / "index")
    index = Index.load(tmp_path / "index", embedder=HashEmbedder())
    tree = index.tree
    decoded = count_calls(monkeypatch, storage_format, "_chunk")
    root = int(tree.roots[0])
    named = node_document(index, root)
    assert decoded.n == (tree.n_leaves if collide else 0) + (named is not None)
    truth = Index.load(tmp_path / "index", embedder=HashEmbedder())
    for u in range(tree.n_nodes):
        leaves = tree.leaves_under(u) if u >= tree.n_leaves else [u]
        docs = {truth.source(int(leaf)).document for leaf in leaves}
        assert node_document(index, u) == (docs.pop() if len(docs) == 1 else None), u


def test_node_documents_match_each_nodes_own_leaves(tmp_path: Path) -> None:
    """The document the tree view gives each node (computed once per index, bottom-up) is the
    one all its leaves share, else none, as gathering its leaves says; also after an add."""
    from psirag.server.labels import sibling_labels
    from psirag.server.views import node_document

    index = build_index(tmp_path / "index")
    text = "Kilauea is a shield volcano in Hawaii. Its lava lake glowed for years."
    for change in ("none", "remove", "add"):  # the same Index object, holding new data
        if change == "remove":
            index.remove(["football"])
        elif change == "add":  # node ids an earlier tree had, now other nodes
            index.add(documents_from_strings([text], ids=["kilauea"]))
        tree = index.tree
        named = [node_document(index, u) for u in range(tree.n_nodes)]
        for u in range(tree.n_nodes):
            leaves = tree.leaves_under(u) if u >= tree.n_leaves else [u]
            docs = {index.source(int(leaf)).document for leaf in leaves}
            assert named[u] == (docs.pop() if len(docs) == 1 else None), u
        assert any(d is not None for d in named[tree.n_leaves :])  # a one-document subtree
        assert any(d is None for d in named[tree.n_leaves :])
        # and the labels are those of the data it holds now
        for u in range(tree.n_leaves, tree.n_nodes):
            group = [int(c) for c in tree.children(u) if c >= tree.n_leaves]
            texts = [index.node_text(c) for c in group]
            want = [x or f"node {c}" for c, x in zip(group, distinctive(texts), strict=True)]
            assert [sibling_labels(index, group)[c] for c in group] == want
    assert "kilauea" in named and "football" not in named


def test_sibling_labels_in_the_tree_differ(client: TestClient) -> None:
    tree = client.get("/tree?depth=3").json()
    by_parent: dict[int, list[str]] = {}
    for node in tree["nodes"]:
        if node["has_children"]:
            by_parent.setdefault(node["parent"], []).append(node["label"])
    assert any(len(v) > 1 for v in by_parent.values())
    for labels in by_parent.values():
        assert len(labels) == len(set(labels)), labels
        assert all(0 < len(x) <= 48 for x in labels)
    root = client.get(f"/nodes/{tree['root']}").json()
    shown = {n["id"]: n["label"] for n in tree["nodes"]}
    assert all(c["label"] == shown[c["id"]] for c in root["children"])


def test_llm_abstracts_are_labelled_by_their_first_words(tmp_path: Path) -> None:
    """An index whose abstracts an LLM wrote (here the scripted loopback server): an inner
    node's label is the start of its summary, not a keyword list."""
    from support import TOPICS, FakeOpenAIServer, client_for

    from psirag import IndexConfig
    from psirag.server.labels import sibling_labels

    def summary(body: dict[str, Any]) -> str:
        text = str(body["messages"][-1]["content"]).lower()
        topic = next((t for t in TOPICS if t.rstrip("s") in text), "things")
        return f"A summary about {topic} and the many details of its passages here."

    texts = [" ".join(t) for t in TOPICS.values()]
    docs = documents_from_strings(texts, titles=list(TOPICS), ids=list(TOPICS))
    config = IndexConfig(chunk_tokens=12, embedder="test:hash", abstracts="llm-summary")
    with FakeOpenAIServer(responder=summary) as llm:
        index = Index.build(docs, config, embedder=HashEmbedder(), llm=client_for(llm))
    tree = index.tree
    inner = [int(c) for c in tree.children(int(tree.roots[0])).tolist() if c >= tree.n_leaves]
    labels = sibling_labels(index, inner)
    assert labels and all(x.startswith("A summary about ") for x in labels.values()), labels
    assert all(x.endswith("…") and len(x.split()) == 6 for x in labels.values())


def test_sync_removes_and_adds_in_one_job_and_checks_its_ids(client: TestClient) -> None:
    sources = client.get("/sources").json()
    assert sources["documents"] == 3 and sources["sources"] == {}  # built from strings
    assert "rebuild_due" in sources["drift"]
    doc = {"id": "notes/tides.txt", "text": "The moon pulls the sea into tides.", "title": "Tides"}
    doc |= {"path": "/data/notes/tides.txt", "sha256": "ab" * 32}
    response = client.post("/sync", json={"remove": ["baking"], "documents": [doc]})
    assert response.status_code == 202, response.text
    job = wait_job(client, response.json()["job"]["id"])
    assert job["status"] == "done" and job["kind"] == "sync", job
    assert job["result"]["update"]["documents_removed"] == 1
    assert job["result"]["update"]["documents_added"] == 1
    assert job["result"]["generation"] == 2  # one generation for both changes
    after = client.get("/sources").json()
    assert after["sources"] == {
        "notes/tides.txt": {"path": "/data/notes/tides.txt", "sha256": "ab" * 32}
    }
    ids = {row["id"] for row in client.get("/documents").json()["documents"]}
    assert ids == {"volcanoes", "football", "notes/tides.txt"}

    unknown = client.post("/sync", json={"remove": ["no-such-doc"], "documents": []})
    assert unknown.status_code == 404 and "no-such-doc" in unknown.text
    clash = client.post("/sync", json={"documents": [{"id": "football", "text": "x"}]})
    assert clash.status_code == 400 and "'football' is already indexed" in clash.text
    empty = client.post("/sync", json={})
    assert empty.status_code == 400 and "nothing to sync" in empty.text
    bad = client.post("/sync", json={"documents": [{"text": "no id"}]})
    assert bad.status_code in (400, 422) and "id" in bad.text
    assert client.get("/generation").json()["generation"] == 2
