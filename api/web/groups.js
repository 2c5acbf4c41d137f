"use strict";
// The Groups page: every consumer group with its total lag, one group's members and partitions (committed
// offset, end offset, lag, age of the oldest unconsumed message), and the admin's offset reset with a dry run
// first. Uses the page's helpers (api, post, fillTable, loaders, markAdmin) from console.js.
let openGroup = null, previewed = null;  // the group shown; the reset request whose dry run is on screen
const DESCRIBED_AT_MOST = 200;  // the list asks each group's lag; past this many, the lag shows on click

function fmtAge(ms) {
  if (ms == null) return "";
  if (!ms) return "0";
  if (ms < 1000) return ms + " ms";
  if (ms < 120000) return (ms / 1000).toFixed(1) + " s";
  if (ms < 7200000) return Math.round(ms / 60000) + " min";
  if (ms < 172800000) return (ms / 3600000).toFixed(1) + " h";
  return Math.round(ms / 86400000) + " d";
}
// no committed offset: no lag to tell ("-", as kafka-consumer-groups shows it), not 0
function lagCell(lag) { return lag ? span(String(lag), "lagging") : (lag ?? "-"); }
async function describeGroup(name) { return api("/v1/groups/" + encodeURIComponent(name)); }

loaders.groups = async function () {
  const groups = await api("/v1/groups");
  const described = await Promise.all(groups.slice(0, DESCRIBED_AT_MOST).map(
    (g) => describeGroup(g.group).catch(() => null)));
  fillTable("groups-table", groups.map((g, i) => {
    const d = described[i];
    const link = document.createElement("a"); link.href = "#"; link.textContent = g.group; link.className = "group-link";
    link.addEventListener("click", (ev) => { ev.preventDefault(); showGroup(g.group); });
    return [link, g.state, g.protocol || g.protocol_type || "", g.members, g.coordinator,
            d ? lagCell(d.lag) : "", d ? fmtAge(d.lag_ms) : ""];
  }), "groups-empty");
  if (openGroup !== null && groups.some((g) => g.group === openGroup)) await showGroup(openGroup, true);
  else $("group-detail").hidden = true;
};

async function showGroup(name, keepPlan = false) {
  const d = await describeGroup(name).catch((e) => { $("groups-error").textContent = e.message; return null; });
  if (d === null) return;
  if (openGroup !== name || !keepPlan) { previewed = null; $("reset-apply").disabled = true; fillTable("reset-plan", []); }
  openGroup = name;
  $("group-detail").hidden = false;
  $("group-name").textContent = d.group;
  $("group-state").textContent = `${d.state} · ${d.members} member(s) · coordinator node ${d.coordinator} · lag ${d.lag ?? "-"}`
    + (d.lag ? ` · oldest unconsumed ${fmtAge(d.lag_ms)} old` : "");
  fillTable("group-members", d.member_details.map((m) => [m.member_id, m.client_id, m.client_host,
    m.assignment.map((a) => `${a.topic}-${a.partition}`).join(", ")]), "group-members-empty");
  fillTable("group-offsets", d.offsets.map((r) => [r.topic, r.partition, r.committed_offset ?? "-", r.end_offset,
    lagCell(r.lag), fmtAge(r.lag_ms), r.client_id ?? ""]));
}

function resetRequest() {
  const to = $("reset-to").value, value = $("reset-value").value.trim();
  const body = { to, topics: $("reset-topics").value.split(/\s+/).filter(Boolean) };
  if (to === "datetime") body.datetime = /^\d+$/.test(value) ? Number(value) : value;
  if (to === "offset") body.offset = value === "" ? null : Number(value);
  if (to === "shift") body.shift_by = value === "" ? null : Number(value);
  return body;
}
function planRows(plan) {
  return plan.offsets.map((r) => [r.topic, r.partition, r.current_offset ?? "none", r.new_offset]);
}
$("reset-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const body = resetRequest();
  action("groups", async () => {
    const plan = await post(`/v1/groups/${encodeURIComponent(openGroup)}/offsets`, { ...body, dry_run: true });
    fillTable("reset-plan", planRows(plan));
    previewed = JSON.stringify(body);
    markAdmin($("reset-apply"));
    return `dry run: ${plan.offsets.length} partition(s) of ${plan.group} would move as listed; Apply stores them`;
  });
});
for (const id of ["reset-to", "reset-value", "reset-topics"]) {  // a changed request needs a new preview
  $(id).addEventListener("input", () => { previewed = null; $("reset-apply").disabled = true; });
}
$("reset-apply").addEventListener("click", () => {
  const body = resetRequest();
  if (previewed !== JSON.stringify(body)) return;
  action("groups", async () => {
    const plan = await post(`/v1/groups/${encodeURIComponent(openGroup)}/offsets`, { ...body, dry_run: false });
    fillTable("reset-plan", planRows(plan));
    previewed = null; $("reset-apply").disabled = true;
    return `offsets of ${plan.group} reset on ${plan.offsets.length} partition(s)`;
  });
});
