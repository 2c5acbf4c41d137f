"use strict";
// The Value search page: starts a value search (POST /v1/searches: a Spark job over the topic's objects), polls
// its progress and new matches (GET /v1/searches/{id}?after=N) into the table, cancels it (DELETE). Uses the
// page's helpers (api, post, ms, fillTable, fmtTime, loaders from console.js; preview, showDetail from lookup.js).
let vsId = null, vsShown = 0, vsTimer = null;
const VS_ACTIVE = ["queued", "running"];

function vsRows(matches) {
  const tbody = $("vs-results").tBodies[0];
  for (const m of matches) {
    const tr = tbody.insertRow();
    for (const v of [m.msg_id, m.partition, m.offset, shownKey(m), fmtTime(m.timestamp)]) tr.insertCell().textContent = v;
    const cell = tr.insertCell(); cell.className = "preview"; cell.textContent = preview(m);
    tr.addEventListener("click", () => showDetail(m));
  }
  vsShown += matches.length;
}
function vsShow(s) {
  vsRows(s.matches);
  const p = s.progress, total = p.partitions_total;
  const parts = total == null ? "planning" : `${p.partitions_done}/${total} partition(s) of the scan read`;
  const what = s.state === "cancelled" ? "cancelled" : s.cancel_requested && VS_ACTIVE.includes(s.state) ? "cancelling" : s.state;
  $("vs-state").textContent = `search ${s.id}: ${what} · ${parts} · ${p.tasks_running} task(s) running · `
    + `${s.matches_total} match(es)` + (s.truncated ? ` (stopped at the limit, ${s.limit})` : "")
    + ` · ${p.objects} object(s), ${fmtBytes(p.bytes)}` + (s.error ? ` · error: ${s.error}` : "");
  $("vs-progress").max = total || 1;
  $("vs-progress").value = s.state === "done" ? (total || 1) : p.partitions_done;
  $("vs-cancel").disabled = !VS_ACTIVE.includes(s.state);
  document.body.dataset.search = s.state;  // tests wait on this
}
async function vsPoll() {
  clearTimeout(vsTimer);
  if (vsId === null) return;
  const id = vsId;
  try {
    const s = await api(`/v1/searches/${encodeURIComponent(id)}?after=${vsShown}`);
    if (id !== vsId) return;
    vsShow(s);
    if (VS_ACTIVE.includes(s.state)) { vsTimer = setTimeout(vsPoll, 500); return; }
    await vsRecent();
  } catch (e) { $("values-error").textContent = e.message; }
}
async function vsRecent() {
  const r = await api("/v1/searches");
  fillTable("vs-recent", r.searches.map((s) => [s.id, s.topic, s.where ?? s.key.join(", "), s.state, s.matches_total,
                                               fmtTime(s.created_ms)]), "vs-recent-empty");
}
loaders.values = async function () {
  await vsRecent();
  if (vsId !== null) await vsPoll();  // back on the page: go on following the search shown
};
leaving.push(() => clearTimeout(vsTimer));

$("vs-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("values-error").textContent = "";
  const topic = $("vs-topic").value.trim(), where = $("vs-where").value.trim(), key = $("vs-key").value;
  if (!topic || (!where && !key)) {
    $("values-error").textContent = "Enter a topic and a predicate (or a key) to search.";
    $(topic ? "vs-where" : "vs-topic").focus(); return;
  }
  const body = { topic };
  if (where) body.where = where;
  if (key) body.key = key;
  const f = ms($("vs-from")), t = ms($("vs-to"));
  if (f) body.from = Number(f);
  if (t) body.to = Number(t);
  if ($("vs-limit").value) body.limit = Number($("vs-limit").value);
  clearTimeout(vsTimer); vsId = null; vsShown = 0; $("detail").style.display = "none";
  $("vs-results").tBodies[0].innerHTML = ""; $("vs-progress").value = 0;
  $("vs-start").disabled = true;
  $("vs-state").textContent = "starting (the first search of a node also starts its Spark session)\u2026";
  document.body.dataset.search = "starting";
  try {
    const s = await post("/v1/searches", body);
    vsId = s.id; vsShow(s); vsTimer = setTimeout(vsPoll, 300);
  } catch (e) {
    $("values-error").textContent = e.message; $("vs-state").textContent = ""; document.body.dataset.search = "refused";
  } finally { $("vs-start").disabled = false; }
});
$("vs-cancel").addEventListener("click", async () => {
  if (vsId === null) return;
  $("vs-cancel").disabled = true;
  try {
    const s = await api(`/v1/searches/${encodeURIComponent(vsId)}`, { method: "DELETE" });
    clearTimeout(vsTimer); vsShow(s); await vsRecent();
  } catch (e) { $("values-error").textContent = e.message; }
});
