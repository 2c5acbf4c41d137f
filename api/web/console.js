"use strict";
// The console's shell: the token, calls to the JSON API, formatting and tables shared by every page, the
// pages' loaders and navigation (show), the caller's scopes and rights, and the admin actions. Loaded first;
// each page's own script (/console/*.js) follows.
// Plain JavaScript, no build step: every page reads the server's JSON API with the token given above.
const $ = (id) => document.getElementById(id);
let token = new URLSearchParams(location.hash.slice(1)).get("token") || sessionStorage.getItem("mqindex-token") || "";
$("token").value = token;
$("token").addEventListener("change", () => {
  token = $("token").value.trim(); sessionStorage.setItem("mqindex-token", token); scopes = scopesAsked = null;
  show(currentPage);
});

async function api(path, options = {}) {
  const headers = token ? { Authorization: "Bearer " + token } : {};
  if (options.body) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, { ...options, headers });
  } catch (err) {
    throw new Error("the server does not answer (" + err.message + ")");
  }
  const body = await resp.json().catch(() => ({ error: resp.statusText || "HTTP " + resp.status }));
  if (!resp.ok) {
    const what = body.field ? `${body.field}: ` : "";
    throw new Error(`${resp.status} ${what}${body.error || resp.statusText}` + (body.object ? ` (object ${body.object})` : ""));
  }
  return body;
}
const post = (path, body) => api(path, { method: "POST", body: JSON.stringify(body) });
function ms(input) { return input.value ? String(new Date(input.value).getTime()) : null; }
function fmtTime(t) { return t == null ? "" : new Date(t).toISOString().replace("T", " ").replace("Z", ""); }
// a key that is not UTF-8 comes as base64 (key_encoding): shown as such, never as if it were the key's text
function shownKey(m) { return m.key == null ? "" : m.key_encoding === "base64" ? `base64:${m.key}` : m.key; }
// a message's headers in order: its header_list when it has one (a value that is not UTF-8 or null, a name given
// twice), else its headers object, which holds them exactly then (docs/MESSAGES.md)
function messageHeaders(m) {
  if (m.header_list != null) return m.header_list;
  return Object.entries(m.headers || {}).map(([name, value]) => ({ name, value, encoding: "utf-8" }));
}
// "name: value", a value that is not UTF-8 as base64:... (as a key), a null value as (null)
function shownHeader(h) {
  const v = h.value == null ? "(null)" : h.encoding === "base64" ? `base64:${h.value}` : h.value;
  return `${h.name}: ${v}`;
}
function fmtBytes(n) {
  if (n == null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0, v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : String(v)) + " " + units[i];
}
function fmtLag(msLag) {
  if (msLag == null) return "being written";  // not waiting for the upload yet
  if (!msLag) return "0";
  return msLag < 1000 ? msLag + " ms" : msLag < 120000 ? (msLag / 1000).toFixed(1) + " s" : Math.round(msLag / 60000) + " min";
}
function appendRows(tbody, rows) {
  for (const cells of rows) {
    const tr = tbody.insertRow();
    for (const c of cells) {
      const td = tr.insertCell();
      if (c instanceof Node) td.appendChild(c); else td.textContent = c ?? "";
    }
  }
}
function fillTable(id, rows, emptyId) {
  const tbody = $(id).tBodies[0]; tbody.innerHTML = "";
  tbody.dataset.drawing = String(Number(tbody.dataset.drawing || 0) + 1);  // stops a fillTableInFrames still going
  appendRows(tbody, rows);
  if (emptyId) $(emptyId).style.display = rows.length ? "none" : "block";
}
// A long table drawn a screenful first and the rest after that frame has been painted: the layout of a 1,000-row
// table is 100-200 ms of the browser's main thread before anything shows. The rest goes in at once (in pieces, each
// piece would lay the growing table out again). Resolves once every row is in (or the table was drawn again
// meanwhile). A frame is waited for at most FRAME_WAIT_MS (none come in a hidden tab).
const FRAME_WAIT_MS = 250;
function fillTableInFrames(id, rows, first = 100) {
  fillTable(id, rows.slice(0, first));
  const tbody = $(id).tBodies[0], drawing = tbody.dataset.drawing;
  return new Promise((resolve) => {
    if (rows.length <= first) return resolve();
    let done = false;
    const rest = () => {
      if (done) return;
      done = true;
      if (tbody.dataset.drawing === drawing) appendRows(tbody, rows.slice(first));
      resolve();
    };
    requestAnimationFrame(() => setTimeout(rest)); setTimeout(rest, FRAME_WAIT_MS);
  });
}
function topicLink(name) {
  const a = document.createElement("a"); a.href = "?page=topic&topic=" + encodeURIComponent(name);
  a.textContent = name; a.className = "topic-link";
  a.addEventListener("click", (ev) => { ev.preventDefault(); openTopic(name); });
  return a;
}
function span(text, cls) { const e = document.createElement("span"); e.textContent = text; e.className = cls; return e; }

// -- pages ------------------------------------------------------------------------------------------
const loaders = {
  async topics() {
    const [topics, parts] = await Promise.all([api("/v1/topics"), api("/v1/console/partitions")]);
    const mine = can("admin") ? (await myRights(topics.map((t) => t.name))).topics : {};  // who may delete what
    const per = {};
    for (const p of parts.partitions) {
      const t = per[p.topic] ??= { records: 0, bytes: 0 };
      t.records += p.end_offset - p.start_offset; t.bytes += p.bytes;
    }
    fillTable("topics-table", topics.map((t) => [topicLink(t.name), t.partitions, t.topic_id, per[t.name]?.records ?? 0,
                                                 fmtBytes(per[t.name]?.bytes ?? 0), deleteButton(t.name, mine[t.name]?.delete)]), "topics-empty");
    fillTable("partitions-table", parts.partitions.map((p) => [p.topic, p.partition, p.leader ?? "none",
      p.leader_epoch ?? "", p.stream_epoch, p.start_offset, p.end_offset, fmtBytes(p.bytes), p.objects]));
  },
  async nodes() {
    const [nodes, self] = await Promise.all([api("/v1/cluster/nodes"), api("/v1/console/node")]);
    fillTable("nodes-table", nodes.nodes.map((n) => [n.node_id, span(n.state, "state-" + n.state),
      fmtTime(n.lease_expires_ms), n.http ?? "", n.partitions.join(", ") || "none",
      n.node_id === self.node_id ? fmtBytes(self.wal_bytes_not_uploaded) : "(on that node)"]), "nodes-empty");
  },
  async objects() {
    const o = await api("/v1/console/objects");
    $("sso-count").textContent = o.stream_set_objects.count; $("sso-bytes").textContent = fmtBytes(o.stream_set_objects.bytes);
    $("so-count").textContent = o.stream_objects.count; $("so-bytes").textContent = fmtBytes(o.stream_objects.bytes);
    $("compaction-runs").textContent = o.compaction.runs;
    $("compaction-failed").textContent = o.compaction.failed_runs + " failed";
    const last = o.compaction.last;
    $("compaction-last").textContent = last ? Object.entries(last).map(([k, v]) =>
      `${k}: ${Array.isArray(v) ? v.length + (k === "errors" && v.length ? " (" + v.join("; ") + ")" : "") : v}`).join("\n")
      : "no compaction run since this node started";
    fillTable("sso-table", Object.entries(o.stream_set_objects.per_node).map(([n, v]) => [n, v.count, fmtBytes(v.bytes)]));
  },
  async index() {
    const body = await api("/v1/console/index");
    const states = {};
    for (const f of body.files) states[f.state] = (states[f.state] ?? 0) + 1;
    $("index-states").innerHTML = "";
    for (const [state, n] of Object.entries(states)) {
      const c = document.createElement("div"); c.className = "card"; c.textContent = state;
      const b = document.createElement("b"); b.textContent = n; c.appendChild(b); $("index-states").appendChild(c);
    }
    fillTable("index-table", body.files.map((f) => [f.state, fmtTime(f.begin_ms), fmtTime(f.end_ms), f.items,
      fmtLag(f.upload_lag_ms), f.location]), "index-empty");
  },
  async search() {},
};
let scopes = null;  // the token's scopes, asked once per token
let scopesAsked = null;  // loadScopes() for the token, under way or done (null: not asked yet)
// what the caller may do, as the server decides it (scope and access control rules): GET /v1/admin/acls/my-rights
let rights = null;  // {principal, scopes, rules_active, superuser, cluster: {describe, alter, create_topics}}
const ADMIN_HINT = "needs a token with the admin scope";
function can(scope) { return scopes !== null && scopes.includes(scope); }
function canAdmin() { return can("admin"); }
function markScope(button, scope) {
  button.disabled = !can(scope);
  if (button.disabled) button.title = `needs a token with the ${scope} scope`; else button.removeAttribute("title");
}
function markAdmin(button) { markScope(button, "admin"); }
// a button the caller may use only with `allowed` (a right from myRights); `what` says what it needs
function markRight(button, allowed, what) {
  button.disabled = !allowed;
  if (button.disabled) button.title = "not allowed: needs " + what; else button.removeAttribute("title");
}
function clusterRight(right) { return !!(rights && rights.cluster[right]); }
// the caller's rights on topics and groups by name (fetched in chunks: names travel in the query string)
async function myRights(topics = [], groups = []) {
  const out = { topics: {}, groups: {} };
  const names = [...topics.map((t) => ["topic", t]), ...groups.map((g) => ["group", g])];
  for (let i = 0; i < names.length || i === 0; i += 100) {
    const q = new URLSearchParams(names.slice(i, i + 100));
    const r = await api("/v1/admin/acls/my-rights?" + q.toString());
    Object.assign(out.topics, r.topics); Object.assign(out.groups, r.groups);
    if (i === 0) Object.assign(out, { principal: r.principal, cluster: r.cluster, rules_active: r.rules_active });
  }
  return out;
}
async function loadScopes() {
  // both asked at once: each is a round trip before the first page can be drawn
  const [session, mine] = await Promise.allSettled([api("/v1/console/session"), api("/v1/admin/acls/my-rights")]);
  scopes = session.status === "fulfilled" ? session.value.scopes : [];
  rights = mine.status === "fulfilled" ? mine.value : null;
  for (const b of document.querySelectorAll("button.admin:not(#reset-apply)")) {
    markAdmin(b);
    if (!b.disabled && b.dataset.right) {
      markRight(b, clusterRight(b.dataset.right), b.dataset.right.replace("_topics", "").toUpperCase() + " on the cluster");
    }
  }
  for (const b of document.querySelectorAll("button.produce")) markScope(b, "produce");
}
let currentPage = "search";
let shows = 0;  // show() calls made: only the latest marks its page drawn
const leaving = [];  // what a page stops when another is shown (the message browser's live tail)
async function show(page) {
  const mine = ++shows;
  for (const stop of leaving) stop();
  currentPage = page;
  $("detail").style.display = "none";
  for (const s of document.querySelectorAll("section[data-page]")) s.classList.toggle("active", s.dataset.page === page);
  for (const b of document.querySelectorAll("nav button")) {
    if (b.dataset.go === page) b.setAttribute("aria-current", "page"); else b.removeAttribute("aria-current");
  }
  const err = $(page + "-error");
  if (err) err.textContent = "";
  document.body.dataset.loaded = "";
  if (scopesAsked === null) scopesAsked = loadScopes();
  const scoping = scopesAsked;
  // the topic page draws its partitions while the scopes load (it marks its buttons once they are in: acls.js)
  if (page !== "topic") await scoping;
  try { await loaders[page](); } catch (e) { if (err) err.textContent = e.message; }
  await scoping;
  // the page is drawn (tests wait on this); a page left before its loads came back (a token entered, then another
  // page clicked) must not mark itself over the page shown since
  if (mine === shows) document.body.dataset.loaded = page;
}
for (const b of document.querySelectorAll("nav button")) b.addEventListener("click", () => show(b.dataset.go));

// -- admin actions (the admin scope) ------------------------------------------------------------------
async function action(page, fn) {
  $(page + "-error").textContent = ""; $(page + "-ok").textContent = "";
  try { $(page + "-ok").textContent = await fn(); await loaders[page](); }
  catch (e) { $(page + "-error").textContent = e.message; }
}
$("create-topic-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  action("topics", async () => {
    const configs = {};
    if ($("new-topic-retention").value) configs["retention.ms"] = Number($("new-topic-retention").value);
    const t = await post("/v1/topics", { name: $("new-topic-name").value.trim(),
                                         partitions: Number($("new-topic-partitions").value || 1), configs });
    return `topic ${t.name} created with ${t.partitions} partition(s)`;
  });
});
function deleteButton(name, allowed) {
  const b = document.createElement("button");
  b.type = "button"; b.textContent = "Delete"; b.className = "delete-topic admin"; b.dataset.topic = name;
  markAdmin(b);
  if (!b.disabled) markRight(b, !!allowed, "DELETE on the topic");
  b.setAttribute("aria-label", `delete topic ${name}`);
  b.addEventListener("click", () => {
    if (!confirm(`Delete topic ${name}? Its partitions, messages, configs and consumer group offsets are removed for good.`)) return;
    action("topics", async () => {
      const t = await api("/v1/topics/" + encodeURIComponent(name), { method: "DELETE" });
      return `topic ${t.name} deleted (${t.partitions} partition(s))`;
    });
  });
  return b;
}
$("reassign-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  action("topics", async () => {
    const r = await post("/v1/admin/reassignments", { topic: $("reassign-topic").value.trim(),
      partition: Number($("reassign-partition").value), to: Number($("reassign-to").value) });
    return `${r.topic}-${r.partition} is led by node ${r.to} (leader epoch ${r.leader_epoch})`;
  });
});
$("run-compaction").addEventListener("click", () => action("objects", async () => {
  const r = await post("/v1/admin/compaction", {});
  return `compaction ran: ${r.objects_in} object(s) in, ${r.objects_out} out` + (r.errors?.length ? `; errors: ${r.errors.join("; ")}` : "");
}));

// the other pages' scripts (/console/*.js) register their loaders before the first page is shown
addEventListener("DOMContentLoaded", () => {
  const q = new URLSearchParams(location.search);
  if (q.get("page") === "topic" && q.get("topic")) openTopic(q.get("topic")); else show(q.get("page") || "search");
});
