"""The plots and the Markdown table of `mqindex bench history --scale ...`: GETs per lookup and p99 latency against
the length of history (log-log), one line per number of messages, for mqindex, the RocketMQ layout and PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_MARK = {"mqindex present": "o-", "mqindex absent": "o--", "RocketMQ layout": "s:", "PostgreSQL": "^-."}


def plot(results: list[dict[str, Any]], out: Path) -> list[Path]:
    """history_gets.png and history_p99.png under `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    scales = sorted({r["messages"] for r in results})
    paths = []
    for what, name, ylabel in (("gets", "history_gets.png", "index GETs per lookup (log; 0 drawn at 0.001)"),
                               ("p99", "history_p99.png", "p99 lookup latency, ms (log)")):
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        for n in scales:
            rs = sorted((r for r in results if r["messages"] == n), key=lambda r: r["days"])
            days = [r["days"] for r in rs]
            label = f"10^{len(str(n)) - 1}" if str(n).strip("0") == "1" else f"{n:,}"
            if what == "gets":
                # absent keys average near zero: plotted at their mean with a floor of 0.001 so the log axis shows them
                series = {"mqindex present": [r["rows"]["present"]["gets_mean"] for r in rs],
                          "mqindex absent": [max(1e-3, r["rows"]["absent"]["gets_mean"]) for r in rs],
                          "RocketMQ layout": [r["rocketmq"]["gets"] for r in rs]}
            else:
                series = {"mqindex present": [r["rows"]["present"]["p99_ms"] for r in rs],
                          "mqindex absent": [r["rows"]["absent"]["p99_ms"] for r in rs],
                          "RocketMQ layout": [r["rocketmq"]["p99_ms"] for r in rs]}
                if all("postgresql" in r for r in rs):
                    series["PostgreSQL"] = [r["postgresql"]["present"]["p99_ms"] for r in rs]
            for peer, ys in series.items():
                ax.plot(days, ys, _MARK[peer], label=f"{peer}, {label} messages")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("history, days (log)")
        ax.set_ylabel(ylabel)
        title = ("Index GETs per key lookup, no time range (PostgreSQL: none, its B-tree is on local disk)"
                 if what == "gets" else "p99 key lookup latency, cold start (RocketMQ layout modelled)")
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def markdown(results: list[dict[str, Any]]) -> str:
    """One table row per history and peer."""
    head = ("| messages | days | files (written / merged) | peer | GETs present avg / p99 | GETs absent avg / p99 "
            "| p50 ms present / absent | p99 ms present / absent | index bytes per message | local disk, filter "
            "memory per 1M keys | USD per 1M lookups present / absent |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in sorted(results, key=lambda r: (r["messages"], r["days"])):
        n, per_m, usd = r["messages"], r["messages"] / 1e6, r["usd_per_get"] * 1e6
        p, a = r["rows"]["present"], r["rows"]["absent"]
        first = f"| {n:,} | {r['days']:g} | {r['files_written']:,} / {r['files']:,} "
        merged = (r["merged_index_bytes"] + r["merged_filter_bytes"]) / n
        lines.append(first + f"| mqindex | {p['gets_mean']:.3f} / {p['gets_p99']:.0f} | {a['gets_mean']:.3f} / "
                     f"{a['gets_p99']:.0f} | {p['p50_ms']:.2f} / {a['p50_ms']:.2f} | {p['p99_ms']:.2f} / "
                     f"{a['p99_ms']:.2f} | {merged:.2f} (filters {r['merged_filter_bytes'] / n:.2f}) | "
                     f"{r['local_bytes']['all'] / per_m / 1e6:.2f} MB, {p['filter_memory'] / per_m / 1e6:.2f} MB | "
                     f"{p['gets_mean'] * usd:.2f} / {a['gets_mean'] * usd:.2f} |")
        rm = r["rocketmq"]
        lines.append(first + f"| RocketMQ layout | {rm['gets']:,} / {rm['gets']:,} | {rm['gets']:,} / {rm['gets']:,} "
                     f"| {rm['p50_ms']:.0f}* | {rm['p99_ms']:.0f}* | | | {rm['gets'] * usd:,.2f} |")
        pg = r.get("postgresql")
        if pg:
            lines.append(first + f"| PostgreSQL B-tree | 0 | 0 | {pg['present']['p50_ms']:.3f} / "
                         f"{pg['absent']['p50_ms']:.3f} | {pg['present']['p99_ms']:.3f} / {pg['absent']['p99_ms']:.3f} "
                         f"| {pg['total_bytes'] / n:.2f} (B-tree {pg['index_bytes'] / n:.2f}) | "
                         f"{pg['total_bytes'] / per_m / 1e6:.2f} MB disk | 0 |")
    return "\n".join(lines) + "\n"


def from_table(text: str) -> list[dict[str, Any]]:
    """The plotted figures of the histories in a table `markdown` wrote (docs/BENCHMARKS.md keeps it; the raw JSON
    of older runs was not kept), for `plot` beside saved runs: per history GETs and p99 of each peer."""
    rows: dict[tuple[int, float], dict[str, Any]] = {}
    inside = False  # in a table with markdown()'s header
    for line in text.splitlines():
        if not line.startswith("|"):
            inside = False
            continue
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if c[:4] == ["messages", "days", "files (written / merged)", "peer"]:
            inside = True
        if not inside or len(c) < 8 or not c[0].replace(",", "").isdigit():
            continue
        n, days, peer = int(c[0].replace(",", "")), float(c[1]), c[3]
        r = rows.setdefault((n, days), {"messages": n, "days": days, "rows": {"present": {}, "absent": {}}})
        if peer == "mqindex":
            p99 = c[7].split("/")
            r["rows"]["present"].update(gets_mean=float(c[4].split("/")[0]), p99_ms=float(p99[0]))
            r["rows"]["absent"].update(gets_mean=float(c[5].split("/")[0]), p99_ms=float(p99[1]))
        elif peer == "RocketMQ layout":
            r["rocketmq"] = {"gets": int(c[4].split("/")[0].replace(",", "")), "p99_ms": float(c[7].rstrip("*"))}
        elif peer == "PostgreSQL B-tree":
            r["postgresql"] = {"present": {"p99_ms": float(c[7].split("/")[0])}}
    return [r for r in rows.values() if "rocketmq" in r and r["rows"]["present"]]
