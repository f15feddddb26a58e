"""The web page on the 2Wiki tree (7,578 nodes), measured by the browser itself.

Starts ``psirag serve INDEX`` on 127.0.0.1 and opens the page in headless Chromium (Debian's
``chromium`` through Playwright) ``--loads`` times, each in a fresh browser context (no HTTP
cache). Every number comes from the page's own clock (``performance.now``, the
``requestAnimationFrame`` timestamps, Resource Timing):

- first render: from navigation start to the first animation frame after the sunburst is drawn
  (the index summary, ``GET /tree`` of the top five levels, layout, SVG arcs); also the part
  from the tree request on, and the ``/tree`` response alone;
- zooming: a fixed tour of animated zooms (root -> widest child -> its widest child -> root ->
  a second-ring node -> root), 550 ms each. Per frame: the interval between
  ``requestAnimationFrame`` timestamps (what a person sees: 16.7 ms is 60 fps) and the script
  time of the frame (arc geometry; the last frame also draws the labels).

- a reload after a foreign write (``--writes N``, on a copy of the index): another client adds
  a document through the API while the page is open (polling ``GET /generation`` every 250 ms),
  then removes it; the page's own time from noticing the new generation to the redrawn tree
  (``GET /generation``, ``/index``, ``/tree``, the path back to the node in focus), and the wall
  time from the write's job finishing to the page showing the new generation.

Usage: python benchmarks/bench_web.py --index DIR [--loads 5] [--writes 3] [--hash-embedder]
       python benchmarks/bench_web.py --hash-corpus CORPUS.json [--loads 2] [--writes 2]
       (--hash-embedder: DIR was built with the tests' HashEmbedder, as a quick stand-in for the
       MiniLM tree when no model can run; the page's work depends on the tree, not the vectors)
       (DIR: a 2Wiki index, e.g. ``psirag index <data>/2wikimultihopqa/corpus.json --out DIR``)
Writes benchmarks/results/web.json and benchmarks/results/section_web.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import RESULTS, machine_info, write_result

# the tests' helpers: one ServerProcess and the system Chromium (tests/support, not installed)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import ServerProcess
from support.browser import chromium_path, launch_chromium

VIEWPORT = (1366, 768)
TOUR_JS = """
async () => {
  const s = window.psirag, chart = s.chart, model = s.model;
  const widest = (id) => model.children(id).reduce((a, b) => (b.leaves > a.leaves ? b : a)).id;
  const root = model.rootId;
  const a = widest(root), b = widest(a);
  const ring2 = model.children(model.children(root)[0].id)[0].id;
  const out = [];
  const tour = [["root->child", a], ["child->grandchild", b], ["grandchild->root", root],
                ["root->ring-2 node", ring2], ["ring-2 node->root", root]];
  for (const [name, id] of tour) {
    await chart.zoomTo(id);
    out.push({name, frames: chart.frameTimes.slice(), work: chart.workTimes.slice(),
              arcs_during: chart.animatedArcs, arcs_after: chart.elements.size});
  }
  return out;
}
"""


def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values), q)), 2)


def stats(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p95": pct(values, 95),
        "max": round(max(values), 2),
        "mean": round(statistics.fmean(values), 2),
    }


def heap_mib(context: Any, page: Any) -> float:
    """The page's live JS heap after a garbage collection (Chrome DevTools Protocol), MiB."""
    cdp = context.new_cdp_session(page)
    cdp.send("HeapProfiler.collectGarbage")
    used = cdp.send("Runtime.getHeapUsage")["usedSize"]
    cdp.detach()
    return round(used / 2**20, 2)


def one_load(browser: Any, url: str) -> dict[str, Any]:
    context = browser.new_context(viewport={"width": VIEWPORT[0], "height": VIEWPORT[1]})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(url)
    page.wait_for_selector("body[data-tree-ready=true]", timeout=120_000)
    first = page.evaluate(
        """() => {
          const f = window.psirag.firstRender;
          const tree = performance.getEntriesByType('resource')
            .filter(e => e.name.includes('/tree?')).map(e => ({
              ms: e.duration, bytes: e.encodedBodySize || e.transferSize}))[0];
          return {navigation_to_render_ms: f.painted, tree_to_render_ms: f.painted - f.treeStart,
                  tree_response_ms: tree ? tree.ms : null, tree_bytes: tree ? tree.bytes : null,
                  arcs: f.arcs, nodes_loaded: window.psirag.model.nodes.size};
        }"""
    )
    first["heap_mib"] = heap_mib(context, page)
    tour = page.evaluate(TOUR_JS)
    heap_after_tour = heap_mib(context, page)
    first["nodes_after_tour"] = page.evaluate("window.psirag.model.nodes.size")
    context.close()
    if errors:
        raise SystemExit(f"console errors on the page: {errors}")
    return {"first_render": first, "tour": tour, "heap_after_tour_mib": heap_after_tour}


RENDERERS = ("canvas", "svg")


def zoom_summary(loads: list[dict[str, Any]]) -> dict[str, Any]:
    """Frame intervals and script times over every zoom of ``loads``, in all and per zoom."""
    frames = [f for run in loads for z in run["tour"] for f in z["frames"]]
    work = [w for run in loads for z in run["tour"] for w in z["work"]]
    per_zoom: dict[str, dict[str, Any]] = {}
    for run in loads:
        for z in run["tour"]:
            entry = per_zoom.setdefault(z["name"], {"frames": [], "work": [], "arcs": 0})
            entry["frames"] += z["frames"]
            entry["work"] += z["work"]
            entry["arcs"] = max(entry["arcs"], z["arcs_during"])
    return {
        "frame_interval_ms": stats(frames),
        "frame_script_ms": stats(work),
        "frames_over_33ms": sum(f > 33.4 for f in frames),
        "per_zoom": {
            name: {
                "arcs": e["arcs"],
                "frames": len(e["frames"]),
                "frame_interval_ms": stats(e["frames"]) if e["frames"] else None,
                "script_ms": stats(e["work"]),
            }
            for name, e in per_zoom.items()
        },
    }


def build_hash_index(corpus: str) -> str:
    """The corpus indexed with the tests' HashEmbedder in a temporary folder (no model)."""
    from support import HashEmbedder

    from psirag import Index, IndexConfig

    folder = Path(tempfile.mkdtemp(prefix="bench-web-")) / "index"
    Index.build([corpus], IndexConfig(embedder="test:hash"), embedder=HashEmbedder()).save(folder)
    return str(folder)


def build_synthetic_index(leaves: int, out: str | None) -> str:
    """``leaves`` synthetic passages (bench_living_scale's corpus: pseudo-words by topic, with
    names) indexed with the tests' HashEmbedder, one chunk each, saved under ``out`` (default: a
    temporary folder); an existing index there with that many chunks is reused."""
    from bench_living_scale import corpus
    from support import HashEmbedder

    from psirag import Index, IndexConfig
    from psirag.ingest import Document

    folder = Path(out) if out else Path(tempfile.mkdtemp(prefix="bench-web-")) / "index"
    manifest = folder / "manifest.json"
    if manifest.exists():
        counts = json.loads(manifest.read_text(encoding="utf-8")).get("counts", {})
        if counts.get("chunks") == leaves:
            return str(folder)
        raise SystemExit(f"{folder} holds another index ({counts.get('chunks')} chunks)")
    texts, _, _ = corpus(leaves)
    docs = [Document(f"s{i}", "", t, is_record=True) for i, t in enumerate(texts)]
    t0 = time.perf_counter()
    index = Index.build(docs, IndexConfig(embedder="test:hash"), embedder=HashEmbedder())
    index.save(folder)
    print(f"built {index.tree.n_leaves:,} leaves in {time.perf_counter() - t0:.0f} s: {folder}")
    return str(folder)


def reload_after_writes(browser: Any, server: Any, writes: int) -> list[dict[str, Any]]:
    """Foreign writes while one page is open: add a document, then remove it, ``writes``
    times each; per write, the page's reload time and the wall time to the new generation."""
    import httpx

    context = browser.new_context(viewport={"width": VIEWPORT[0], "height": VIEWPORT[1]})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(server.url + "/?poll=250")
    page.wait_for_selector("body[data-tree-ready=true]", timeout=120_000)
    out = []

    def follow(response: httpx.Response, what: str) -> None:
        assert response.status_code == 202, response.text
        job_id = response.json()["job"]["id"]
        while True:
            job = httpx.get(f"{server.url}/jobs/{job_id}", timeout=60).json()
            if job["status"] in ("done", "failed"):
                break
            time.sleep(0.05)
        if job["status"] != "done":
            raise SystemExit(f"the {what} failed: {job['error']}")
        done = time.monotonic()
        generation = job["result"]["generation"]
        page.wait_for_selector(f"body[data-generation='{generation}']", timeout=120_000)
        seen = time.monotonic()
        reload = page.evaluate("window.psirag.lastReload")
        out.append(
            {
                "write": what,
                "job_s": round(done - started, 3),
                "page_reload_ms": round(reload["ms"], 1),
                "write_done_to_page_s": round(seen - done, 3),
                "arcs": page.evaluate("window.psirag.chart.elements.size"),
                "heap_mib": heap_mib(context, page),
            }
        )

    for i in range(writes):
        text = f"Benchmark note {i}: a film directed by a director born in a city of rivers."
        started = time.monotonic()
        follow(
            httpx.post(
                f"{server.url}/documents", json={"text": text, "id": f"bench-{i}"}, timeout=60
            ),
            "add",
        )
        started = time.monotonic()
        follow(httpx.delete(f"{server.url}/documents/bench-{i}", timeout=60), "remove")
    context.close()
    if errors:
        raise SystemExit(f"console errors on the page: {errors}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", help="a saved 2Wiki index folder")
    parser.add_argument(
        "--hash-corpus",
        help="instead of --index: index this corpus with the tests' HashEmbedder first (~15 s)",
    )
    parser.add_argument(
        "--synthetic-leaves",
        type=int,
        help="instead of --index: a synthetic corpus of this many passages, HashEmbedder",
    )
    parser.add_argument("--keep", help="with --synthetic-leaves: build into (or reuse) this folder")
    parser.add_argument("--loads", type=int, default=5, help="page loads per renderer (default 5)")
    parser.add_argument(
        "--writes", type=int, default=0, help="foreign writes (add + remove) while the page is open"
    )
    parser.add_argument(
        "--hash-embedder", action="store_true", help="DIR was built with the tests' HashEmbedder"
    )
    args = parser.parse_args()
    if chromium_path() is None:
        raise SystemExit("no Chromium: apt-get install -y chromium (or set PSIRAG_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    if args.synthetic_leaves:
        args.index = build_synthetic_index(args.synthetic_leaves, args.keep)
        args.hash_embedder = True
    elif args.hash_corpus:
        args.index, args.hash_embedder = build_hash_index(args.hash_corpus), True
    elif not args.index:
        parser.error("give --index DIR or --hash-corpus FILE")
    manifest = json.loads((Path(args.index) / "manifest.json").read_text(encoding="utf-8"))
    loadavg_start = [round(x, 2) for x in os.getloadavg()]
    runs: dict[str, list[dict[str, Any]]] = {r: [] for r in RENDERERS}
    reloads: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        ServerProcess(
            shutil.copytree(args.index, Path(tmp) / "index") if args.writes else args.index,
            hash_embedder=args.hash_embedder,
        ) as server,
        sync_playwright() as p,
    ):
        browser = launch_chromium(p)
        one_load(browser, server.url + "/")  # warm-up: the server's first calls, disk caches
        for _ in range(args.loads):  # the renderers alternate, so machine load hits both alike
            for renderer in RENDERERS:
                runs[renderer].append(one_load(browser, f"{server.url}/?render={renderer}"))
        if args.writes:
            reloads = reload_after_writes(browser, server, args.writes)
        version = browser.version
        browser.close()

    firsts = [run["first_render"] for r in RENDERERS for run in runs[r]]
    result = {
        "index": {
            "nodes": manifest.get("counts", {}).get("nodes"),
            "chunks": manifest.get("counts", {}).get("chunks"),
        },
        "browser": f"Chromium {version} (headless, software rendering)",
        "viewport": list(VIEWPORT),
        "loads": args.loads * len(RENDERERS),
        "first_render_ms": {
            key: stats([float(f[key]) for f in firsts])
            for key in ("navigation_to_render_ms", "tree_to_render_ms", "tree_response_ms")
        },
        "heap_mib": {
            "first_render": stats([f["heap_mib"] for f in firsts]),
            "after_zoom_tour": stats(
                [run["heap_after_tour_mib"] for r in RENDERERS for run in runs[r]]
            ),
            "after_reloads": stats([w["heap_mib"] for w in reloads]) if reloads else None,
        },
        "nodes_loaded_after_tour": max(f["nodes_after_tour"] for f in firsts),
        "tree_response_bytes": firsts[0]["tree_bytes"],
        "nodes_loaded_at_first_render": firsts[0]["nodes_loaded"],
        "arcs_at_first_render": firsts[0]["arcs"],
        "zoom": {r: zoom_summary(runs[r]) for r in RENDERERS},
        "embedder": "tests' HashEmbedder" if args.hash_embedder else manifest.get("embedder"),
        "reload_after_foreign_write": {
            "writes": reloads,
            "page_reload_ms": stats([w["page_reload_ms"] for w in reloads]) if reloads else None,
            "write_done_to_page_s": (
                stats([w["write_done_to_page_s"] for w in reloads]) if reloads else None
            ),
        },
        "machine": machine_info(),
        "loadavg_at_start": loadavg_start,
        "runs": runs,
    }
    # a stand-in tree and a synthetic one keep their own files
    name = "web_hash" if args.hash_embedder else "web"
    if args.synthetic_leaves:
        name, result["synthetic_leaves"] = f"web_synthetic_{args.synthetic_leaves}", True
    path = write_result(f"{name}.json", result)
    from report import reflow  # the line width of BENCHMARKS.md

    (RESULTS / f"section_{name}.md").write_text(reflow(section(result)), encoding="utf-8")
    print(f"wrote {path}")
    print(section(result))


def stand_in_section(r: dict[str, Any]) -> str:
    """First render and reloads on a 2Wiki tree built with the tests' HashEmbedder (when the
    MiniLM index cannot be built in time): the same page work, a differently shaped tree."""
    nav, resp = (
        r["first_render_ms"]["navigation_to_render_ms"],
        r["first_render_ms"]["tree_response_ms"],
    )
    return "\n".join(
        [
            "## Web page: reload after a foreign write (2Wiki corpus, stand-in tree)",
            "",
            "`python benchmarks/bench_web.py --hash-corpus <data>/2wikimultihopqa/corpus.json "
            "--loads 2 --writes 2` "
            f"serves the 2Wiki corpus indexed with the tests' HashEmbedder "
            f"({r['index']['nodes']:,} nodes; the MiniLM tree of the section above has a "
            "different shape) and opens the page "
            f"{r['loads']} times in {r['browser']}. First render p50 {nav['p50']} ms (max "
            f"{nav['max']}), of which the `/tree` response ({r['tree_response_bytes'] or 0:,} "
            f"bytes, {r['nodes_loaded_at_first_render']:,} nodes) p50 {resp['p50']} ms.",
            "",
            *reload_lines(r),
            f"Load average at the start: {r['loadavg_at_start']}, on 2 cores shared with other "
            "jobs: the absolute times are pessimistic for a laptop.",
            "",
        ]
    )


def reload_lines(r: dict[str, Any]) -> list[str]:
    """The paragraph on reloads after foreign writes, when the run made some."""
    re_ = r.get("reload_after_foreign_write") or {}
    if not re_.get("writes"):
        return []
    page, wall = re_["page_reload_ms"], re_["write_done_to_page_s"]
    return [
        f"Reload after a foreign write ({len(re_['writes'])} writes through the API, an add "
        "and a remove in turn, while the page polls `GET /generation` every 250 ms): the "
        f"page's reload, from noticing the new generation to the redrawn tree, p50 "
        f"{page['p50']} ms (max {page['max']}); from the write's job finishing to the page "
        f"showing the new generation, p50 {wall['p50']} s (max {wall['max']}).",
        "",
    ]


def heap_lines(r: dict[str, Any]) -> list[str]:
    """The paragraph on the page's JS heap, when the run measured it."""
    heap = r.get("heap_mib")
    if not heap:
        return []
    reloads = heap.get("after_reloads")
    return [
        f"JS heap (live, after a forced garbage collection, Chrome DevTools Protocol): "
        f"{heap['first_render']['p50']} MiB at the first render, "
        f"{heap['after_zoom_tour']['p50']} MiB after the zoom tour "
        f"({r['nodes_loaded_after_tour']:,} nodes loaded by then)"
        + (f", {reloads['p50']} MiB after a reload" if reloads else "")
        + ".",
        "",
    ]


def zoom_lines(r: dict[str, Any]) -> list[str]:
    """Frame intervals of the zoom tour, canvas against svg, in one sentence."""
    canvas, svg = r["zoom"]["canvas"], r["zoom"]["svg"]
    ci, vi = canvas["frame_interval_ms"], svg["frame_interval_ms"]
    return [
        f"Zooming (the tour of five animated zooms): frame interval p50 canvas {ci['p50']} ms "
        f"(p95 {ci['p95']}, {canvas['frames_over_33ms']} of {ci['n']} frames over 33 ms), "
        f"svg {vi['p50']} ms (p95 {vi['p95']}, {svg['frames_over_33ms']} of {vi['n']}); script "
        f"per frame p50 canvas {canvas['frame_script_ms']['p50']} ms (max "
        f"{canvas['frame_script_ms']['max']}: the last frame of a zoom, which builds the SVG "
        "and its labels).",
        "",
    ]


def synthetic_section(r: dict[str, Any]) -> str:
    """First render, heap, zooms and reloads on the synthetic tree of ``--synthetic-leaves``."""
    f = r["first_render_ms"]
    nav, resp = f["navigation_to_render_ms"], f["tree_response_ms"]
    leaves = r["index"]["chunks"]
    return "\n".join(
        [
            f"## Web page on a {leaves:,}-leaf tree (synthetic, headless Chromium)",
            "",
            f"`python benchmarks/bench_web.py --synthetic-leaves {leaves} --loads "
            f"{r['loads'] // 2} --writes "
            f"{len((r.get('reload_after_foreign_write') or {}).get('writes') or []) // 2}` "
            "indexes bench_living_scale's synthetic corpus (one passage a leaf, pseudo-words by "
            "topic, names) with the tests' HashEmbedder and default settings "
            f"({r['index']['nodes']:,} nodes), serves it and opens the page {r['loads']} "
            f"times in {r['browser']} at {r['viewport'][0]}x{r['viewport'][1]}. The page "
            "loads the tree lazily: the top levels the first view draws (`GET /tree?depth=4`), "
            "then each zoomed-into node's subtree.",
            "",
            f"First render p50 {nav['p50']} ms (max {nav['max']}), of which the `/tree` "
            f"response ({r['tree_response_bytes'] or 0:,} bytes, "
            f"{r['nodes_loaded_at_first_render']:,} nodes) p50 {resp['p50']} ms; "
            f"{r['arcs_at_first_render']:,} arcs drawn.",
            "",
            *zoom_lines(r),
            *heap_lines(r),
            *reload_lines(r),
            f"Load average at the start: {r['loadavg_at_start']}, on 2 cores shared with other "
            "jobs: the absolute times are pessimistic for a laptop.",
            "",
        ]
    )


def section(r: dict[str, Any]) -> str:
    if r.get("synthetic_leaves"):
        return synthetic_section(r)
    if str(r.get("embedder", "")).startswith("tests'"):
        return stand_in_section(r)
    f = r["first_render_ms"]
    nav, tree, resp = (
        f["navigation_to_render_ms"],
        f["tree_to_render_ms"],
        f["tree_response_ms"],
    )
    canvas, svg = r["zoom"]["canvas"], r["zoom"]["svg"]
    writes = (r.get("reload_after_foreign_write") or {}).get("writes") or []

    def cell(z: dict[str, Any], key: str, q: str) -> str:
        return str(z[key][q]) if z.get(key) else "-"

    rows = []
    for name in canvas["per_zoom"]:
        c, v = canvas["per_zoom"][name], svg["per_zoom"][name]
        rows.append(
            f"| {name} | {c['arcs']:,} | {c['frames']} / {v['frames']} | "
            f"{cell(c, 'frame_interval_ms', 'p50')} / {cell(v, 'frame_interval_ms', 'p50')} | "
            f"{c['script_ms']['p50']} / {v['script_ms']['p50']} |"
        )
    ci, vi = canvas["frame_interval_ms"], svg["frame_interval_ms"]
    ratio = round(vi["p50"] / ci["p50"], 1) if ci["p50"] else None
    return "\n".join(
        [
            "## Web page on the 2Wiki tree (headless Chromium)",
            "",
            f"`python benchmarks/bench_web.py --index DIR --loads {r['loads'] // 2} --writes "
            f"{len(writes) // 2}` serves the 2Wiki index "
            f"({r['index']['nodes']:,} nodes) with `psirag serve` and opens the page "
            f"{r['loads']} times in {r['browser']} at {r['viewport'][0]}x{r['viewport'][1]}, "
            "each load in a fresh context after one warm-up load. The times are the page's own "
            "(`performance.now`, `requestAnimationFrame` timestamps, Resource Timing).",
            "",
            "| first render | p50 ms | p95 ms | max ms |",
            "|---|---|---|---|",
            f"| navigation start to the first frame with the tree drawn | {nav['p50']} | "
            f"{nav['p95']} | {nav['max']} |",
            f"| of which: `GET /tree` request to that frame | {tree['p50']} | {tree['p95']} | "
            f"{tree['max']} |",
            f"| of which: the `/tree` response ({r['tree_response_bytes'] or 0:,} bytes, "
            f"{r['nodes_loaded_at_first_render']:,} nodes) | {resp['p50']} | {resp['p95']} | "
            f"{resp['max']} |",
            "",
            f"The first render draws {r['arcs_at_first_render']:,} arcs (arcs narrower than "
            "0.004 rad wait until zoomed into). Zooming: a tour of five animated zooms (550 ms "
            "each) per load, the page's default canvas renderer (frames painted on a canvas, "
            "the SVG rebuilt once at the end) against the `?render=svg` renderer (every SVG "
            "arc moved on every frame), loads alternating between the two in one run. "
            f"Frame interval p50: canvas {ci['p50']} ms (p95 {ci['p95']}, "
            f"{canvas['frames_over_33ms']} of {ci['n']} frames over 33 ms), svg {vi['p50']} ms "
            f"(p95 {vi['p95']}, {svg['frames_over_33ms']} of {vi['n']} over 33 ms): "
            f"{ratio}x. Script time per frame p50: canvas {canvas['frame_script_ms']['p50']} "
            f"ms, svg {svg['frame_script_ms']['p50']} ms (the last frame of a zoom rebuilds "
            "the SVG and its labels in both).",
            "",
            "| zoom | arcs animated | frames canvas / svg | interval p50 ms canvas / svg | "
            "script p50 ms canvas / svg |",
            "|---|---|---|---|---|",
            *rows,
            "",
            *heap_lines(r),
            *reload_lines(r),
            f"Load average at the start: {r['loadavg_at_start']}, on 2 cores shared with other "
            "jobs: the absolute times are pessimistic for a laptop; the ratio comes from the "
            "same run.",
            "",
        ]
    )


if __name__ == "__main__":
    main()
