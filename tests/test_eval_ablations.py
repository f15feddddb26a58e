"""``psirag eval`` ablation flags: abstract type, routing, fan-out, sub-corpus.

Each variant must get its own cached index (and a rerun must reuse it), results.json must record
the settings, and LLM abstracts must come from the run's ``--llm`` through the same response cache
as the answers (a scripted OpenAI-compatible server on 127.0.0.1 stands for the model).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support import FakeOpenAIServer, HashEmbedder
from support.datasets import CORPUS as EVAL_CORPUS
from support.datasets import write_dataset

from psirag.cli import main
from psirag.config import IndexConfig
from psirag.errors import InputError
from psirag.eval.data import EvalDataset, EvalQuestion, load_dataset, subcorpus
from psirag.eval.settings import EMBEDDER_HOOKS, EvalSettings
from psirag.index import Index
from psirag.ingest import Document

CORPUS = [
    *EVAL_CORPUS[:6],
    ("Calder Group", "The Calder Group is a hospitality company. Its head office is in Lisbon."),
    ("Blue Harbour Hotel", "The Blue Harbour Hotel in Portmere is owned by the Calder Group."),
    *EVAL_CORPUS[8:],
]
"""The evaluation tests' passages, with shorter Calder Group and hotel pages."""
QUESTIONS = [
    {
        "id": "q0",
        "question": "Which volcano destroyed Pompeii?",
        "answer": "Vesuvius",
        "supporting_passage_ids": [1],
    },
    {
        "id": "q1",
        "question": "Where is the head office of the company that owns the Blue Harbour Hotel?",
        "answer": "Lisbon",
        "supporting_passage_ids": [7, 6],
    },
    {
        "id": "q2",
        "question": "Which football club is based in north London?",
        "answer": "Arsenal",
        "supporting_passage_ids": [2],
    },
]


def passage(i: int) -> str:
    return f"{CORPUS[i][0]}\n{CORPUS[i][1]}"


@pytest.fixture
def dataset_dir(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "tiny", CORPUS, QUESTIONS)


@pytest.fixture
def hash_spec(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(EMBEDDER_HOOKS, "test:hash", HashEmbedder)
    return "test:hash"


def run_cli(dataset: Path, tmp_path: Path, spec: str, *extra: str) -> dict[str, Any]:
    out = tmp_path / "results.json"
    argv = ["eval", str(dataset), "--embedder", spec, "--cache-dir", str(tmp_path / "cache")]
    assert main([*argv, "--output", str(out), "-q", "--bootstrap", "0", *extra]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


def index_dir(results: dict[str, Any]) -> Path:
    return Path(results["indexes"]["psirag"]["path"]) / "index"


# --- the sub-corpus -------------------------------------------------------------------------------


def test_subcorpus_keeps_gold_then_distractors_in_corpus_order(dataset_dir: Path) -> None:
    data = load_dataset(dataset_dir, limit=2)  # gold: passages 1, 7, 6
    small = subcorpus(data, 5)
    assert [d.id for d in small.documents] == ["0", "1", "2", "6", "7"]
    assert [q.id for q in small.questions] == ["q0", "q1"]
    assert set(small.passage_of) == {"0", "1", "2", "6", "7"}
    assert small.content_hash() != data.content_hash()
    # exactly the gold passages; larger than the corpus: all of it; applying it again: no change
    assert [d.id for d in subcorpus(data, 3).documents] == ["1", "6", "7"]
    assert subcorpus(data, 100).documents == data.documents
    assert subcorpus(small, 5) == small
    with pytest.raises(InputError, match="smaller than the 3 gold passages"):
        subcorpus(data, 2)
    with pytest.raises(InputError, match="positive"):
        subcorpus(data, 0)
    # the input is left as it was
    assert len(data.documents) == len(CORPUS)


def test_subcorpus_drops_questions_whose_gold_is_out() -> None:
    """A question whose gold is not all kept is not evaluated (here: gold text absent)."""
    documents = [Document(str(i), t, f"{t}\n{x}", True) for i, (t, x) in enumerate(CORPUS[:4])]
    q_in = EvalQuestion("a", "?", "x", ["x"], [passage(0)], ["0"])
    q_out = EvalQuestion("b", "?", "x", ["x"], ["a passage of another corpus"], ["99"])
    data = EvalDataset("t", Path("."), documents, [q_in, q_out], {d.id: d.text for d in documents})
    small = subcorpus(data, 2)
    assert [d.id for d in small.documents] == ["0", "1"]
    assert [q.id for q in small.questions] == ["a"]


def test_subcorpus_flag_indexes_n_passages_and_is_recorded(
    dataset_dir: Path, tmp_path: Path, hash_spec: str
) -> None:
    results = run_cli(
        dataset_dir, tmp_path, hash_spec, "--methods", "bm25", "--limit", "2", "--subcorpus", "4"
    )
    assert results["n_questions"] == 2
    assert results["settings"]["subcorpus"] == 4
    index = Index.load(index_dir(results), embedder=HashEmbedder())
    assert [c.source.document for c in index.chunks] == ["0", "1", "6", "7"]
    # BM25 over 4 passages finds every gold passage of the 2 questions
    assert results["methods"]["bm25"]["recall@5"] == 100.0

    whole = run_cli(dataset_dir, tmp_path, hash_spec, "--methods", "bm25", "--limit", "2")
    assert whole["settings"]["subcorpus"] is None
    assert whole["index_builds"] == ["psirag"]  # another corpus, another index


# --- index ablations ------------------------------------------------------------------------------


def test_max_children_builds_its_own_index_and_a_rerun_reuses_it(
    dataset_dir: Path, tmp_path: Path, hash_spec: str
) -> None:
    base = run_cli(dataset_dir, tmp_path, hash_spec, "--methods", "psi-tree")
    assert base["index_builds"] == ["psirag"]
    assert base["settings"]["max_children"] == 40
    assert base["settings"]["abstracts"] == "keywords"
    assert base["settings"]["routing"] == "leaf_mean"

    small = run_cli(
        dataset_dir, tmp_path, hash_spec, "--methods", "psi-tree", "--max-children", "3"
    )
    assert small["index_builds"] == ["psirag"]
    assert small["settings"]["max_children"] == 3
    assert small["settings"]["index_config"]["max_children"] == 3
    assert index_dir(small) != index_dir(base)
    index = Index.load(index_dir(small), embedder=HashEmbedder())
    assert int(index.tree.fan_out.max()) <= 3

    again = run_cli(
        dataset_dir, tmp_path, hash_spec, "--methods", "psi-tree", "--max-children", "3"
    )
    assert again["index_builds"] == []
    assert index_dir(again) == index_dir(small)
    assert run_cli(dataset_dir, tmp_path, hash_spec, "--methods", "psi-tree")["index_builds"] == []

    none = run_cli(dataset_dir, tmp_path, hash_spec, "--methods", "bm25", "--max-children", "none")
    assert none["settings"]["max_children"] is None
    assert none["index_builds"] == ["psirag"]


def test_keyword_abstracts_routed_by_their_text(
    dataset_dir: Path, tmp_path: Path, hash_spec: str
) -> None:
    """The LLM-free keyword abstract type: routing by the embedding of the keyword text."""
    results = run_cli(
        dataset_dir, tmp_path, hash_spec, "--methods", "psi-tree", "--routing", "abstract"
    )
    assert results["index_builds"] == ["psirag"]
    assert (results["settings"]["abstracts"], results["settings"]["routing"]) == (
        "keywords",
        "abstract",
    )
    index = Index.load(index_dir(results), embedder=HashEmbedder())
    n = index.tree.n_leaves
    expected = HashEmbedder().embed(index.abstracts)
    assert abs(index.node_vectors[n:] - expected).max() < 1e-5

    off = run_cli(dataset_dir, tmp_path, hash_spec, "--methods", "psi-tree", "--abstracts", "none")
    assert off["index_builds"] == ["psirag"]
    assert Index.load(index_dir(off), embedder=HashEmbedder()).abstracts[0] == ""


def test_bad_ablations_fail_clearly(
    dataset_dir: Path,
    tmp_path: Path,
    hash_spec: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("PSIRAG_LLM", raising=False)
    base = ["eval", str(dataset_dir), "--embedder", hash_spec, "--cache-dir", str(tmp_path), "-q"]
    assert main([*base, "--abstracts", "llm-summary"]) == 2
    err = capsys.readouterr().err
    assert "--abstracts llm-summary needs an LLM: pass --llm SPEC" in err
    assert main([*base, "--abstracts", "none", "--routing", "abstract"]) == 2
    assert "routing by abstract text" in capsys.readouterr().err
    assert main([*base, "--limit", "3", "--subcorpus", "2"]) == 2
    assert "smaller than the 4 gold passages" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--subcorpus", "0"])
    with pytest.raises(InputError, match="--llm"):
        EvalSettings(index_config=IndexConfig(abstracts="llm-keywords"))


# --- LLM abstracts --------------------------------------------------------------------------------


def is_abstract(body: dict[str, Any]) -> bool:
    """Whether a request asks for an abstract (else it asks a question)."""
    return bool(body["messages"][-1]["content"].startswith("Documents:"))


def abstract_reply(body: dict[str, Any]) -> str:
    """Writes a summary naming the first word of each document; answers questions briefly."""
    last = body["messages"][-1]["content"]
    if last.startswith("Documents:"):
        heads = re.findall(r"(?m)^\[\d+\] (\S+)", last)  # each document's first word
        return "Summary of " + " and ".join(heads) + "."
    return "Answer: Vesuvius"


@pytest.mark.fake_llm(responder=abstract_reply)
def test_llm_summaries_use_the_run_llm_and_its_cache(
    dataset_dir: Path, tmp_path: Path, hash_spec: str, server: FakeOpenAIServer
) -> None:
    args = ("--methods", "psi-tree", "--abstracts", "llm-summary", "--llm", server.spec)
    results = run_cli(dataset_dir, tmp_path, hash_spec, *args)
    settings = results["settings"]
    assert (settings["abstracts"], settings["routing"]) == ("llm-summary", "abstract")
    assert settings["index_config"]["llm"] == server.spec
    index = Index.load(index_dir(results), embedder=HashEmbedder())
    assert index.abstracts and all(a.startswith("Summary of ") for a in index.abstracts)
    manifest = json.loads((index_dir(results) / "manifest.json").read_text(encoding="utf-8"))
    paid = manifest["llm_abstracts"]["calls"]
    assert paid >= 1
    assert sum(is_abstract(b) for b in server.requests) == paid
    # routing by the summaries' embedding, as the paper does
    n = index.tree.n_leaves
    assert abs(index.node_vectors[n:] - HashEmbedder().embed(index.abstracts)).max() < 1e-5
    # one response cache: the harness's, in the cache folder
    assert (tmp_path / "cache" / "llm-cache.sqlite").is_file()

    sent = len(server.requests)
    again = run_cli(dataset_dir, tmp_path, hash_spec, *args)
    assert again["index_builds"] == [] and len(server.requests) == sent

    # the keyword-abstract index does not depend on --llm: it is built once for both runs
    plain = run_cli(dataset_dir, tmp_path, hash_spec, "--methods", "psi-tree")
    with_llm = run_cli(
        dataset_dir, tmp_path, hash_spec, "--methods", "psi-tree", "--llm", server.spec
    )
    assert plain["index_builds"] == ["psirag"] and with_llm["index_builds"] == []
    assert with_llm["settings"]["index_config"]["llm"] is None


@pytest.mark.fake_llm(responder=abstract_reply)
def test_retrieval_only_pays_for_abstracts_and_no_answers(
    dataset_dir: Path,
    tmp_path: Path,
    hash_spec: str,
    server: FakeOpenAIServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ("--abstracts", "llm-keywords", "--llm", server.spec, "--retrieval-only")
    results = run_cli(dataset_dir, tmp_path, hash_spec, "--methods", "psi,bm25", *args)
    assert results["settings"]["retrieval_only"] is True
    answers = [b for b in server.requests if not is_abstract(b)]
    assert answers == []  # only abstract calls reached the model
    assert any(is_abstract(b) for b in server.requests)
    for summary in results["methods"].values():
        assert summary["em"] is None and summary["recall@5"] is not None

    capsys.readouterr()
    argv = ["eval", str(dataset_dir), "--embedder", hash_spec, "--cache-dir", str(tmp_path / "c")]
    assert main([*argv, "-q", "--methods", "psi+agent", *args]) == 2
    assert "psi+agent answer with the LLM, which --retrieval-only turns off" in (
        capsys.readouterr().err
    )


def test_run_eval_applies_the_subcorpus_itself(
    dataset_dir: Path, tmp_path: Path, hash_spec: str
) -> None:
    from psirag.eval.harness import run_eval

    settings = EvalSettings(
        methods=("bm25",),
        limit=1,
        subcorpus=3,
        embedder=hash_spec,
        cache_dir=tmp_path / "cache",
        bootstrap=0,
    )
    report = run_eval(dataset_dir, settings)
    assert report.settings["subcorpus"] == 3
    index = Index.load(Path(report.indexes["psirag"]["path"]) / "index", embedder=HashEmbedder())
    assert len(index.chunks) == 3


def test_llm_abstract_cache_key_follows_the_abstract_prompts_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import psirag.prompts as prompts
    from psirag.eval.methods import abstract_key

    config = IndexConfig(abstracts="llm-summary", llm="openai:http://127.0.0.1:1/v1#m")
    before = abstract_key(config)
    monkeypatch.setattr(prompts, "PROMPT_VERSION", "999")  # e.g. only the agent's prompts changed
    assert abstract_key(config) == before
    original = prompts.summary_system_prompt
    monkeypatch.setattr(prompts, "summary_system_prompt", lambda *a: original(*a) + " Be brief.")
    assert abstract_key(config) != before
    # LLM-free abstracts never carry a prompt fingerprint
    assert "abstract_prompts" not in abstract_key(IndexConfig())
