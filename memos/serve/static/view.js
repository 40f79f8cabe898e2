// The memos web view: reads the /v1 API with the API key kept in this tab (sessionStorage),
// and refreshes when the server pushes an event (server-sent events read through fetch, so the
// key travels in a header, never in a URL).
"use strict";
const $ = (id) => document.getElementById(id);
let key = sessionStorage.getItem("memos-key") || "";
let stream = null;
let pending = null;

const fromHash = new URLSearchParams(location.hash.slice(1)).get("key");
if (fromHash) { key = fromHash; sessionStorage.setItem("memos-key", key); history.replaceState(null, "", location.pathname); }

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: { "Authorization": "Bearer " + key, "Content-Type": "application/json", ...(options.headers || {}) } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error ? body.error.message : response.statusText);
  return body;
}

function bar(label, value, max, extra = "", warn = true) {
  const share = max > 0 ? Math.min(100, (100 * value) / max) : 0;
  const row = el("div", { class: "row", "data-label": label },
    el("span", { text: label }),
    el("div", { class: "track" }, el("div", { class: "fill" + (warn && share > 85 ? " hot" : ""), style: `width:${share.toFixed(1)}%` })),
    el("span", { class: "num", text: extra || String(value) }));
  return row;
}

async function loadStores() {
  const data = await api("/v1/stores");
  $("who").textContent = "user " + data.user_id + (data.agent_id ? " · agent " + data.agent_id : "");
  const max = Math.max(1, ...data.stores.map((s) => s.count));
  $("stores").replaceChildren(...data.stores.map((s) => el("li", { class: "store", "data-store": s.name }, bar(s.name, s.count, max, "", false))));
  const hasGraph = data.stores.some((s) => s.name === "entity") && data.stores.some((s) => s.name === "relation");
  $("graph-panel").hidden = !hasGraph;
  if (hasGraph) await loadGraph();
}

async function loadCore() {
  const data = await api("/v1/core");
  $("core").replaceChildren(...data.blocks.map((b) => el("div", { class: "block", "data-block": b.label },
    bar(b.label + (b.read_only ? " 🔒" : ""), b.used, b.limit, `${b.used}/${b.limit}`), el("pre", { text: b.value }))));
}

async function loadContext() {
  const data = await api("/v1/context?session_id=" + encodeURIComponent($("session").value || "default"));
  $("context-total").textContent = data.total ? `${data.total} / ${data.budget} tokens, ${data.turns} turns in context` : "no turns yet";
  const rows = Object.entries(data.sections).map(([name, tokens]) => {
    const row = bar(name, tokens, data.budget);
    row.classList.add("section");
    return row;
  });
  if (data.total) rows.push(bar("total", data.total, data.budget, `${data.total}/${data.budget}`));
  $("context").replaceChildren(...rows);
}

async function loadTimeline() {
  const session = $("session").value || "default";
  const data = await api("/v1/timeline?limit=50&session_id=" + encodeURIComponent(session));
  $("timeline").replaceChildren(...data.turns.slice().reverse().map((t) => {
    const role = t.tags.includes("role:assistant") ? "assistant" : "user";
    const item = el("li", { class: "turn", "data-id": t.id },
      el("span", { class: "role " + role, text: t.actor || role }), el("span", { class: "text", text: t.summary }),
      el("time", { text: new Date(t.occurred_at).toLocaleString() }));
    if (t.produced.length) {
      item.append(el("div", { class: "produced" }, ...t.produced.map((p) =>
        el("span", { class: "chip", title: p.id, text: `${p.store}: ${p.rendered.slice(0, 90)}` }))));
    }
    return item;
  }));
}

async function loadGraph() {
  const data = await api("/v1/graph");
  const svg = $("graph");
  const nodes = data.nodes.slice(0, 60);
  const at = {};
  nodes.forEach((n, i) => {
    const angle = (2 * Math.PI * i) / Math.max(1, nodes.length);
    at[n.id] = at[n.label] = [400 + 300 * Math.cos(angle), 180 + 140 * Math.sin(angle)];
  });
  const ns = "http://www.w3.org/2000/svg";
  const shape = (tag, attrs, text) => { const s = document.createElementNS(ns, tag); for (const [k, v] of Object.entries(attrs)) s.setAttribute(k, v); if (text) s.textContent = text; return s; };
  const parts = [];
  for (const e of data.edges) {
    const a = at[e.source], b = at[e.target];
    if (!a || !b) continue;
    parts.push(shape("line", { x1: a[0], y1: a[1], x2: b[0], y2: b[1], stroke: "#b8c2d8" }));
    parts.push(shape("text", { x: (a[0] + b[0]) / 2, y: (a[1] + b[1]) / 2, fill: "#6b7385" }, e.label));
  }
  for (const n of nodes) {
    const [x, y] = at[n.id];
    parts.push(shape("circle", { cx: x, cy: y, r: 6, fill: "#2f6fdf" }), shape("text", { x: x + 8, y: y + 4 }, n.label));
  }
  svg.replaceChildren(...parts);
}

async function search(event) {
  event.preventDefault();
  const query = $("query").value.trim();
  if (!query) return;
  try {
    const data = await api("/v1/search", { method: "POST", body: JSON.stringify({ query, k: 10 }) });
    $("results").replaceChildren(...data.hits.map((h) => el("li", { class: "hit" },
      el("div", {}, el("b", { text: h.store + " " }), el("span", { text: h.record.rendered })),
      el("div", { class: "parts", text: "score " + h.score.toFixed(3) + " = " +
        Object.entries(h.parts).map(([k, v]) => `${k} ${Number(v).toFixed(3)}`).join(" · ") }))));
    if (!data.hits.length) $("results").replaceChildren(el("li", { class: "muted", text: "nothing found" }));
  } catch (err) { $("results").replaceChildren(el("li", { class: "muted", text: err.message })); }
}

async function refresh() {
  try {
    await Promise.all([loadStores(), loadCore(), loadTimeline(), loadContext()]);
  } catch (err) {
    $("who").textContent = err.message;
  }
}

function soon() {  // many events in a burst: one refresh
  clearTimeout(pending);
  pending = setTimeout(refresh, 150);
}

async function listen() {
  if (stream) stream.abort();
  stream = new AbortController();
  try {
    const response = await fetch("/v1/events", { headers: { "Authorization": "Bearer " + key }, signal: stream.signal });
    if (!response.ok) throw new Error("events: " + response.status);
    $("live").textContent = "live"; $("live").classList.remove("off");
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (frame.split("\n").some((line) => line.startsWith("data:"))) soon();
      }
    }
  } catch (err) {
    if (err.name === "AbortError") return;
  }
  $("live").textContent = "offline"; $("live").classList.add("off");
  setTimeout(listen, 3000);
}

function connect() {
  if (!key) { $("who").textContent = "enter an API key"; return; }
  refresh();
  listen();
}

$("login").addEventListener("submit", (event) => {
  event.preventDefault();
  key = $("key").value.trim();
  sessionStorage.setItem("memos-key", key);
  $("key").value = "";
  connect();
});
$("search-form").addEventListener("submit", search);
$("session").addEventListener("change", refresh);
setInterval(() => { if (key && !document.hidden) refresh(); }, 10000);
connect();
