// The psirag page: tree explorer + Node / Ask / Search / Documents views, one module, no build.
import * as api from "./api.js";
import { FOREST, RINGS, Sunburst, TreeModel } from "./sunburst.js";

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function fmtScore(x) {
  return typeof x === "number" ? x.toFixed(4) : "";
}

function showError(box, err) {
  if (!err) {
    box.hidden = true;
    box.textContent = "";
    return;
  }
  box.hidden = false;
  box.textContent = "";
  const type = err.type || "Error";
  box.append(el("strong", { text: `${type}: ` }), err.message || String(err));
  if (err.status === 501) {
    box.append(el("p", { class: "muted", text: "This server cannot do that yet (501 Not Implemented)." }));
  }
}

// ------------------------------------------------------------------ state
const state = {
  model: new TreeModel(),
  chart: null,
  index: null,
  ready: null, // Promise of the first tree render
  loading: new Map(), // "node:depth" -> Promise
  generation: null, // the index generation the model was read from (GET /generation)
  counts: null, // {documents, chunks} of that generation
  reloading: null, // Promise of a reload onto a newer generation
  lastSearch: null, // {query, k, bm25} of the search on screen
  pollMs: Number(new URLSearchParams(location.search).get("poll")) || 4000,
};
window.psirag = state; // for debugging and the browser tests' benchmarks

// ------------------------------------------------------------------ tabs
const TABS = ["node", "ask", "search", "docs"];
function selectTab(name, focus = false) {
  for (const t of TABS) {
    const tab = $(`#tab-${t}`);
    const on = t === name;
    tab.setAttribute("aria-selected", on ? "true" : "false");
    tab.tabIndex = on ? 0 : -1;
    $(`#view-${t}`).hidden = !on;
    if (on && focus) tab.focus();
  }
  if (name === "docs") loadDocuments();
}
for (const t of TABS) {
  const tab = $(`#tab-${t}`);
  tab.addEventListener("click", () => selectTab(t));
  tab.addEventListener("keydown", (e) => {
    const i = TABS.indexOf(t);
    if (e.key === "ArrowRight") selectTab(TABS[(i + 1) % TABS.length], true);
    else if (e.key === "ArrowLeft") selectTab(TABS[(i + TABS.length - 1) % TABS.length], true);
    else return;
    e.preventDefault();
  });
}

// ------------------------------------------------------------------ auth
function askForKey(reason) {
  const dialog = $("#key-dialog");
  const error = $("#key-error");
  error.hidden = !reason;
  error.textContent = reason || "";
  $("#key-input").value = "";
  return new Promise((resolve) => {
    const done = (e) => {
      e.preventDefault();
      const key = $("#key-input").value.trim();
      if (!key) return;
      api.saveKey(key, $("#key-remember").checked);
      $("#key-form").removeEventListener("submit", done);
      dialog.close();
      $("#key-button").hidden = false;
      resolve(key);
    };
    $("#key-form").addEventListener("submit", done);
    if (!dialog.open) dialog.showModal();
    $("#key-input").focus();
  });
}
api.setKeyPrompt(askForKey);
$("#key-button").addEventListener("click", () => {
  api.forgetKey();
  askForKey("").then(() => boot());
});

// ------------------------------------------------------------------ tree loading
async function loadTree(node, depth) {
  const key = `${node}:${depth}`;
  if (!state.loading.has(key)) {
    const query = node === null || node === FOREST ? `depth=${depth}` : `node=${node}&depth=${depth}`;
    const model = state.model;
    const p = api
      .getJSON(`tree?${query}`)
      .then((resp) => {
        // never merge nodes of another generation into this model: reload instead
        if (noticeGeneration(resp.generation)) return;
        if (model === state.model) model.merge(resp);
      })
      .finally(() => {
        if (state.loading.get(key) === p) state.loading.delete(key);
      });
    state.loading.set(key, p);
  }
  return state.loading.get(key);
}

/** Load the children of every node on `path` that lacks them (one request per node, parallel). */
async function loadPath(path) {
  const need = path.slice(0, -1).filter((id) => !state.model.childrenLoaded(id));
  await Promise.all(need.map((id) => loadTree(id, 1)));
}

async function revealNode(id, path) {
  if (!state.model.get(id) || path) {
    if (!path) path = (await api.getJSON(`nodes/${id}`)).path;
    await loadPath(path);
  }
  state.chart.cursor = id;
  await state.chart.zoomTo(id);
  state.chart.paintCursor();
  openNode(id);
}

// ------------------------------------------------------------------ breadcrumb + node view
function renderBreadcrumb(focus) {
  const nav = $("#breadcrumb");
  nav.textContent = "";
  const path = state.model.path(focus);
  const list = el("ol");
  path.forEach((id, i) => {
    const node = state.model.get(id);
    const name = i === 0 ? "root" : node.label || `node ${id}`;
    const item = el("li");
    if (i === path.length - 1) {
      item.append(el("span", { "aria-current": "location", text: name, title: name }));
    } else {
      item.append(
        el("button", { type: "button", class: "linkish", title: name, onclick: () => state.chart.zoomTo(id) }, name),
      );
    }
    list.append(item);
  });
  nav.append(list);
}

function passageItem(p, { index = null, reveal = true, id = null } = {}) {
  const src = p.source || {};
  const span = Array.isArray(src.span) ? `${src.span[0]}–${src.span[1]}` : "";
  const meta = el(
    "p",
    { class: "meta" },
    index !== null ? el("span", { class: "num", text: `[${index}]` }) : null,
    typeof p.score === "number" ? el("span", { class: "score", title: "score", text: fmtScore(p.score) }) : null,
    el("span", { class: "doc", title: "document", text: src.title || src.document || "?" }),
    el("span", { text: `chunk ${src.chunk ?? "?"}` }),
    span ? el("span", { title: "character span in the document", text: `chars ${span}` }) : null,
    Number.isInteger(src.page) ? el("span", { class: "page", text: `page ${src.page}` }) : null,
  );
  const text = el("p", { class: "text", text: p.text || "" });
  const item = el("li", { class: "passage", id, "data-passage": p.id }, meta, text);
  if (reveal) {
    item.append(
      el(
        "button",
        { type: "button", class: "linkish reveal", onclick: () => revealPassage(p) },
        "show in tree",
      ),
    );
  }
  return item;
}

const leafOfPassage = new Map(); // passage id -> {node, path} from /search hits

/** The leaf of a passage, {node, path}: from a search hit, from the node an answer's passage
 *  names, else found by a search for the passage's own text; null when not in the tree. */
async function leafOf(p) {
  let hit = leafOfPassage.get(p.id);
  if (!hit && Number.isInteger(p.node) && p.node >= 0) {
    // an answer's passage names its leaf: the node's path places it in the tree
    const node = await api.getJSON(`nodes/${p.node}`);
    if (node.path) hit = { node: p.node, path: node.path, passage: p.id };
  }
  if (!hit) {
    // the passage came from elsewhere: find its leaf with a search for its own text
    const res = await api.postJSON("search", { query: p.text.slice(0, 500), k: 10 });
    rememberHits(res.hits || []);
    hit = leafOfPassage.get(p.id);
  }
  if (!hit) $("#tree-status").textContent = "That passage's leaf was not found in the tree.";
  return hit || null;
}

async function revealPassage(p) {
  const hit = await leafOf(p);
  if (!hit) return;
  state.chart.setHighlight(hit.path, [hit.node]);
  showHighlightNote(`Showing one passage's leaf.`);
  await revealNode(hit.node, hit.path);
}

/** A citation marker's second link: its passage's leaf lit up in the tree, zoomed to the leaf's
 *  parent, while the answer stays in view. */
async function highlightCited(p, n) {
  const hit = await leafOf(p);
  if (!hit) return;
  await loadPath(hit.path);
  state.chart.setHighlight(hit.path, [hit.node]);
  const parent = hit.path.length > 1 ? hit.path[hit.path.length - 2] : state.model.rootId;
  await state.chart.zoomTo(state.model.get(parent) ? parent : state.model.rootId);
  showHighlightNote(`Showing the leaf of cited passage [${n}].`);
}

/** Highlight the hits and their paths, zoomed to the deepest node above all of them. */
async function showHits(hits) {
  const paths = hits.map((h) => h.path || []).filter((p) => p.length);
  const onPath = new Set(paths.flat());
  await Promise.all(paths.map((p) => loadPath(p)));
  let common = paths.length ? paths[0].slice() : [];
  for (const p of paths) {
    let i = 0;
    while (i < common.length && i < p.length && common[i] === p[i]) i++;
    common = common.slice(0, i);
  }
  state.chart.setHighlight(onPath, hits.map((h) => h.node));
  const top = common.length ? common[common.length - 1] : state.model.rootId;
  if (state.model.get(top) && state.model.get(top).has_children) await state.chart.zoomTo(top);
  else await state.chart.zoomTo(state.model.rootId);
  const where = common.length > 1 ? " under the node in focus" : "";
  showHighlightNote(`${hits.length} hits highlighted${where}, with their paths from the root.`);
}

function rememberHits(hits) {
  for (const h of hits) leafOfPassage.set(h.passage, h);
}

let nodeRequest = 0;
async function openNode(id) {
  state.chart.setSelected(id);
  selectTab("node");
  const box = $("#node-detail");
  const ticket = ++nodeRequest;
  if (id === FOREST) {
    box.textContent = "";
    box.append(el("h2", { text: "All trees" }));
    box.append(el("p", { class: "muted", text: `This index is a forest of ${state.model.children(FOREST).length} trees.` }));
    return;
  }
  box.setAttribute("aria-busy", "true");
  let data;
  try {
    data = await api.getJSON(`nodes/${id}`);
  } catch (err) {
    if (ticket !== nodeRequest) return;
    box.textContent = "";
    const e = el("div", { class: "error", role: "alert" });
    showError(e, err);
    box.append(e);
    return;
  } finally {
    box.removeAttribute("aria-busy");
  }
  if (ticket !== nodeRequest) return;
  if (noticeGeneration(data.generation)) return;
  box.textContent = "";
  const known = state.model.get(id);
  const isLeaf = data.layer === 0;
  const crumbs = el("ol", { class: "crumbs", "aria-label": "Path from the root" });
  (data.path || [id]).forEach((pid, i, all) => {
    const n = state.model.get(pid);
    const name = i === 0 ? "root" : n ? n.label || `node ${pid}` : `node ${pid}`;
    crumbs.append(
      el(
        "li",
        {},
        i === all.length - 1
          ? el("span", { "aria-current": "page", text: name })
          : el("button", { type: "button", class: "linkish", onclick: () => revealNode(pid, all.slice(0, i + 1)) }, name),
      ),
    );
  });
  box.append(el("nav", { "aria-label": "Node path" }, crumbs));
  const title = known && known.label ? known.label : isLeaf ? "Leaf" : `Node ${id}`;
  box.append(el("h2", { id: "node-title", text: title }));
  const facts = [`node ${data.id}`, `layer ${data.layer}`, `${(data.leaf_count ?? 1).toLocaleString()} leaves`];
  if (known && known.document) facts.push(`document ${known.document}`);
  box.append(el("p", { class: "muted", text: facts.join(" · ") }));
  box.append(el("h3", { text: isLeaf ? "Text" : "Abstract" }));
  box.append(el("p", { id: "node-abstract", class: "abstract", text: data.abstract || "(empty)" }));
  if (isLeaf && data.source) {
    const where = passageItem({ ...data, text: "", score: undefined }, { reveal: false });
    box.append(el("ul", { class: "passages", "aria-label": "Provenance" }, where));
  }
  if (data.children && data.children.length) {
    box.append(el("h3", { text: `Children (${data.children.length})` }));
    const list = el("ul", { class: "children" });
    for (const c of data.children) {
      list.append(
        el(
          "li",
          {},
          el(
            "button",
            { type: "button", class: "linkish", onclick: () => revealNode(c.id, [...(data.path || [id]), c.id]) },
            c.label || `node ${c.id}`,
          ),
          el("span", { class: "muted", text: `${c.leaves ?? 1} leaves · layer ${c.layer}` }),
        ),
      );
    }
    box.append(list);
  }
  if (data.sample && data.sample.length && !isLeaf) {
    box.append(el("h3", { text: "Sample of its leaves" }));
    const list = el("ol", { class: "passages" });
    for (const p of data.sample) list.append(passageItem(p, { reveal: false }));
    box.append(list);
  }
}

// ------------------------------------------------------------------ highlight
function showHighlightNote(text) {
  $("#highlight-note").hidden = false;
  $("#highlight-text").textContent = text;
}
function clearHighlight() {
  if (state.chart) state.chart.setHighlight([], []);
  $("#highlight-note").hidden = true;
}
$("#clear-highlight").addEventListener("click", clearHighlight);
$("#colour-by").addEventListener("change", (e) => state.chart.setColourBy(e.target.value));

// ------------------------------------------------------------------ search
$("#search-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const query = $("#search-query").value.trim();
  if (!query) return;
  const button = $("#search-submit");
  button.disabled = true;
  showError($("#search-error"), null);
  $("#search-summary").textContent = "searching…";
  const list = $("#search-results");
  list.textContent = "";
  try {
    const k = Number($("#search-k").value) || 10;
    state.lastSearch = { query, k, bm25: $("#search-bm25").checked };
    const res = await api.postJSON("search", state.lastSearch);
    if (noticeGeneration(res.generation)) await state.reloading;
    showSearchResults(res);
    await showHits(res.hits || []);
  } catch (err) {
    $("#search-summary").textContent = "";
    showError($("#search-error"), err);
  } finally {
    button.disabled = false;
  }
});

function showSearchResults(res) {
  const list = $("#search-results");
  list.textContent = "";
  rememberHits(res.hits || []);
  res.passages.forEach((p, i) => list.append(passageItem(p, { index: i + 1 })));
  $("#search-results").dataset.generation = String(res.generation ?? "");
  $("#search-summary").textContent = `${res.passages.length} passages for “${res.query}”.`;
}

// ------------------------------------------------------------------ ask
let askAbort = null;
// The retrieval budget box: a count (0-10) or "auto"; anything else is refused before sending.
function askBudget() {
  const raw = $("#ask-retrievals").value.trim().toLowerCase();
  if (raw === "auto") return "auto";
  if (/^\d+$/.test(raw) && Number(raw) <= 10) return Number(raw);
  return null;
}

$("#ask-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const query = $("#ask-query").value.trim();
  if (!query) return;
  const budget = askBudget();
  if (budget === null) {
    showError($("#ask-error"), { type: "Retrievals", message: "give a number from 0 to 10, or auto" });
    return;
  }
  if (askAbort) askAbort.abort();
  askAbort = new AbortController();
  const button = $("#ask-submit");
  button.disabled = true;
  const steps = $("#ask-steps");
  const answer = $("#ask-answer");
  steps.textContent = "";
  answer.hidden = true;
  answer.textContent = "";
  showError($("#ask-error"), null);
  const waiting = el("li", { class: "step waiting", text: "retrieving…" });
  steps.append(waiting);
  let count = 0;
  let liveCall = null;
  const live = el("span", { id: "ask-live", class: "live" });
  const body = {
    query,
    max_retrievals: budget,
    k: Number($("#ask-k").value) || 5,
  };
  try {
    await api.postStream(
      "ask",
      body,
      (event, data) => {
        if (event === "token") {
          // the model's reply as it is written; a new call starts a new text
          if (data.call !== liveCall) {
            liveCall = data.call;
            waiting.textContent = "";
            waiting.append(el("span", { class: "muted", text: "The model is writing: " }), live);
            live.textContent = "";
          }
          live.textContent += data.text;
        } else if (event === "answer_token") {
          // the answer as the model writes it: a draft until the answer event replaces it
          if (!answer.querySelector("#ask-draft")) {
            answer.replaceChildren(
              el("h3", { text: "Answer (being written)" }),
              el("p", { id: "ask-draft", class: "answer-text draft", "aria-live": "polite" }),
            );
            answer.hidden = false;
          }
          $("#ask-draft").textContent += data.text;
          // below the steps (and the model's live text, which grows above it): keep it in view
          answer.scrollIntoView({ block: "nearest" });
        } else if (event === "answer_revised") {
          // the agent turned the draft down: the answer it accepts follows
          const draft = $("#ask-draft");
          if (draft) {
            draft.textContent = "";
            draft.dataset.revised = "true";
            answer.querySelector("h3").textContent = "Answer (revised after checking the documents)";
          }
        } else if (event === "step") {
          count += 1;
          steps.insertBefore(renderStep(data, count), waiting);
          waiting.textContent = "retrieving and reading…";
          liveCall = null;
        } else if (event === "answer") {
          if (!count) (data.steps || []).forEach((s, i) => steps.insertBefore(renderStep(s, i + 1), waiting));
          renderAnswer(data);
        } else if (event === "error") {
          const err = data.error || data;
          showError($("#ask-error"), { type: err.type || "Error", message: err.message || String(err) });
        }
      },
      askAbort.signal,
    );
  } catch (err) {
    if (err.name !== "AbortError") showError($("#ask-error"), err);
  } finally {
    waiting.remove();
    button.disabled = false;
  }
});

function renderStep(step, n) {
  const item = el("li", { class: "step" });
  const query = step.query || step.sub_question || "";
  item.append(el("h3", {}, `Step ${n}: `, el("span", { class: "sub-question", text: query })));
  const passages = step.passages || [];
  if (passages.length) {
    const details = el("details", { open: n === 1 });
    details.append(el("summary", { text: `${passages.length} passages retrieved` }));
    const list = el("ol", { class: "passages" });
    passages.forEach((p, i) => list.append(passageItem(p, { index: i + 1 })));
    details.append(list);
    item.append(details);
  }
  const thought = step.thought || step.reasoning || "";
  if (thought) item.append(el("p", { class: "thought" }, el("strong", { text: "Reasoning: " }), thought));
  if (step.action) {
    const names = { retrieve: "asks to retrieve again", answer: "answers", forced_answer: "answers (asked to)", not_mentioned: "gives up: not mentioned" };
    item.append(el("p", { class: "action muted", text: `The model ${names[step.action] || step.action}.` }));
  }
  return item;
}

/** An answer's passage as passageItem takes it: a passage record ({id, text, score, source,
 *  node}), from the server's citation/evidence entries or an older server's bare fields. */
function passageOf(c) {
  if (c.source) return { ...c, id: c.id || c.passage };
  const source = { document: c.document, title: c.title, chunk: c.chunk, span: c.span, page: c.page };
  return { id: c.passage || c.id, text: c.text || "", score: c.score, source, node: c.node };
}

function renderAnswer(result) {
  const box = $("#ask-answer");
  box.textContent = "";
  box.hidden = false;
  // citations: the passages the model cited and psirag verified; evidence: the top-k retrieved
  const cites = (result.citations || []).filter((c) => c && typeof c === "object").map(passageOf);
  const evidence = (result.evidence || []).map(passageOf);
  box.append(el("h3", { text: "Answer" }));
  const text = el("p", { id: "answer-text", class: "answer-text" }, String(result.answer ?? ""));
  cites.forEach((p, i) => {
    // the marker jumps to its passage and lights up the passage's leaf in the tree
    const marker = el("a", { href: `#cite-${i + 1}`, class: "cite", title: "the cited passage, and its leaf in the tree" }, `[${i + 1}]`);
    marker.addEventListener("click", () => highlightCited(p, i + 1).catch((err) => showError($("#ask-error"), err)));
    text.append(" ", marker);
  });
  box.append(text);
  if (Number.isInteger(result.max_retrievals)) {
    const n = result.max_retrievals;
    box.append(el("p", { id: "answer-budget", class: "muted", text: `Budget: ${n} retrieval${n === 1 ? "" : "s"} after the first.` }));
  }
  if (cites.length) {
    box.append(el("h3", { text: "Cited passages" }));
    const list = el("ol", { class: "passages citations" });
    cites.forEach((p, i) => list.append(passageItem(p, { index: i + 1, id: `cite-${i + 1}` })));
    box.append(list);
  } else {
    box.append(el("p", { id: "answer-uncited", class: "muted", text: "The model cited no passage for this answer." }));
  }
  if (evidence.length) {
    const details = el("details", { class: "evidence" });
    details.append(el("summary", { text: `Retrieved evidence (top ${evidence.length})` }));
    const list = el("ol", { class: "passages evidence-list" });
    evidence.forEach((p, i) => list.append(passageItem(p, { index: i + 1 })));
    details.append(list);
    box.append(details);
  }
  text.scrollIntoView({ block: "nearest" }); // the answer sits below the steps
}

// ------------------------------------------------------------------ documents
// The server pages, sorts and filters (GET /documents?offset&limit&sort&order&q&status); the
// page shows one page at a time, with each document's status (indexed, pending, failed).
const DOCS_PAGE = Number(new URLSearchParams(location.search).get("docs")) || 50; // ?docs=N
const docsView = { offset: 0, total: 0, timer: null, ticket: 0 };
const STATUS_TEXT = { indexed: "indexed", pending: "pending", failed: "failed" };

function docsQuery() {
  const params = new URLSearchParams({
    offset: String(docsView.offset),
    limit: String(DOCS_PAGE),
    sort: $("#docs-sort").value,
    order: $("#docs-order").value,
  });
  const q = $("#docs-filter").value.trim();
  if (q) params.set("q", q);
  const status = $("#docs-status").value;
  if (status) params.set("status", status);
  return `documents?${params}`;
}

async function loadDocuments() {
  showError($("#docs-error"), null);
  const ticket = ++docsView.ticket;
  try {
    const res = await api.getJSON(docsQuery());
    if (ticket !== docsView.ticket) return;
    renderDocuments(res);
    noticeGeneration(res.generation);
  } catch (err) {
    showError($("#docs-error"), err);
  }
}

function statusCell(d) {
  const cell = el("td", { class: `status ${d.status}`, "data-label": "Status" });
  let text = STATUS_TEXT[d.status] || d.status;
  if (d.status === "pending") text = d.action === "remove" ? "removing…" : "adding…";
  cell.append(el("span", { class: "badge", text }));
  if (d.status === "failed" && d.error) cell.append(el("span", { class: "reason", text: d.error }));
  return cell;
}

function actionCell(d) {
  const cell = el("td", { class: "actions" });
  if (d.status === "indexed") {
    cell.append(el("button", { type: "button", class: "danger", "aria-label": `Remove ${d.title || d.id}`, onclick: () => removeDocument(d) }, "Remove"));
  } else if (d.status === "failed" && d.retryable && d.job) {
    cell.append(el("button", { type: "button", "aria-label": `Retry ${d.title || d.id}`, onclick: () => retryJob(d.job, d.title || d.id) }, "Retry"));
  }
  return cell;
}

function renderDocuments(res) {
  const body = $("#docs-table tbody");
  body.textContent = "";
  docsView.total = res.total;
  for (const d of res.documents || []) {
    body.append(
      el(
        "tr",
        { "data-doc": d.id, "data-status": d.status },
        el("td", { class: "name", "data-label": "Document" }, el("span", { class: "doc", text: d.title || d.id }), d.title && d.title !== d.id ? el("span", { class: "muted id", title: "document id", text: ` · id ${d.id}` }) : null),
        el("td", { class: "num", "data-unit": d.chunks === 1 ? " chunk" : " chunks", text: String(d.chunks ?? "") }),
        statusCell(d),
        actionCell(d),
      ),
    );
  }
  const c = res.counts || {};
  const parts = [`${(c.indexed || 0).toLocaleString()} indexed`];
  if (c.pending) parts.push(`${c.pending.toLocaleString()} pending`);
  if (c.failed) parts.push(`${c.failed.toLocaleString()} failed`);
  $("#docs-summary").textContent = parts.join(" · ") + ".";
  const first = res.total ? res.offset + 1 : 0;
  const last = res.offset + (res.documents || []).length;
  $("#docs-range").textContent = `${first.toLocaleString()}–${last.toLocaleString()} of ${res.total.toLocaleString()}`;
  $("#docs-prev").disabled = res.offset <= 0;
  $("#docs-next").disabled = last >= res.total;
  const busy = (res.counts || {}).pending > 0;
  clearTimeout(docsView.timer);
  if (busy && !$("#view-docs").hidden) docsView.timer = setTimeout(loadDocuments, 1000);
}

function reloadDocsFromStart() {
  docsView.offset = 0;
  loadDocuments();
}
let filterTimer = null;
$("#docs-filter").addEventListener("input", () => {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(reloadDocsFromStart, 250);
});
for (const id of ["#docs-status", "#docs-sort", "#docs-order"]) $(id).addEventListener("change", reloadDocsFromStart);
$("#docs-prev").addEventListener("click", () => {
  docsView.offset = Math.max(0, docsView.offset - DOCS_PAGE);
  loadDocuments();
});
$("#docs-next").addEventListener("click", () => {
  if (docsView.offset + DOCS_PAGE < docsView.total) docsView.offset += DOCS_PAGE;
  loadDocuments();
});

/** All chosen files in one upload (one job); files the server could not read are listed. */
/** The file types uploads take: the picker's accept list (what `psirag add` reads). */
const UPLOAD_TYPES = $("#doc-file").accept.split(",").map((t) => t.trim().toLowerCase());

function showRejected(rejected) {
  if (!rejected.length) return;
  const box = $("#docs-rejected");
  box.hidden = false;
  box.textContent = "";
  box.append(el("strong", { text: `${rejected.length} file${rejected.length === 1 ? "" : "s"} not added:` }));
  const list = el("ul", { class: "rejected" });
  for (const r of rejected) list.append(el("li", {}, el("strong", { text: r.file }), `: ${r.error}`));
  box.append(list);
}

async function uploadFiles(chosen) {
  showError($("#docs-error"), null);
  showError($("#docs-rejected"), null);
  const suffix = (name) => (name.includes(".") ? name.slice(name.lastIndexOf(".")).toLowerCase() : "");
  const files = chosen.filter((f) => UPLOAD_TYPES.includes(suffix(f.name)));
  const refused = chosen
    .filter((f) => !files.includes(f))
    .map((f) => ({ file: f.name, error: `not a type psirag reads (${UPLOAD_TYPES.join(", ")})` }));
  showRejected(refused);
  if (!files.length) return;
  const form = new FormData();
  for (const file of files) form.append("file", file, file.name);
  const title = files.length === 1 ? `add ${files[0].name}` : `add ${files.length} files`;
  try {
    const res = await api.postForm("documents", form);
    watchJob(res.job, title);
    showRejected([...refused, ...(res.rejected || [])]);
    loadDocuments();
  } catch (err) {
    showError($("#docs-error"), err);
  }
}

async function removeDocument(doc) {
  if (!confirm(`Remove “${doc.title || doc.id}” from the index?`)) return;
  showError($("#docs-error"), null);
  try {
    const res = await api.del(`documents/${encodeURIComponent(doc.id)}`);
    watchJob(res.job, `remove ${doc.title || doc.id}`);
    loadDocuments();
  } catch (err) {
    showError($("#docs-error"), err);
  }
}

async function retryJob(jobId, title) {
  showError($("#docs-error"), null);
  try {
    const res = await api.postJSON(`jobs/${encodeURIComponent(jobId)}/retry`, {});
    watchJob(res.job, `retry ${title}`);
    loadDocuments();
  } catch (err) {
    showError($("#docs-error"), err);
  }
}

function watchJob(job, title) {
  const bar = el("progress", { max: "1", value: "0", id: `job-${job.id}` });
  const label = el("label", { for: `job-${job.id}`, text: title });
  const status = el("span", { class: "muted", text: job.status || "queued" });
  const item = el("li", { class: "job", "data-job": job.id }, label, bar, status);
  $("#jobs").append(item);
  const poll = async () => {
    let current;
    try {
      current = await api.getJSON(`jobs/${encodeURIComponent(job.id)}`);
    } catch (err) {
      status.textContent = `failed: ${err.message}`;
      item.classList.add("failed");
      return;
    }
    const p = current.progress || {};
    if (p.total) {
      bar.max = p.total;
      bar.value = p.done || 0;
    }
    status.textContent = current.status + (p.total ? ` ${p.done}/${p.total}` : "");
    if (current.status === "done") {
      bar.max = 1;
      bar.value = 1;
      await checkGeneration();
      await loadDocuments();
    } else if (current.status === "failed") {
      status.textContent = `failed: ${current.error || "unknown error"}`;
      item.classList.add("failed");
      if (current.retryable) {
        status.append(" ", el("button", { type: "button", class: "linkish", onclick: () => retryJob(current.id, title) }, "retry"));
      }
      await loadDocuments();
    } else {
      setTimeout(poll, 400);
      return;
    }
    item.dataset.status = current.status;
  };
  poll();
}

const zone = $("#drop-zone");
zone.addEventListener("dragover", (e) => {
  e.preventDefault();
  zone.classList.add("over");
});
zone.addEventListener("dragleave", () => zone.classList.remove("over"));
zone.addEventListener("drop", (e) => {
  e.preventDefault();
  zone.classList.remove("over");
  if (e.dataTransfer && e.dataTransfer.files.length) uploadFiles([...e.dataTransfer.files]);
});
$("#doc-file").addEventListener("change", (e) => {
  uploadFiles([...e.target.files]);
  e.target.value = "";
});

// ------------------------------------------------------------------ a newer generation
// Another client (the API, the CLI through a server write, a second tab) may change the index
// while the page is open. Every read names its generation; a cheap poll of GET /generation
// (304 while unchanged) notices writes the page did not ask for. The page then reloads its
// model instead of mixing two generations, keeps the node in focus where it still exists, says
// what changed, and drops highlights that belonged to the old tree.

/** True (and a reload starts) when `generation` is newer than the model's. */
function noticeGeneration(generation) {
  if (typeof generation !== "number" || state.generation === null) return false;
  if (generation === state.generation) return false;
  if (!state.reloading) {
    state.reloading = reloadGeneration()
      .catch((err) => showError($("#docs-error"), err))
      .finally(() => {
        state.reloading = null;
        checkGeneration(); // a write during the reload: reload once more
      });
  }
  return true;
}

async function checkGeneration() {
  if (state.generation === null || state.reloading) return;
  try {
    const info = await api.getJSON("generation");
    noticeGeneration(info.generation);
  } catch {
    // the next poll tries again
  }
}

function changeText(before, after) {
  const parts = [];
  const docs = (after.documents ?? 0) - (before.documents ?? 0);
  const plural = (n, word) => `${n.toLocaleString()} ${word}${n === 1 ? "" : "s"}`;
  if (docs > 0) parts.push(`${plural(docs, "document")} added`);
  if (docs < 0) parts.push(`${plural(-docs, "document")} removed`);
  if (!docs && after.chunks !== before.chunks) parts.push("documents changed");
  return parts.length ? parts.join(", ") : "the index changed";
}

/** The old focus path followed down the new tree: at each level, the child with the same layer
 * and label (a label comes from the node's abstract and its siblings', so an unchanged label
 * is an unchanged node; ids shift when leaves are added). The deepest node found, or null. */
async function followPath(oldPath) {
  let here = state.model.rootId;
  let found = null;
  for (const old of oldPath.slice(1)) {
    if (!state.model.childrenLoaded(here)) await loadTree(here, 1);
    const match = state.model.children(here).find((c) => c && c.layer === old.layer && c.label === old.label);
    if (!match) break;
    here = match.id;
    found = match.id;
  }
  return found;
}

async function reloadGeneration() {
  const started = performance.now();
  const info = await api.getJSON("generation");
  const before = state.counts || {};
  const oldModel = state.model;
  const focus = state.chart ? state.chart.focus : null;
  const selected = state.chart ? state.chart.selected : null;
  const oldPath = focus === null ? [] : oldModel.path(focus).map((id) => oldModel.get(id));
  clearHighlight();
  leafOfPassage.clear();
  state.loading.clear();
  state.generation = info.generation;
  state.counts = { documents: info.documents, chunks: info.chunks };
  state.model = new TreeModel();
  if (!(await startTree())) return; // newer still: the next check reloads again
  const kept = oldPath.length > 1 ? await followPath(oldPath) : null;
  if (kept !== null) await state.chart.zoomTo(kept, false);
  const what = changeText(before, info);
  let where = "";
  if (oldPath.length > 1) {
    if (kept !== null && oldPath.length === state.model.path(kept).length) where = " Your place was kept.";
    else if (kept !== null) where = " The node you were on changed; showing its nearest unchanged parent.";
    else where = " The node you were on changed; back at the root.";
  }
  const note = $("#generation-note");
  note.hidden = false;
  note.dataset.generation = String(info.generation);
  $("#generation-text").textContent = `Index updated: ${what}.${where}`;
  await loadIndexSummary();
  if (state.lastSearch) {
    try {
      const res = await api.postJSON("search", state.lastSearch);
      showSearchResults(res);
      const paths = (res.hits || []).map((h) => h.path || []).filter((p) => p.length);
      await Promise.all(paths.map((p) => loadPath(p)));
      state.chart.setHighlight(new Set(paths.flat()), (res.hits || []).map((h) => h.node));
      if (paths.length) showHighlightNote(`${paths.length} hits of the new index highlighted.`);
    } catch (err) {
      showError($("#search-error"), err);
    }
  }
  if (!$("#view-docs").hidden) loadDocuments();
  if (selected !== null && !$("#view-node").hidden) openNode(kept ?? state.chart.focus);
  // read by the web benchmark: how long the page took from noticing to redrawn
  state.lastReload = { generation: info.generation, ms: performance.now() - started, kept };
  document.body.dataset.generation = String(info.generation);
}
$("#generation-dismiss").addEventListener("click", () => {
  $("#generation-note").hidden = true;
});

function startPolling() {
  const tick = () => {
    if (!document.hidden) checkGeneration();
    setTimeout(tick, state.pollMs);
  };
  setTimeout(tick, state.pollMs);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) checkGeneration();
  });
}

// ------------------------------------------------------------------ boot
async function loadIndexSummary() {
  const info = await api.getJSON("index");
  state.index = info;
  if (state.generation === null && typeof info.generation === "number") {
    const counts = info.counts || info;
    state.generation = info.generation;
    state.counts = { documents: counts.documents, chunks: counts.chunks };
    document.body.dataset.generation = String(info.generation);
  }
  const c = info.counts || info; // psirag inspect's summary: counts at the top level
  const parts = [];
  if (c.documents !== undefined) parts.push(`${c.documents.toLocaleString()} documents`);
  if (c.chunks !== undefined) parts.push(`${c.chunks.toLocaleString()} chunks`);
  if (c.nodes !== undefined) parts.push(`${c.nodes.toLocaleString()} nodes`);
  if (c.depth !== undefined) parts.push(`depth ${c.depth}`);
  $("#index-summary").textContent = parts.join(" · ");
}

/** Load and draw the top of the tree; false when the answer came from a newer generation than
 * the page knew (nothing drawn: the reload that started draws it). */
async function startTree() {
  const t0 = performance.now();
  await loadTree(null, RINGS); // the levels the first view draws; deeper ones load on zoom
  const model = state.model;
  if (model.rootId === null) return false;
  if (state.chart) {
    state.chart.model = model;
    state.chart.focus = model.rootId;
    state.chart.cursor = null;
    for (const node of state.chart.elements.values()) node.remove();
    state.chart.elements.clear();
    state.chart.redraw();
    renderBreadcrumb(model.rootId);
    return true;
  }
  state.chart = new Sunburst($("#sunburst"), model, {
    onOpen: (id) => openNode(id),
    onNeed: (id, depth) => loadTree(id, depth),
    announce: (text) => {
      $("#announcer").textContent = text;
    },
    onFocusChange: (id) => renderBreadcrumb(id),
    // ?render=svg animates the SVG itself (for the side-by-side benchmark)
    renderer: new URLSearchParams(location.search).get("render") === "svg" ? "svg" : "canvas",
  });
  state.chart.setColourBy($("#colour-by").value);
  state.chart.redraw();
  renderBreadcrumb(model.rootId);
  await new Promise((r) => requestAnimationFrame(() => r()));
  const t1 = performance.now();
  performance.measure("psirag:first-render", { start: t0, end: t1 });
  state.firstRender = { treeStart: t0, painted: t1, arcs: state.chart.elements.size };
  document.body.dataset.treeReady = "true";
  return true;
}

async function boot() {
  try {
    await loadIndexSummary();
    if (!(await startTree())) await state.reloading; // the index changed while the page loaded
    if (state.model.rootId !== null && state.model.rootId !== FOREST) await openNode(state.model.rootId);
    startPolling();
  } catch (err) {
    $("#index-summary").textContent = "";
    const box = el("div", { class: "error", role: "alert" });
    showError(box, err);
    $("#tree-status").replaceChildren(box);
  }
}

state.ready = boot();
