"""PDF and HTML inputs: the text layer with page numbers in the provenance, text without markup,
and unreadable files named (failed, or skipped with --skip-bad-files)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pypdf")
pytest.importorskip("bs4")

from support import HashEmbedder

from psirag import Index, IndexConfig
from psirag.errors import InputError
from psirag.ingest import load_documents, make_chunks


def make_pdf(pages: list[str], title: str | None = None) -> bytes:
    """A minimal PDF with one line of Helvetica text per page, written by hand (xref and all)."""
    objects: list[bytes] = []
    n = len(pages)
    font = 3 + 2 * n
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(n))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode())
    for i, text in enumerate(pages):
        safe = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 12 Tf 72 720 Td ({safe}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    info = None
    if title:
        objects.append(f"<< /Title ({title}) >>".encode())
        info = len(objects)
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for k, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % k + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    trailer = f"<< /Size {len(objects) + 1} /Root 1 0 R" + (f" /Info {info} 0 R" if info else "")
    out += f"trailer\n{trailer} >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def test_pdf_pages_are_in_the_provenance(tmp_path: Path) -> None:
    pages = [
        "Mount Etna is an active volcano on the coast of Sicily.",
        "Trains run on steel rails between the stations of the valley.",
        "Glaciers of ice move slowly down the cold mountains.",
    ]
    (tmp_path / "report.pdf").write_bytes(make_pdf(pages, title="Field report"))
    docs = load_documents([tmp_path / "report.pdf"])
    assert len(docs) == 1 and docs[0].title == "Field report"
    chunks = make_chunks(docs, chunk_tokens=12)
    by_page = {c.source.page: c.text for c in chunks}
    assert sorted(by_page) == [1, 2, 3]
    assert "Etna" in by_page[1] and "rails" in by_page[2] and "Glaciers" in by_page[3]
    config = IndexConfig(chunk_tokens=12)
    index = Index.build([tmp_path / "report.pdf"], config, embedder=HashEmbedder())
    hit = index.search("steel rails stations", k=1)[0]
    assert hit.source.page == 2
    assert hit.source.to_dict()["page"] == 2


def test_html_text_without_markup(tmp_path: Path) -> None:
    page = (
        "<html><head><title>Etna</title><style>p {color: red}</style></head><body>"
        "<h1>Mount Etna</h1><script>var secret = 1;</script>"
        "<p>Etna is an <b>active</b> volcano &amp; a mountain.</p></body></html>"
    )
    (tmp_path / "etna.html").write_text(page)
    [doc] = load_documents([tmp_path / "etna.html"])
    assert doc.title == "Etna"
    assert "Etna is an\nactive\nvolcano & a mountain." in doc.text or "active" in doc.text
    for markup in ("<", ">", "color", "secret", "&amp;"):
        assert markup not in doc.text
    assert doc.text.startswith("Mount Etna")


def test_unreadable_pdf_is_named(tmp_path: Path) -> None:
    (tmp_path / "good.txt").write_text("Mount Etna is an active volcano.")
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not a pdf at all")
    with pytest.raises(InputError, match=r"broken\.pdf: not a readable PDF"):
        load_documents([tmp_path])
    warned: list[str] = []
    docs = load_documents([tmp_path], on_bad_file="skip", warn=warned.append)
    assert [d.id for d in docs] == ["good.txt"]
    assert any("broken.pdf" in w for w in warned)


def test_pdf_without_text_is_skipped_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "scan.pdf").write_bytes(make_pdf([""]))
    (tmp_path / "a.txt").write_text("Mount Etna is an active volcano.")
    warned: list[str] = []
    docs = load_documents([tmp_path], warn=warned.append)
    assert [d.id for d in docs] == ["a.txt"]
    assert any("scan.pdf" in w and "no text layer" in w for w in warned)
