"""The web page in a real headless Chromium, against a real ``psirag serve`` child process.

The index is built here with the real default embedder; the LLM is the scripted loopback
server of ``support`` (the agent in the server is the real one). Needs Debian's ``chromium``
and ``pip install 'psirag[browser-tests]'``; skipped, saying which is missing, without them
(CI installs both).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.browser,
    # the module's ``llm`` (tests/conftest.py)
    pytest.mark.fake_llm(responder=lambda body: "Thought: nothing to add.\nAnswer: Lisbon"),
]

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed: pip install 'psirag[browser-tests]'"
)
pytest.importorskip(
    "fastapi", reason="the server extra is not installed: pip install 'psirag[server]'"
)

from support import FakeOpenAIServer, Reply, ServerProcess  # noqa: E402
from support.browser import chromium_path, launch_chromium  # noqa: E402

from psirag import Index, IndexConfig  # noqa: E402

if chromium_path() is None:
    pytest.skip(
        "no Chromium: apt-get install -y chromium (or set PSIRAG_CHROMIUM)", allow_module_level=True
    )

KEY = "web-test-key"
SUB_QUESTION = "Calder Group head office city"

RECORDS = [
    ("Calder Hotel", "The Calder Hotel in Porto is owned by the Calder Group."),
    ("Calder Group", "The Calder Group is a hotel company whose head office is in Lisbon."),
    ("Lisbon", "Lisbon is the capital of Portugal, on the Tagus estuary."),
    ("Porto", "Porto is a coastal city in northern Portugal known for port wine."),
    ("Mount Etna", "Mount Etna is an active volcano on the east coast of Sicily."),
    ("Vesuvius", "Vesuvius destroyed Pompeii with ash and lava in the year 79."),
    ("Volcanic ash", "Volcanic eruptions release ash clouds, lava and sulfur gases."),
    ("Stromboli", "Stromboli is a small volcanic island with frequent eruptions."),
    ("Arsenal", "Arsenal is a football club based in north London."),
    ("Liverpool", "Liverpool won the football league title with a record points total."),
    ("Football manager", "A football club employs a manager, players and scouts."),
    ("Derby", "The football derby ended with a late goal from the striker."),
    ("Sourdough", "Sourdough bread uses a starter of wild yeast instead of baker's yeast."),
    ("Croissant", "Croissants are baked from laminated dough with butter layers."),
    ("Bread oven", "Bake the bread in a hot oven until the crust is brown."),
    ("Yeast", "Bread dough rises when yeast ferments the sugars in flour."),
    ("Chess", "Chess is a board game for two players on a checkered board of 64 squares."),
    ("Go", "Go is a board game in which two players place black and white stones."),
    ("Shogi", "Shogi is a Japanese board game related to chess."),
    ("Backgammon", "Backgammon is a board game of dice and checkers for two players."),
]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("web")
    corpus = folder / "corpus.json"
    corpus.write_text(json.dumps([{"title": t, "text": x} for t, x in RECORDS]), encoding="utf-8")
    index = Index.build([corpus], IndexConfig(max_children=4))
    assert index.tree.depth >= 3  # deep enough that zooming and lazy loading are exercised
    return index.save(folder / "index")


@pytest.fixture(scope="module")
def server(index_dir: Path, llm: FakeOpenAIServer) -> Iterator[ServerProcess]:
    spec = f"openai:{llm.base_url}#fake"
    with ServerProcess(index_dir, ["--llm", spec, "--api-key", KEY]) as proc:
        yield proc


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()


class Page:
    """A page on the server, with the key already given, recording console errors, failed
    requests and every URL it asked for."""

    def __init__(
        self,
        browser: Any,
        server: ServerProcess,
        *,
        key: str | None = KEY,
        viewport: tuple[int, int] = (1366, 768),
    ) -> None:
        self.context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        if key:
            self.context.add_init_script(f"sessionStorage.setItem('psirag-api-key', {key!r})")
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.failed: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on(
            "response", lambda r: r.status >= 400 and self.failed.append(f"{r.status} {r.url}")
        )
        self.server = server

    def open(self, query: str = "") -> Any:
        self.page.goto(self.server.url + "/" + query)
        self.page.wait_for_selector("body[data-tree-ready=true]", timeout=30_000)
        return self.page

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def page(browser: Any, server: ServerProcess) -> Iterator[Page]:
    p = Page(browser, server)
    yield p
    p.close()


def api(server: ServerProcess, method: str, path: str, body: Any = None) -> Any:
    status, data = server.request(method, path, body, key=KEY)
    assert status == 200, (status, data)
    return data


def click_arc(page: Any, node: int) -> None:
    """A real mouse click in the middle of a node's arc (an arc's bounding box may be mostly
    somewhere else)."""
    point = page.evaluate("id => window.psirag.chart.pointOf(id)", node)
    assert point is not None, f"node {node} is not drawn"
    box = page.locator("#sunburst").bounding_box()
    page.mouse.click(box["x"] + point["x"], box["y"] + point["y"])


def drawn_ids(page: Any, selector: str) -> set[int]:
    return {
        int(x) for x in page.eval_on_selector_all(selector, "els => els.map(e => e.dataset.id)")
    }


def test_page_loads_offline_without_console_errors(page: Page, server: ServerProcess) -> None:
    p = page.open()
    assert p.title() == "psirag"
    info = api(server, "GET", "/index")
    summary = p.inner_text("#index-summary")
    assert f"{info.get('counts', info)['chunks']} chunks" in summary
    assert p.locator("#sunburst path").count() > 0
    assert page.errors == []
    assert page.failed == []
    # every asset and call stays on the server: nothing from a CDN
    assert page.requests and all(u.startswith(server.url + "/") for u in page.requests)
    # every form control has a label
    unlabelled = p.evaluate(
        """() => [...document.querySelectorAll('input, select, textarea')]
              .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
              .map(e => e.id || e.name || e.type)"""
    )
    assert unlabelled == []


def test_the_page_asks_for_the_key_once_and_sends_it(browser: Any, server: ServerProcess) -> None:
    status, body = server.request("GET", "/tree")
    assert status == 401 and "error" in body  # the server really wants a key
    page = Page(browser, server, key=None)
    try:
        p = page.page
        p.goto(server.url + "/")
        p.wait_for_selector("#key-dialog[open]")
        p.fill("#key-input", "wrong-key")
        p.click("#key-form button[type=submit]")
        p.wait_for_selector("#key-error:not([hidden])")
        assert "refused" in p.inner_text("#key-error")
        p.fill("#key-input", KEY)
        p.click("#key-form button[type=submit]")
        p.wait_for_selector("body[data-tree-ready=true]", timeout=30_000)
        assert p.locator("#key-dialog[open]").count() == 0
        # the key is kept: a reload asks nothing
        p.reload()
        p.wait_for_selector("body[data-tree-ready=true]", timeout=30_000)
        assert p.locator("#key-dialog[open]").count() == 0
    finally:
        page.close()


def test_click_shows_abstract_children_and_breadcrumb(page: Page, server: ServerProcess) -> None:
    p = page.open()
    tree = api(server, "GET", "/tree?depth=1")
    root = tree["root"]
    first_ring = [n for n in tree["nodes"] if n["parent"] == root and n["has_children"]]
    target = max(first_ring, key=lambda n: n["leaves"])
    click_arc(p, target["id"])
    p.wait_for_selector("#node-abstract")
    truth = api(server, "GET", f"/nodes/{target['id']}")
    p.wait_for_function(
        "id => document.querySelector('#sunburst .centre').dataset.id === String(id)",
        arg=target["id"],
    )
    assert p.inner_text("#node-abstract") == truth["abstract"]
    children = p.locator("#node-detail .children li").all_inner_texts()
    assert len(children) == len(truth["children"])
    # the clicked node is now the centre; its children are the first ring
    ring = drawn_ids(p, "#sunburst path:not([visibility=hidden])")
    assert {c["id"] for c in truth["children"]} <= ring
    assert p.locator("#breadcrumb [aria-current]").inner_text() == (target["label"] or "")
    # the breadcrumb leads back to the root
    p.click("#breadcrumb button:has-text('root')")
    p.wait_for_function(
        "id => document.querySelector('#sunburst .centre').dataset.id === String(id)", arg=root
    )
    assert page.errors == []


def test_keyboard_moves_opens_and_zooms_out(page: Page, server: ServerProcess) -> None:
    p = page.open()
    root = api(server, "GET", "/tree?depth=0")["root"]
    p.focus("#sunburst")
    p.keyboard.press("ArrowDown")  # from the centre to its widest child
    cursor = p.eval_on_selector("#sunburst", "s => s.getAttribute('aria-activedescendant')")
    assert cursor and cursor.startswith("arc-")
    node = int(cursor.removeprefix("arc-"))
    assert api(server, "GET", f"/nodes/{node}")["parent"] == root
    p.keyboard.press("ArrowRight")
    sibling = p.eval_on_selector("#sunburst", "s => s.getAttribute('aria-activedescendant')")
    assert sibling != cursor
    p.keyboard.press("Enter")
    opened = int(sibling.removeprefix("arc-"))
    truth = api(server, "GET", f"/nodes/{opened}")
    p.wait_for_function(
        "t => document.querySelector('#node-abstract')?.textContent === t", arg=truth["abstract"]
    )
    if truth["children"]:
        p.wait_for_function(
            "id => document.querySelector('#sunburst .centre').dataset.id === String(id)",
            arg=opened,
        )
        p.keyboard.press("Escape")
        p.wait_for_function(
            "id => document.querySelector('#sunburst .centre').dataset.id === String(id)", arg=root
        )
    # the focus ring is visible on the node the keyboard is on
    assert p.locator("#sunburst .cursor").count() == 1


def test_search_lists_results_and_highlights_their_paths(page: Page, server: ServerProcess) -> None:
    p = page.open()
    query = "volcano eruption ash lava"
    truth = api(server, "POST", "/search", {"query": query, "k": 4, "bm25": True})
    p.click("#tab-search")
    p.fill("#search-query", query)
    p.fill("#search-k", "4")
    p.click("#search-submit")
    p.wait_for_selector("#highlight-note:not([hidden])")
    items = p.locator("#search-results > li")
    assert items.count() == len(truth["passages"])
    first = truth["passages"][0]
    text = items.nth(0).inner_text()
    assert first["source"]["title"] in text and f"chunk {first['source']['chunk']}" in text
    span = first["source"]["span"]
    assert f"chars {span[0]}–{span[1]}" in text
    on_path = {n for h in truth["hits"] for n in h["path"]}
    hit_leaves = {h["node"] for h in truth["hits"]}
    drawn_on_path = drawn_ids(p, "#sunburst path.on-path")
    drawn_hits = drawn_ids(p, "#sunburst path.hit")
    assert drawn_on_path and drawn_on_path <= on_path
    assert drawn_hits and drawn_hits <= hit_leaves
    # the arcs drawn off every hit's path are dimmed, not highlighted
    all_drawn = drawn_ids(p, "#sunburst path")
    assert (all_drawn & on_path) == drawn_on_path
    # "show in tree" reveals the passage's leaf and opens it
    items.nth(0).locator("button.reveal").click()
    p.wait_for_function(
        "t => document.querySelector('#node-abstract')?.textContent === t", arg=first["text"]
    )
    leaf = truth["hits"][0]["node"]
    assert p.locator(f"#arc-{leaf}.hit").count() == 1


def test_ask_streams_steps_then_the_answer_with_citations(
    page: Page, server: ServerProcess, llm: FakeOpenAIServer, request: pytest.FixtureRequest
) -> None:
    p = page.open()
    second_reply = (
        "Thought: the Calder Group's head office is in Lisbon.\nAnswer: Lisbon, the capital "
        "of Portugal [1]"
    )
    llm.script(
        Reply(f"Thought: the hotel belongs to the Calder Group.\nRetrieve: {SUB_QUESTION}"),
        Reply(second_reply, delay=2.0),
    )
    llm.token_delay = 0.15
    request.addfinalizer(lambda: setattr(llm, "token_delay", 0.0))
    p.click("#tab-ask")
    p.fill("#ask-query", "Where is the head office of the company that owns the Calder Hotel?")
    p.fill("#ask-retrievals", "1")
    p.click("#ask-submit")
    # the first step shows while the model still thinks about the second: the steps stream
    p.wait_for_selector("#ask-steps .step:not(.waiting)", timeout=20_000)
    assert p.locator("#ask-answer").is_hidden()
    assert p.locator("#ask-steps .step:not(.waiting)").count() == 1
    # the second reply shows as the model writes it (one piece every 0.15 s)
    live = p.wait_for_selector("#ask-live:has-text('Calder')", timeout=20_000)
    assert live is not None and p.locator("#ask-answer").is_hidden()
    assert second_reply.startswith(live.inner_text().strip()[:20])
    # the answer shows as a draft while the model writes it, then as the accepted answer
    # (checked in one go in the page, each frame: the draft, in view, before the answer)
    in_view = "e => { const r = e.getBoundingClientRect(); return r.top >= 0 && "
    in_view += "r.bottom <= innerHeight; }"
    drafting = f"""() => {{
      const draft = document.querySelector('#ask-draft');
      return !!draft && draft.textContent.startsWith('Lisbon, the')
        && !document.querySelector('#answer-text') && ({in_view})(draft);
    }}"""
    p.wait_for_function(drafting, polling="raf", timeout=20_000)
    p.wait_for_selector("#answer-text", timeout=30_000)
    assert p.inner_text("#answer-text").strip().startswith("Lisbon, the capital of Portugal")
    assert p.locator("#ask-draft").count() == 0
    assert p.eval_on_selector("#answer-text", in_view)
    steps = p.locator("#ask-steps .step:not(.waiting)")
    assert steps.count() == 2
    assert steps.nth(1).locator(".sub-question").inner_text() == SUB_QUESTION
    assert "Calder Group" in steps.nth(0).inner_text()  # the model's reasoning is shown
    first_step_passages = steps.nth(0).locator(".passage")
    assert first_step_passages.count() > 0
    assert "chunk" in first_step_passages.nth(0).inner_text()
    # the model's own citation: one marker, linked to the passage it labels [1] (the first
    # passage of the first step), with the top-k evidence listed apart
    cites = p.locator("#ask-answer .citations > li")
    assert cites.count() == 1
    assert (
        cites.nth(0).locator(".text").inner_text()
        == first_step_passages.nth(0).locator(".text").inner_text()
    )
    markers = p.locator("#answer-text a.cite")
    assert markers.count() == 1 and markers.nth(0).inner_text() == "[1]"
    assert p.locator("#ask-answer .evidence-list > li").count() == 5
    markers.nth(0).click()
    assert p.evaluate("location.hash") == "#cite-1"
    # the marker also lights up the cited passage's leaf in the tree, the answer still in view
    p.wait_for_selector("#sunburst path.hit", timeout=10_000)
    assert p.locator("#sunburst path.hit").count() == 1
    assert "cited passage [1]" in p.inner_text("#highlight-text")
    assert p.locator("#answer-text").is_visible()
    # and to the tree: "show in tree" opens the cited passage's leaf
    cites.nth(0).locator("button.reveal").click()
    same_text = "t => (document.querySelector('#node-abstract')?.textContent || '')"
    same_text += ".replace(/\\s+/g, ' ').trim() === t.replace(/\\s+/g, ' ').trim()"
    p.wait_for_function(same_text, arg=cites.nth(0).locator(".text").inner_text())
    assert page.errors == []


def test_ask_budget_box_takes_auto_and_refuses_nonsense(
    page: Page, server: ServerProcess, llm: FakeOpenAIServer
) -> None:
    p = page.open()
    p.click("#tab-ask")
    p.fill("#ask-query", "Where is Lisbon?")
    p.fill("#ask-retrievals", "lots")
    before = len(llm.requests)
    p.click("#ask-submit")
    p.wait_for_selector("#ask-error:not([hidden])")
    assert "0 to 10, or auto" in p.inner_text("#ask-error")
    assert len(llm.requests) == before  # nothing was sent
    # auto: the server sizes the budget from the predicted hops (a 1-2 hop question: 1).
    p.fill("#ask-retrievals", "auto")
    p.click("#ask-submit")
    p.wait_for_selector("#answer-budget", timeout=60_000)
    assert p.inner_text("#answer-budget") == "Budget: 1 retrieval after the first."
    assert p.locator("#ask-error").is_hidden()
    mine = [r for r in llm.requests[before:] if "Where is Lisbon?" in json.dumps(r)]
    assert mine and "at most 1 time;" in mine[0]["messages"][0]["content"]
    assert page.errors == []


def test_ask_shows_an_llm_error_plainly(page: Page, llm: FakeOpenAIServer) -> None:
    p = page.open()
    llm.script(Reply(status=400, body={"error": {"message": "model 'fake' does not exist"}}))
    p.click("#tab-ask")
    p.fill("#ask-query", "Where is Lisbon?")
    p.click("#ask-submit")
    p.wait_for_selector("#ask-error:not([hidden])", timeout=30_000)
    message = p.inner_text("#ask-error")
    assert "400" in message or "does not exist" in message
    assert p.locator("#ask-answer").is_hidden()
    assert p.locator("#ask-submit").is_enabled()


def test_documents_list_upload_and_remove(
    page: Page, server: ServerProcess, tmp_path: Path
) -> None:
    p = page.open()
    truth = api(server, "GET", "/documents")["documents"]
    p.click("#tab-docs")
    p.wait_for_selector("#docs-table tbody tr")
    rows = p.locator("#docs-table tbody tr")
    assert rows.count() == len(truth)
    assert rows.nth(0).locator("td.num").inner_text() == str(truth[0]["chunks"])
    note = tmp_path / "tides.txt"
    note.write_text(
        "Tides rise and fall twice a day under the pull of the moon.\n", encoding="utf-8"
    )
    with p.expect_response(
        lambda r: r.url.endswith("/documents") and r.request.method == "POST"
    ) as r:
        p.set_input_files("#doc-file", str(note))
    response = r.value
    assert response.status == 202, response.text()
    p.wait_for_selector("#jobs li[data-status=done]", timeout=120_000)
    p.wait_for_selector("#docs-table tbody tr:has-text('tides')", timeout=30_000)
    p.once("dialog", lambda d: d.accept())
    p.locator("#docs-table tbody tr:has-text('tides') button.danger").click()
    p.wait_for_selector("#jobs li:nth-child(2)[data-status=done]", timeout=120_000)
    p.wait_for_function(
        "() => !document.querySelector('#docs-table').textContent.includes('tides')"
    )


def test_drop_zone_uploads_dropped_files(page: Page, server: ServerProcess) -> None:
    p = page.open()
    p.click("#tab-docs")
    handle = p.evaluate_handle(
        """() => { const dt = new DataTransfer();
                   dt.items.add(new File(['Dropped text about glaciers.'], 'glaciers.txt',
                                         {type: 'text/plain'}));
                   dt.items.add(new File(['PK'], 'letter.docx', {type: 'application/zip'}));
                   return dt; }"""
    )
    with p.expect_request(lambda r: r.url.endswith("/documents") and r.method == "POST") as req:
        p.dispatch_event("#drop-zone", "drop", {"dataTransfer": handle})
    assert req.value.headers["content-type"].startswith("multipart/form-data")
    raw = req.value.post_data_buffer  # Chromium may keep a dropped file's bytes to itself
    if raw is not None:
        assert b'filename="glaciers.txt"' in raw and b"Dropped text about glaciers." in raw
        assert b"letter.docx" not in raw  # a type psirag does not read is not sent
    assert "letter.docx: not a type psirag reads" in p.inner_text("#docs-rejected")
    response = req.value.response()
    assert response is not None and response.status == 202, response and response.text()
    # wait for the job, then take the document out again
    p.wait_for_selector("#jobs li[data-status=done]", timeout=120_000)
    remove(server, "glaciers.txt")


@pytest.mark.parametrize("viewport", [(1366, 768), (390, 844)], ids=["laptop", "phone"])
def test_layout_fits_laptop_and_phone(
    browser: Any, server: ServerProcess, viewport: tuple[int, int]
) -> None:
    page = Page(browser, server, viewport=viewport)
    try:
        p = page.open()
        width = p.evaluate("document.scrollingElement.scrollWidth")
        assert width <= viewport[0]
        box = p.locator("#sunburst").bounding_box()
        assert box and box["width"] >= 0.5 * min(viewport) and box["height"] >= 0.5 * min(viewport)
        for tab in ("#tab-node", "#tab-ask", "#tab-search", "#tab-docs"):
            t = p.locator(tab).bounding_box()
            assert t and t["x"] >= 0 and t["x"] + t["width"] <= viewport[0] + 1
        assert page.errors == [], (page.errors, page.failed)
    finally:
        page.close()


def test_zoom_animation_finishes_in_frames(page: Page, server: ServerProcess) -> None:
    p = page.open()
    tree = api(server, "GET", "/tree?depth=1")
    child = next(n for n in tree["nodes"] if n["parent"] == tree["root"] and n["has_children"])
    started = time.monotonic()
    frames = p.evaluate(
        "async id => { const c = window.psirag.chart; await c.zoomTo(id); return c.frameTimes; }",
        child["id"],
    )
    assert time.monotonic() - started < 10
    assert len(frames) >= 3  # it animated, frame by frame


def remove(server: ServerProcess, doc_id: str) -> None:
    """Take a document out again and wait for the job, so the next test sees a still index."""
    status, body = server.request("DELETE", f"/documents/{doc_id}", key=KEY)
    assert status == 202, body
    deadline = time.monotonic() + 120
    while api(server, "GET", f"/jobs/{body['job']['id']}")["status"] not in ("done", "failed"):
        assert time.monotonic() < deadline, "the removal did not finish"
        time.sleep(0.2)


def upload(server: ServerProcess, files: list[tuple[str, bytes]]) -> dict[str, Any]:
    """A write by another client: multipart files through the API, waited for."""
    import httpx

    response = httpx.post(
        f"{server.url}/documents",
        files=[("file", (name, data)) for name, data in files],
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["job"]["id"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = api(server, "GET", f"/jobs/{job_id}")
        if job["status"] in ("done", "failed"):
            assert job["status"] == "done", job
            return dict(job)
        time.sleep(0.2)
    raise AssertionError("the upload job did not finish")


def server_tree(server: ServerProcess) -> dict[int, dict[str, Any]]:
    tree = api(server, "GET", "/tree?depth=6")
    assert all(n["layer"] == 0 or not n["has_children"] or n["layer"] > 0 for n in tree["nodes"])
    return {n["id"]: n for n in tree["nodes"]}


def test_a_foreign_write_reloads_the_page_onto_the_new_generation(
    page: Page, server: ServerProcess
) -> None:
    """Another client adds two documents while the page shows a search: the page notices the
    new generation, redraws from it alone (every drawn parent one layer up, as the server
    says), says what changed, and its counts, search results and highlights are the new
    index's."""
    p = page.open("?poll=300")
    before = int(p.evaluate("document.body.dataset.generation"))
    p.click("#tab-search")
    p.fill("#search-query", "volcano eruption ash")
    p.click("#search-submit")
    p.wait_for_selector("#highlight-note:not([hidden])")
    tree = api(server, "GET", "/tree?depth=1")
    place = next(n for n in tree["nodes"] if n["parent"] == tree["root"] and n["has_children"])
    p.evaluate("id => window.psirag.chart.zoomTo(id, false)", place["id"])
    files = [
        ("krakatoa.txt", b"Krakatoa is a volcano whose eruption in 1883 spread ash worldwide."),
        ("pinatubo.txt", b"Pinatubo erupted in 1991; its volcanic ash cooled the planet."),
    ]
    job = upload(server, files)
    after = job["result"]["generation"]
    assert after > before
    p.wait_for_selector(f"body[data-generation='{after}']", timeout=30_000)
    p.wait_for_selector("#generation-note:not([hidden])")
    assert "2 documents added" in p.inner_text("#generation-text")

    truth = server_tree(server)
    # the place is kept exactly when the new root still has a child that is the same node
    # (same layer and label; ids shift when leaves are added)
    root = next(n for n in truth.values() if n["parent"] < 0)
    same = [
        n["id"]
        for n in truth.values()
        if n["parent"] == root["id"]
        and (n["layer"], n["label"]) == (place["layer"], place["label"])
    ]
    focus = p.evaluate("window.psirag.chart.focus")
    note = p.inner_text("#generation-text")
    if same:
        assert focus == same[0] and "Your place was kept" in note
    else:
        assert focus == root["id"] and "back at the root" in note
    drawn = p.evaluate(
        """() => { const m = window.psirag.model;
                   return [...window.psirag.chart.elements.keys()].map(id => {
                     const n = m.get(id); const up = n.parent === null ? null : m.get(n.parent);
                     return [id, n.layer, n.parent, up ? up.layer : null, n.label]; }); }"""
    )
    assert len(drawn) > 5
    for node_id, layer, parent, parent_layer, label in drawn:
        if node_id < 0:
            continue
        assert node_id in truth, node_id
        assert (layer, label) == (truth[node_id]["layer"], truth[node_id]["label"])
        if truth[node_id]["parent"] >= 0:
            assert parent == truth[node_id]["parent"], node_id
            assert parent_layer == layer + 1, (node_id, layer, parent_layer)

    index = api(server, "GET", "/index")
    summary = p.inner_text("#index-summary")
    assert (
        f"{index['documents']:,} documents" in summary and f"{index['chunks']:,} chunks" in summary
    )
    fresh = api(server, "POST", "/search", {"query": "volcano eruption ash", "k": 10})
    assert fresh["generation"] == after
    p.wait_for_function(
        "g => document.querySelector('#search-results').dataset.generation === String(g)", arg=after
    )
    shown = p.eval_on_selector_all("#search-results li", "els => els.map(e => e.dataset.passage)")
    assert shown == [x["id"] for x in fresh["passages"]]
    hits = set(p.evaluate("[...window.psirag.chart.hits]"))
    assert hits == {h["node"] for h in fresh["hits"]}  # no highlight left from the old tree
    assert page.errors == [] and page.failed == []
    for name, _ in files:  # leave the shared server as it was
        remove(server, name)


def make_pdf(pages: list[str]) -> bytes:
    fpdf = pytest.importorskip("fpdf")
    pdf = fpdf.FPDF()
    pdf.set_title("Harbour report")
    pdf.set_font("helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    return bytes(pdf.output())


def test_uploads_take_the_types_psirag_add_reads(
    page: Page, server: ServerProcess, tmp_path: Path
) -> None:
    from psirag.ingest.loaders import SUFFIXES

    p = page.open()
    p.click("#tab-docs")
    accept = p.get_attribute("#doc-file", "accept")
    assert accept is not None and set(accept.split(",")) == set(SUFFIXES)
    told = p.inner_text("#drop-zone")
    assert all(word in told for word in ("PDF", "HTML", ".txt", ".md", "JSON", "JSONL"))
    pdf = tmp_path / "harbour.pdf"
    pdf.write_bytes(make_pdf(["Cranes unload ships in the harbour.", "Tugboats guide tankers."]))
    records = tmp_path / "birds.jsonl"
    records.write_text(
        json.dumps({"title": "Puffin", "text": "Puffins nest on cliffs."}) + "\n", encoding="utf-8"
    )
    broken = tmp_path / "broken.json"
    broken.write_text("[{", encoding="utf-8")
    p.set_input_files("#doc-file", [str(pdf), str(records), str(broken)])
    p.wait_for_selector("#docs-rejected:not([hidden])")
    assert "broken.json" in p.inner_text("#docs-rejected")
    assert "malformed JSON" in p.inner_text("#docs-rejected")
    p.wait_for_selector("#jobs li[data-status=done]", timeout=120_000)
    p.fill("#docs-filter", "harbour")
    p.wait_for_selector("#docs-table tbody tr[data-doc='harbour.pdf'][data-status=indexed]")
    assert "Harbour report" in p.inner_text("#docs-table tbody")
    found = api(server, "POST", "/search", {"query": "tugboats", "k": 5, "docs": ["harbour.pdf"]})
    [passage] = found["passages"]  # one chunk of ~100 tokens: it starts on page 1
    assert passage["source"]["page"] == 1 and "Tugboats guide tankers" in passage["text"]
    for doc in ("harbour.pdf", "birds.jsonl:0"):
        remove(server, doc)


@pytest.mark.parametrize("viewport", [(1366, 768), (390, 844)], ids=["laptop", "phone"])
def test_documents_page_sort_and_filter_on_the_server(
    browser: Any, server: ServerProcess, viewport: tuple[int, int], tmp_path: Path
) -> None:
    page = Page(browser, server, viewport=viewport)
    try:
        p = page.open("?docs=5")
        p.click("#tab-docs")
        p.wait_for_selector("#docs-table tbody tr")
        total = api(server, "GET", "/documents")["total"]
        assert p.locator("#docs-table tbody tr").count() == 5
        assert p.inner_text("#docs-range") == f"1–5 of {total}"
        p.click("#docs-next")
        p.wait_for_function(
            "() => document.querySelector('#docs-range').textContent.startsWith('6–')"
        )
        second = api(server, "GET", "/documents?offset=5&limit=5")["documents"]
        rows = p.eval_on_selector_all("#docs-table tbody tr", "els => els.map(e => e.dataset.doc)")
        assert rows == [d["id"] for d in second]
        p.select_option("#docs-sort", "title")
        p.select_option("#docs-order", "desc")
        p.fill("#docs-filter", "CA")
        expected = api(server, "GET", "/documents?q=ca&sort=title&order=desc&limit=5")
        assert 1 < expected["total"] < total
        p.wait_for_function(
            "n => document.querySelector('#docs-range').textContent.endsWith(` of ${n}`)",
            arg=expected["total"],
        )
        rows = p.eval_on_selector_all("#docs-table tbody tr", "els => els.map(e => e.dataset.doc)")
        assert rows == [d["id"] for d in expected["documents"]]
        titles = [d["title"] for d in expected["documents"]]
        assert titles == sorted(titles, key=str.lower, reverse=True)
        statuses = p.eval_on_selector_all(
            "#docs-table td.status", "els => els.map(e => e.innerText)"
        )
        assert statuses and all(s.strip() == "indexed" for s in statuses)
        assert p.evaluate("document.scrollingElement.scrollWidth") <= viewport[0]
        for row in p.locator("#docs-table tbody tr").all():
            box = row.bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= viewport[0] + 1
        name = "laptop" if viewport[0] > 800 else "phone"
        p.screenshot(path=str(tmp_path / f"docs-{name}.png"))
        assert page.errors == [], page.errors
    finally:
        page.close()


def test_the_phone_view_labels_its_rings(browser: Any, server: ServerProcess) -> None:
    page = Page(browser, server, viewport=(390, 844))
    try:
        p = page.open()
        labels = p.eval_on_selector_all(
            "#sunburst .labels text", "els => els.map(e => [e.dataset.id, e.textContent])"
        )
        assert len(labels) >= 4, labels
        assert all(len(text) >= 5 for _, text in labels)
        rings = p.evaluate(
            "ids => ids.map(id => window.psirag.model.get(Number(id)).depth)",
            [i for i, _ in labels],
        )
        assert len(set(rings)) >= 2  # more than one ring has labels
    finally:
        page.close()


def test_an_interrupted_job_shows_failed_and_the_page_retries_it(
    browser: Any, index_dir: Path, llm: FakeOpenAIServer, tmp_path: Path
) -> None:
    """A server stopped during an add leaves the job 'running' in its jobs file; the next
    server shows the document as failed (interrupted) with a Retry button, and Retry adds it."""
    import shutil

    from psirag.ingest import documents_from_strings
    from psirag.server.jobs import INTERRUPTED, JOBS_FILE, JOBS_SCHEMA
    from psirag.server.uploads import document_to_json

    folder = Path(shutil.copytree(index_dir, tmp_path / "index"))
    [doc] = documents_from_strings(
        ["Lighthouses guide ships past the rocks at night."], titles=["Lighthouses"], ids=["lh"]
    )
    left = {
        "id": "job-7",
        "kind": "add",
        "status": "running",
        "progress": {"done": 0, "total": 1},
        "created": time.time(),
        "documents": [{"id": "lh", "title": "Lighthouses"}],
        "payload": [document_to_json(doc)],
    }
    (folder / JOBS_FILE).write_text(
        json.dumps({"schema": JOBS_SCHEMA, "jobs": [left]}), encoding="utf-8"
    )
    with ServerProcess(folder, ["--api-key", KEY]) as second:
        page = Page(browser, second)
        try:
            p = page.open()
            p.click("#tab-docs")
            p.select_option("#docs-status", "failed")
            row = p.locator("#docs-table tbody tr[data-doc='lh']")
            row.wait_for()
            assert row.get_attribute("data-status") == "failed"
            assert INTERRUPTED in row.inner_text()
            row.get_by_role("button", name="Retry Lighthouses").click()
            p.wait_for_selector("#jobs li[data-status=done]", timeout=120_000)
            p.select_option("#docs-status", "indexed")
            p.fill("#docs-filter", "lighthouse")
            p.wait_for_selector("#docs-table tbody tr[data-doc='lh'][data-status=indexed]")
            status, job = second.request("GET", "/jobs/job-7", key=KEY)
            assert status == 200 and job["status"] == "failed" and job["error"] == INTERRUPTED
            assert page.errors == [], page.errors
        finally:
            page.close()


def test_a_write_while_the_page_loads_is_drawn_from_the_new_generation(
    page: Page, server: ServerProcess
) -> None:
    """The index summary comes from one generation and the first /tree answer from the next
    (a write lands in between, held there by the test): the page draws the newer one and asks
    for nothing that is not there."""
    writes: list[dict[str, Any]] = []

    def write_then_continue(route: Any) -> None:
        if not writes:
            writes.append(upload(server, [("tides.txt", b"Tides follow the moon's pull.")]))
        route.continue_()

    page.page.route("**/tree?depth=*", write_then_continue)
    p = page.open()
    after = writes[0]["result"]["generation"]
    p.wait_for_selector(f"body[data-generation='{after}']", timeout=30_000)
    p.wait_for_selector("#node-title")
    drawn = drawn_ids(p, "#sunburst path[data-id]")
    truth = server_tree(server)
    assert drawn and drawn <= set(truth)
    assert page.errors == [] and page.failed == [], (page.errors, page.failed)
    remove(server, "tides.txt")
