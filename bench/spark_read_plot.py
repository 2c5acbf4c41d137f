"""The plot of `mqindex bench spark_read` runs: MB/s of the Spark full read, of raw ranged GETs of the same objects
and of a Kafka consumer, per topic size, with the MB/s the machine's cores allow the Spark read (its CPU s/MB).

    python -m bench.spark_read_plot OUT.png RUN.json [RUN.json ...]   (the JSON `mqindex bench spark_read` saves;
    a "label" added to a run's JSON names its bars, e.g. two runs of one size before and after a change)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def plot(runs: list[dict[str, Any]], out: Path, cores: int | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cores = cores or os.cpu_count() or 1
    runs = sorted(runs, key=lambda r: r["payload_mb"])  # stable: runs of one size keep their order
    labels = [r.get("label") or f"{r['payload_mb']:.0f} MB\n{r['records']:,} records" for r in runs]
    series = {
        "Spark local[2], the Python data source (reader=python)": [r["payload_mb"] / r["spark_s"] for r in runs],
        f"its CPU ceiling ({cores} cores / CPU s per MB)": [cores * r["payload_mb"] / r["spark_cpu_s"] for r in runs],
    }
    if all("columnar_s" in r for r in runs):  # runs since the JVM columnar reader (format("mqindex") since 2026-11-28)
        series["Spark local[2], format(\"mqindex\"): the JVM columnar reader"] = [r["payload_mb"] / r["columnar_s"]
                                                                              for r in runs]
        series[f"its CPU ceiling ({cores} cores / CPU s per MB) "] = [cores * r["payload_mb"] / r["columnar_cpu_s"]
                                                                      for r in runs]
    series["Kafka consumer (librdkafka) from the broker"] = [r["payload_mb"] / r["kafka_s"] for r in runs]
    series["raw ranged GETs of the objects (2 threads)"] = [r["object_mb"] / r["raw_s"] for r in runs]
    fig, ax = plt.subplots(figsize=(max(7.5, 1.5 * len(runs)), 4.6))
    width = 0.8 / len(series)
    for i, (name, ys) in enumerate(series.items()):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(runs))]
        ax.bar(xs, ys, width, label=name, hatch="//" if "ceiling" in name else None,
                      fill="ceiling" not in name)
        for x, y in zip(xs, ys, strict=True):
            ax.annotate(f"{y:.0f}", (x, y), ha="center", va="bottom", fontsize=6)
    ax.set_yscale("log")
    ax.set_ylim(top=max(max(ys) for ys in series.values()) * 8)  # room for the legend
    ax.set_xticks(range(len(runs)), labels)
    ax.set_ylabel("MB/s of record payload (log)")
    ax.set_title("Full read of a topic: Spark from the object store, raw GETs, a Kafka consumer (one run each)",
                 fontsize=9)
    raw = series["raw ranged GETs of the objects (2 threads)"]
    for j, r in enumerate(runs):
        if "columnar_s" in r:
            ax.hlines(0.6 * raw[j], j - 0.45, j + 0.45, colors="black", linestyles="dotted",
                      label="0.6x raw GETs (the goal)" if j == 0 else None)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(plot([json.loads(Path(p).read_text()) for p in args[1:]], Path(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
