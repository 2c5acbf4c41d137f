"use strict";
// Throughput sparklines: messages/s and bytes/s over the last hour per topic (Topics page) and per node (Nodes
// page), from GET /v1/console/throughput (each node's in-memory history, no Prometheus). Wraps the pages'
// loaders from console.js and adds the last column of each row; uses its helpers (api, fmtBytes, loaders).
const SVG = "http://www.w3.org/2000/svg";
const SPARK_W = 120, SPARK_H = 22;

function fmtRate(v, kind) {
  if (kind === "bytes") return fmtBytes(Math.round(v)) + "/s";
  return (v >= 100 ? Math.round(v) : v >= 10 ? v.toFixed(1) : v.toFixed(2)) + " msg/s";
}
// one inline SVG polyline of `values` (oldest first), scaled to its own peak; the label says the current rate
function sparkline(values, kind, what) {
  const wrap = document.createElement("span");
  wrap.className = "spark"; wrap.dataset.kind = kind;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", SPARK_W); svg.setAttribute("height", SPARK_H);
  svg.setAttribute("viewBox", `0 0 ${SPARK_W} ${SPARK_H}`);
  svg.setAttribute("role", "img");
  const peak = Math.max(0, ...values), last = values.length ? values[values.length - 1] : 0;
  const step = values.length > 1 ? SPARK_W / (values.length - 1) : SPARK_W;
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(SPARK_H - 1 - (peak ? v / peak : 0) * (SPARK_H - 2)).toFixed(1)}`);
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", points.join(" ")); line.setAttribute("fill", "none");
  line.setAttribute("stroke", kind === "bytes" ? "#0a7d28" : "#1f4fd1"); line.setAttribute("stroke-width", "1.2");
  svg.appendChild(line);
  const title = document.createElementNS(SVG, "title");
  title.textContent = `${what}: ${fmtRate(last, kind)} now, peak ${fmtRate(peak, kind)} over the last hour`;
  svg.appendChild(title);
  svg.setAttribute("aria-label", title.textContent);
  const label = document.createElement("span");
  label.className = "spark-rate muted"; label.textContent = " " + fmtRate(last, kind);
  wrap.dataset.now = String(last); wrap.dataset.peak = String(peak);
  wrap.append(svg, label);
  return wrap;
}
function sparkCell(series, what) {
  const cell = document.createElement("div");
  cell.className = "sparks";
  if (!series) { cell.textContent = "no appends here in the last hour"; cell.classList.add("muted"); return cell; }
  cell.append(sparkline(series.messages_per_s, "messages", what), document.createElement("br"),
              sparkline(series.bytes_per_s, "bytes", what));
  return cell;
}
// the last cell of each row of `table`, for the row's name (its first cell's text)
function addSparkColumn(table, seriesOf, what) {
  for (const tr of $(table).tBodies[0].rows) {
    const name = tr.cells[0].textContent;
    const td = tr.insertCell(); td.className = "throughput";
    if (typeof seriesOf === "string") { td.textContent = seriesOf; td.classList.add("muted"); continue; }
    const s = seriesOf(name);
    td.appendChild(s && s.error ? Object.assign(document.createElement("span"), { textContent: s.error, className: "page-error" })
                                : sparkCell(s, `${what} ${name}`));
  }
}
async function throughput() {
  try { return await api("/v1/console/throughput"); } catch (e) { return "throughput unavailable: " + e.message; }
}
for (const [page, table, what] of [["topics", "topics-table", "topic"], ["nodes", "nodes-table", "node"]]) {
  const draw = loaders[page];
  loaders[page] = async function () {
    const [, t] = await Promise.all([draw(), throughput()]);
    if (typeof t === "string") { addSparkColumn(table, t, what); return; }
    const nodes = Object.fromEntries(t.nodes.map((n) => [String(n.node_id), n]));
    addSparkColumn(table, page === "topics" ? (name) => t.topics[name] : (name) => nodes[name], what);
  };
}
