"use strict";
// The search page (messages by key, a message by id) and the message detail every page opens (showDetail,
// preview); uses the shell's helpers (console.js).
let cursor = null, lastQuery = null, shown = 0, current = null;
// -- search and message detail ---------------------------------------------------------------------------
function toHex(bytes) { return Array.from(bytes, (c) => c.toString(16).padStart(2, "0")).join(" "); }
function bytesOf(m) {
  if (m.value == null) return new Uint8Array();
  if (m.encoding === "base64") return Uint8Array.from(atob(m.value), (c) => c.charCodeAt(0));
  return new TextEncoder().encode(m.value);
}
function clear() {
  $("results").tBodies[0].innerHTML = ""; $("detail").style.display = "none";
  $("error").textContent = ""; $("summary").textContent = ""; shown = 0;
}
function preview(m) {  // the value's first characters; binary values by their size
  if (m.value == null) return "(null)";
  if (m.encoding === "base64") return `(binary, ${bytesOf(m).length} bytes)`;
  return m.value.length > 80 ? m.value.slice(0, 80) + "\u2026" : m.value;
}
function addRows(messages) {
  const tbody = $("results").tBodies[0];
  for (const m of messages) {
    const tr = tbody.insertRow();
    for (const v of [m.msg_id, m.partition, m.offset, shownKey(m), fmtTime(m.timestamp)]) {
      tr.insertCell().textContent = v;
    }
    const cell = tr.insertCell(); cell.className = "preview"; cell.textContent = preview(m);
    tr.addEventListener("click", () => showDetail(m));
  }
  shown += messages.length;
  $("summary").textContent = shown + " message(s)";
}
function showValue(view) {
  const m = current;
  if (m.value == null) { $("detail-encoding").textContent = "(null)"; $("detail-value").textContent = "(null)"; return; }
  if (view === "hex") {
    $("detail-encoding").textContent = m.encoding === "base64" ? "(binary, hex)" : "(hex)";
    $("detail-value").textContent = toHex(bytesOf(m));
  } else if (view === "json") {
    $("detail-encoding").textContent = "(JSON)";
    try {
      const text = m.encoding === "base64" ? new TextDecoder("utf-8", { fatal: true }).decode(bytesOf(m)) : m.value;
      $("detail-value").textContent = JSON.stringify(JSON.parse(text), null, 2);
    } catch (e) { $("detail-value").textContent = "not JSON: " + e.message; }
  } else {
    $("detail-encoding").textContent = "(text)";
    $("detail-value").textContent = m.encoding === "base64" ? new TextDecoder().decode(bytesOf(m)) : m.value;
  }
}
function showDetail(m) {
  current = m;
  $("detail").style.display = "block";
  $("detail-id").textContent = m.msg_id;
  $("detail-meta").textContent = `topic ${m.topic} · partition ${m.partition} · offset ${m.offset} · key ${m.key == null ? "(none)" : shownKey(m)} · ${fmtTime(m.timestamp)}`;
  $("detail-headers").textContent = messageHeaders(m).map(shownHeader).join("\n") || "(none)";
  showValue(m.encoding === "base64" ? "hex" : "text");
}
for (const v of ["text", "json", "hex"]) $("view-" + v).addEventListener("click", () => showValue(v));
async function searchPage() {
  const q = new URLSearchParams(lastQuery);
  if (cursor) q.set("cursor", cursor);
  const body = await api("/v1/messages?" + q.toString());
  addRows(body.messages);
  cursor = body.next_cursor;
  $("more").style.display = cursor ? "inline-block" : "none";
}
$("by-key").addEventListener("submit", async (ev) => {
  ev.preventDefault(); clear(); cursor = null; $("more").style.display = "none";
  const missing = ["topic", "key"].filter((f) => !$(f).value.trim());
  if (missing.length) {
    $("error").textContent = `Enter ${missing.map((f) => "a " + f).join(" and ")} to search by key `
      + "(or a message id below to look one up).";
    $((missing[0])).focus(); return;
  }
  const q = { topic: $("topic").value.trim(), key: $("key").value, max: $("max").value || "50" };
  // a key shown as base64:... (not UTF-8) is asked by its bytes: the base64 after the prefix, if pasted with it
  if ($("key-encoding").value === "base64") { q.key = q.key.trim().replace(/^base64:/, ""); q.key_encoding = "base64"; }
  const b = ms($("begin")), e = ms($("end"));
  if (b) q.begin = b;
  if (e) q.end = e;
  lastQuery = q;
  try { await searchPage(); } catch (err) { $("error").textContent = err.message; }
});
$("more").addEventListener("click", async () => {
  try { await searchPage(); } catch (err) { $("error").textContent = err.message; }
});
$("by-id").addEventListener("submit", async (ev) => {
  ev.preventDefault(); clear(); $("more").style.display = "none";
  if (!$("msgid").value.trim()) {
    $("error").textContent = "Enter a message id (32 hex characters, as produce and search print it) to look it up.";
    $("msgid").focus(); return;
  }
  try {
    const m = await api("/v1/messages/" + encodeURIComponent($("msgid").value.trim()));
    addRows([m]); showDetail(m);
  } catch (err) { $("error").textContent = err.message; }
});
$("detail-copy").addEventListener("click", async () => {
  const text = JSON.stringify(current, null, 2);
  try { await navigator.clipboard.writeText(text); $("detail-copied").textContent = "copied"; }
  catch (e) { $("detail-copied").textContent = "the browser refused the clipboard: " + e.message; }
});
