"use strict";
// The Access page: who the caller is and what it may do (GET /v1/admin/acls/my-rights, decided by the server from
// the token's scopes and the access control rules), the rules (GET /v1/admin/acls: the admin scope and DESCRIBE on
// the cluster), adding and removing rules (POST / DELETE /v1/admin/acls: ALTER on the cluster). A caller that may
// list the rules but not change them sees them read-only; one that may not list them sees only its own access.
// The topic page's Produce button follows the caller's WRITE on the topic, the Groups page's offset reset its READ on the group.
// Uses the page's helpers (api, post, fillTable, loaders, action, can, markScope, markRight, myRights, rights).
function accessCard(label, value, note) {
  const c = document.createElement("div"); c.className = "card"; c.textContent = label;
  const b = document.createElement("b"); b.textContent = value; c.appendChild(b);
  if (note) { const n = document.createElement("span"); n.className = "muted"; n.textContent = note; c.appendChild(n); }
  return c;
}
const RULE_FIELDS = ["principal", "resource_type", "pattern_type", "resource_name", "operation", "permission", "host"];
function ruleText(r) {
  return `${r.permission} ${r.principal} ${r.operation} on ${r.resource_type} ${r.resource_name}`
    + (r.pattern_type === "prefixed" ? " (prefix)" : "") + (r.host !== "*" ? ` from ${r.host}` : "");
}
function removeRuleButton(r, allowed) {
  const b = document.createElement("button");
  b.type = "button"; b.textContent = "Remove"; b.className = "remove-acl admin";
  b.setAttribute("aria-label", "remove rule " + ruleText(r));
  markRight(b, allowed, "the admin scope and ALTER on the cluster");
  b.addEventListener("click", () => {
    if (!confirm(`Remove the rule: ${ruleText(r)}?`)) return;
    action("acls", async () => {
      const q = new URLSearchParams(RULE_FIELDS.map((f) => [f, r[f]]));
      const body = await api("/v1/admin/acls?" + q.toString(), { method: "DELETE" });
      return `${body.removed.length} rule(s) removed: ${body.removed.map(ruleText).join("; ")}`;
    });
  });
  return b;
}
loaders.acls = async function () {
  const me = rights = await api("/v1/admin/acls/my-rights");
  const onCluster = Object.entries(me.cluster).filter(([, v]) => v).map(([k]) => k);
  $("acls-me").replaceChildren(
    accessCard("Principal", me.principal, me.superuser ? "superuser: every operation" : ""),
    accessCard("Scopes", me.scopes.join(", ") || "none", "from the token"),
    accessCard("Rules", me.rules_active ? "enforced" : "none", me.rules_active ? "default deny" : "the scopes alone decide"),
    accessCard("On the cluster", onCluster.join(", ") || "nothing", "describe: list rules; alter: change them"));
  const mayList = me.scopes.includes("admin") && me.cluster.describe;
  const mayChange = me.scopes.includes("admin") && me.cluster.alter;
  $("acls-hidden").hidden = mayList;
  $("acls-list").hidden = !mayList;
  $("acls-add-panel").hidden = !mayChange;
  markRight($("acl-add"), mayChange, "the admin scope and ALTER on the cluster");
  if (!mayList) { fillTable("acls-table", []); return; }
  const who = $("acls-filter-principal").value.trim();
  const body = await api("/v1/admin/acls" + (who ? "?principal=" + encodeURIComponent(who) : ""));
  fillTable("acls-table", body.rules.map((r) => [r.principal, r.resource_type, r.pattern_type, r.resource_name,
    r.operation, r.permission, r.host, removeRuleButton(r, mayChange)]), "acls-empty");
};
$("acls-filter-principal").addEventListener("change", () => show("acls"));
$("acl-add-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  action("acls", async () => {
    const rule = { principal: $("acl-principal").value.trim(), resource_type: $("acl-resource-type").value,
                   pattern_type: $("acl-pattern-type").value, resource_name: $("acl-resource-name").value.trim(),
                   operation: $("acl-operation").value, permission: $("acl-permission").value,
                   host: $("acl-host").value.trim() || "*" };
    const body = await post("/v1/admin/acls", { rules: [rule] });
    return body.added ? `rule added: ${ruleText(body.rules[0])}` : `the rule was already there: ${ruleText(rule)}`;
  });
});

// the topic page: Produce only with WRITE on the topic (and the produce scope)
const drawTopic = loaders.topic;
loaders.topic = async function () {
  if (!browseTopic) return drawTopic();
  const mine = myRights([browseTopic]).catch(() => null);
  try { await drawTopic(); } finally {
    await scopesAsked;  // show() does not wait for the scopes before drawing this page
    const r = await mine, b = $("produce");
    markScope(b, "produce");
    if (!b.disabled) markRight(b, !!(r && r.topics[browseTopic] && r.topics[browseTopic].produce), "WRITE on the topic");
  }
};

// the Groups page: an offset reset's Preview only with READ on the group (and the admin scope)
const showGroupPlain = showGroup;
showGroup = async function (name, keepPlan = false) {
  const mine = myRights([], [name]).catch(() => null);
  await showGroupPlain(name, keepPlan);
  const r = await mine, b = $("reset-preview");
  markAdmin(b);
  if (!b.disabled) markRight(b, !!(r && r.groups[name] && r.groups[name].reset_offsets), "READ on the group");
};
