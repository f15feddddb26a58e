"""``psirag index --ray``: the same index as a local build, on a local Ray cluster the tests start
on loopback (2 CPUs, no dashboard), plus the bad inputs: no Ray, no cluster, a worker killed.

Embeddings and LLM answers come from the scripted OpenAI-compatible server on 127.0.0.1 (the
``openai:`` spec, so Ray's actors load the embedder from its spec exactly as in production).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import FakeOpenAIServer

from psirag.cli import main
from psirag.config import IndexConfig
from psirag.embed import load_embedder
from psirag.index import Index
from psirag.llm import LLMClient, OpenAIChat
from psirag.llm.base import ChatResult, GenerationParams, Message

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'psirag[ray]'")
pytest.importorskip("ray.data", reason="needs Ray Data: pip install 'psirag[ray]'")

from psirag.ray_backend import EmbedActor, RayBackend, RayOptions  # noqa: E402

TOPICS = {
    "volcano": "lava ash eruption crater magma",
    "football": "goal striker league club match",
    "bread": "dough yeast oven crust flour",
    "river": "delta flood bank current estuary",
    "chess": "bishop rook gambit endgame pawn",
}


def corpus() -> list[str]:
    """25 short documents, five per topic, each sharing its topic's words."""
    docs = []
    for name, words in TOPICS.items():
        w = words.split()
        for i in range(5):
            docs.append(
                f"{name.title()} note {i}. The {w[i]} and the {w[(i + 1) % 5]} of the {name}. "
                f"Here {w[(i + 2) % 5]} meets {w[(i + 3) % 5]}."
            )
    return docs


def summarise(body: dict[str, Any]) -> str:
    """A deterministic 'summary': the first word of each numbered document in the prompt."""
    content = body["messages"][-1]["content"]
    heads = [line.split("] ", 1)[1].split()[0] for line in content.splitlines() if "] " in line]
    return "About " + ", ".join(heads[:6]) + "."


def test_unreachable_cluster_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Lava and ash.\n", encoding="utf-8")
    out = tmp_path / "out"
    cache = tmp_path / "cache.sqlite"
    code = main(
        ["index", str(docs), "--out", str(out), "--ray", "127.0.0.1:1", "-q",
         "--abstracts", "llm-summary", "--llm", "openai:http://127.0.0.1:1/v1#m",
         "--llm-cache", str(cache)]
    )  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("psirag: error: cannot reach the Ray cluster at 127.0.0.1:1")
    assert len(err.splitlines()) == 1
    assert not out.exists() and not cache.exists()


def test_missing_ray_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Lava and ash.\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["index", str(docs), "--out", str(out), "--ray", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'psirag[ray]'" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_the_default_cli_does_not_import_ray() -> None:
    code = (
        "import sys, psirag.cli as c; c.build_parser(); "
        "import psirag.pipeline, psirag.index; print('ray' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    got = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert got.stdout.strip() == "False"


def test_an_address_that_is_not_host_port_is_refused(tmp_path: Path) -> None:
    from psirag.errors import ClusterError

    with pytest.raises(ClusterError, match="is not host:port"):
        RayBackend("minilm", options=RayOptions(address="no-port-here")).connect()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One local 2-CPU Ray cluster for the module (its start is most of these tests' time)."""
    temp = tmp_path_factory.mktemp("ray")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _temp_dir=str(temp),
        object_store_memory=128 * 1024**2,
        log_to_driver=False,
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


pytestmark = pytest.mark.fake_llm(responder=summarise)
"""Each test's ``server`` (tests/conftest.py) embeds and writes the summaries."""


def specs(srv: FakeOpenAIServer) -> tuple[str, str]:
    return srv.model_spec("hash"), srv.model_spec("scripted")


def config_for(srv: FakeOpenAIServer, **over: Any) -> IndexConfig:
    embed_spec, llm_spec = specs(srv)
    base: dict[str, Any] = {
        "embedder": embed_spec,
        "tree_mode": "bucketed",
        "tree_bucket_size": 6,
        "max_children": 4,
        "abstracts": "llm-summary",
        "llm": llm_spec,
    }
    base.update(over)
    return IndexConfig(**base)


def build(
    srv: FakeOpenAIServer, cache: Path, batch: RayBackend | None, **over: Any
) -> tuple[Index, LLMClient]:
    config = config_for(srv, **over)
    llm = LLMClient(OpenAIChat(srv.base_url, "scripted"), cache)
    try:
        index = Index.build(
            corpus(),
            config,
            embedder=load_embedder(config.embedder),
            texts=True,
            llm=llm,
            batch=batch,
        )
    finally:
        llm.close()
    return index, llm


def assert_same_index(a: Index, b: Index) -> None:
    """Same ids, vectors within float tolerance, the same tree, the same abstracts."""
    assert [c.id for c in a.chunks] == [c.id for c in b.chunks]
    assert [c.text for c in a.chunks] == [c.text for c in b.chunks]
    np.testing.assert_allclose(a.node_vectors, b.node_vectors, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(a.tree.parent, b.tree.parent)
    np.testing.assert_array_equal(a.tree.layer, b.tree.layer)
    assert a.abstracts == b.abstracts


def backend(srv: FakeOpenAIServer, **kw: Any) -> RayBackend:
    embed_spec, llm_spec = specs(srv)
    options = kw.pop("options", RayOptions(embed_rows=4, embed_actors=2, retries=2))
    return RayBackend(embed_spec, llm_spec=llm_spec, options=options, **kw)


class DyingEmbedActor(EmbedActor):
    """Kills its own worker process on its first batch (once per marker file)."""

    marker = ""

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        mark = Path(self.marker)
        if not mark.exists():
            mark.write_text(str(os.getpid()))
            os._exit(1)
        return super().__call__(batch)


class DyingChat:
    """A chat model (over the scripted server) whose process dies on its first call, once."""

    def __init__(self, base_url: str, marker: str) -> None:
        self.inner = OpenAIChat(base_url, "scripted")
        self.id = self.inner.id
        self.context_tokens = self.inner.context_tokens
        self.marker = Path(marker)

    def chat(self, messages: list[Message], params: GenerationParams) -> ChatResult:
        if not self.marker.exists():
            self.marker.write_text(str(os.getpid()))
            os._exit(1)
        return self.inner.chat(messages, params)


class DyingChatFactory:
    def __init__(self, base_url: str, marker: str) -> None:
        self.base_url, self.marker = base_url, marker

    def __call__(self) -> DyingChat:
        return DyingChat(self.base_url, self.marker)


def test_ray_build_equals_local_build_with_workers_killed_mid_job(
    cluster: Any, server: Any, tmp_path: Path
) -> None:
    """Bucketed tree and LLM summaries, built locally and on Ray: the same index. On Ray the
    first embedding actor and the first LLM actor kill their own process mid-job; the job
    retries (replaced actors, retried calls) and the result is unchanged."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test's classes
    embed_mark, chat_mark = tmp_path / "embed-died", tmp_path / "chat-died"
    DyingEmbedActor.marker = str(embed_mark)  # pickled with the class, by value
    try:
        local, local_llm = build(server, tmp_path / "local.sqlite", None)
        calls_before = server.calls
        with backend(
            server,
            embed_actor=DyingEmbedActor,
            chat_model_factory=DyingChatFactory(server.base_url, str(chat_mark)),
        ) as batch:
            remote, remote_llm = build(server, tmp_path / "ray.sqlite", batch)
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert embed_mark.exists() and chat_mark.exists()  # both kinds of worker did die
    assert int(embed_mark.read_text()) != os.getpid()
    assert local.tree.n_leaves == 25 and local.stats.tree_mode == "bucketed"
    assert local.tree.depth >= 3  # several buckets merged, several layers of LLM abstracts
    assert_same_index(local, remote)
    # Every LLM call paid once, through the driver's cache (the killed call never reached the
    # server); the embedding went through the actors in batches of at most 4 rows.
    paid = local_llm.usage["abstracts"]["calls"]
    assert paid > 5
    assert remote_llm.usage["abstracts"]["calls"] == paid
    assert remote.stats.llm["calls"] == paid
    embeds = [r for r in server.requests[calls_before:] if r.path.endswith("/embeddings")]
    assert len(embeds) >= 7 and all(len(r["input"]) <= 4 for r in embeds)


def test_a_failed_ray_build_resumes_from_the_cache(
    cluster: Any, server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The LLM server refuses after 4 answers: the CLI fails cleanly; the rerun pays only for the
    calls that were not answered before."""
    embed_spec, llm_spec = specs(server)
    cache = tmp_path / "cache.sqlite"
    out = tmp_path / "index"
    argv = [
        "index", "--embedder", embed_spec, "--tree-mode", "bucketed", "--tree-bucket-size", "6",
        "--max-children", "4", "--abstracts", "llm-summary", "--llm", llm_spec,
        "--llm-cache", str(cache), "--retries", "0", "--out", str(out), "--ray", "-q", "--json",
    ]  # fmt: skip
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, text in enumerate(corpus()):
        (docs / f"d{i:02d}.txt").write_text(text + "\n", encoding="utf-8")
    answered = {"n": 0}

    def flaky(body: dict[str, Any]) -> Any:
        answered["n"] += 1
        return summarise(body) if answered["n"] <= 4 else 400

    server.responder = flaky
    assert main([*argv[:1], str(docs), *argv[1:]]) == 2
    err = capsys.readouterr().err.strip()
    assert "400" in err and len(err.splitlines()) == 1
    assert not out.exists()

    server.responder = summarise
    before = server.calls
    assert main([*argv[:1], str(docs), *argv[1:]]) == 0
    import json

    summary = json.loads(capsys.readouterr().out)
    llm = summary["llm_abstracts"]
    assert llm["cached"] == 4
    assert llm["calls"] == server.calls - before - _embed_calls(server, before)
    assert Index.load(out).tree.n_leaves == 25


def _embed_calls(srv: FakeOpenAIServer, since: int) -> int:
    return sum(1 for r in srv.requests[since:] if r.path.endswith("/embeddings"))
