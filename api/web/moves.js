"use strict";
// The Moves page: the partition moves the cluster recorded, newest first (GET /v1/cluster/moves, read scope): the
// self-balancer's decisions with their reason and the node loads they saw, rebalances and reassignments, who
// decided and how long the move took. Its section is built here; index.html holds its nav button.
// Uses the page's helpers (api, fillTable, fmtTime, loaders, show, span, $).
(function () {
  const section = document.createElement("section");
  section.dataset.page = "moves";
  section.innerHTML = `
    <div id="moves-error" class="page-error" role="alert"></div>
    <h2>Partition moves</h2>
    <p class="muted">Newest first: the self-balancer's moves (kind auto) with the reason it gave, rebalances and
      reassignments. The balancer moves one partition at a time, never one moved within its cool-down.</p>
    <label style="max-width: 16rem">Kind <select id="moves-kind">
      <option value="">all</option><option value="auto">auto (balancer)</option>
      <option value="rebalance">rebalance</option><option value="reassign">reassign</option>
    </select></label>
    <span id="moves-summary" class="muted"></span>
    <table id="moves-table"><thead><tr><th>When</th><th>Partition</th><th>From</th><th>To</th><th>Kind</th>
      <th>Reason</th><th>Node loads (B/s)</th><th>Decided by</th><th>Took</th></tr></thead><tbody></tbody></table>
    <div id="moves-empty" class="empty" style="display:none">No partition moved yet.</div>`;
  const sections = document.querySelectorAll("section[data-page]");
  sections[sections.length - 1].after(section);
  $("moves-kind").addEventListener("change", () => show("moves"));
})();

function fmtLoads(m) {
  if (!m.loads) return "";
  const mean = m.mean != null ? ` (mean ${Math.round(m.mean)})` : "";
  return Object.entries(m.loads).map(([n, v]) => `node ${n}: ${Math.round(v)}`).join(", ") + mean;
}
loaders.moves = async function () {
  const all = (await api("/v1/cluster/moves")).moves;
  const kind = $("moves-kind").value;
  const shown = kind ? all.filter((m) => m.kind === kind) : all;
  const auto = all.filter((m) => m.kind === "auto").length;
  $("moves-summary").textContent = `${all.length} move(s) recorded, ${auto} by the balancer`;
  fillTable("moves-table", shown.map((m) => [fmtTime(m.at_ms), `${m.topic}-${m.partition}`, m.from ?? "none", m.to,
    span(m.kind, "move-" + m.kind), m.reason ?? "", fmtLoads(m), m.by ?? "",
    m.seconds != null ? m.seconds.toFixed(3) + " s" : ""]), "moves-empty");
};
