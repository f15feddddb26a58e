// The tree explorer: a zoomable sunburst over a lazily loaded tree. Rings are depths below the
// node in focus, arc angles are proportional to leaf counts. SVG, so every arc is an element
// a click (or a browser test) can find; arcs narrower than MIN_ANGLE are not drawn, which keeps
// the element count bounded on a tree of thousands of nodes.

const TAU = Math.PI * 2;
const SVG = "http://www.w3.org/2000/svg";
export const RINGS = 4; // rings drawn around the node in focus
export const FOREST = -1; // id of the local node above the trees of a forest (root -1 in /tree)
const MIN_ANGLE = 0.004; // radians; narrower arcs are skipped (they show once zoomed in)
const HIT_ANGLE = 0.03; // radians: the least width a search hit is drawn with
const DURATION = 550; // ms of the zoom transition

/** The part of the tree loaded so far, from GET /tree responses. */
export class TreeModel {
  constructor() {
    this.nodes = new Map();
    this.rootId = null;
    this.nLeaves = 0;
  }

  /** Merge one /tree response: new nodes, children lists, then a fresh layout. */
  merge(response) {
    if (response.n_leaves !== undefined) this.nLeaves = response.n_leaves;
    const roots = response.roots || [];
    if (this.rootId === null) {
      this.rootId = response.root;
      if (response.root === FOREST || (response.root === undefined && roots.length > 1)) {
        // a forest: one local node above its trees (the server has no such node)
        this.rootId = FOREST;
        const tops = response.nodes.filter((n) => roots.includes(n.id));
        this.nodes.set(FOREST, {
          id: FOREST, parent: null, layer: Math.max(0, ...tops.map((n) => n.layer)) + 1,
          leaves: this.nLeaves || tops.reduce((s, n) => s + n.leaves, 0), label: "all trees",
          document: null, has_children: true, children: null, x0: 0, x1: 1, depth: 0,
        });
      }
    }
    const forest = this.rootId === FOREST;
    for (const raw of response.nodes) {
      let parent = raw.parent === null || raw.parent === undefined || raw.parent < 0 ? null : raw.parent;
      if (parent === null && forest && raw.id !== FOREST) parent = FOREST;
      const old = this.nodes.get(raw.id);
      if (old) {
        Object.assign(old, { ...raw, parent, children: old.children });
      } else {
        this.nodes.set(raw.id, { ...raw, parent, children: null, x0: 0, x1: 0, depth: 0 });
      }
    }
    for (const raw of response.nodes) {
      const node = this.nodes.get(raw.id);
      if (node.parent === null) continue;
      const parent = this.nodes.get(node.parent);
      if (!parent) continue;
      if (!parent.children) parent.children = [];
      if (!parent.children.includes(node.id)) parent.children.push(node.id);
    }
    for (const node of this.nodes.values()) {
      if (!node.has_children && !node.children) node.children = [];
    }
    this.layout();
  }

  get(id) {
    return this.nodes.get(id);
  }

  childrenLoaded(id) {
    const node = this.nodes.get(id);
    return !!node && node.children !== null;
  }

  children(id) {
    const node = this.nodes.get(id);
    return node && node.children ? node.children.map((c) => this.nodes.get(c)) : [];
  }

  /** Ids from the root to `id` (as far as loaded). */
  path(id) {
    const out = [];
    let node = this.nodes.get(id);
    while (node) {
      out.push(node.id);
      node = node.parent === null ? null : this.nodes.get(node.parent);
    }
    return out.reverse();
  }

  isAncestor(a, b) {
    let node = this.nodes.get(b);
    while (node) {
      if (node.id === a) return true;
      node = node.parent === null ? null : this.nodes.get(node.parent);
    }
    return false;
  }

  /** Nodes under `id` within `depth` levels whose children are not loaded yet. */
  missingBelow(id, depth) {
    const missing = [];
    const walk = (nodeId, left) => {
      const node = this.nodes.get(nodeId);
      if (!node || left <= 0) return;
      if (node.children === null) {
        missing.push(nodeId);
        return;
      }
      for (const c of node.children) walk(c, left - 1);
    };
    walk(id, depth);
    return missing;
  }

  /** Angular extents [x0, x1) in turns, proportional to leaf counts; depth from the root. */
  layout() {
    const root = this.nodes.get(this.rootId);
    if (!root) return;
    root.x0 = 0;
    root.x1 = 1;
    root.depth = 0;
    const stack = [root];
    while (stack.length) {
      const node = stack.pop();
      if (!node.children || !node.children.length) continue;
      const kids = node.children.map((c) => this.nodes.get(c));
      const total = kids.reduce((s, k) => s + Math.max(k.leaves, 1), 0);
      let x = node.x0;
      for (const kid of kids) {
        const w = ((node.x1 - node.x0) * Math.max(kid.leaves, 1)) / total;
        kid.x0 = x;
        kid.x1 = x + w;
        kid.depth = node.depth + 1;
        x += w;
        stack.push(kid);
      }
    }
  }
}

function hashHue(text) {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 16777619);
  }
  return ((h >>> 0) % 360 + 360) % 360;
}

function describe(node) {
  const kind = node.has_children ? `${node.leaves.toLocaleString()} leaves` : "leaf";
  return `${node.label || `node ${node.id}`} (${kind}, layer ${node.layer})`;
}

function arcPath(cx, cy, a0, a1, r0, r1) {
  if (a1 - a0 >= TAU - 1e-6) {
    // a full ring: two half arcs each way, with the hole cut out
    const o = `M${cx},${cy - r1}A${r1},${r1} 0 1 1 ${cx},${cy + r1}A${r1},${r1} 0 1 1 ${cx},${cy - r1}Z`;
    if (r0 <= 0) return o;
    return `${o}M${cx},${cy - r0}A${r0},${r0} 0 1 0 ${cx},${cy + r0}A${r0},${r0} 0 1 0 ${cx},${cy - r0}Z`;
  }
  const large = a1 - a0 > Math.PI ? 1 : 0;
  const s0 = Math.sin(a0);
  const c0 = Math.cos(a0);
  const s1 = Math.sin(a1);
  const c1 = Math.cos(a1);
  const f = (v) => v.toFixed(2);
  let d = `M${f(cx + r1 * s0)},${f(cy - r1 * c0)}A${r1},${r1} 0 ${large} 1 ${f(cx + r1 * s1)},${f(cy - r1 * c1)}`;
  if (r0 > 0) {
    d += `L${f(cx + r0 * s1)},${f(cy - r0 * c1)}A${r0},${r0} 0 ${large} 0 ${f(cx + r0 * s0)},${f(cy - r0 * c0)}Z`;
  } else {
    d += `L${cx},${cy}Z`;
  }
  return d;
}

/**
 * The drawing. `onOpen(id)` runs when a node is clicked or opened with Enter; `onNeed(id, depth)`
 * must load the missing levels under `id` (a Promise); `announce(text)` speaks keyboard moves.
 */
export class Sunburst {
  constructor(svg, model, { onOpen, onNeed, announce, onFocusChange, renderer = "canvas" }) {
    this.renderer = renderer; // how zoom transitions are drawn: "canvas" or "svg"
    this.svg = svg;
    this.model = model;
    this.onOpen = onOpen;
    this.onNeed = onNeed;
    this.announce = announce || (() => {});
    this.onFocusChange = onFocusChange || (() => {});
    this.colourBy = "branch";
    this.focus = model.rootId;
    this.view = { x0: 0, x1: 1, depth: 0 };
    this.selected = null;
    this.cursor = null; // the node the keyboard is on
    this.onPath = new Set();
    this.hits = new Set();
    this.elements = new Map(); // id -> <path>
    this.animation = null;
    this.frameTimes = []; // ms between frames of the last transition (read by benchmarks)
    this.workTimes = []; // ms of script work per frame of the last transition

    svg.innerHTML = "";
    this.gArcs = document.createElementNS(SVG, "g");
    this.gLabels = document.createElementNS(SVG, "g");
    this.gLabels.setAttribute("class", "labels");
    this.gLabels.setAttribute("aria-hidden", "true");
    this.centre = document.createElementNS(SVG, "circle");
    this.centre.setAttribute("class", "centre");
    this.centre.setAttribute("role", "treeitem");
    this.centre.id = "arc-centre";
    this.centreText = document.createElementNS(SVG, "text");
    this.centreText.setAttribute("class", "centre-text");
    this.centreText.setAttribute("aria-hidden", "true");
    svg.append(this.gArcs, this.centre, this.centreText, this.gLabels);

    svg.addEventListener("click", (e) => this.click(e));
    svg.addEventListener("keydown", (e) => this.key(e));
    // the focus ring shows while the keyboard is in use (Tab included), not after clicks
    document.addEventListener("keydown", () => svg.classList.add("kbd"), true);
    document.addEventListener("pointerdown", () => svg.classList.remove("kbd"), true);
    svg.addEventListener("focus", () => {
      if (this.cursor === null) this.cursor = this.focus;
      this.paintCursor();
    });
    new ResizeObserver((entries) => {
      const box = entries[entries.length - 1].contentRect;
      if (this.size && box.width === this.size.width && box.height === this.size.height) return;
      this.size = { width: box.width, height: box.height };
      this.redraw();
    }).observe(svg);
    // a tooltip: one element for every arc
    this.tip = document.createElement("div");
    this.tip.className = "tip";
    this.tip.setAttribute("aria-hidden", "true");
    this.tip.hidden = true;
    svg.parentElement.append(this.tip);
    svg.addEventListener("pointermove", (e) => this.hover(e));
    svg.addEventListener("pointerleave", () => {
      this.tip.hidden = true;
    });
  }

  /** Sizes for drawing; the SVG's box is read once per resize (reading it after DOM changes
   * forces a layout). */
  geometry() {
    if (!this.size) {
      const rect = this.svg.getBoundingClientRect();
      this.size = { width: rect.width, height: rect.height };
    }
    const w = Math.max(this.size.width, 10);
    const h = Math.max(this.size.height, 10);
    const radius = Math.min(w, h) / 2 - 4;
    const r0 = radius * 0.2;
    return { cx: w / 2, cy: h / 2, radius, r0, ring: (radius - r0) / RINGS, w, h };
  }

  /** Radius at depth-offset s (0 = centre of the disc, 1 = edge of the centre disc). */
  radiusAt(s, g) {
    if (s <= 0) return 0;
    if (s <= 1) return g.r0 * s;
    return Math.min(g.r0 + (s - 1) * g.ring, g.radius);
  }

  colour(node) {
    if (this.colourBy === "layer") {
      const l = Math.min(node.layer || 0, 8);
      return `hsl(${210 - l * 22} 55% ${72 - l * 4}%)`;
    }
    const light = 48 + Math.min(node.depth, 6) * 6;
    if (this.colourBy === "document") {
      if (node.document === null || node.document === undefined) return `hsl(220 10% ${light + 8}%)`;
      return `hsl(${hashHue(String(node.document))} 60% ${light}%)`;
    }
    // branch: the hue of the node's place around the whole tree, so a branch keeps its colour
    // when zoomed into, and its sub-branches differ a little
    if (node.depth === 0) return "hsl(220 10% 80%)";
    const hue = ((node.x0 + node.x1) * 180 + 200) % 360;
    return `hsl(${hue.toFixed(1)} 52% ${light}%)`;
  }

  /** Nodes under `top` down to `depthLimit` (absolute depth), wide enough in some view. */
  collect(top, depthLimit, views) {
    const out = [];
    const stack = [this.model.get(top)];
    while (stack.length) {
      const node = stack.pop();
      if (!node) continue;
      let include = false;
      let descend = node.id === top;
      for (const v of views) {
        const inside = Math.min(node.x1, v.x1) - Math.max(node.x0, v.x0);
        if (inside <= 0 || node.depth > v.depth + RINGS) continue;
        if (node.depth <= v.depth) {
          descend = true; // on the way down to the view's centre
        } else if (this.hits.has(node.id) || (inside / (v.x1 - v.x0)) * TAU >= MIN_ANGLE) {
          include = descend = true;
        } else if (this.onPath.has(node.id)) {
          descend = true; // a narrow arc above a search hit
        }
      }
      if (include && node.id !== top) out.push(node);
      if (!descend || node.depth >= depthLimit || !node.children) continue;
      for (const c of node.children) stack.push(this.model.get(c));
    }
    return out;
  }

  viewOf(id) {
    const node = this.model.get(id);
    return { x0: node.x0, x1: node.x1, depth: node.depth };
  }

  /** Make exactly `nodes` have elements (kept in tree order: parents first). */
  sync(nodes) {
    const keep = new Set(nodes.map((n) => n.id));
    for (const [id, el] of this.elements) {
      if (!keep.has(id)) {
        el.remove();
        this.elements.delete(id);
      }
    }
    for (const node of nodes) {
      let el = this.elements.get(node.id);
      if (!el) {
        el = document.createElementNS(SVG, "path");
        el.id = `arc-${node.id}`;
        el.dataset.id = String(node.id);
        el.setAttribute("role", "treeitem");
        // an attribute, not a <title> child: a child element per arc made each relayout
        // several times slower (measured in benchmarks/bench_web.py's tour)
        el.setAttribute("aria-label", describe(node));
        el.setAttribute("aria-level", String(node.depth + 1));
        this.gArcs.append(el);
        this.elements.set(node.id, el);
      }
      const fill = this.colour(node);
      if (el.dataset.fill !== fill) {
        el.style.fill = fill;
        el.dataset.fill = fill;
      }
      this.classify(el, node.id);
    }
  }

  classify(el, id) {
    el.classList.toggle("on-path", this.onPath.has(id));
    el.classList.toggle("hit", this.hits.has(id));
    el.classList.toggle("selected", this.selected === id);
    el.classList.toggle("cursor", this.cursor === id);
    el.setAttribute("aria-selected", this.selected === id ? "true" : "false");
  }

  /** Place every element for the view (x0, x1, depth); returns the drawn count. */
  /** [a0, a1, r0, r1] of a node's arc in a view, or null when it is not drawn there. */
  arcGeom(node, view, g) {
    const span = view.x1 - view.x0;
    const s = node.depth - view.depth;
    if (s <= 0 || s > RINGS) return null;
    let a0 = Math.max(0, Math.min(1, (node.x0 - view.x0) / span)) * TAU;
    let a1 = Math.max(0, Math.min(1, (node.x1 - view.x0) / span)) * TAU;
    if (this.hits.has(node.id) && a1 - a0 < HIT_ANGLE && a1 > 0 && a0 < TAU) {
      // a hit leaf is drawn at least HIT_ANGLE wide, so that it can be seen and clicked
      const mid = (a0 + a1) / 2;
      a0 = Math.max(0, mid - HIT_ANGLE / 2);
      a1 = Math.min(TAU, mid + HIT_ANGLE / 2);
    }
    const r0 = this.radiusAt(s, g);
    const r1 = this.radiusAt(s + 1, g);
    if (a1 - a0 < 1e-4 || r1 - r0 < 0.5) return null;
    return [a0, a1, r0, r1];
  }

  /** Place every SVG element for the view (x0, x1, depth). */
  place(view, g) {
    for (const [id, el] of this.elements) {
      const arc = this.arcGeom(this.model.get(id), view, g);
      if (arc === null) {
        el.setAttribute("d", "");
        el.setAttribute("visibility", "hidden");
      } else {
        el.setAttribute("d", arcPath(g.cx, g.cy, arc[0], arc[1], arc[2], arc[3]));
        el.removeAttribute("visibility");
      }
    }
  }

  /** One animation frame on the canvas: `items` are [node, fill, alpha] triples. */
  paint(ctx, items, view, g) {
    ctx.clearRect(0, 0, g.w, g.h);
    ctx.lineWidth = 0.6;
    ctx.strokeStyle = "#fbfbfa";
    for (const [node, fill, alpha] of items) {
      const arc = this.arcGeom(node, view, g);
      if (arc === null) continue;
      const [a0, a1, r0, r1] = arc;
      ctx.beginPath();
      ctx.arc(g.cx, g.cy, r1, a0 - Math.PI / 2, a1 - Math.PI / 2);
      ctx.arc(g.cx, g.cy, r0, a1 - Math.PI / 2, a0 - Math.PI / 2, true);
      ctx.closePath();
      ctx.globalAlpha = alpha;
      ctx.fillStyle = fill;
      ctx.fill();
      ctx.stroke();
    }
    ctx.globalAlpha = 1;
    ctx.beginPath();
    ctx.arc(g.cx, g.cy, Math.max(0, g.r0 - 1), 0, TAU);
    ctx.fillStyle = "#fff";
    ctx.fill();
  }

  drawCentre(g) {
    const node = this.model.get(this.focus);
    this.centre.setAttribute("cx", g.cx);
    this.centre.setAttribute("cy", g.cy);
    this.centre.setAttribute("r", Math.max(0, g.r0 - 1));
    this.centre.classList.toggle("cursor", this.cursor === this.focus);
    this.centre.classList.toggle("selected", this.selected === this.focus);
    this.centre.classList.toggle("on-path", this.onPath.has(this.focus));
    const label = node ? node.label || `node ${node.id}` : "";
    this.centre.setAttribute("aria-label", node ? `${label}, in focus; Escape zooms out` : "");
    this.centre.dataset.id = node ? String(node.id) : "";
    this.centreText.textContent = "";
    if (!node) return;
    const chars = Math.max(6, Math.floor((g.r0 * 1.7) / 7));
    const lines = [label.length > chars ? `${label.slice(0, chars - 1)}…` : label, `${node.leaves.toLocaleString()} leaves`];
    lines.forEach((line, i) => {
      const t = document.createElementNS(SVG, "tspan");
      t.setAttribute("x", g.cx);
      t.setAttribute("y", g.cy + (i - 0.3) * 15);
      t.textContent = line;
      this.centreText.append(t);
    });
  }

  drawLabels(g) {
    this.gLabels.textContent = "";
    const span = this.view.x1 - this.view.x0;
    const frag = document.createDocumentFragment();
    const small = g.radius < 240; // a phone: smaller type, so the thin rings get labels too
    const charWidth = small ? 5.3 : 6.2;
    this.gLabels.classList.toggle("small", small);
    for (const id of this.elements.keys()) {
      const node = this.model.get(id);
      const s = node.depth - this.view.depth;
      if (s < 1 || s > RINGS) continue;
      const a0 = Math.max(0, (node.x0 - this.view.x0) / span) * TAU;
      const a1 = Math.min(1, (node.x1 - this.view.x0) / span) * TAU;
      const mid = (a0 + a1) / 2;
      const rIn = this.radiusAt(s, g);
      const rOut = this.radiusAt(s + 1, g);
      const rMid = (rIn + rOut) / 2;
      const thick = rOut - rIn;
      if (thick < 11) continue;
      // along the radius (fits the ring's thickness) or across it (fits the arc's chord):
      // whichever shows more of the label
      const chord = 2 * rMid * Math.sin(Math.min(a1 - a0, Math.PI) / 2);
      const width = (a1 - a0) * rMid; // the arc's length at mid-ring
      const radial = width >= (small ? 10 : 12) ? Math.floor((thick - 6) / charWidth) : 0;
      const across = width >= 24 ? Math.floor((chord - 8) / charWidth) : 0;
      const tangent = across > radial;
      const chars = Math.max(radial, across);
      let text = node.label || "";
      if (!text || chars < 5) continue; // a label cut to a few letters says nothing
      if (text.length > chars) {
        // cut at a phrase or word boundary where one is near, else mid-word
        const cut = text.slice(0, chars - 1);
        const stop = Math.max(cut.lastIndexOf(", "), cut.lastIndexOf(" "));
        text = `${stop >= chars / 2 ? cut.slice(0, stop).replace(/,$/, "") : cut}…`;
      }
      const x = g.cx + rMid * Math.sin(mid);
      const y = g.cy - rMid * Math.cos(mid);
      let deg = (mid * 180) / Math.PI - (tangent ? 0 : 90);
      if (tangent ? mid > Math.PI / 2 && mid < (3 * Math.PI) / 2 : mid > Math.PI) deg += 180;
      const t = document.createElementNS(SVG, "text");
      t.setAttribute("transform", `translate(${x.toFixed(1)},${y.toFixed(1)}) rotate(${deg.toFixed(1)})`);
      t.dataset.id = String(id);
      t.textContent = text;
      frag.append(t);
    }
    this.gLabels.append(frag);
  }

  /** Draw the current focus without animation. */
  redraw() {
    if (this.focus === null || !this.model.get(this.focus)) return;
    const g = this.geometry();
    this.svg.setAttribute("viewBox", `0 0 ${g.w} ${g.h}`);
    this.view = this.viewOf(this.focus);
    const nodes = this.collect(this.focus, this.view.depth + RINGS, [this.view]);
    this.sync(nodes);
    this.place(this.view, g);
    this.drawCentre(g);
    this.drawLabels(g);
    this.paintCursor();
  }

  /** Zoom so that `id` is the centre; loads missing levels first. Resolves when drawn. */
  async zoomTo(id, animate = true) {
    let node = this.model.get(id);
    if (!node) return;
    if (!node.has_children && node.parent !== null) id = node.parent; // a leaf: show it in its ring
    const missing = this.model.missingBelow(id, RINGS);
    if (missing.length) await this.onNeed(id, RINGS + 1, missing);
    node = this.model.get(id);
    const from = this.focus;
    this.focus = id;
    this.onFocusChange(id);
    const related = from !== null && (this.model.isAncestor(from, id) || this.model.isAncestor(id, from));
    if (!animate || !related || from === id || matchMedia("(prefers-reduced-motion: reduce)").matches) {
      this.redraw();
      return;
    }
    await this.animate(from, id);
  }

  /**
   * The zoom transition. With the canvas renderer (the default) the frames are painted on a
   * canvas laid over the SVG, and the SVG is rebuilt once at the end; the "svg" renderer moves
   * every SVG arc on every frame (kept for benchmarks/bench_web.py's side-by-side run).
   */
  animate(from, to) {
    if (this.animation) cancelAnimationFrame(this.animation.raf);
    const g = this.geometry();
    const start = this.view;
    const end = this.viewOf(to);
    const top = this.model.get(from).depth <= this.model.get(to).depth ? from : to;
    const limit = Math.max(start.depth, end.depth) + RINGS;
    const nodes = this.collect(top, limit, [start, end]);
    this.animatedArcs = nodes.length;
    let ctx = null;
    let items = null;
    if (this.renderer === "canvas") {
      ctx = this.canvasFor(g);
      const dim = this.onPath.size > 0;
      items = nodes.map((n) => [
        n,
        this.hits.has(n.id) ? "#e8590c" : this.colour(n),
        dim && !this.onPath.has(n.id) ? 0.28 : 1,
      ]);
      this.paint(ctx, items, start, g);
      this.canvas.hidden = false;
      this.gArcs.setAttribute("visibility", "hidden");
    } else {
      this.sync(nodes);
    }
    this.gLabels.textContent = "";
    this.drawCentre(g);
    this.frameTimes = [];
    this.workTimes = [];
    return new Promise((resolve) => {
      const t0 = performance.now();
      let last = t0;
      const step = (now) => {
        this.frameTimes.push(now - last);
        last = now;
        const t = Math.min(1, (now - t0) / DURATION);
        const e = t < 0.5 ? 2 * t * t : 1 - (-2 * t + 2) ** 2 / 2;
        const view = {
          x0: start.x0 + (end.x0 - start.x0) * e,
          x1: start.x1 + (end.x1 - start.x1) * e,
          depth: start.depth + (end.depth - start.depth) * e,
        };
        const w0 = performance.now();
        this.view = view;
        if (ctx) this.paint(ctx, items, view, g);
        else this.place(view, g);
        if (t < 1) {
          this.workTimes.push(performance.now() - w0);
          this.animation = { raf: requestAnimationFrame(step) };
        } else {
          this.animation = null;
          this.frameTimes.shift(); // the first entry measures the wait before the first frame
          this.redraw(); // the final frame rebuilds the SVG arcs and their labels
          if (ctx) {
            this.gArcs.removeAttribute("visibility");
            this.canvas.hidden = true;
          }
          this.workTimes.push(performance.now() - w0);
          resolve();
        }
      };
      this.animation = { raf: requestAnimationFrame(step) };
    });
  }

  canvasFor(g) {
    if (!this.canvas) {
      this.canvas = document.createElement("canvas");
      this.canvas.className = "zoom-canvas";
      this.canvas.setAttribute("aria-hidden", "true");
      this.svg.after(this.canvas);
    }
    const dpr = window.devicePixelRatio || 1;
    const width = Math.round(g.w * dpr);
    const height = Math.round(g.h * dpr);
    if (this.canvas.width !== width || this.canvas.height !== height) {
      this.canvas.width = width;
      this.canvas.height = height;
      this.canvas.style.width = `${g.w}px`;
      this.canvas.style.height = `${g.h}px`;
    }
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return ctx;
  }

  /** The middle of a drawn arc, in the SVG's own pixels (null when it is not drawn). */
  pointOf(id) {
    const node = this.model.get(id);
    if (!node || !this.elements.has(id)) return null;
    const g = this.geometry();
    const span = this.view.x1 - this.view.x0;
    const a0 = Math.max(0, (node.x0 - this.view.x0) / span) * TAU;
    const a1 = Math.min(1, (node.x1 - this.view.x0) / span) * TAU;
    const s = node.depth - this.view.depth;
    const r = (this.radiusAt(s, g) + this.radiusAt(s + 1, g)) / 2;
    const mid = (a0 + a1) / 2;
    return { x: g.cx + r * Math.sin(mid), y: g.cy - r * Math.cos(mid) };
  }

  setHighlight(onPath, hits) {
    this.onPath = new Set(onPath);
    this.hits = new Set(hits);
    this.redraw();
    this.svg.classList.toggle("highlighting", this.onPath.size > 0);
  }

  setSelected(id) {
    this.selected = id;
    this.restyle();
  }

  setColourBy(mode) {
    this.colourBy = mode;
    for (const [id, el] of this.elements) el.style.fill = this.colour(this.model.get(id));
  }

  restyle() {
    for (const [id, el] of this.elements) this.classify(el, id);
    const g = this.geometry();
    this.drawCentre(g);
    this.paintCursor();
  }

  paintCursor() {
    for (const el of this.svg.querySelectorAll(".cursor")) el.classList.remove("cursor");
    if (this.cursor === null) return;
    const el = this.cursor === this.focus ? this.centre : this.elements.get(this.cursor);
    if (el) {
      el.classList.add("cursor");
      this.svg.setAttribute("aria-activedescendant", el.id);
    }
  }

  hover(event) {
    const target = event.target.closest("[data-id]");
    const node = target && target.dataset.id !== "" ? this.model.get(Number(target.dataset.id)) : null;
    if (!node) {
      this.tip.hidden = true;
      return;
    }
    const box = this.svg.parentElement.getBoundingClientRect();
    this.tip.textContent = describe(node);
    this.tip.hidden = false;
    const x = Math.min(event.clientX - box.left + 12, box.width - this.tip.offsetWidth - 4);
    this.tip.style.transform = `translate(${Math.max(0, x)}px, ${event.clientY - box.top + 14}px)`;
  }

  click(event) {
    const target = event.target.closest("[data-id]");
    if (!target || target.dataset.id === "") return;
    const id = Number(target.dataset.id);
    this.cursor = id;
    if (target === this.centre) {
      const node = this.model.get(id);
      if (node.parent !== null) {
        this.cursor = node.parent;
        this.zoomTo(node.parent);
      }
      this.onOpen(this.cursor);
      return;
    }
    this.onOpen(id);
    if (this.model.get(id).has_children) this.zoomTo(id);
  }

  async key(event) {
    const keys = ["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "Enter", " ", "Escape", "Home"];
    if (!keys.includes(event.key)) return;
    event.preventDefault();
    const model = this.model;
    if (this.cursor === null || !model.get(this.cursor)) this.cursor = this.focus;
    const node = model.get(this.cursor);
    let next = this.cursor;
    if (event.key === "ArrowLeft" || event.key === "ArrowRight") {
      if (node.parent === null) return;
      const siblings = model.get(node.parent).children;
      const i = siblings.indexOf(node.id);
      const j = (i + (event.key === "ArrowRight" ? 1 : -1) + siblings.length) % siblings.length;
      next = siblings[j];
    } else if (event.key === "ArrowDown") {
      if (!node.has_children) return;
      if (!model.childrenLoaded(node.id)) await this.onNeed(node.id, 2, [node.id]);
      const kids = model.children(node.id);
      if (!kids.length) return;
      next = kids.reduce((a, b) => (b.leaves > a.leaves ? b : a)).id; // the widest child
    } else if (event.key === "ArrowUp") {
      if (node.parent === null) return;
      next = node.parent;
    } else if (event.key === "Home") {
      next = model.rootId;
      this.cursor = next;
      await this.zoomTo(next);
      this.speak(next);
      return;
    } else if (event.key === "Escape") {
      const focus = model.get(this.focus);
      if (focus.parent === null) return;
      this.cursor = this.focus;
      await this.zoomTo(focus.parent);
      this.paintCursor();
      this.speak(this.cursor);
      return;
    } else {
      this.onOpen(this.cursor);
      if (node.has_children && this.cursor !== this.focus) await this.zoomTo(this.cursor);
      return;
    }
    this.cursor = next;
    const target = model.get(next);
    const s = target.depth - model.get(this.focus).depth;
    if (s < 0) {
      await this.zoomTo(next);
    } else if (s > RINGS || (s > 0 && !this.elements.has(next))) {
      await this.zoomTo(target.parent);
    }
    this.paintCursor();
    this.speak(next);
  }

  speak(id) {
    const node = this.model.get(id);
    if (!node) return;
    const kind = node.has_children ? `${node.leaves} leaves` : "leaf";
    this.announce(`${node.label || `node ${id}`}, layer ${node.layer}, ${kind}`);
  }
}
