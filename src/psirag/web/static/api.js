// HTTP calls to `psirag serve`: the API key (asked once, sent as a Bearer token), the server's
// error shape {"error": {"type", "message"}}, and Server-Sent Events read from a POST response
// (EventSource can only GET, and /ask is a POST).

const BASE = new URL("../", import.meta.url);
const KEY_NAME = "psirag-api-key";

export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

let keyPrompt = null; // () => Promise<string>: set by the page, asks the person for a key
let pendingKey = null;

export function setKeyPrompt(fn) {
  keyPrompt = fn;
}

export function storedKey() {
  return sessionStorage.getItem(KEY_NAME) || localStorage.getItem(KEY_NAME) || "";
}

export function saveKey(key, remember) {
  sessionStorage.setItem(KEY_NAME, key);
  if (remember) localStorage.setItem(KEY_NAME, key);
  else localStorage.removeItem(KEY_NAME);
}

export function forgetKey() {
  sessionStorage.removeItem(KEY_NAME);
  localStorage.removeItem(KEY_NAME);
}

function headers(extra) {
  const h = new Headers(extra || {});
  const key = storedKey();
  if (key) h.set("Authorization", `Bearer ${key}`);
  return h;
}

async function errorOf(response) {
  let type = `HTTP ${response.status}`;
  let message = response.statusText || "request failed";
  try {
    const body = await response.json();
    if (body && body.error) {
      type = body.error.type || type;
      message = body.error.message || message;
    } else if (body && body.detail) {
      message = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
    }
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, type, message);
}

/** fetch with the key; a 401 asks for a key (one prompt shared by concurrent calls) and
 * retries, until the server takes the key. */
async function send(path, init = {}) {
  let response;
  try {
    response = await fetch(new URL(path, BASE), { ...init, headers: headers(init.headers) });
  } catch (err) {
    throw new ApiError(0, "NetworkError", `the server did not answer (${err.message})`);
  }
  if (response.status === 401 && keyPrompt) {
    const sent = storedKey();
    if (!pendingKey) {
      pendingKey = keyPrompt(sent ? "That key was refused." : "").finally(() => {
        pendingKey = null;
      });
    }
    await pendingKey;
    return send(path, init);
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

export async function getJSON(path) {
  const response = await send(path, { headers: { Accept: "application/json" } });
  return response.json();
}

export async function postJSON(path, body) {
  const response = await send(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify(body),
  });
  return response.json();
}

export async function postForm(path, form) {
  const response = await send(path, { method: "POST", body: form });
  return response.json();
}

export async function del(path) {
  const response = await send(path, { method: "DELETE", headers: { Accept: "application/json" } });
  return response.status === 204 ? {} : response.json();
}

/** POST `body` and call onEvent(name, data) for each SSE event as it arrives. */
export async function postStream(path, body, onEvent, signal) {
  const response = await send(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify(body),
    signal,
  });
  const type = response.headers.get("Content-Type") || "";
  if (!type.startsWith("text/event-stream")) {
    // a server that answered with plain JSON: one answer event
    onEvent("answer", await response.json());
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    buffer = buffer.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      dispatch(block, onEvent);
    }
    if (done) break;
  }
  if (buffer.trim()) dispatch(buffer, onEvent);
}

function dispatch(block, onEvent) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return;
  const text = data.join("\n");
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = text;
  }
  onEvent(name, parsed);
}
