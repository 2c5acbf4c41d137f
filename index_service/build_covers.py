"""What a build registered from outside (the Spark builder) indexed whole, and the parts of the service's own files a
lookup then no longer needs to read.

A build that took every key kind records what it covers (`info.covers` of its document; jobs/spark_build): a topic,
a store-time window [from_ms, to_ms) and per partition the [start, end) offset runs of the object parts it read.
Every record of that topic stored in the window at an offset of those runs is in the build's files. The service's
files lying wholly in it are superseded at adoption (external_builds.covered_files). A file only partly inside the
window stays served, and before this a lookup read it whole and also read the build's file for the same entries
(answers de-duplicated by (queue, offset)). Now each file of the build carries the cover (its manifest's `covers`,
written at adoption), and a lookup of the cover's topic reads such a file only for the part of its time range
outside the window, or not at all when the window holds the whole part the lookup asks of it.

A cover applies to a file only when the build holds every entry of the topic the file has in the window: for each
partition of the topic in the file, its highest offset is below the end of the build's runs and its offsets from
the runs' start up are inside the runs (no gap). Offsets below the runs' start are in objects committed before
from_ms, which the build pruned because they hold records stored before the window only (the rule the build's own
planning rests on, jobs/spark_build/plan.py). A file whose offset ranges are unknown, a RocketMQ file and a build's
own file are read as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from index_service.managed_file import ManagedFile


@dataclass(frozen=True)
class Cover:
    build: str  # the build's name
    topic: str
    from_ms: int
    to_ms: int  # exclusive
    runs: dict[int, tuple[tuple[int, int], ...]]  # partition -> [start, end) runs, ascending

    @classmethod
    def parse(cls, build: str, covers: dict[str, Any]) -> Cover:
        runs = {int(p): tuple(sorted((int(a), int(b)) for a, b in rs)) for p, rs in covers["offsets"].items()}
        return cls(build, str(covers["topic"]), int(covers["from_ms"]), int(covers["to_ms"]), runs)

    def holds_offsets(self, partition: int, lowest: int, highest: int) -> bool:
        """Whether every offset in [lowest, highest] of `partition` is in the runs, or below their start."""
        runs = self.runs.get(partition)
        if not runs or highest >= runs[-1][1]:
            return False
        at = max(lowest, runs[0][0])  # below the runs' start: pruned, stored before the window
        for start, end in runs:
            if at < start:
                return False  # a gap the build did not read
            if at < end:
                at = end
            if at > highest:
                return True
        return at > highest

    def applies_to(self, mf: ManagedFile) -> bool:
        """Whether every entry of the cover's topic that `mf` holds in the window is also in the build."""
        from index_service.external_builds import parse_build_stem

        if not mf.exact or mf.ranges is None or parse_build_stem(mf.stem) is not None:
            return False
        return all(self.holds_offsets(q, lo, hi) for (t, q), (lo, hi) in mf.ranges.items() if t == self.topic)


def _subtract(spans: list[tuple[int, int]], cut_lo: int, cut_hi: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in spans:
        if cut_hi < lo or cut_lo > hi:
            out.append((lo, hi))
            continue
        if lo < cut_lo:
            out.append((lo, cut_lo - 1))
        if cut_hi < hi:
            out.append((cut_hi + 1, hi))
    return out


def covers_of(files: list[ManagedFile], topic: str) -> list[Cover]:
    """The covers of `topic` carried by the given files (a build's files all carry its cover: counted once)."""
    seen: dict[tuple[str, int, int], Cover] = {}
    for mf in files:
        for c in mf.covers or ():
            if c.topic == topic:
                seen.setdefault((c.build, c.from_ms, c.to_ms), c)
    return list(seen.values())


def parts_to_read(mf: ManagedFile, covers: list[Cover], lo: int, hi: int) -> list[tuple[int, int]] | None:
    """The [lo, hi] spans of store time a lookup still reads in `mf`: [] when the covers hold all it asks of the
    file (no read), None when no cover applies (the file is read as before)."""
    applied = [c for c in covers if c.applies_to(mf)]
    if not applied:
        return None
    bounds = mf.time_bounds()
    if bounds is None:
        return []
    spans = [(max(lo, bounds[0]), min(hi, bounds[1]))]
    if spans[0][0] > spans[0][1]:
        return []
    for c in applied:
        spans = _subtract(spans, c.from_ms, c.to_ms - 1)
    return spans
