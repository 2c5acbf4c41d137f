"use strict";
// The topic page: each partition's start/end offsets, leader and bytes, the topic's configs, a message browser
// (one partition or all, from an offset, a time or the newest N; next and previous pages; a live tail that polls
// for what is stored after the shown positions: each a single POST /v1/console/page) and a produce form. Uses the page's helpers (api, post, fillTable, loaders, show, showDetail).
let browseTopic = null, bounds = {};  // the topic shown; partition -> {start, end} as last read
let pageStart = null, pageNext = null;  // partition -> first offset shown / offset after the last shown
let tailing = null;  // the live tail's timer, null when off
const TAIL_EVERY_MS = 500, TAIL_ROWS = 500, TAIL_BATCH = 100;

let boundsAsked = null;  // {topic, answer}: the partitions asked for by openTopic, while the page's scopes load
function askPartitions(topic) {
  const answer = api("/v1/console/partitions?topic=" + encodeURIComponent(topic));
  answer.catch(() => {});  // awaited by readBounds: its error is shown there
  return { topic, answer };
}

function openTopic(name) {
  if (browseTopic !== name) { pageStart = pageNext = null; fillTable("browse-table", []); }
  browseTopic = name;
  boundsAsked = askPartitions(name);  // on its way while show() asks for the scopes (the first load)
  history.replaceState(null, "", "?page=topic&topic=" + encodeURIComponent(name) + location.hash);
  return show("topic");
}

async function readBounds() {
  const asked = boundsAsked && boundsAsked.topic === browseTopic ? boundsAsked : askPartitions(browseTopic);
  boundsAsked = null;
  const parts = (await asked.answer).partitions;
  bounds = {};
  for (const p of parts) bounds[p.partition] = { start: p.start_offset, end: p.end_offset };
  return parts;
}

loaders.topic = async function () {
  if (!browseTopic) throw new Error("no topic chosen: click a topic's name on the Topics page");
  $("topic-title").textContent = browseTopic;
  // the partitions table is drawn as soon as its rows arrive; the configs and the first page of messages after
  const detail = api("/v1/topics/" + encodeURIComponent(browseTopic));
  detail.catch(() => {});  // awaited below: its error is shown there
  const parts = await readBounds();
  // the first rows are painted before the rest of the page's work: the other rows, the partition choice, and the
  // first page of messages (whose answer the server works on while the browser lays the table out)
  await fillTableInFrames("topic-partitions", parts.map((p) => [p.partition, p.start_offset, p.end_offset,
                                                               p.leader ?? "none", fmtBytes(p.bytes)]));
  const select = $("browse-partition"), chosen = select.value;
  const options = document.createDocumentFragment();
  options.append(new Option("all", "all"));
  for (const p of parts) options.append(new Option(String(p.partition), String(p.partition)));
  select.replaceChildren(options);
  select.value = parts.some((p) => String(p.partition) === chosen) ? chosen : "all";
  const first = pageStart === null ? browse() : null;
  fillTable("topic-configs", Object.entries((await detail).configs).map(([k, c]) => [k, c.value, c.source]));
  if (first) await first;
};

function chosenPartitions() {
  const v = $("browse-partition").value;
  return v === "all" ? Object.keys(bounds).map(Number) : [Number(v)];
}
function pageSize() { return Math.max(1, Math.min(1000, Number($("browse-n").value) || 20)); }
// one page over the chosen partitions, read and merged by store time on the server (POST /v1/console/page):
// `body` is {after: positions} (next), {before: positions} (previous), {offset}, {time} or nothing (the newest)
async function fetchPage(body) {
  const page = await post("/v1/console/page?topic=" + encodeURIComponent(browseTopic), { n: pageSize(), ...body });
  for (const [p, b] of Object.entries(page.bounds)) bounds[p] = b;
  return page;
}
async function pageForward(from) { const pg = await fetchPage({ after: from }); drawPage(pg.messages, pg.start, pg.next); }
async function pageBack(before) { const pg = await fetchPage({ before }); drawPage(pg.messages, pg.start, pg.next); }
function drawPage(messages, start, next) {
  pageStart = start; pageNext = next;
  const tbody = $("browse-table").tBodies[0]; tbody.innerHTML = "";
  for (const m of messages) addBrowseRow(m);
  $("browse-empty").style.display = messages.length ? "none" : "block";
  const ps = Object.keys(start).map(Number);
  $("browse-prev").disabled = ps.every((p) => start[p] <= bounds[p].start);
  $("browse-next").disabled = ps.every((p) => next[p] >= bounds[p].end);
  $("browse-status").textContent = messages.length ? `${messages.length} message(s): `
    + ps.filter((p) => next[p] > start[p]).map((p) => `partition ${p} offsets ${start[p]}-${next[p] - 1}`).join(", ")
    : "no messages";
}
function addBrowseRow(m, fresh = false) {
  const tr = $("browse-table").tBodies[0].insertRow();
  const headers = messageHeaders(m).map(shownHeader).join(", ");
  for (const v of [m.partition, m.offset, fmtTime(m.timestamp), shownKey(m), headers]) tr.insertCell().textContent = v;
  const cell = tr.insertCell(); cell.className = "preview"; cell.textContent = preview(m);
  if (fresh) tr.className = "fresh";
  tr.addEventListener("click", () => showDetail(m));
}

// the first page: the newest N, from an offset or from a time, of one partition or all, in one request
async function browse() {
  const mode = $("browse-from").value, at = $("browse-at").value.trim(), chosen = $("browse-partition").value;
  const body = chosen === "all" ? {} : { partitions: [Number(chosen)] };
  if (mode !== "newest") {
    if (!at) throw new Error(mode === "offset" ? "Enter the offset to read from." : "Enter the time to read from (ISO 8601).");
    if (mode === "offset" && !/^\d+$/.test(at)) throw new Error(`offset: ${at} is not a whole number`);
    if (mode === "offset") body.offset = Number(at); else body.time = at;
  }
  const pg = await fetchPage(body);
  drawPage(pg.messages, pg.start, pg.next);
}
async function browseAction(fn) {
  $("topic-error").textContent = "";
  try { await fn(); } catch (e) { $("topic-error").textContent = e.message; }
}
$("browse-form").addEventListener("submit", (ev) => { ev.preventDefault(); stopTail(); browseAction(browse); });
$("browse-next").addEventListener("click", () => browseAction(() => pageForward(pageNext)));
$("browse-prev").addEventListener("click", () => browseAction(() => pageBack(pageStart)));

// -- live tail: from the end of the chosen partitions, every new message as it is stored
async function tailOnce() {
  const got = (await fetchPage({ after: pageNext, n: TAIL_BATCH })).messages;  // oldest first, one request
  for (const m of got) {
    pageNext[m.partition] = Math.max(pageNext[m.partition], m.offset + 1);
    addBrowseRow(m, true);
  }
  const tbody = $("browse-table").tBodies[0];
  while (tbody.rows.length > TAIL_ROWS) tbody.deleteRow(0);
  if (got.length) {
    $("browse-empty").style.display = "none";
    tbody.rows[tbody.rows.length - 1].scrollIntoView({ block: "nearest" });
  }
}
function stopTail() {
  if (tailing !== null) clearTimeout(tailing);
  tailing = null;
  $("browse-tail").setAttribute("aria-pressed", "false"); $("browse-tail").textContent = "Live tail";
  $("browse-tail").classList.remove("tailing");
}
leaving.push(stopTail);
$("browse-tail").addEventListener("click", () => browseAction(async () => {
  if (tailing !== null) { stopTail(); return; }
  await readBounds();  // from the end of the chosen partitions: what is stored from now on
  pageNext = Object.fromEntries(chosenPartitions().map((p) => [p, bounds[p].end]));
  $("browse-tail").setAttribute("aria-pressed", "true"); $("browse-tail").textContent = "Stop tail";
  $("browse-tail").classList.add("tailing");
  $("browse-prev").disabled = $("browse-next").disabled = true;
  $("browse-status").textContent = "following new messages";
  const tick = async () => {
    try { await tailOnce(); $("topic-error").textContent = ""; } catch (e) { $("topic-error").textContent = e.message; }
    if (tailing !== null) tailing = setTimeout(tick, TAIL_EVERY_MS);
  };
  tailing = setTimeout(tick, 0);
}));

// -- produce (the produce scope)
// the headers field of a message to produce: {headers: {name: value}}, or {header_list: [...]} when a name is
// given twice (each one sent, in order)
function parseHeaders(text) {
  const pairs = [];
  for (const [i, line] of text.split("\n").entries()) {
    if (!line.trim()) continue;
    const at = line.indexOf(":");
    if (at <= 0) throw new Error(`headers line ${i + 1}: write name: value`);
    pairs.push([line.slice(0, at).trim(), line.slice(at + 1).trim()]);
  }
  if (new Set(pairs.map(([name]) => name)).size < pairs.length) {
    return { header_list: pairs.map(([name, value]) => ({ name, value })) };
  }
  return { headers: Object.fromEntries(pairs) };
}
$("produce-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  $("topic-error").textContent = ""; $("topic-ok").textContent = "";
  browseAction(async () => {
    const m = { value: $("produce-value").value, ...parseHeaders($("produce-headers").value) };
    // binary keys and values as base64 (the server checks it: bad base64 is refused naming the field); a key
    // shown as base64:... and pasted with the prefix is taken without it, as the lookup form does
    // (whitespace dropped: base64 wrapped at 76 characters, as the base64 tool writes it, is taken whole)
    if ($("produce-encoding").value === "base64") { m.value = m.value.replace(/\s+/g, ""); m.encoding = "base64"; }
    if ($("produce-key").value !== "") m.key = $("produce-key").value;
    if (m.key !== undefined && $("produce-key-encoding").value === "base64") {
      m.key = m.key.replace(/\s+/g, "").replace(/^base64:/, ""); m.key_encoding = "base64";
    }
    if ($("produce-partition").value !== "") m.partition = Number($("produce-partition").value);
    const r = (await post(`/v1/topics/${encodeURIComponent(browseTopic)}/messages`, { messages: [m] })).results[0];
    $("topic-ok").textContent = `produced to partition ${r.partition} at offset ${r.offset} (message id ${r.msg_id})`;
    if (tailing === null) {  // the new message shown at the end of the newest page
      await loaders.topic(); $("browse-from").value = "newest"; await browse();
    }
  });
});
