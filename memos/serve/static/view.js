// The memos web view: reads the /v1 API with the API key kept in this tab (sessionStorage),
// and refreshes when the server pushes an event (server-sent events read through fetch, so the
// key travels in a header, never in a URL).
"use strict";
const $ = (id) => document.getElementById(id);
let key = sessionStorage.getItem("memos-key") || "";
let stream = null;
let pending = null;
let stores = {};        // name -> the store's info from /v1/stores (its fields)
let openStore = null;   // the store whose records are listed
let session = "";       // the session shown: the one picked, else the latest
let editing = 0;        // editors open: refreshes leave the records and blocks alone meanwhile

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
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const detail = body.error ? body.error.message : Array.isArray(body.detail) ? body.detail.map((d) => d.msg).join("; ") : "";
    throw new Error(`${response.status}: ${detail || response.statusText}`);
  }
  return body;
}

function shown(node, message) {  // an error message from the API, in place
  node.textContent = message || "";
  node.hidden = !message;
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
  stores = Object.fromEntries(data.stores.map((s) => [s.name, s]));
  $("stores").replaceChildren(...data.stores.map((s) => {
    const item = el("li", { class: "store" + (s.name === openStore ? " open" : ""), "data-store": s.name, title: s.description },
      bar(s.name, s.count, max, "", false));
    item.addEventListener("click", () => { openStore = s.name; loadRecords(); loadStores(); });
    return item;
  }));
  const hasGraph = data.stores.some((s) => s.name === "entity") && data.stores.some((s) => s.name === "relation");
  $("graph-panel").hidden = !hasGraph;
  if (hasGraph) await loadGraph();
}

async function loadSessions() {
  const data = await api("/v1/sessions");
  const picked = $("session").value.trim();
  session = picked || (data.sessions.length ? data.sessions[0].session_id : "default");
  $("sessions").replaceChildren(...data.sessions.map((s) => {
    const item = el("li", { class: "session" + (s.session_id === session ? " open" : ""), "data-session": s.session_id },
      el("span", { text: s.session_id }),
      el("span", { class: "num", text: `${s.turns} turn${s.turns === 1 ? "" : "s"} · ${new Date(s.last_at).toLocaleString()}` }));
    item.addEventListener("click", () => { $("session").value = s.session_id; refresh(); });
    return item;
  }));
  if (!data.sessions.length) $("sessions").replaceChildren(el("li", { class: "muted", text: "no sessions yet" }));
}

async function loadCore() {
  if (editing) return;
  const data = await api("/v1/core");
  if (editing) return;
  $("core").replaceChildren(...data.blocks.map((b) => {
    const error = el("p", { class: "error", hidden: "" });
    const text = el("pre", { text: b.value });
    const edit = el("button", { class: "edit", text: "edit", title: "rewrite the block (PUT /v1/core/" + b.label + ")" });
    const block = el("div", { class: "block", "data-block": b.label },
      bar(b.label + (b.read_only ? " 🔒" : ""), b.used, b.limit, `${b.used}/${b.limit}`), el("span", { class: "actions" }, edit), text, error);
    edit.addEventListener("click", () => {
      const box = el("textarea", { class: "editor" }); box.value = b.value;
      const save = el("button", { class: "save", text: "save" }), cancel = el("button", { text: "cancel" });
      editing++;
      const done = () => { editing = Math.max(0, editing - 1); loadCore(); };
      cancel.addEventListener("click", done);
      save.addEventListener("click", async () => {
        try {
          await api("/v1/core/" + encodeURIComponent(b.label), { method: "PUT", body: JSON.stringify({ value: box.value }) });
          done();
        } catch (err) { shown(error, err.message); }
      });
      text.replaceWith(el("div", {}, box, save, cancel));
    });
    return block;
  }));
}

function recordQuery() {
  const q = new URLSearchParams({ status: $("f-status").value, limit: "200" });
  const contains = $("f-contains").value.trim(), tag = $("f-tag").value.trim();
  if (contains) q.set("contains", contains);
  if (tag) q.set("tags", tag);
  if ($("f-since").value) q.set("since", $("f-since").value + "T00:00:00Z");
  if ($("f-until").value) q.set("until", $("f-until").value + "T23:59:59Z");
  return q;
}

async function loadRecords() {
  if (!openStore || editing) return;
  const store = openStore;
  $("records-panel").hidden = false;
  $("records-store").textContent = store;
  try {
    const data = await api(`/v1/stores/${encodeURIComponent(store)}?${recordQuery()}`);
    if (editing || store !== openStore) return;  // an editor opened (or another store) while this loaded
    shown($("records-error"), "");
    $("records-count").textContent = `${data.records.length} shown`;
    $("records").replaceChildren(...data.records.map((r) => recordItem(store, r)));
    if (!data.records.length) $("records").replaceChildren(el("li", { class: "muted", text: "no records match" }));
  } catch (err) { shown($("records-error"), err.message); $("records").replaceChildren(); }
}

function editable(store, record) {  // the fields a user writes, secrets left out (they come back redacted)
  const info = stores[store] || { fields: [], secret_fields: [] };
  const out = {};
  for (const name of info.fields) if (!info.secret_fields.includes(name)) out[name] = record[name];
  out.tags = record.tags; out.importance = record.importance;
  return out;
}

function recordItem(store, r) {
  const item = el("li", { class: "record", "data-id": r.id, "data-status": r.status },
    el("div", {}, el("span", { class: "text", text: r.rendered })),
    el("div", { class: "meta", text: `${r.status} · ${r.id}` + (r.tags.length ? " · " + r.tags.join(", ") : "") }));
  const actions = el("span", { class: "actions" });
  const error = el("p", { class: "error", hidden: "" });
  const act = (name, title, run) => {
    const button = el("button", { class: name, text: name, title });
    button.addEventListener("click", async () => {
      try { await run(); } catch (err) { shown(error, err.message); }
    });
    actions.append(button);
  };
  const editor = (verb) => {
    const fields = editable(store, r);
    const box = el("textarea", { class: "editor" }); box.value = JSON.stringify(fields, null, 2);
    const save = el("button", { class: "save", text: verb }), cancel = el("button", { text: "cancel" });
    editing++;
    const done = () => { editing = Math.max(0, editing - 1); loadRecords(); };
    cancel.addEventListener("click", done);
    save.addEventListener("click", async () => {
      try {
        const body = JSON.parse(box.value);
        if (verb === "save") {
          const changes = Object.fromEntries(Object.entries(body).filter(([k, v]) => JSON.stringify(v) !== JSON.stringify(fields[k])));
          if (!Object.keys(changes).length) { done(); return; }
          await api(`/v1/stores/${encodeURIComponent(store)}/${encodeURIComponent(r.id)}`, { method: "PATCH", body: JSON.stringify(changes) });
        } else {
          await api(`/v1/stores/${encodeURIComponent(store)}/${encodeURIComponent(r.id)}/supersede`, { method: "POST", body: JSON.stringify(body) });
        }
        done();
      } catch (err) { shown(error, err.message); }
    });
    item.append(el("div", { class: "editing" }, box, save, cancel));
  };
  act("edit", "change fields (PATCH, audited)", async () => editor("save"));
  act("supersede", "replace by a new record (the old one closes and links it)", async () => editor("supersede"));
  act("delete", "delete the record and its history", async () => {
    if (!confirm(`Delete this ${store} record and its history for good?\n\n${r.rendered.slice(0, 200)}`)) return;
    await api(`/v1/stores/${encodeURIComponent(store)}/${encodeURIComponent(r.id)}`, { method: "DELETE" });
    loadRecords();
  });
  item.firstChild.append(actions);
  item.append(error);
  return item;
}

async function loadContext() {
  const data = await api("/v1/context?session_id=" + encodeURIComponent(session || "default"));
  $("prompt").textContent = data.system_prompt || "(no turns yet: nothing compiled)";
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
  const data = await api("/v1/timeline?limit=50&session_id=" + encodeURIComponent(session || "default"));
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
    await loadSessions();
    await Promise.all([loadStores(), loadCore(), loadTimeline(), loadContext(), loadRecords()]);
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
$("filters").addEventListener("submit", (event) => { event.preventDefault(); loadRecords(); });
$("session").addEventListener("change", refresh);
setInterval(() => { if (key && !document.hidden) refresh(); }, 10000);
connect();
