"""Screenshots of each view of the web page at laptop (1366x768) and phone (390x844) widths,
for docs/ and the README.

    python scripts/web_screenshots.py INDEX_DIR [--out docs]

Starts ``psirag serve INDEX_DIR`` on 127.0.0.1 with a scripted loopback LLM (so the Ask view
shows a two-step episode of the real agent without a model), drives the page in headless
Chromium, and writes web-<view>-<width>.png (and web-ask-draft-laptop.png: the answer while the
model writes it). Needs ``apt-get install chromium`` and
``pip install 'psirag[server,browser-tests]'``; with Pillow installed the PNGs get a small palette.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

# the tests' helpers: the scripted LLM, one ServerProcess and the system Chromium (tests/support,
# not installed)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import FakeOpenAIServer, ServerProcess
from support.browser import launch_chromium

QUESTION = "When did Lothair II's mother die?"
SEARCH = "Ermengarde of Tours, mother of Lothair II"
VIEWPORTS = {"laptop": (1366, 768), "phone": (390, 844)}


def scripted_llm(body: dict[str, Any]) -> str:
    """The first turn asks for a sub-question, every later one answers."""
    turns = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
    if turns == 0:
        return (
            "Thought: Lothair II's mother is Ermengarde of Tours; these passages do not give "
            "her date of death.\nRetrieve: Ermengarde of Tours date of death"
        )
    # cite, as a model does, the documents of this turn that give the date (their labels)
    users = [str(m.get("content", "")) for m in body.get("messages", []) if m.get("role") == "user"]
    blocks = re.split(r"(?m)^\[(\d+)\] ", users[-1] if users else "")
    labels = [blocks[i] for i in range(1, len(blocks) - 1, 2) if "851" in blocks[i + 1]]
    cites = "".join(f" [{n}]" for n in labels[:2]) or " [1]"
    answer = "Ermengarde of Tours died on 20 March 851"  # long enough to show as a draft
    return f"Thought: Ermengarde of Tours died on 20 March 851.\nAnswer: {answer}{cites}"


def shoot(page: Any, path: Path) -> None:
    page.wait_for_timeout(250)  # let the last transition and fonts settle
    page.screenshot(path=str(path))
    try:  # Pillow, when installed, cuts the PNG to a 128-colour palette: a third of the size
        from PIL import Image

        with Image.open(path) as image:
            small = image.convert("RGB").quantize(colors=128, method=Image.Quantize.FASTOCTREE)
        small.save(path, optimize=True)
    except ImportError:
        pass
    print(f"{path} ({path.stat().st_size // 1024} KiB)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("index", help="index folder to serve")
    parser.add_argument("--out", default="docs", help="folder for the PNG files (default docs)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeOpenAIServer(responder=scripted_llm) as llm,
        sync_playwright() as p,
    ):
        # a copy: the Documents view uploads a file, which a living index would take
        index = shutil.copytree(args.index, Path(tmp) / "index")
        server = ServerProcess(index, ["--llm", f"openai:{llm.base_url}#scripted"])
        server.wait_ready()
        browser = launch_chromium(p)
        for name, (w, h) in VIEWPORTS.items():
            page = browser.new_page(viewport={"width": w, "height": h})
            page.goto(server.url + "/")
            page.wait_for_selector("body[data-tree-ready=true]", timeout=60_000)
            shoot(page, out / f"web-tree-{name}.png")

            # zoom into the widest first-ring node and show it
            root = page.evaluate("window.psirag.model.rootId")
            kids = page.evaluate(
                "id => window.psirag.model.children(id).map(n => [n.id, n.leaves])", root
            )
            widest = max(kids, key=lambda k: k[1])[0]
            point = page.evaluate("id => window.psirag.chart.pointOf(id)", widest)
            box = page.locator("#sunburst").bounding_box()
            page.mouse.click(box["x"] + point["x"], box["y"] + point["y"])
            page.wait_for_selector("#node-abstract")
            if name == "phone":
                page.evaluate("document.querySelector('.panel').scrollIntoView()")
            shoot(page, out / f"web-node-{name}.png")

            page.evaluate("window.scrollTo(0, 0)")
            page.click("#tab-search")
            page.fill("#search-query", SEARCH)
            page.click("#search-submit")
            page.wait_for_selector("#highlight-note:not([hidden])", timeout=60_000)
            shoot(page, out / f"web-search-{name}.png")

            page.evaluate("window.scrollTo(0, 0)")
            page.click("#clear-highlight")
            page.click("#tab-ask")
            page.fill("#ask-query", QUESTION)
            page.fill("#ask-retrievals", "1")
            if name == "laptop":  # the answer as the model writes it: a draft, then the answer
                llm.token_delay = 0.25
                page.click("#ask-submit")
                page.wait_for_selector("#ask-draft:has-text('Tours died')", timeout=120_000)
                page.evaluate(  # the passages folded, as in the answer's shot below
                    "document.querySelectorAll('#ask-steps details').forEach(d => d.open = false)"
                )
                shoot(page, out / f"web-ask-draft-{name}.png")
                llm.token_delay = 0.0
            else:
                page.click("#ask-submit")
            page.wait_for_selector("#answer-text", timeout=120_000)
            page.evaluate(
                "document.querySelectorAll('#ask-steps details').forEach(d => d.open = false)"
            )
            if name == "phone":
                page.evaluate("document.querySelector('.panel').scrollIntoView()")
            shoot(page, out / f"web-ask-{name}.png")

            page.evaluate("window.scrollTo(0, 0)")
            page.click("#tab-docs")
            page.wait_for_selector("#docs-table tbody tr")
            note = Path(tmp) / f"notes-{name}.txt"  # one upload per width: ids stay unique
            note.write_text("A note to add to the index.\n", encoding="utf-8")
            page.set_input_files("#doc-file", str(note))
            page.wait_for_selector(
                "#docs-error:not([hidden]), #jobs li[data-status]", timeout=120_000
            )
            if name == "phone":
                page.evaluate("document.querySelector('.panel').scrollIntoView()")
            shoot(page, out / f"web-docs-{name}.png")
            page.close()
        browser.close()
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
