// The memos API reference, rendered in the browser from the server's own /openapi.json: every
// operation with its parameters, request and response schemas, and a form that sends it with the
// API key typed above (kept in this tab only). Nothing is loaded from anywhere but this server.
"use strict";
const $ = (id) => document.getElementById(id);
let spec = null;
let token = "";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

function resolve(schema) {
  if (schema && schema.$ref) return spec.components.schemas[schema.$ref.split("/").pop()] || {};
  return schema || {};
}

function typeName(schema) {
  if (!schema) return "any";
  if (schema.$ref) return schema.$ref.split("/").pop();
  const union = schema.anyOf || schema.oneOf;
  if (union) return union.map(typeName).join(" | ");
  if (schema.enum) return "one of " + schema.enum.map((v) => JSON.stringify(v)).join(", ");
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  if (schema.type === "array") return "list of " + typeName(schema.items);
  if (schema.type === "object" && schema.additionalProperties && typeof schema.additionalProperties === "object") {
    return "map of " + typeName(schema.additionalProperties);
  }
  return (schema.type || "any") + (schema.format ? ` (${schema.format})` : "");
}

function schemaTree(schema, depth = 0) {
  const node = resolve(schema);
  const list = el("ul");
  const required = new Set(node.required || []);
  for (const [name, field] of Object.entries(node.properties || {})) {
    const item = el("li", {}, el("code", { text: name + (required.has(name) ? "*" : "") }), " ",
      el("span", { class: "muted", text: typeName(field) }), field.description ? " — " + field.description : "");
    const inner = field.$ref ? field : (field.items && field.items.$ref ? field.items : null);
    if (inner && depth < 2) item.append(schemaTree(inner, depth + 1));
    list.append(item);
  }
  if (node.additionalProperties === true) list.append(el("li", { class: "muted", text: "… and the store's own fields" }));
  return el("div", { class: "schema" }, list);
}

function example(schema, depth = 0) {
  const node = resolve(schema);
  if (node.examples && node.examples.length) return node.examples[0];
  if (node.example !== undefined) return node.example;
  if (node.default !== undefined && node.default !== null) return node.default;
  if (node.anyOf) return example(node.anyOf.find((s) => s.type !== "null") || node.anyOf[0], depth);
  if (node.enum) return node.enum[0];
  if (node.type === "object" || node.properties) {
    const out = {};
    for (const name of node.required || []) out[name] = depth < 3 ? example(node.properties[name], depth + 1) : {};
    return out;
  }
  if (node.type === "array") return node.items && depth < 3 ? [example(node.items, depth + 1)] : [];
  return { string: "", integer: 0, number: 0, boolean: false }[node.type] ?? null;
}

function bodySchema(op) {
  const content = op.requestBody && op.requestBody.content;
  return content && content["application/json"] ? content["application/json"] : null;
}

function parameterTable(params) {
  const table = el("table", {}, el("tr", {}, el("th", { text: "parameter" }), el("th", { text: "in" }),
    el("th", { text: "type" }), el("th", { text: "description" })));
  for (const p of params) {
    table.append(el("tr", {}, el("td", {}, el("code", { text: p.name + (p.required ? "*" : "") })), el("td", { text: p.in }),
      el("td", { text: typeName(p.schema) }), el("td", { text: p.description || (p.schema && p.schema.description) || "" })));
  }
  return table;
}

async function send(method, path, op, form, output) {
  let url = path;
  const query = new URLSearchParams();
  const headers = {};
  for (const input of form.querySelectorAll("input[data-in]")) {
    const value = input.value.trim();
    if (input.dataset.in === "path") url = url.replace("{" + input.name + "}", encodeURIComponent(value));
    else if (!value) continue;
    else if (input.dataset.in === "query") value.split(",").forEach((v) => query.append(input.name, v.trim()));
    else if (input.dataset.in === "header") headers[input.name] = value;
  }
  if (token && op.security) headers["Authorization"] = "Bearer " + token;
  const text = form.querySelector("textarea");
  const options = { method: method.toUpperCase(), headers };
  if (text) { headers["Content-Type"] = "application/json"; options.body = text.value; }
  const full = url + (query.toString() ? "?" + query : "");
  output.textContent = options.method + " " + full + " …";
  try {
    const response = await fetch(full, options);
    let body = "";
    const reader = response.body ? response.body.getReader() : null;
    const decoder = new TextDecoder();
    while (reader && body.length < 20000) {  // a stream (/v1/events) is shown as it starts
      const { value, done } = await Promise.race([reader.read(), new Promise((r) => setTimeout(() => r({ done: true, timeout: true }), 5000))]);
      if (done) break;
      body += decoder.decode(value, { stream: true });
    }
    if (reader) reader.cancel().catch(() => {});
    try { body = JSON.stringify(JSON.parse(body), null, 2); } catch (e) { /* not JSON: shown as it came */ }
    output.replaceChildren(el("span", { class: "status", text: response.status + " " + response.statusText }), "\n" + body);
    output.dataset.status = String(response.status);
  } catch (error) {
    output.textContent = "request failed: " + error.message;
    output.dataset.status = "error";
  }
}

function operation(path, method, op) {
  const id = op.operationId || method + path;
  const details = el("details", { class: "op", id: "op-" + id, "data-method": method, "data-path": path },
    el("summary", {}, el("span", { class: "method " + method, text: method }), el("span", { class: "path", text: path }),
      el("span", { text: op.summary || "" }), op.security ? el("span", { class: "lock", text: "auth: bearer" }) : ""));
  const body = el("div", { class: "body" });
  if (op.description && op.description !== op.summary) body.append(el("p", { text: op.description }));
  const params = op.parameters || [];
  if (params.length) body.append(el("h4", { text: "Parameters" }), parameterTable(params));
  const requestBody = bodySchema(op);
  if (requestBody) body.append(el("h4", { text: "Request body: " + typeName(requestBody.schema) }), schemaTree(requestBody.schema));
  body.append(el("h4", { text: "Responses" }));
  for (const [status, response] of Object.entries(op.responses || {})) {
    const content = response.content || {};
    const media = Object.keys(content);
    const schema = content["application/json"] && content["application/json"].schema;
    body.append(el("div", {}, el("code", { text: status }), " ", response.description || "",
      media.length ? el("span", { class: "muted", text: " — " + media.join(", ") + (schema ? ": " + typeName(schema) : "") }) : ""));
    if (schema && status.startsWith("2")) body.append(schemaTree(schema));
  }
  const form = el("form", { class: "try" });
  for (const p of params) {
    form.append(el("label", {}, p.name + " (" + p.in + ") ", el("input", { name: p.name, "data-in": p.in, placeholder: typeName(p.schema) })), " ");
  }
  if (requestBody) {
    const text = el("textarea", { name: "body" });
    text.value = JSON.stringify(example(requestBody.schema), null, 2);
    form.append(el("div", {}, text));
  }
  const output = el("pre", { class: "response" });
  form.append(el("button", { text: "send" }));
  form.addEventListener("submit", (event) => { event.preventDefault(); send(method, path, op, form, output); });
  body.append(el("h4", { text: "Try it" }), form, output);
  details.append(body);
  return details;
}

function render() {
  $("title").textContent = spec.info.title + " API";
  $("version").textContent = "version " + spec.info.version;
  $("summary").textContent = spec.info.summary || "";
  $("description").textContent = spec.info.description || "";
  const groups = new Map();
  for (const [path, methods] of Object.entries(spec.paths)) {
    for (const [method, op] of Object.entries(methods)) {
      const tag = (op.tags && op.tags[0]) || "other";
      if (!groups.has(tag)) groups.set(tag, []);
      groups.get(tag).push(operation(path, method, op));
    }
  }
  const main = $("operations");
  main.replaceChildren();
  for (const [tag, ops] of groups) {
    $("tags").append(el("a", { href: "#tag-" + tag, text: tag }));
    main.append(el("h2", { id: "tag-" + tag, text: tag }), ...ops);
  }
}

$("auth").addEventListener("submit", (event) => {
  event.preventDefault();
  token = $("token").value.trim();
  $("auth-state").textContent = token ? "key set" : "no key";
  $("auth-state").className = token ? "pill" : "pill off";
});

fetch("/openapi.json").then((r) => r.json()).then((data) => { spec = data; render(); })
  .catch((error) => { $("operations").textContent = "could not read /openapi.json: " + error.message; });
