"use strict";
// The Index page's tiers, key filters and merge progress, from GET /v1/admin/index/status (read scope): files and
// bytes per merge tier, the filters held in memory and their answers, the merge backlog and the last merge, and the
// cluster's merges of departed nodes' and rescued files (the failover leader's; its own section, added here).
// Wraps the page's loader from console.js and uses its helpers (api, fillTable, fmtBytes, fmtTime, loaders).
function fmtSpan(ms) {
  if (ms == null) return "as written";
  const h = ms / 3600000;
  return h % 168 === 0 ? (h / 168) + " week(s)" : h % 24 === 0 ? (h / 24) + " day(s)" : h + " h";
}
function card(label, value, note, id) {
  const c = document.createElement("div"); c.className = "card"; c.textContent = label;
  if (id) c.id = id;
  const b = document.createElement("b"); b.textContent = value; c.appendChild(b);
  if (note) { const n = document.createElement("span"); n.className = "muted"; n.textContent = note; c.appendChild(n); }
  return c;
}
function fillCards(id, cards) { $(id).innerHTML = ""; for (const c of cards) $(id).appendChild(c); }
const drawFiles = loaders.index;
loaders.index = async function () {
  const [, s] = await Promise.all([drawFiles(), api("/v1/admin/index/status")]);
  fillTable("index-tiers", s.tiers.map((t) => [t.tier, fmtSpan(t.span_ms), t.files, fmtBytes(t.bytes), t.items,
    Object.entries(t.states).map(([k, n]) => `${k} ${n}`).join(", ") || "none"]));
  const f = s.filters, answered = f.answers_no + f.answers_maybe;
  fillCards("index-filters", [
    card("Filters held", f.held, f.enabled ? "" : "key filters are off", "filters-held"),
    card("Filter cache", fmtBytes(f.bytes_held), "of " + fmtBytes(f.max_bytes), "filters-bytes"),
    card("Files skipped (no)", f.answers_no, answered ? `${Math.round(100 * f.answers_no / answered)}% of answers` : "no lookups yet", "filters-no"),
    card("Files read (maybe)", f.answers_maybe, `${f.false_positives} false positive(s)`, "filters-maybe"),
    card("Unusable filters", f.unusable, "the file is read instead", "filters-unusable"),
  ]);
  const m = s.merging;
  fillCards("index-merging", [
    card("Backlog", m.backlog_files + " file(s)", m.enabled ? "waiting in closed windows" : "merging is off", "merge-backlog"),
    card("Merges", m.merges, `${m.files_merged} file(s) in, ${fmtBytes(m.bytes_written)} written`, "merge-count"),
    card("Last merge", m.last_merge_ms ? fmtTime(m.last_merge_ms) : "none yet", m.last_merged_file ?? "", "merge-last"),
    card("Inputs to delete", m.awaiting_release, "after the grace period", "merge-release"),
  ]);
  drawClusterMerging(s.cluster_merging);
};
function drawClusterMerging(c) {
  if (!$("index-cluster-merging")) {  // a section after "Merging": the page's HTML predates it
    const h = document.createElement("h2"); h.textContent = "Cluster merges (departed and rescued files)";
    const d = document.createElement("div"); d.id = "index-cluster-merging"; d.className = "cards";
    $("index-merging").after(h, d);
  }
  if (!c || !c.leader) {
    fillCards("index-cluster-merging", [card("This node", "not merging",
      "the failover leader (the lowest live node) merges published files when cluster_merge_tiers > 0",
      "cluster-merge-leader")]);
    return;
  }
  fillCards("index-cluster-merging", [
    card("Backlog", c.backlog + " file(s)", c.tiers_ms.length ? "due for a merge" : "cluster merging is off",
      "cluster-merge-backlog"),
    card("Merges", c.merges, `${c.files_merged} file(s) in, ${fmtBytes(c.bytes_written)} written` +
      (c.failures ? `, ${c.failures} failed` : ""), "cluster-merge-count"),
    card("Last merge", c.last_merge_ms ? fmtTime(c.last_merge_ms) : "none yet", c.last_merged_file ?? "",
      "cluster-merge-last"),
    card("Inputs to delete", c.awaiting_release, `after the grace (${Math.round(c.grace_ms / 1000)} s)`,
      "cluster-merge-release"),
    card("Tiers", c.tiers_ms.map(fmtSpan).join(", ") || "none", `${c.runs} pass(es)`, "cluster-merge-tiers"),
  ]);
}
