"""The `psirag` command end to end on a small fixture, with the real default embedder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import TOPICS

from psirag.cli import main


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cli")
    corpus = root / "corpus"
    corpus.mkdir()
    for name, texts in TOPICS.items():
        (corpus / f"{name}.txt").write_text(" ".join(texts * 3) + "\n", encoding="utf-8")
    records = [
        {"idx": i, "title": f"Record {i}", "text": t} for i, t in enumerate(TOPICS["baking"])
    ]
    (corpus / "records.json").write_text(json.dumps(records), encoding="utf-8")
    out = root / "index"
    assert main(["index", str(corpus), "--out", str(out), "-q", "--chunk-tokens", "30"]) == 0
    return corpus, out


def run_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_index_summary_and_inspect(built: tuple[Path, Path], capsys) -> None:
    _corpus, out = built
    info = run_json(capsys, ["inspect", str(out), "--json"])
    assert info["schema"] == "psirag.inspect/1"
    body = info["index"]
    assert body["documents"] == 3 + 4  # three text files, four JSON records
    assert body["chunks"] == body["nodes_per_layer"][0]
    assert sum(body["nodes_per_layer"]) == body["nodes"]
    assert body["embedder"]["id"].startswith("st:all-MiniLM-L6-v2@")
    assert body["fan_out"]["max"] <= 40
    root = body["roots"][0]
    node = run_json(capsys, ["inspect", str(out), "--node", str(root), "--json"])["node"]
    assert node["layer"] == body["depth"] and node["parent"] == -1
    assert node["leaf_count"] == body["chunks"]
    assert node["text"], "the root has a keyword abstract"
    assert sum(c["leaf_count"] for c in node["children"]) == body["chunks"]
    leaf = run_json(capsys, ["inspect", str(out), "--node", "0", "--json"])["node"]
    assert leaf["layer"] == 0 and set(leaf["source"]) == {"document", "title", "chunk", "span"}

    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "nodes per layer" in text and "fan-out" in text


def test_search_json_schema(built: tuple[Path, Path], capsys) -> None:
    _, out = built
    result = run_json(
        capsys, ["search", str(out), "volcanic eruption of lava", "-k", "3", "--json"]
    )
    assert result["schema"] == "psirag.search/1" and result["k"] == 3
    assert len(result["passages"]) == 3
    for p in result["passages"]:
        # psirag.search/1 grew one field, "also" (other sources of the same text); the rest stays
        assert set(p) == {"id", "text", "score", "source", "also"}
        assert set(p["source"]) == {"document", "title", "chunk", "span"}
        for other in p["also"]:  # the same text elsewhere: a full source, not this one
            assert set(other) == set(p["source"]) and other != p["source"]
    assert result["passages"][0]["source"]["document"] == "volcanoes.txt"
    scores = [p["score"] for p in result["passages"]]
    assert scores == sorted(scores, reverse=True)

    only = run_json(capsys, ["search", str(out), "bread", "--doc", "0", "--doc", "1", "--json"])
    assert {p["source"]["document"] for p in only["passages"]} <= {"0", "1"}
    bm25 = run_json(capsys, ["search", str(out), "Arsenal", "--no-tree", "--json"])
    assert all("Arsenal" in p["text"] for p in bm25["passages"])


def test_search_text_output(built: tuple[Path, Path], capsys) -> None:
    _, out = built
    capsys.readouterr()
    assert main(["search", str(out), "football club", "-k", "2"]) == 0
    text = capsys.readouterr().out
    assert text.count("score") == 2 and "football.txt" in text


def test_errors_are_one_line(tmp_path: Path, capsys, built: tuple[Path, Path]) -> None:
    _, out = built
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (bad / "good.txt").write_text("A good file about rivers and lakes.", encoding="utf-8")
    capsys.readouterr()
    assert main(["index", str(bad), "--out", str(tmp_path / "i"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "latin1.txt" in err and "UTF-8" in err and "Traceback" not in err
    assert not (tmp_path / "i").exists()
    assert main(["index", str(bad), "--out", str(tmp_path / "i"), "-q", "--skip-bad-files"]) == 0
    assert "latin1.txt" in capsys.readouterr().err

    (tmp_path / "empty").mkdir()
    assert main(["index", str(tmp_path / "empty"), "--out", str(tmp_path / "e"), "-q"]) == 2
    assert "no usable files" in capsys.readouterr().err
    assert main(["search", str(tmp_path / "nowhere"), "q"]) == 2
    assert "no such index folder" in capsys.readouterr().err
    assert main(["search", str(out), "   "]) == 2
    assert "query is empty" in capsys.readouterr().err
    assert main(["inspect", str(out), "--node", "999999"]) == 2
    assert "does not exist" in capsys.readouterr().err
    args = ["index", str(bad), "--out", str(tmp_path / "x"), "--embedder", "st:/no/such/model"]
    assert main([*args, "-q", "--skip-bad-files"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_console_script_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "psirag.cli", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("psirag ")


def test_demo_builds_then_reuses(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo path with a three-topic corpus standing in for the language reference."""
    import psirag.cli.index_cmds as cli

    topics = {name: " ".join(texts * 2) for name, texts in TOPICS.items()}
    monkeypatch.setattr(cli, "demo_corpus", lambda: (list(topics.values()), list(topics)))
    monkeypatch.setattr(cli, "DEMO_QUERIES", ("Which volcano destroyed Pompeii?",))
    monkeypatch.setattr(cli, "_demo_agent", lambda index, folder, out: None)  # no local LLM
    out = tmp_path / "demo"
    capsys.readouterr()
    assert main(["demo", "--out", str(out), "-q"]) == 0
    first = capsys.readouterr().out
    assert "indexing the Python language reference" in first and "built" in first
    assert "Q: Which volcano destroyed Pompeii?" in first
    assert "[1] score" in first and "doc volcanoes" in first
    assert main(["demo", "--out", str(out), "-q"]) == 0
    second = capsys.readouterr().out
    assert "using the index in" in second and "doc volcanoes" in second
    assert "For answers written by an LLM" in second

    # with an LLM (a scripted server standing in for the local model) the demo answers
    from support import FakeOpenAIServer

    from psirag.agent import RetrieveAndAnswer
    from psirag.llm import LLMClient, OpenAIChat

    server = FakeOpenAIServer(lambda body: "Thought: The passages name it.\nAnswer: Vesuvius")
    try:
        client = LLMClient(OpenAIChat(server.base_url, "m"), cache_path=None)
        monkeypatch.setattr(
            cli, "_demo_agent", lambda index, folder, out: RetrieveAndAnswer(client, index.search)
        )
        assert main(["demo", "--out", str(out), "-q"]) == 0
        answered = capsys.readouterr().out
    finally:
        server.close()
    assert "A: Vesuvius" in answered and "doc volcanoes" in answered
    assert len(server.requests) == 1


def test_real_demo_corpus_is_the_language_reference() -> None:
    from psirag.cli import demo_corpus

    texts, names = demo_corpus()
    assert len(texts) == len(names) > 50 and "with" in names
    assert "__enter__" in texts[names.index("with")]


def test_llm_abstract_build_resumes_after_a_crash(tmp_path: Path, capsys) -> None:
    """`psirag index --abstracts llm-keywords`: a build that dies halfway is resumed by running
    it again, and the second run pays only for the abstracts the first did not finish."""
    from support import FakeOpenAIServer

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, texts in TOPICS.items():
        (corpus / f"{name}.txt").write_text(" ".join(texts * 2), encoding="utf-8")
    state: dict = {"fail_after": 3, "answered": []}

    def reply(body: dict) -> str | int:
        if state["fail_after"] is not None and len(server.requests) > state["fail_after"]:
            return 400  # not retried: the build stops here
        state["answered"].append(json.dumps(body["messages"]))
        return "volcanic activity, football clubs, bread baking, Mount Etna"

    server = FakeOpenAIServer(reply)
    cache = tmp_path / "llm.sqlite"
    args = [
        "index", str(corpus), "--out", str(tmp_path / "idx"), "-q", "--json",
        "--chunk-tokens", "20", "--abstracts", "llm-keywords",
        "--llm", f"openai:{server.base_url}#m", "--llm-cache", str(cache),
    ]  # fmt: skip
    try:
        capsys.readouterr()
        assert main(args) == 2
        assert "400" in capsys.readouterr().err
        assert not (tmp_path / "idx").exists()
        answered_first = set(state["answered"])
        state["fail_after"] = None
        before = len(server.requests)
        assert main(args) == 0
        summary = json.loads(capsys.readouterr().out)
    finally:
        server.close()
    llm = summary["llm_abstracts"]
    second = [json.dumps(r["messages"]) for r in server.requests[before:]]
    assert answered_first and not answered_first & set(second), "finished abstracts not re-paid"
    assert llm["calls"] == len(second) and llm["cached"] >= len(answered_first)
    assert llm["calls"] + llm["cached"] + llm["inherited"] == llm["nodes"]
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["config"]["abstracts"] == "llm-keywords"
    assert "OPENAI_API_KEY" not in json.dumps(manifest)
    root = summary["nodes"] - 1
    node = run_json(capsys, ["inspect", str(tmp_path / "idx"), "--node", str(root), "--json"])
    assert node["node"]["text"].startswith("volcanic activity, football clubs")
