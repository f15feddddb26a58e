"""What a save writes when it keeps the base generation's files and publishes the pointer:
the files :meth:`IndexWriter.keep` carries over are exactly the manifest's for the name (a
file, or every file under a folder), and the pointer (``manifest.json`` at the top) is the
generation's manifest with its checksum, encoded as that manifest is."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support import TOPICS, HashEmbedder

from psirag import Index, IndexConfig
from psirag.storage import IndexWriter, _encoded, _with_last_key


def _saved(tmp_path: Path) -> Path:
    texts = [
        f"{topic} note {i}: {topic} facts and {topic} names." for topic in TOPICS for i in range(4)
    ]
    index = Index.build(
        texts, IndexConfig(max_children=3, chunk_tokens=40), texts=True, embedder=HashEmbedder()
    )
    folder = tmp_path / "ix"
    index.save(folder)
    return folder


def test_keep_carries_the_manifests_files_for_a_name(tmp_path: Path) -> None:
    folder = _saved(tmp_path)
    with IndexWriter(folder) as writer:
        assert writer.base is not None
        files = list(writer.base.manifest["files"])
        tops = sorted({f.split("/")[0] for f in files})
        folders = [t for t in tops if any(f.startswith(t + "/") for f in files)]
        assert folders, "the index saves no folder"
        for name in tops:
            want = [f for f in files if f == name or f.startswith(name + "/")]
            assert writer.keep(name) == want
        with pytest.raises(Exception, match="has no"):
            writer.keep("no-such-file")
        writer.abort()


def test_the_pointer_is_the_generations_manifest_and_its_checksum(tmp_path: Path) -> None:
    folder = _saved(tmp_path)
    pointer_raw = (folder / "manifest.json").read_bytes()
    pointer = json.loads(pointer_raw)
    generation = folder / "generations" / f"{pointer['generation']:06d}" / "manifest.json"
    raw = generation.read_bytes()
    assert pointer["manifest_sha256"] == hashlib.sha256(raw).hexdigest()
    assert pointer_raw == _encoded(pointer)  # what encoding it whole gives
    assert {k: v for k, v in pointer.items() if k != "manifest_sha256"} == json.loads(raw)


@pytest.mark.parametrize(
    "payload",
    [
        {"a": 1, "files": {"x/é": {"bytes": 3, "sha256": "ab"}}, "t": {"s": [["s", 1], []]}},
        {"format": "p", "files": {}},
        {"a": [1, {"b": None}], "ü": 'ü\n"q"'},
    ],
)
def test_a_last_key_appended_to_an_encoding_is_the_encoding_of_the_whole(
    payload: dict[str, object],
) -> None:
    whole = {**payload, "manifest_sha256": "0" * 64}
    assert _with_last_key(_encoded(payload), whole) == _encoded(whole)
    assert _with_last_key(b"{}\n", {"k": 1}) is None  # nothing to append to
