"use strict";
// The Nodes page's failover history: per failed node, the failovers GET /v1/cluster/failovers kept (read scope),
// newest first: when, the epoch it was fenced at, which survivor took over, the partitions it took (only those
// of topics the caller may describe: the endpoint filters them) with their committed ends, the WAL records it
// replayed (a local WAL replays none: what the node acknowledged past the committed ends is lost), how long it
// took and the dead node's local index entries rebuilt. Wraps the Nodes loader from console.js (and
// throughput.js) and adds its own part below the nodes table; uses the page's helpers (api, fillTable, fmtTime,
// loaders, span, $).
(function () {
  const part = document.createElement("div");
  part.id = "failovers";
  part.innerHTML = `
    <h3>Failovers</h3>
    <div id="failovers-error" class="page-error" role="alert"></div>
    <p class="muted">Per failed node, newest first: the survivor that fenced it and took its partitions over.
      The history kept per node is bounded (setting failover_history_per_node).</p>
    <span id="failovers-summary" class="muted"></span>
    <table id="failovers-table"><thead><tr><th>Node</th><th>When</th><th>Fenced at epoch</th><th>Taken by</th>
      <th>WAL</th><th>Partitions taken (committed end)</th><th>Records replayed</th><th>Took</th>
      <th>Index entries rebuilt</th></tr></thead><tbody></tbody></table>
    <div id="failovers-empty" class="empty" style="display:none">No node failed over.</div>`;
  $("nodes-empty").after(part);
})();

function fmtTaken(f) {
  const ends = f.committed_ends || {};
  const named = (f.partitions || []).map((p) => (ends[p] != null ? `${p} (${ends[p]})` : p));
  return named.join(", ") || "none you may see";
}
function fmtReplayed(f) {
  if (f.wal !== "shared") return span("none: local WAL, records acknowledged past the committed ends are lost", "page-error");
  const of = (f.replayed_wals_of || []).length > 1 ? ` (WALs of nodes ${f.replayed_wals_of.join(", ")})` : "";
  return `${f.replayed_records ?? 0}${of}`;
}
function fmtRescue(f) {
  const r = f.index_rescue;
  if (!r) return "";
  if (r.error) return span(r.error, "page-error");
  return `${r.entries} in ${r.files} file(s), ${r.seconds.toFixed(3)} s`;
}
async function failovers() {
  $("failovers-error").textContent = "";
  let all;
  try { all = (await api("/v1/cluster/failovers")).failovers; } catch (e) {
    $("failovers-error").textContent = "failovers: " + e.message; fillTable("failovers-table", []); return;
  }
  // grouped by node (lowest id first), each node's newest first; the endpoint answers newest first overall
  const order = [...new Set(all.map((f) => f.node))].sort((a, b) => a - b);
  const rows = [], rowNodes = [];
  for (const node of order) {
    const mine = all.filter((f) => f.node === node).sort((a, b) => b.at_ms - a.at_ms || b.fenced_epoch - a.fenced_epoch);
    mine.forEach((f, i) => rows.push([i === 0 ? `${node} (${mine.length})` : "", fmtTime(f.at_ms), f.fenced_epoch, f.by,
      f.wal, fmtTaken(f), fmtReplayed(f), f.seconds != null ? f.seconds.toFixed(3) + " s" : "", fmtRescue(f)]));
    rowNodes.push(...mine.map(() => String(node)));
  }
  fillTable("failovers-table", rows, "failovers-empty");
  // each row names its node (data-node); only a node's first row shows it, with how many it has kept
  [...$("failovers-table").tBodies[0].rows].forEach((tr, i) => { tr.dataset.node = rowNodes[i]; });
  $("failovers-summary").textContent = `${all.length} failover(s) of ${order.length} node(s) kept`;
}
{
  const draw = loaders.nodes;
  loaders.nodes = async function () { await Promise.all([draw(), failovers()]); };
}
