"""``psirag eval`` in summarization mode (``NAME+summarize``, SPEC 2.5) on a tiny hand-written
QMSum-like set: three "meetings", one long record each, questions "Summarize the whole meeting."
scored by ROUGE-L against reference summaries.

The scripted OpenAI-compatible server on 127.0.0.1 plays the model through the real client. It
reads the excerpts it is sent and names the meetings whose words it finds, so each row's answer
says which meetings the summarizer was shown: the doc restriction is checked on what the model
actually received, not on an internal list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import NO_RETRY, FakeOpenAIServer, HashEmbedder
from support.datasets import write_dataset

from psirag.cli import main
from psirag.config import IndexConfig
from psirag.errors import InputError
from psirag.eval import methods as eval_methods
from psirag.eval.harness import questions_path, run_eval
from psirag.eval.metrics import rouge_l_max
from psirag.eval.settings import EMBEDDER_HOOKS, SUMMARY_METHODS, EvalSettings
from psirag.index import Index
from psirag.llm import LLMClient, OpenAIChat

QUESTION = "Summarize the whole meeting."
TEMPLATES = (
    "In the meeting the group talked about the {0} and the {1}, and agreed the {2} needs work.",
    "Someone said the {1} matters more than the {0}; after a pause the {2} came up again.",
    "The meeting closed the point on the {2}, with the {0} left for the next meeting.",
)
TERMS = {
    "remote": [
        ("remote", "buttons", "battery"),
        ("rubber", "casing", "scroll"),
        ("infrared", "chip", "prototype"),
        ("speech", "recognition", "designer"),
        ("titanium", "curve", "logo"),
        ("charger", "lighting", "screen"),
        ("kinetic", "dynamo", "wheel"),
        ("fruit", "shape", "yellow"),
    ],
    "budget": [
        ("budget", "invoices", "salaries"),
        ("auditors", "pension", "spreadsheet"),
        ("quarterly", "forecast", "revenue"),
        ("deficit", "grants", "taxes"),
        ("payroll", "expenses", "contracts"),
        ("insurance", "ledger", "bonuses"),
        ("overtime", "treasury", "loans"),
        ("interest", "audit", "cheques"),
    ],
    "school": [
        ("teachers", "pupils", "classroom"),
        ("curriculum", "library", "textbooks"),
        ("playground", "homework", "exams"),
        ("headmaster", "parents", "canteen"),
        ("lunches", "buses", "uniforms"),
        ("science", "laboratory", "reading"),
        ("mathematics", "sports", "holidays"),
        ("timetable", "tutors", "literacy"),
    ],
}
MEETINGS = list(TERMS)
SUMMARIES = {
    "remote": "The design team discussed the remote control: buttons, battery, a rubber casing "
    "with a scroll wheel, speech recognition and a yellow fruit shape.",
    "budget": "The finance group went through the budget: invoices, salaries, the auditors, the "
    "quarterly forecast, the deficit and the payroll.",
    "school": "The school board discussed teachers and pupils, the curriculum, the library, "
    "homework and exams, the canteen and the timetable.",
}
BAD_SUMMARY = "Bananas ripen slowly in a cold kitchen."


def meeting_text(name: str) -> str:
    """About 1,000 words: each triple in every template, in two orders (ten ~100-token chunks)."""
    sentences = [
        template.format(*triple[turn:], *triple[:turn])
        for triple in TERMS[name]
        for turn in range(2)
        for template in TEMPLATES
    ]
    # paragraphs of four sentences, as a transcript split into turns
    return "\n\n".join(" ".join(sentences[i : i + 4]) for i in range(0, len(sentences), 4))


def meetings_in(text: str) -> list[str]:
    """The meetings whose own words appear in ``text``."""
    words = set(re.findall(r"[a-z]+", text.lower()))
    return [m for m in MEETINGS if words & {w for triple in TERMS[m] for w in triple}]


def is_summary(body: dict[str, Any]) -> bool:
    """Whether a request asks for a summary (else it is an agent-format request)."""
    return "Excerpts:" in body["messages"][-1]["content"]


def excerpts(body: dict[str, Any]) -> str:
    user = body["messages"][-1]["content"]
    return str(user.split("Excerpts:", 1)[1].rsplit("\n\nRequest:", 1)[0])


def summarizer(mode: str = "tag") -> Callable[[dict[str, Any]], str]:
    """A model that summarizes by naming the meetings it was shown (``tag``), with the reference
    summary of the one meeting it was shown (``good``), or with an unrelated sentence
    (``bad``), and answers agent-format requests (plain ``NAME`` on a summarization set)
    briefly."""

    def reply(body: dict[str, Any]) -> str:
        if not is_summary(body):
            return "Thought: The passages talk about a meeting.\nAnswer: a meeting"
        seen = meetings_in(excerpts(body))
        if mode == "bad":
            return BAD_SUMMARY
        if mode == "good" and len(seen) == 1:
            return "Summary: " + SUMMARIES[seen[0]]
        return f"Summary: {' '.join(seen)} meeting."

    return reply


pytestmark = pytest.mark.fake_llm(responder=summarizer("tag"), model="tag")
"""Each test's ``server`` (tests/conftest.py) summarizes by naming the meetings it was shown."""


@pytest.fixture
def dataset_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setitem(EMBEDDER_HOOKS, "test:hash", HashEmbedder)
    monkeypatch.delenv("PSIRAG_LLM", raising=False)
    corpus = [(f"Meeting {name}", meeting_text(name)) for name in MEETINGS]
    questions = [
        {
            "id": f"m{i}",
            "question": QUESTION,
            "answers": [SUMMARIES[name]],
            "supporting_passage_ids": [i],
        }
        for i, name in enumerate(MEETINGS)
    ]
    return write_dataset(tmp_path / "meetings", corpus, questions)


def run_cli(
    dataset: Path, tmp_path: Path, *extra: str
) -> tuple[dict[str, Any], dict[tuple[str, str], dict[str, Any]]]:
    """Results and rows by (method, question id) of one ``psirag eval`` run over ~100-token
    chunks with one tree per meeting (the paper's QMSum setting)."""
    out = tmp_path / "results.json"
    argv = ["eval", str(dataset), "--embedder", "test:hash", "--cache-dir", str(tmp_path / "cache")]
    argv += ["--split", "--tree-per-document"]
    assert main([*argv, "--output", str(out), "-q", "--bootstrap", "0", *extra]) == 0
    results = json.loads(out.read_text(encoding="utf-8"))
    rows = {(r["method"], r["id"]): r for r in map(json.loads, questions_path(out).open())}
    return results, rows


# --- what the summarizer is shown -----------------------------------------------------------------


def test_each_summary_reads_only_its_own_meeting(
    dataset_dir: Path, tmp_path: Path, server: FakeOpenAIServer
) -> None:
    methods = "psi+summarize,dense+summarize,psi-tree+summarize,bm25+summarize,hybrid+summarize"
    results, rows = run_cli(dataset_dir, tmp_path, "--methods", methods, "--llm", server.spec)
    assert list(results["methods"]) == methods.split(",")
    for method in methods.split(","):
        for i, name in enumerate(MEETINGS):
            row = rows[(method, f"m{i}")]
            # the model saw this meeting's words and no other meeting's
            assert row["answer"] == f"{name} meeting.", (method, name)
            assert row["retrieved"] and {p["doc"] for p in row["retrieved"]} == {str(i)}
            assert row["actions"] == ["summarize"] and row["queries"] == [QUESTION]
            assert row["llm_calls"] == 1 and row["agent_stats"]["llm_calls"] == 1
            assert len(row["retrieved"]) <= 20


def test_psi_shows_abstracts_and_dense_only_passages(
    dataset_dir: Path, tmp_path: Path, server: FakeOpenAIServer
) -> None:
    """Ten leaves a meeting fit in 20 nodes, which Algorithm 2 then takes whole (leaves only);
    with k = 4 the visit starts above the leaves and abstracts compete."""
    methods = "psi+summarize,dense+summarize"
    _, rows = run_cli(
        dataset_dir, tmp_path, "--methods", methods, "--llm", server.spec, "--summary-top-k", "4"
    )
    summaries = [b for b in server.requests if is_summary(b)]
    assert len(summaries) == 6  # psi's three meetings, then dense's
    for body in summaries[:3]:
        assert "(abstract, layer" in excerpts(body)
        assert "(passage)" in excerpts(body)
    for body in summaries[3:]:
        assert "(abstract, layer" not in excerpts(body)
    for i in range(len(MEETINGS)):
        psi, dense = rows[("psi+summarize", f"m{i}")], rows[("dense+summarize", f"m{i}")]
        assert any(p["layer"] > 0 for p in psi["retrieved"])
        assert psi["agent_stats"]["abstract_nodes"] > 0
        assert all(p["layer"] == 0 for p in dense["retrieved"])
        assert dense["agent_stats"]["abstract_nodes"] == 0
        assert len(psi["retrieved"]) == len(dense["retrieved"]) == 4
    assert {b["max_tokens"] for b in summaries} == {200}  # the paper's QMSum cap


def test_dense_visit_is_cosine_over_the_document_leaves(dataset_dir: Path, tmp_path: Path) -> None:
    """The dense baseline's nodes: that document's leaves by cosine, independently computed."""
    from psirag.eval.data import load_dataset
    from psirag.eval.methods import EvalContext, IndexCache

    settings = EvalSettings(
        embedder="test:hash",
        cache_dir=tmp_path / "c",
        index_config=IndexConfig(split_records=True, tree_per_document=True),
        summary_top_k=3,
    )
    ctx = EvalContext(load_dataset(dataset_dir), settings, HashEmbedder(), IndexCache(tmp_path))
    index, _ = ctx.psi_index()
    vector = HashEmbedder().embed([QUESTION])[0]
    nodes = eval_methods.METHODS["dense"].factory(ctx).visit(QUESTION, vector, ["1"])  # type: ignore[misc]
    leaves = [i for i, c in enumerate(index.chunks) if c.source.document == "1"]
    scores = index.node_vectors[leaves] @ vector
    expected = [leaves[j] for j in np.lexsort((leaves, -scores))[:3]]
    assert [n.node for n in nodes] == expected and len(leaves) > 3
    # the tree visit is Index.visit with the shared query vector
    tree = eval_methods.METHODS["psi"].factory(ctx).visit(QUESTION, vector, ["1"])  # type: ignore[misc]
    index.embedder = HashEmbedder()
    assert tree == index.visit(QUESTION, docs=["1"], beam=3, k=3)
    assert tree == index.visit_vector(vector, docs=["1"], beam=3, k=3)
    assert {n.document for n in tree} == {"1"} and any(n.layer > 0 for n in tree)


# --- scores, defaults, cache ----------------------------------------------------------------------


def test_rouge_l_tells_a_good_summary_from_a_bad_one(
    dataset_dir: Path, tmp_path: Path, fake_llm: Callable[..., FakeOpenAIServer]
) -> None:
    scores = {}
    for mode in ("good", "bad"):
        server = fake_llm(summarizer(mode), model=mode)
        results, rows = run_cli(
            dataset_dir, tmp_path, "--methods", "psi+summarize", "--llm", server.spec
        )
        summary = results["methods"]["psi+summarize"]
        scores[mode] = summary["rouge_l"]
        # no Recall@k (retrieval is confined to the gold meeting) and no EM/F1 (no answer)
        assert summary["recall@5"] is None and summary["em"] is None and summary["f1"] is None
        for row in rows.values():
            assert row["rouge_l"] == pytest.approx(rouge_l_max(row["answer"], row["gold_answers"]))
    assert scores["good"] == 100.0  # the references themselves, "Summary:" label dropped
    assert scores["bad"] is not None and scores["bad"] < 20.0


def test_a_rerun_sends_no_request_and_builds_no_index(
    dataset_dir: Path, tmp_path: Path, server: FakeOpenAIServer
) -> None:
    args = (
        "--methods",
        "psi+summarize,dense+summarize",
        "--llm",
        server.spec,
        "--summary-top-k",
        "4",
    )
    first, first_rows = run_cli(dataset_dir, tmp_path, *args)
    sent = len(server.requests)
    assert first["index_builds"] == ["psirag"] and sent == 6
    again, again_rows = run_cli(dataset_dir, tmp_path, *args)
    assert len(server.requests) == sent
    assert again["index_builds"] == []
    assert [r["answer"] for r in again_rows.values()] == [r["answer"] for r in first_rows.values()]


def test_defaults_stage_and_settings_on_a_summary_set(
    dataset_dir: Path, tmp_path: Path, server: FakeOpenAIServer
) -> None:
    """No methods + an LLM + reference summaries: psi+summarize and dense+summarize, counted
    under their own usage label; the index flags are recorded and key the index cache."""
    llm = LLMClient(OpenAIChat(server.base_url, "tag", http=NO_RETRY), None)
    said: list[str] = []
    settings = EvalSettings(
        cache_dir=tmp_path / "c",
        embedder="test:hash",
        bootstrap=0,
        index_config=IndexConfig(split_records=True, tree_per_document=True),
    )
    report = run_eval(dataset_dir, settings, llm=llm, say=said.append)
    assert tuple(m.name for m in report.methods) == SUMMARY_METHODS
    assert set(llm.usage) == {"eval-summarize"}
    assert llm.usage["eval-summarize"]["calls"] == 6
    assert not [m for m in said if m.startswith("warning")]
    assert report.settings["split_records"] is True
    assert report.settings["tree_per_document"] is True
    assert (report.settings["summary_top_k"], report.settings["summary_max_tokens"]) == (20, 200)

    # Without the flags: a warning (not an error) for each, and another index.
    said.clear()
    plain = EvalSettings(cache_dir=tmp_path / "c", embedder="test:hash", bootstrap=0)
    other = run_eval(dataset_dir, plain, llm=llm, say=said.append)
    warnings = [m for m in said if m.startswith("warning")]
    assert len(warnings) == 2
    assert "--tree-per-document" in warnings[0] and "--split" in warnings[1]
    assert other.settings["tree_per_document"] is False
    assert other.index_builds == ["psirag"]
    assert other.indexes["psirag"]["path"] != report.indexes["psirag"]["path"]


def test_cli_flags_reach_the_index(
    dataset_dir: Path, tmp_path: Path, server: FakeOpenAIServer
) -> None:
    results, _ = run_cli(
        dataset_dir, tmp_path, "--methods", "dense+summarize", "--llm", server.spec,
        "--summary-top-k", "2", "--summary-max-tokens", "50",
    )  # fmt: skip
    config = results["settings"]["index_config"]
    assert config["split_records"] is True and config["tree_per_document"] is True
    index = Index.load(
        Path(results["indexes"]["psirag"]["path"]) / "index", embedder=HashEmbedder()
    )
    assert len(index.chunks) > len(MEETINGS)  # the meetings were chunked
    assert int(index.tree.roots.size) == len(MEETINGS)  # one tree per meeting
    summaries = [b for b in server.requests if is_summary(b)]
    assert {b["max_tokens"] for b in summaries} == {50}
    assert all(excerpts(b).count("(passage)") == 2 for b in summaries)


def test_rows_have_the_shape_of_other_llm_rows(
    dataset_dir: Path, tmp_path: Path, server: FakeOpenAIServer
) -> None:
    results, rows = run_cli(
        dataset_dir, tmp_path, "--methods", "psi,psi+summarize", "--llm", server.spec
    )
    plain, summarize = results["methods"]["psi"], results["methods"]["psi+summarize"]
    assert set(summarize) == set(plain)
    assert summarize["llm_calls"] == 3 and summarize["retrievals_per_question"] == 1.0
    assert summarize["replies"] == 0 and summarize["well_formed_pct"] is None
    assert summarize["rouge_l"] is not None and summarize["answer_ms_p50"] is not None
    assert set(rows[("psi+summarize", "m0")]) == set(rows[("psi", "m0")])


def rewrite_questions(dataset_dir: Path, change: Any) -> None:
    path = dataset_dir / "questions.json"
    questions = json.loads(path.read_text(encoding="utf-8"))
    change(questions)
    path.write_text(json.dumps(questions), encoding="utf-8")


def summarize_with(
    dataset_dir: Path, tmp_path: Path, server: FakeOpenAIServer, method: str, top_k: int = 20
) -> tuple[Any, list[str]]:
    """run_eval of one method through the model; the report and the lines it said."""
    said: list[str] = []
    settings = EvalSettings(
        methods=(method,),
        cache_dir=tmp_path / "c",
        embedder="test:hash",
        bootstrap=0,
        index_config=IndexConfig(split_records=True, tree_per_document=True),
        summary_top_k=top_k,
    )
    llm = LLMClient(OpenAIChat(server.base_url, "tag", http=NO_RETRY), None)
    return run_eval(dataset_dir, settings, llm=llm, say=said.append), said


def test_nothing_retrieved_is_an_empty_answer_without_a_call(
    dataset_dir: Path, tmp_path: Path, server: FakeOpenAIServer
) -> None:
    """BM25 finds nothing for a query sharing no word with the meeting: no request, a warning."""
    rewrite_questions(dataset_dir, lambda qs: qs[0].update(question="Xylophone quartz?"))
    report, said = summarize_with(dataset_dir, tmp_path, server, "bm25+summarize")
    row = report.methods[0].rows[0]
    assert row["answer"] == "" and row["llm_calls"] == 0 and row["retrieved"] == []
    assert row["rouge_l"] == 0.0
    assert len([b for b in server.requests if is_summary(b)]) == 2
    assert any(
        line.startswith("warning: bm25+summarize: 1 of 3 questions retrieved") for line in said
    )


def test_a_question_without_gold_reads_the_whole_corpus_with_a_warning(
    dataset_dir: Path, tmp_path: Path, server: FakeOpenAIServer
) -> None:
    rewrite_questions(dataset_dir, lambda qs: qs[1].pop("supporting_passage_ids"))
    report, said = summarize_with(dataset_dir, tmp_path, server, "dense+summarize")
    answers = [row["answer"] for row in report.methods[0].rows]
    assert answers == ["remote meeting.", "remote budget school meeting.", "school meeting."]
    assert any("1 of 3 questions name no supporting passage" in line for line in said)


def test_a_short_meeting_beside_deeper_trees_is_still_summarized(
    dataset_dir: Path, tmp_path: Path, server: FakeOpenAIServer
) -> None:
    records = json.loads((dataset_dir / "corpus.json").read_text(encoding="utf-8"))
    records.append({"idx": 3, "title": "Short", "text": "The coffee meeting was brief."})
    (dataset_dir / "corpus.json").write_text(json.dumps(records), encoding="utf-8")
    short = {"id": "m3", "question": QUESTION, "answers": ["Brief."], "supporting_passage_ids": [3]}
    rewrite_questions(dataset_dir, lambda qs: qs.append(short))
    # k = 4: the forest's layer 1 has more than 4 nodes, so the search starts there
    report, _ = summarize_with(dataset_dir, tmp_path, server, "psi+summarize", top_k=4)
    index = Index.load(Path(report.indexes["psirag"]["path"]) / "index", embedder=HashEmbedder())
    assert index.tree.layer_sizes()[1] > 4 and index.tree.layer[index.tree.roots].min() == 0
    assert [row["answer"] for row in report.methods[0].rows[:3]] == [
        f"{name} meeting." for name in MEETINGS
    ]
    assert report.methods[0].rows[3]["retrieved"], "the short meeting's leaf was not visited"


# --- errors ---------------------------------------------------------------------------------------


def test_summarize_needs_an_llm(
    dataset_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["eval", str(dataset_dir), "--embedder", "test:hash", "--cache-dir", str(tmp_path)]
    assert main([*argv, "--methods", "psi+summarize", "-q"]) == 2
    assert "psi+summarize need an LLM" in capsys.readouterr().err
    settings = EvalSettings(methods=("dense+summarize",), cache_dir=tmp_path, embedder="test:hash")
    with pytest.raises(InputError, match="dense\\+summarize need an LLM"):
        run_eval(dataset_dir, settings)
    assert eval_methods.check_method("hybrid+summarize") == ("hybrid", "summarize")


def test_a_retriever_without_visit_fails_before_any_request(
    dataset_dir: Path, tmp_path: Path, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def make(ctx: eval_methods.EvalContext) -> eval_methods.Retrieval:
        plain = eval_methods.METHODS["dense"].factory(ctx)
        return eval_methods.Retrieval(plain.search, plain.index, plain.stages)

    monkeypatch.setitem(eval_methods.METHODS, "novisit", eval_methods.MethodSpec("novisit", make))
    llm = LLMClient(OpenAIChat(server.base_url, "tag", http=NO_RETRY), None)
    settings = EvalSettings(
        methods=("psi+summarize", "novisit+summarize"),
        cache_dir=tmp_path / "c",
        embedder="test:hash",
        bootstrap=0,
    )
    with pytest.raises(InputError, match=r"novisit\+summarize: .*Retrieval\.visit"):
        run_eval(dataset_dir, settings, llm=llm)
    assert server.requests == []
    # the same retriever answers questions as usual
    plain = EvalSettings(methods=("novisit",), cache_dir=tmp_path / "c", embedder="test:hash")
    assert run_eval(dataset_dir, plain).methods[0].rows


def test_doc_id_names_the_gold_document_when_passage_ids_are_absent(tmp_path: Path) -> None:
    from psirag.eval.data import load_dataset

    folder = tmp_path / "docs"
    folder.mkdir()
    corpus = [{"idx": i, "title": f"m{i}", "text": f"Meeting {i} text."} for i in range(3)]
    (folder / "corpus.json").write_text(json.dumps(corpus), encoding="utf-8")
    question = {"id": 0, "question": QUESTION, "answers": ["A summary."], "doc_id": 2}
    (folder / "questions.json").write_text(json.dumps([question]), encoding="utf-8")
    q = load_dataset(folder).questions[0]
    assert q.gold_ids == ["2"] and q.gold_passages == ["m2\nMeeting 2 text."]
