"""``psirag serve`` end to end: a real server process on 127.0.0.1 (uvicorn in a subprocess), a
real agent, a scripted LLM server on loopback, the official ``openai`` client and the ``mcp``
SDK's own client."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import itertools

import httpx
from support import (
    ANSWER_REPLY,
    LAUNCHER,
    LLM_SECRET,
    SUMMARY_REPLY,
    FakeOpenAIServer,
    ScriptedLLM,
    ServerProcess,
    ask_stream,
    build_index,
    child_env,
    free_port,
    sse_events,
)

from psirag.config import SearchConfig, profile_config
from psirag.index import Index

API_KEY = "psirag-test-key-0123456789"
QUESTION = "Where is Mount Etna?"


def script_of(llm: FakeOpenAIServer) -> ScriptedLLM:
    """The scripted model behind the module's ``llm`` (tests/conftest.py): its delay and its
    count of calls in flight."""
    assert isinstance(llm.responder, ScriptedLLM)
    return llm.responder


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    folder = tmp_path_factory.mktemp("served") / "index"
    return folder, build_index(folder)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="module")
def server(built: tuple[Path, Index], llm: FakeOpenAIServer, logs: Path) -> Iterator[ServerProcess]:
    """No key, an LLM, at most 2 LLM calls at a time."""
    spec = f"openai:{llm.base_url}#fake"
    proc = ServerProcess(
        built[0],
        ["--llm", spec, "--llm-concurrency", "2", "--retries", "0"],
        log_path=logs / "open.log",
        hash_embedder=True,
    )
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def guarded(
    built: tuple[Path, Index], llm: FakeOpenAIServer, logs: Path
) -> Iterator[ServerProcess]:
    """A key, small limits, CORS for one origin, a 2 s request timeout."""
    spec = f"openai:{llm.base_url}#fake"
    args = ["--llm", spec, "--api-key", API_KEY, "--max-body-bytes", "2000"]
    args += ["--max-query-chars", "300", "--cors-origin", "http://page.example"]
    args += ["--request-timeout", "2", "--retries", "0"]
    proc = ServerProcess(built[0], args, log_path=logs / "guarded.log", hash_embedder=True)
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


RESPONSES: list[str] = []
"""Every response body the tests saw, checked for the LLM key at the end."""


def call(method: str, url: str, **kwargs: Any) -> httpx.Response:
    response = httpx.request(method, url, timeout=30, **kwargs)
    RESPONSES.append(response.text)
    return response


def requests_about(fake: FakeOpenAIServer, since: int, text: str) -> list[str]:
    """The LLM requests from call ``since`` on (as JSON) that mention ``text``: a late call left
    over from an earlier test on the shared server cannot stand in for this test's own."""
    return [json.dumps(r) for r in fake.requests[since:] if text in json.dumps(r)]


def assert_error(response: httpx.Response, status: int, kind: str | None = None) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and body["error"]["message"]
    assert "Traceback" not in response.text
    if kind is not None:
        assert body["error"]["type"] == kind
    return str(body["error"]["message"])


# ---------------------------------------------------------------------------- read endpoints
def test_health_and_index(server: ServerProcess, built: tuple[Path, Index]) -> None:
    _, index = built
    assert call("GET", f"{server.url}/health").json() == {"status": "ok", "version": "0.1.0"}
    body = call("GET", f"{server.url}/index").json()
    assert body["chunks"] == index.tree.n_leaves and body["nodes"] == index.tree.n_nodes
    assert body["documents"] == 3 and body["generation"] == 1
    assert body["embedder"]["id"] == index.embedder_id
    assert body["llm"].startswith("openai:") and LLM_SECRET not in json.dumps(body)


def test_search_is_the_in_process_search(server: ServerProcess, built: tuple[Path, Index]) -> None:
    _, index = built
    body = call("POST", f"{server.url}/search", json={"query": "volcano lava ash", "k": 3}).json()
    expected = index.search("volcano lava ash", config=SearchConfig(k=3))
    assert body["schema"] == "psirag.search/1" and body["k"] == 3
    assert body["passages"] == [p.to_dict() for p in expected]
    assert body["passages"][0]["source"]["document"] == "volcanoes"
    parent = index.tree.parent
    for hit, passage in zip(body["hits"], expected, strict=True):
        assert hit["passage"] == passage.id and hit["node"] == passage.leaf
        path = hit["path"]
        assert path[-1] == passage.leaf and parent[path[0]] == -1
        assert all(parent[b] == a for a, b in itertools.pairwise(path))

    only = call(
        "POST", f"{server.url}/search", json={"query": "bread", "k": 5, "docs": ["football"]}
    ).json()
    assert only["passages"] and {p["source"]["document"] for p in only["passages"]} == {"football"}
    paper = call(
        "POST", f"{server.url}/search", json={"query": "lava ash", "k": 4, "profile": "paper"}
    ).json()
    expected_paper = index.search("lava ash", config=profile_config("paper").with_(k=4))
    assert paper["passages"] == [p.to_dict() for p in expected_paper]
    bm25 = call(
        "POST", f"{server.url}/search", json={"query": "Arsenal", "tree": False, "k": 2}
    ).json()
    assert all("Arsenal" in p["text"] for p in bm25["passages"])


def test_search_bad_input(server: ServerProcess) -> None:
    url = f"{server.url}/search"
    assert "nowhere" in assert_error(
        call("POST", url, json={"query": "x", "docs": ["nowhere"]}), 400
    )
    assert "empty" in assert_error(call("POST", url, json={"query": "   "}), 400)
    message = assert_error(call("POST", url, json={"query": "x", "k": 0}), 422, "ValidationError")
    assert "k" in message
    assert_error(call("POST", url, json={"query": "x", "kk": 3}), 422)  # a typo is not ignored
    bad = call("POST", url, content=b"{not json", headers={"content-type": "application/json"})
    assert assert_error(bad, 400, "InvalidJSON") == "request body is not valid JSON"
    assert_error(call("GET", f"{server.url}/nowhere"), 404, "NotFound")
    assert_error(call("PUT", f"{server.url}/search"), 405, "MethodNotAllowed")


def test_tree_and_nodes(server: ServerProcess, built: tuple[Path, Index]) -> None:
    _, index = built
    tree = index.tree
    body = call("GET", f"{server.url}/tree", params={"depth": 1}).json()
    root = tree.root
    assert body["root"] == root and body["n_leaves"] == tree.n_leaves
    nodes = {n["id"]: n for n in body["nodes"]}
    assert set(nodes) == {root, *tree.children(root).tolist()}
    assert all(nodes[c]["parent"] == root for c in tree.children(root).tolist())
    assert sum(nodes[c]["leaves"] for c in tree.children(root).tolist()) == tree.n_leaves
    assert all(n["label"] for n in nodes.values()) and nodes[root]["has_children"]
    inner = next(c for c in tree.children(root).tolist() if c >= tree.n_leaves)
    deeper = call("GET", f"{server.url}/tree", params={"node": inner, "depth": 1}).json()
    assert {n["id"] for n in deeper["nodes"]} == {inner, *tree.children(inner).tolist()}

    node = call("GET", f"{server.url}/nodes/{root}").json()
    assert node["layer"] == tree.depth and node["parent"] == -1 and node["path"] == [root]
    assert node["abstract"] == index.node_text(root) and node["leaf_count"] == tree.n_leaves
    assert [c["id"] for c in node["children"]] == tree.children(root).tolist()
    assert 1 <= len(node["sample"]) <= 5
    leaf = call("GET", f"{server.url}/nodes/0").json()
    assert leaf["layer"] == 0 and leaf["abstract"] == index.chunks[0].text
    assert leaf["path"][-1] == 0 and leaf["path"][0] == root and leaf["children"] == []
    assert_error(call("GET", f"{server.url}/nodes/{tree.n_nodes}"), 404)
    assert_error(call("GET", f"{server.url}/nodes/abc"), 422)
    assert_error(call("GET", f"{server.url}/tree", params={"node": 10**6}), 404)


def test_documents_and_write_endpoints(server: ServerProcess, built: tuple[Path, Index]) -> None:
    _, index = built
    docs = call("GET", f"{server.url}/documents").json()["documents"]
    assert [d["id"] for d in docs] == ["volcanoes", "football", "baking"]
    assert sum(d["chunks"] for d in docs) == index.tree.n_leaves
    assert all(d["title"] == d["id"] for d in docs)
    # writes are tested on a server of their own (test_server_living.py): this one is shared
    assert_error(call("DELETE", f"{server.url}/documents/nope"), 404)
    assert_error(call("GET", f"{server.url}/jobs/job-1"), 404)


def test_docs_work_offline(server: ServerProcess) -> None:
    page = call("GET", f"{server.url}/docs")
    assert page.status_code == 200 and "/docs/assets/swagger-ui-bundle.js" in page.text
    assert "cdn" not in page.text.lower()
    script = httpx.get(f"{server.url}/docs/assets/swagger-ui-bundle.js", timeout=30)
    assert script.status_code == 200 and len(script.content) > 100_000
    schema = call("GET", f"{server.url}/openapi.json").json()
    for path in ("/search", "/ask", "/summarize", "/tree", "/nodes/{node_id}", "/documents"):
        assert path in schema["paths"]
    assert "/v1/chat/completions" in schema["paths"]


# ---------------------------------------------------------------------------- the agent
def test_ask_json(server: ServerProcess, llm: FakeOpenAIServer) -> None:
    fake = llm
    before = fake.calls
    body = call("POST", f"{server.url}/ask", json={"query": QUESTION, "k": 3}).json()
    assert body["answer"] == "Sicily"
    assert [s["action"] for s in body["steps"]] == ["retrieve", "answer"]
    assert body["steps"][0]["query"] == QUESTION
    assert body["steps"][1]["query"] == "Mount Etna Sicily"
    assert body["steps"][1]["raw"].startswith(ANSWER_REPLY + " [")
    # The citations are the model's own labels, verified: passages it was shown that say
    # "Sicily", numbered 1.. in the order cited; the top-k retrieved passages are the evidence.
    cites = body["citations"]
    assert cites and body["stats"]["cited"] == len(cites)
    assert [c["n"] for c in cites] == list(range(1, len(cites) + 1))
    assert all("Sicily" in c["text"] and c["label"] >= 1 for c in cites)
    labels = [int(x) for x in re.findall(r"\[(\d+)\]", body["steps"][1]["raw"])]
    assert [c["label"] for c in cites] == labels
    shown = {p["id"] for step in body["steps"] for p in step["passages"]}
    assert {c["passage"] for c in cites} <= shown
    assert all(c["node"] >= 0 and c["document"] == "volcanoes" for c in cites)
    assert len(body["evidence"]) == 3 and body["evidence"][0]["n"] == 1
    assert body["evidence"][0]["passage"] == body["evidence"][0]["id"]
    requests = fake.requests[before:]
    assert len(requests) == 2
    # The real agent sent the retrieved passages to the model, with the LLM's own key.
    assert "Mount Etna is an active volcano" in json.dumps(requests[1])
    assert requests[0].headers.get("Authorization") == f"Bearer {LLM_SECRET}"


COMPARISON = "Which film has the director who was born later, El Tonto or The Heart Of Doreon?"


def test_ask_auto_budget_comes_from_the_predicted_hops(
    server: ServerProcess, llm: FakeOpenAIServer
) -> None:
    from psirag.hops import HopPredictor

    # The shipped hop model reads this comparison template as 4 hops: 3 retrievals after the
    # first (the server loads MiniLM for it, as the index's hash embedder is not the model's).
    expected = HopPredictor().max_retrievals(COMPARISON)
    assert expected == 3
    fake = llm
    before = fake.calls
    auto = {"query": COMPARISON, "k": 3, "max_retrievals": "auto"}
    # The first auto ask loads the model: more time than a plain call's 30 s on a busy machine.
    body = httpx.post(f"{server.url}/ask", json=auto, timeout=300).json()
    assert body["max_retrievals"] == expected
    assert "at most 3 times" in requests_about(fake, before, COMPARISON)[0]
    plain = call("POST", f"{server.url}/ask", json={"query": COMPARISON, "k": 3}).json()
    assert plain["max_retrievals"] == 1  # the server's default, --max-retrievals 1
    for wrong in ("lots", 11, True):
        bad = call("POST", f"{server.url}/ask", json={**auto, "max_retrievals": wrong})
        message = assert_error(bad, 422)
        assert "max_retrievals" in message and "from 0 to 10, or 'auto'" in message
        assert repr(wrong) in message and "literal" not in message  # one plain message
    # The OpenAI-compatible endpoint takes the same extension.
    before = fake.calls
    chat = {"messages": [{"role": "user", "content": COMPARISON}], "max_retrievals": "auto"}
    assert call("POST", f"{server.url}/v1/chat/completions", json=chat).status_code == 200
    assert "at most 3 times" in requests_about(fake, before, COMPARISON)[0]


def test_ask_streams_steps_as_they_happen(server: ServerProcess, llm: FakeOpenAIServer) -> None:
    script = script_of(llm)
    script.delay = 0.6  # each model call takes 0.6 s: the first step must arrive before the end
    try:
        lines = ask_stream(server.url, {"query": QUESTION})
    finally:
        script.delay = 0.0
    everything = sse_events(lines)
    events = [e for e in everything if e[1] not in ("token", "answer_token")]
    assert [name for _, name, _ in events] == ["step", "step", "answer"]
    first, second, answer = (json.loads(data) for _, _, data in events)
    # The model's replies streamed as token events, each call's before its step, and they
    # join into the replies the agent parsed.
    tokens = [json.loads(data) for _, name, data in everything if name == "token"]
    for call, step in enumerate((first, second)):
        assert "".join(t["text"] for t in tokens if t["call"] == call) == step["raw"]
    names = [name for _, name, _ in everything]
    assert names.index("step") > names.index("token") and names[-1] == "answer"
    assert len(tokens) > 2  # in pieces, not one event per reply
    assert first["action"] == "retrieve" and first["query"] == QUESTION
    assert second["action"] == "answer" and second["query"] == "Mount Etna Sicily"
    said = "".join(
        json.loads(data)["text"] for _, name, data in everything if name == "answer_token"
    )
    assert said == answer["answer"]  # the answer's own pieces join into it
    assert answer["answer"] == "Sicily" and [s["action"] for s in answer["steps"]] == [
        "retrieve",
        "answer",
    ]
    # Streamed, not buffered: the first step came a model call (0.6 s) before the answer.
    assert events[2][0] - events[0][0] >= 0.5
    RESPONSES.extend(line for _, line in lines)


def test_ask_stream_error_event(guarded: ServerProcess) -> None:
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {API_KEY}"}
    with httpx.stream(
        "POST",
        f"{guarded.url}/ask",
        json={"query": "answer this slowly please"},
        headers=headers,
        timeout=30,
    ) as response:
        lines = [(0.0, line) for line in response.iter_lines()]
    events = sse_events(lines)
    assert events and events[-1][1] == "error"
    assert json.loads(events[-1][2])["error"]["type"] == "RequestTimeoutError"


def test_summarize(server: ServerProcess) -> None:
    body = call("POST", f"{server.url}/summarize", json={"docs": ["volcanoes"], "top_k": 5}).json()
    assert body["summary"] == SUMMARY_REPLY
    assert 1 <= len(body["nodes"]) <= 5
    assert all(n["document"] in ("volcanoes", None) for n in body["nodes"])
    assert_error(call("POST", f"{server.url}/summarize", json={"top_k": 0}), 422)


def test_llm_calls_stay_under_the_cap(server: ServerProcess, llm: FakeOpenAIServer) -> None:
    script = script_of(llm)
    script.delay = 0.3
    script.max_in_flight = 0
    results: list[int] = []

    def one() -> None:
        response = httpx.post(f"{server.url}/ask", json={"query": QUESTION}, timeout=60)
        results.append(response.status_code)

    try:
        threads = [threading.Thread(target=one) for _ in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=90)
    finally:
        script.delay = 0.0
    assert results == [200] * 5
    assert script.max_in_flight == 2  # --llm-concurrency 2, and five requests wanted more


def test_concurrent_searches(server: ServerProcess, built: tuple[Path, Index]) -> None:
    _, index = built
    queries = ["volcano ash", "football club", "bread yeast", "Sicily", "oven crust"] * 6
    expected = {q: [p.id for p in index.search(q)] for q in set(queries)}
    got: dict[int, list[str]] = {}

    def one(i: int) -> None:
        body = httpx.post(f"{server.url}/search", json={"query": queries[i]}, timeout=30).json()
        got[i] = [p["id"] for p in body["passages"]]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(queries))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(got) == len(queries)
    assert all(got[i] == expected[q] for i, q in enumerate(queries))


# ---------------------------------------------------------------------------- OpenAI API
def test_openai_client(
    server: ServerProcess,
    llm: FakeOpenAIServer,
    built: tuple[Path, Index],
) -> None:
    openai = pytest.importorskip("openai")
    fake = llm
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    # psirag and the index folder's name, both the agent over this index
    assert [m.id for m in client.models.list()] == ["psirag", built[0].name]
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(
            model="llama3", messages=[{"role": "user", "content": QUESTION}]
        )

    reply = client.chat.completions.create(
        model="psirag", messages=[{"role": "user", "content": QUESTION}]
    )
    text = reply.choices[0].message.content or ""
    assert text.startswith("Sicily [1]")
    assert "Sources:\n[1] volcanoes (volcanoes, chunk" in text
    citations = reply.model_extra["citations"]
    assert citations[0]["n"] == 1 and citations[0]["document"] == "volcanoes"
    assert reply.usage is not None and reply.usage.total_tokens > 0
    # Each [n] marker is a citation the model gave, and the sources list is exactly those.
    head, _, sources = text.partition("\n\n")
    assert head == "Sicily " + "".join(f"[{c['n']}]" for c in citations)
    assert sources.count("\n[") == len(citations) and all("Sicily" in c["text"] for c in citations)
    assert len(reply.model_extra["evidence"]) == SearchConfig.k

    conversation = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "Tell me about volcanoes."},
        {"role": "assistant", "content": "Etna and Vesuvius are volcanoes."},
        {"role": "user", "content": QUESTION},
    ]
    before = fake.calls
    streamed = client.chat.completions.create(
        model="psirag",
        messages=conversation,
        stream=True,  # type: ignore[arg-type]
    )
    chunks = list(streamed)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    joined = "".join(c.choices[0].delta.content or "" for c in chunks)
    plain = client.chat.completions.create(model="psirag", messages=conversation)  # type: ignore[arg-type]
    assert joined == plain.choices[0].message.content  # the same reply, in chunks
    assert joined.startswith("Sicily [") and "Sources:" in joined
    mine = requests_about(fake, before, "Vesuvius are volcanoes")
    assert mine and "Earlier in this conversation" in mine[0]
    assert all("be brief" not in r for r in mine)  # the agent keeps its own system prompt

    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="psirag", messages=[{"role": "system", "content": "no user turn"}]
        )


def test_openai_client_needs_the_key(guarded: ServerProcess) -> None:
    openai = pytest.importorskip("openai")
    wrong = openai.OpenAI(base_url=f"{guarded.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    right = openai.OpenAI(base_url=f"{guarded.url}/v1", api_key=API_KEY, max_retries=0)
    assert [m.id for m in right.models.list()] == ["psirag", "index"]


# ---------------------------------------------------------------------------- MCP
TOOLS = {"search", "ask", "inspect_node", "list_documents"}


async def _use_mcp(client: Any, index: Index) -> dict[str, Any]:
    async with client:
        tools = await client.list_tools()
        names = {t.name for t in tools.tools}
        found = await client.call_tool("search", {"query": "volcano lava ash", "k": 3})
        root = await client.call_tool("inspect_node", {})
        docs = await client.call_tool("list_documents", {})
        page = await client.call_tool("list_documents", {"offset": 1, "limit": 1})
        bad = await client.call_tool("inspect_node", {"node": 10**6})
        answer = await client.call_tool("ask", {"question": QUESTION})
        auto = await client.call_tool("ask", {"question": COMPARISON, "max_retrievals": "auto"})
        nonsense = await client.call_tool("ask", {"question": QUESTION, "max_retrievals": "lots"})
    return {
        "auto": auto.structured_content,
        "nonsense": nonsense,
        "names": names,
        "search": found.structured_content,
        "root": root.structured_content,
        "docs": docs.structured_content,
        "page": page.structured_content,
        "bad": bad,
        "answer": answer.structured_content,
    }


def _check_mcp(out: dict[str, Any], index: Index) -> None:
    assert out["names"] == TOOLS
    expected = index.search("volcano lava ash", config=SearchConfig(k=3))
    assert out["search"]["passages"] == [p.to_dict() for p in expected]
    assert out["root"]["id"] == index.tree.root and out["root"]["path"] == [index.tree.root]
    assert [d["id"] for d in out["docs"]["documents"]] == ["volcanoes", "football", "baking"]
    assert [d["id"] for d in out["page"]["documents"]] == ["football"]  # paged
    assert out["page"]["total"] == 3 and out["page"]["documents"][0]["status"] == "indexed"
    assert out["bad"].is_error and "does not exist" in out["bad"].content[0].text
    assert out["answer"]["answer"] == "Sicily" and out["answer"]["citations"]
    # MCP's citations are the model's verified ones too, with the top-k evidence apart.
    assert all("Sicily" in c["text"] and c["label"] >= 1 for c in out["answer"]["citations"])
    assert len(out["answer"]["evidence"]) == SearchConfig.k
    assert out["answer"]["max_retrievals"] == 1  # the server's default
    assert out["auto"]["max_retrievals"] == 3  # COMPARISON reads as 4 hops
    assert out["nonsense"].is_error
    assert "or 'auto'" in out["nonsense"].content[0].text


def test_mcp_over_http(server: ServerProcess, built: tuple[Path, Index]) -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    out = asyncio.run(_use_mcp(Client(f"{server.url}/mcp"), built[1]))
    _check_mcp(out, built[1])


def test_mcp_over_http_needs_the_key(guarded: ServerProcess, built: tuple[Path, Index]) -> None:
    pytest.importorskip("mcp")
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    assert_error(call("POST", f"{guarded.url}/mcp", json={}), 401)

    async def run() -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            transport = streamable_http_client(f"{guarded.url}/mcp", http_client=http)
            async with Client(transport) as client:
                tools = await client.list_tools()
                found = await client.call_tool("search", {"query": "football club"})
        return {"names": {t.name for t in tools.tools}, "search": found.structured_content}

    out = asyncio.run(run())
    assert out["names"] == TOOLS
    assert out["search"]["passages"][0]["source"]["document"] == "football"


def test_mcp_over_stdio(built: tuple[Path, Index], llm: FakeOpenAIServer, logs: Path) -> None:
    pytest.importorskip("mcp")
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    spec = f"openai:{llm.base_url}#fake"
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(LAUNCHER), "mcp", str(built[0]), "--llm", spec],
        env=child_env(),
    )
    with open(logs / "stdio.log", "w", encoding="utf-8") as errlog:
        from mcp.client.stdio import stdio_client

        out = asyncio.run(_use_mcp(Client(stdio_client(params, errlog=errlog)), built[1]))
    _check_mcp(out, built[1])
    RESPONSES.append(json.dumps(out, default=str))


def test_mcp_over_stdio_shows_a_served_index_jobs_and_never_writes_them(
    built: tuple[Path, Index], tmp_path: Path, logs: Path
) -> None:
    """``psirag mcp`` only reads (no tool writes the index), so it makes no job to persist.
    Its document list shows the jobs of a ``psirag serve`` on the same index from that
    server's jobs file and jobs folder (``--workers N``), as they say them, and it leaves both
    alone: loading them as its own would have marked the live server's running job as
    interrupted."""
    pytest.importorskip("mcp")
    import shutil

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from psirag.server.jobs import JOBS_DIR, JOBS_FILE, JOBS_SCHEMA

    folder = tmp_path / "index"
    shutil.copytree(built[0], folder)
    # a job of `psirag serve --workers N`, in the jobs folder beside the file
    (folder / JOBS_DIR).mkdir()
    queued = {"id": "job-6", "kind": "add", "status": "queued", "created": 3.0, "payload": []}
    queued |= {"documents": [{"id": "worker-doc", "title": "From a worker"}]}
    (folder / JOBS_DIR / "job-6.json").write_text(json.dumps(queued))
    running = {"id": "job-4", "kind": "add", "status": "running", "created": 2.0}
    running |= {"documents": [{"id": "fresh-doc", "title": "Fresh"}], "payload": []}
    failed = {"id": "job-3", "kind": "add", "status": "failed", "created": 1.0}
    failed |= {"documents": [{"id": "broken-doc", "title": "Broken"}], "payload": []}
    failed |= {"error": "LoadError: broken.pdf is not a PDF", "finished": 1.5}
    jobs_file = folder / JOBS_FILE
    jobs_file.write_text(json.dumps({"schema": JOBS_SCHEMA, "jobs": [failed, running]}))
    before = jobs_file.read_bytes()
    params = StdioServerParameters(
        command=sys.executable, args=[str(LAUNCHER), "mcp", str(folder)], env=child_env()
    )

    async def run() -> dict[str, Any]:
        with open(logs / "stdio-jobs.log", "w", encoding="utf-8") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                tools = await client.list_tools()
                docs = await client.call_tool("list_documents", {"limit": 200})
        return {"names": {t.name for t in tools.tools}, "docs": docs.structured_content}

    out = asyncio.run(run())
    assert out["names"] == TOOLS  # read-only tools: nothing to make a job of
    rows = {row["id"]: row for row in out["docs"]["documents"]}
    assert rows["fresh-doc"]["status"] == "pending"  # the live server's job, not "interrupted"
    assert rows["worker-doc"]["status"] == "pending"  # and the workers' folder's
    assert rows["broken-doc"]["status"] == "failed"
    assert "broken.pdf" in rows["broken-doc"]["error"]
    assert rows["football"]["status"] == "indexed"
    assert jobs_file.read_bytes() == before
    assert [p.name for p in (folder / JOBS_DIR).iterdir()] == ["job-6.json"]
    assert json.loads((folder / JOBS_DIR / "job-6.json").read_text()) == queued
    assert not list(folder.glob(f".{JOBS_FILE}*"))  # no temporary file left either


# ---------------------------------------------------------------------------- security
def test_api_key(guarded: ServerProcess) -> None:
    url = guarded.url
    assert call("GET", f"{url}/health").status_code == 200  # the one open endpoint
    for method, path in [
        ("GET", "/index"),
        ("POST", "/search"),
        ("GET", "/documents"),
        ("GET", "/v1/models"),
        ("GET", "/tree"),
        ("GET", "/nodes/0"),
    ]:
        response = call(method, f"{url}{path}", json={"query": "x"} if method == "POST" else None)
        assert "API key" in assert_error(response, 401, "Unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"
    wrong = call("GET", f"{url}/index", headers={"Authorization": "Bearer nope"})
    assert "wrong" in assert_error(wrong, 401)
    assert_error(call("GET", f"{url}/index", headers={"Authorization": f"Basic {API_KEY}"}), 401)
    assert call("GET", f"{url}/index", headers={"Authorization": f"Bearer {API_KEY}"}).json()[
        "chunks"
    ]
    assert call("GET", f"{url}/documents", headers={"X-API-Key": API_KEY}).status_code == 200
    schema = call("GET", f"{url}/openapi.json").json()  # static: no key; it declares the key
    assert schema["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"


def test_limits(guarded: ServerProcess) -> None:
    url, auth = guarded.url, {"Authorization": f"Bearer {API_KEY}"}
    big = {"query": "volcano " * 400}  # over --max-body-bytes 2000
    message = assert_error(call("POST", f"{url}/search", json=big, headers=auth), 413)
    assert "2,000 bytes" in message

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"query": "'
        for _ in range(50):
            yield b"lava " * 20
        yield b'"}'

    chunked = call(
        "POST",
        f"{url}/search",
        content=chunks(),
        headers={**auth, "content-type": "application/json"},
    )
    assert_error(chunked, 413, "PayloadTooLargeError")
    long_query = {"query": "lava " * 100}  # 500 characters, under the body limit
    assert "300" in assert_error(call("POST", f"{url}/search", json=long_query, headers=auth), 413)
    assert_error(call("GET", f"{url}/tree?node=1&x={'a' * 9000}", headers=auth), 414)
    ok = call("POST", f"{url}/search", json={"query": "lava"}, headers=auth)
    assert ok.status_code == 200


def test_request_timeout(guarded: ServerProcess) -> None:
    auth = {"Authorization": f"Bearer {API_KEY}"}
    start = time.monotonic()
    response = call("POST", f"{guarded.url}/ask", json={"query": "say it slowly"}, headers=auth)
    assert "2 s" in assert_error(response, 504, "RequestTimeoutError")
    assert time.monotonic() - start < 5  # answered at the deadline, not when the LLM finished


def test_cors(server: ServerProcess, guarded: ServerProcess) -> None:
    origin = {"Origin": "http://page.example"}
    plain = call("GET", f"{server.url}/health", headers=origin)
    assert "access-control-allow-origin" not in plain.headers  # off by default
    allowed = call("GET", f"{guarded.url}/health", headers=origin)
    assert allowed.headers["access-control-allow-origin"] == "http://page.example"
    preflight = call(
        "OPTIONS",
        f"{guarded.url}/search",
        headers={
            **origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "http://page.example"
    other = call("GET", f"{guarded.url}/health", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in other.headers


def test_refuses_an_exposed_address_without_a_key(built: tuple[Path, Index]) -> None:
    command = [sys.executable, "-m", "psirag.cli", "serve", str(built[0]), "--host", "0.0.0.0"]
    done = subprocess.run(command, capture_output=True, text=True, env=child_env(), timeout=60)
    assert done.returncode == 2
    assert "--api-key" in done.stderr and "--insecure" in done.stderr
    assert "Traceback" not in done.stderr


def test_llm_key_never_shown(server: ServerProcess, guarded: ServerProcess, logs: Path) -> None:
    """Runs last in this module: every response seen and every log line written."""
    texts = [server.log(), guarded.log(), *RESPONSES]
    texts += [p.read_text(encoding="utf-8") for p in logs.glob("*.log")]
    assert len(RESPONSES) > 30 and "POST /ask" in server.log()  # the logs are the real ones
    assert all(LLM_SECRET not in text for text in texts)


@pytest.mark.slow
def test_real_cli_with_the_default_embedder(tmp_path: Path) -> None:
    """``python -m psirag.cli serve`` itself, on an index built with MiniLM (loads the model)."""
    from support import TOPICS

    from psirag.ingest import documents_from_strings

    texts = [" ".join(t) for t in TOPICS.values()]
    docs = documents_from_strings(texts, titles=list(TOPICS), ids=list(TOPICS))
    index = Index.build(docs)
    index.save(tmp_path / "index")
    port = free_port()
    log = open(tmp_path / "cli.log", "wb")  # noqa: SIM115
    command = [sys.executable, "-m", "psirag.cli", "serve", str(tmp_path / "index")]
    proc = subprocess.Popen(
        [*command, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=child_env()
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        body = httpx.post(f"{url}/search", json={"query": "volcano lava", "k": 3}, timeout=60)
        expected = index.search("volcano lava", k=3)
        assert [p["id"] for p in body.json()["passages"]] == [p.id for p in expected]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
