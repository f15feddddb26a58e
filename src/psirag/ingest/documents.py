"""PDF (its text layer) and HTML (its text, without markup) as plain text for the loader.

Both go through maintained libraries in the ``documents`` extra (pypdf, beautifulsoup4),
imported only when such a file is read, so the rest of psirag needs neither. A PDF's text keeps
where each page starts, so every chunk can name the page it comes from.
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass

from psirag.errors import InputError

PDF_SUFFIXES = (".pdf",)
HTML_SUFFIXES = (".html", ".htm")
EXTRA = "pip install 'psirag[documents]'"

_BLANK_RUN = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")
_SPACES = re.compile(r"[ \t\r\f\v]+")


class UnreadableDocument(Exception):
    """The file is not a readable PDF/HTML document (the loader names it and applies the
    bad-file policy)."""


@dataclass(frozen=True)
class ExtractedText:
    text: str
    title: str | None = None
    page_starts: tuple[int, ...] = ()
    """Character offset where each page starts (page ``i + 1`` starts at ``page_starts[i]``)."""


def _tidy(text: str) -> str:
    lines = [_SPACES.sub(" ", line).strip() for line in text.replace("\r", "\n").split("\n")]
    return _BLANK_RUN.sub("\n\n", "\n".join(lines)).strip()


def pdf_text(data: bytes) -> ExtractedText:
    """The text layer of every page, pages separated by a blank line."""
    try:
        import pypdf
    except ImportError:  # pragma: no cover - depends on the environment
        raise InputError(f"reading PDF files needs the pypdf package: {EXTRA}") from None
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings repeat our one message
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise UnreadableDocument("the PDF is encrypted; decrypt it first")
        parts: list[str] = []
        starts: list[int] = []
        offset = 0
        for page in reader.pages:
            text = _tidy(page.extract_text() or "")
            starts.append(offset)
            parts.append(text)
            offset += len(text) + 2
        title = None
        meta = reader.metadata
        if meta is not None and meta.title:
            title = str(meta.title).strip() or None
    except UnreadableDocument:
        raise
    except Exception as exc:  # pypdf raises many kinds on damaged files
        raise UnreadableDocument(f"not a readable PDF ({type(exc).__name__}: {exc})") from exc
    return ExtractedText("\n\n".join(parts), title, tuple(starts))


def html_text(text: str) -> ExtractedText:
    """The visible text of an HTML page (scripts, styles and templates dropped)."""
    try:
        from bs4 import BeautifulSoup
    except ImportError:  # pragma: no cover - depends on the environment
        raise InputError(f"reading HTML files needs the beautifulsoup4 package: {EXTRA}") from None
    soup = BeautifulSoup(text, "html.parser")
    for tag in soup(["script", "style", "noscript", "template", "head"]):
        if tag.name == "head":
            continue
        tag.decompose()
    title = soup.title.get_text(strip=True) if soup.title else None
    if soup.head is not None:
        soup.head.decompose()
    return ExtractedText(_tidy(soup.get_text("\n")), title or None)


__all__ = ["HTML_SUFFIXES", "PDF_SUFFIXES", "ExtractedText", "html_text", "pdf_text"]
