"""Embedders: the MiniLM backend (a real model, loaded once), vector checks, spec parsing and the
OpenAI-compatible client against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import EMBED_DIM, FakeOpenAIServer, Reply, bag_of_words

from psirag.embed import finalize_vectors, load_embedder, model_fingerprint
from psirag.embed.base import model_name_from_path
from psirag.embed.openai_compat import OpenAIEmbedder
from psirag.errors import EmbeddingError, InputError
from psirag.http import HttpPolicy

# -- MiniLM (real model) ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> Any:
    """Load the packaged model once, with every non-loopback connection forbidden."""
    real_connect = socket.socket.connect

    def guarded(self: socket.socket, address: Any) -> Any:
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"network access during model load: {address!r}")
        return real_connect(self, address)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", guarded)
        return load_embedder("minilm")


def test_minilm_vectors_are_unit_float32(minilm: Any) -> None:
    vecs = minilm.embed(["The cat sat on the mat.", "Paris is in France.", ""])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert minilm.dim == 384 and minilm.max_tokens == 256
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert minilm.embed([]).shape == (0, 384)


def test_minilm_is_deterministic(minilm: Any) -> None:
    text = "Marie Curie won two Nobel prizes."
    pair = minilm.embed([text, text, "something much longer " * 10], progress=True, desc="t")
    assert np.array_equal(pair[0], pair[1])
    np.testing.assert_allclose(minilm.embed([text])[0], pair[0], atol=1e-6)


def test_minilm_ranks_related_above_unrelated(minilm: Any) -> None:
    q, rel, unrel = minilm.embed(
        [
            "Who directed the film Jaws?",
            "Jaws is a 1975 film directed by Steven Spielberg.",
            "The mitochondrion is the powerhouse of the cell.",
        ]
    )
    assert float(q @ rel) > float(q @ unrel) + 0.2


def test_minilm_counts_and_warns_truncation(minilm: Any) -> None:
    long = " ".join(f"word{i % 50}" for i in range(2000))
    assert minilm.count_truncated([long, "short text"]) == 1
    assert minilm.count_truncated(["short text"]) == 0
    with pytest.warns(UserWarning, match="1 of 2 texts"):
        minilm.embed([long, "short text"])
    assert minilm.last_truncated == 1
    minilm.embed(["short text"])
    assert minilm.last_truncated == 0


def test_minilm_id_is_machine_independent(minilm: Any) -> None:
    assert minilm.id.startswith("st:all-MiniLM-L6-v2@")
    assert "/" not in minilm.id and str(minilm.path) not in minilm.id
    assert minilm.spec == "minilm"


# -- identity of model folders ----------------------------------------------------------------


def _fake_model(folder: Path, weights: int, name_or_path: str) -> Path:
    folder.mkdir(parents=True)
    config = {"hidden_size": 8, "_name_or_path": name_or_path, "transformers_version": "x"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"\0" * weights)
    return folder


def test_fingerprint_ignores_location_and_resave_noise(tmp_path: Path) -> None:
    a = _fake_model(tmp_path / "a" / "my-model", 100, "/home/a")
    b = _fake_model(tmp_path / "b" / "my-model", 100, "/srv/b")
    c = _fake_model(tmp_path / "c" / "my-model", 101, "/srv/b")
    assert model_fingerprint(a) == model_fingerprint(b) != model_fingerprint(c)
    assert model_name_from_path(a) == "my-model"
    snapshot = tmp_path / "models--org--nice-model" / "snapshots" / ("ab" * 20)
    assert model_name_from_path(snapshot) == "nice-model"


# -- specs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    ["st:/nonexistent/model", "st:", "bogus", "hf:foo", "openai:http://x/v1", "openai:nourl#m"],
)
def test_bad_specs_raise_input_error(spec: str) -> None:
    with pytest.raises(InputError, match="accepted embedder specs"):
        load_embedder(spec)


def test_st_folder_without_model_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a model folder"):
        load_embedder(f"st:{tmp_path}")


# -- finalize_vectors -------------------------------------------------------------------------


def test_finalize_normalises() -> None:
    out = finalize_vectors([[3.0, 4.0], [0.0, -2.0]], ["a", "b"])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, -1.0]], atol=1e-7)


def test_finalize_rejects_nan_and_zero_naming_the_text() -> None:
    texts = ["fine", "x" * 100 + " tail"]
    with pytest.raises(EmbeddingError, match=r"text 1 \('x{60}\.\.\.'\).*NaN"):
        finalize_vectors([[1.0, 0.0], [np.nan, 1.0]], texts)
    with pytest.raises(EmbeddingError, match=r"text 0 \('fine'\).*all zeros"):
        finalize_vectors([[0.0, 0.0], [1.0, 1.0]], texts)
    with pytest.raises(EmbeddingError, match="infinity"):
        finalize_vectors([[1.0, 0.0], [np.inf, 1.0]], texts)


def test_finalize_rejects_wrong_shape() -> None:
    with pytest.raises(EmbeddingError, match="shape"):
        finalize_vectors([[1.0, 0.0]], ["a", "b"])
    with pytest.raises(EmbeddingError, match="length 3, expected 2"):
        finalize_vectors([[1.0, 0.0, 1.0]], ["a"], dim=2)


# -- OpenAI-compatible endpoint ---------------------------------------------------------------

DIM = EMBED_DIM
FAST = HttpPolicy(timeout=10, backoff=0.01)


pytestmark = pytest.mark.fake_llm()
"""Each test's ``server`` (tests/conftest.py) is a default FakeOpenAIServer: it embeds texts as
hashed bags of words."""


def _client(srv: FakeOpenAIServer, **kw: Any) -> OpenAIEmbedder:
    kw.setdefault("http", FAST)
    return OpenAIEmbedder(srv.base_url, "test-model", **kw)


def test_openai_success(server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSIRAG_TEST_EMBED_KEY", "sk-secret")
    emb = _client(server, batch_size=2, api_key_env="PSIRAG_TEST_EMBED_KEY")
    texts = ["alpha beta", "gamma", "alpha beta", "delta epsilon zeta", ""]
    vecs = emb.embed(texts, progress=True)
    assert vecs.shape == (5, DIM) and vecs.dtype == np.float32
    expected = np.array([bag_of_words(t) for t in texts])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(vecs, expected, atol=1e-6)
    assert len(server.requests) == 3 and emb.dim == DIM and len(server.requests) == 3
    first = server.requests[0]
    assert dict(first) == {"model": "test-model", "input": ["alpha beta", "gamma"]}
    assert first.headers["Authorization"] == "Bearer sk-secret"
    assert server.requests[2]["input"] == [" "]
    assert emb.id == "openai:test-model"
    assert all("sk-secret" not in s for s in (emb.id, emb.spec, repr(emb)))
    assert emb.count_truncated(texts) == 0 and emb.max_tokens is None


def test_openai_key_is_not_kept_on_the_object(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is read per request: nothing reachable from the embedder holds it, and a key
    changed (or removed) in the environment takes effect at once."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-kept-nowhere-77")
    emb = _client(server)
    emb.embed(["one"])
    assert server.requests[-1].headers["Authorization"] == "Bearer sk-kept-nowhere-77"
    seen: set[int] = set()

    def walk(obj: object, depth: int = 0) -> None:
        if id(obj) in seen or depth > 4:
            return
        seen.add(id(obj))
        assert "sk-kept-nowhere-77" not in repr(obj)
        for value in getattr(obj, "__dict__", {}).values():
            walk(value, depth + 1)

    walk(emb)
    monkeypatch.delenv("OPENAI_API_KEY")
    emb.embed(["two"])
    assert "Authorization" not in server.requests[-1].headers


def test_openai_key_is_scrubbed_from_errors(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that echoes the key back (in an error body or a non-JSON page) never gets it
    into the error message."""
    secret = "sk-echoed-back-9911"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    server.script(Reply(status=401, body={"error": {"message": f"key {secret} is revoked"}}))
    with pytest.raises(
        EmbeddingError, match=r"HTTP 401 \(check the API key in \$OPENAI_API_KEY"
    ) as info:
        _client(server).embed(["one"])
    assert secret not in str(info.value) and "***" in str(info.value)
    server.script(Reply(body=f"<html>Authorization: Bearer {secret}</html>"))
    with pytest.raises(EmbeddingError, match="did not return JSON") as info:
        _client(server).embed(["one"])
    assert secret not in str(info.value)


def test_openai_dim_probes_lazily(server: FakeOpenAIServer) -> None:
    emb = _client(server)
    assert server.requests == []
    assert emb.dim == DIM and len(server.requests) == 1


def test_openai_via_spec_and_env_key(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    emb = load_embedder(f"openai:{server.base_url}/#test-model", http=FAST)
    assert emb.embed(["hello"]).shape == (1, DIM)
    assert server.requests[0].headers["Authorization"] == "Bearer sk-env"
    assert "sk-env" not in emb.spec
    assert isinstance(emb, OpenAIEmbedder) and emb.policy is FAST


def test_openai_retries_429_then_succeeds(server: FakeOpenAIServer) -> None:
    server.script(Reply(status=429, headers={"Retry-After": "0"}), Reply(status=503))
    assert _client(server).embed(["one", "two"]).shape == (2, DIM)
    assert len(server.requests) == 3


def test_openai_gives_up_after_retries(server: FakeOpenAIServer) -> None:
    server.script(*[Reply(status=503, body="busy")] * 10)
    with pytest.raises(EmbeddingError, match=r"HTTP 503: busy \(gave up after 3 attempts\)"):
        _client(server, http=HttpPolicy(retries=2, backoff=0.01)).embed(["one"])
    assert len(server.requests) == 3


def test_openai_client_error_is_not_retried(server: FakeOpenAIServer) -> None:
    server.script(Reply(status=400, body="busy"))
    with pytest.raises(EmbeddingError, match=r"HTTP 400: .*busy"):
        _client(server).embed(["one"])
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"not json at all", "did not return JSON"),
        (b'{"object": "list"}', "no 'data' list"),
        (b'{"data": [{"index": 0}]}', r"'data\[0\]\.embedding'"),
        (b'{"data": []}', "0 items for 1 inputs"),
        (b'{"data": [{"index": 0, "embedding": ["a"]}]}', "non-numbers"),
    ],
)
def test_openai_malformed_responses(server: FakeOpenAIServer, body: bytes, match: str) -> None:
    server.script(Reply(body=body))
    with pytest.raises(EmbeddingError, match=match):
        _client(server).embed(["one"])


def test_openai_nan_vector_names_text(server: FakeOpenAIServer) -> None:
    def with_nan(texts: Sequence[str]) -> list[list[float]]:
        rows = [bag_of_words(t) for t in texts]
        rows[-1][0] = float("nan")
        return rows

    server.embed = with_nan
    with pytest.raises(EmbeddingError, match=r"text 1 \('bad one'\).*NaN"):
        _client(server).embed(["good", "bad one"])


def test_openai_connection_refused_names_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    emb = OpenAIEmbedder(
        f"http://127.0.0.1:{port}/v1", "m", http=HttpPolicy(retries=1, backoff=0.01)
    )
    with pytest.raises(EmbeddingError, match=rf"http://127\.0\.0\.1:{port}/v1/embeddings") as info:
        emb.embed(["x"])
    assert "gave up after 2 attempts" in str(info.value)


def test_openai_embedding_call_has_an_overall_deadline(server: FakeOpenAIServer) -> None:
    """A trickling embedding server is cut off at the deadline, as a chat server is."""
    server.script(Reply(body=b'{"data": []}' * 50, trickle=0.2))
    start = time.monotonic()
    with pytest.raises(EmbeddingError, match="did not answer within 1 s"):
        _client(server, http=HttpPolicy(timeout=1, retries=2)).embed(["one"])
    assert time.monotonic() - start < 3
