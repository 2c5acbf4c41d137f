"""The Spark build's item rows: one row per key with the online writer's fingerprint, sorted by store time
with a record's keys together, a repeated record dropped, histograms counting records and items."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from index_file.hashing import fingerprint
from jobs import index_items as ii

# up to 12 keys: a record given twice makes a run of more than 16 rows (the de-duplication's sorting path)
record = st.tuples(st.integers(0, 50), st.integers(1, 500), st.integers(0, 40),
                   st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=12, unique=True))


@settings(max_examples=50, deadline=None)
@given(st.lists(record, max_size=30, unique_by=lambda r: r[0]), st.integers(0, 3))
def test_rows_sorted_and_deduplicated(recs: list[tuple], dup: int) -> None:
    entries = [(off, size, t, keys) for off, size, t, keys in recs]
    rows = ii.record_items("orders", 3, entries + entries[:dup])  # a record given twice is stored once
    assert len(rows) == sum(len(e[3]) for e in entries + entries[:dup])
    out = ii.sort_dedup(rows)
    want = sorted(entries, key=lambda e: (e[2], e[0]))
    assert [(int(r["time"]), int(r["offset"]), int(r["fp"])) for r in out] == \
        [(t, off, fingerprint("orders", k)) for off, _s, t, keys in want for k in keys]
    assert set(out["partition"].tolist()) <= {3} and len(ii.record_starts(out).nonzero()[0]) == len(entries)
    hist = {b: (r, n) for b, r, n in ii.histogram(out, 10)}
    assert sum(r for r, _n in hist.values()) == len(entries) and sum(n for _r, n in hist.values()) == len(out)


def test_file_cuts_never_split_a_record_and_respect_the_bound() -> None:
    rng = random.Random(9)
    counts = np.array([rng.randint(1, 4) for _ in range(5000)], dtype=np.int64)
    for max_items in (4, 13, 1000, 20_000):
        cuts = ii.file_cuts(counts, max_items)
        sizes = [int(counts[a:b].sum()) for a, b in zip(cuts, [*cuts[1:], len(counts)], strict=True)]
        assert cuts[0] == 0 and sorted(set(cuts)) == cuts and max(sizes) <= max_items
        assert sum(sizes) == int(counts.sum())
