"""The Spark batch builder against real servers: SeaweedFS objects, PostgreSQL metadata, Spark local[2].

The broker (tests/jobs/conftest.py) produces records over 3 partitions and 6 time windows and indexes
them online; the Spark build of the same range must answer every key exactly like the online index."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from index_file.key_filter import FILTER_SUFFIX, verify_filter
from index_service import IndexService
from index_service.external_builds import BUILD_PREFIX, BUILDS, pending_builds, uploaded_manifests
from jobs.spark_build import (
    MERGED_MAX_ITEMS,
    MERGED_WINDOW_MS,
    BuildError,
    BuildFailed,
    BuildOptions,
    plan_build,
    run_build,
)
from storage_tier import open_store
from tests.jobs.conftest import PARTITIONS, ROUNDS, TOPIC, WINDOW_MS, Produced

MAX_ITEMS = 700  # a window holds ~1,900 items: three files per window


def options(p: Produced, index_dir: Path, **kw: Any) -> BuildOptions:
    kw.setdefault("window_ms", WINDOW_MS)
    kw.setdefault("max_items", MAX_ITEMS)
    kw.setdefault("progress_interval_s", 0.5)
    return BuildOptions(metadata_url=p.meta_url, store_url=p.store_url, index_dir=str(index_dir), topic=TOPIC, **kw)


def sample_keys(p: Produced) -> list[str]:
    keys = p.all_keys()
    uniq = [k for k in keys if k.startswith("uniq-")]
    return [k for k in keys if not k.startswith("uniq-")] + uniq[:: max(1, len(uniq) // 60)]


def expected(p: Produced, key: str, lo: int = 0, hi: int = 1 << 62, kinds: tuple[str, ...] = ()) -> set[tuple[int,
                                                                                                            int]]:
    out = set()
    for part, off, t, by_kind in p.records:
        ks = [k for kind, vals in by_kind.items() if not kinds or kind in kinds for k in vals]
        if key in ks and lo <= t < hi:
            out.add((part, off))
    return out


def build_files(index_dir: Path) -> dict[str, dict[str, Any]]:
    return {s: m for s, m in uploaded_manifests(index_dir).items() if s.startswith("b")}


def objects_of(files: dict[str, dict[str, Any]]) -> list[str]:
    """The store keys a build's files have: each file and its key filter beside it."""
    return sorted(k for m in files.values() for k in (m["key"], m["key"] + FILTER_SUFFIX))


def store_keys(p: Produced) -> list[str]:
    with open_store(p.store_url) as s:
        return s.list(BUILD_PREFIX)


def test_data_set_spans_partitions_windows_and_both_object_kinds(produced: Produced) -> None:
    assert {r[0] for r in produced.records} == set(range(PARTITIONS))
    assert len({r[2] // WINDOW_MS for r in produced.records}) >= ROUNDS
    assert produced.object_kinds == {"SO", "SSO"}


def test_local_workers_fork_with_the_build_code_loaded(spark: Any) -> None:
    # jobs/spark_daemon.py imports the executor code and freezes the heap before PySpark's daemon forks

    def worker_start(_: int) -> tuple[str, bool, int]:  # pickled by value: imports nothing of the project
        import gc
        import sys

        main = sys.modules["__main__"]
        return main.__spec__.name if main.__spec__ else "", "jobs.spark_build" in sys.modules, gc.get_freeze_count()

    got = spark.sparkContext.parallelize(range(2), 2).map(worker_start).collect()
    assert len(got) == 2
    for name, loaded, frozen in got:
        assert name == "jobs.spark_daemon" and loaded and frozen > 10_000, got


def test_bad_arguments_fail_before_spark_starts(produced: Produced, tmp_path: Path) -> None:
    # an unparseable master proves Spark was never reached: creating a session would fail differently
    cases = [({"topic": "nope"}, "unknown topic 'nope'"),
             ({"from_ms": 2000, "to_ms": 1000}, "is after --to"),
             ({"from_ms": 1000, "to_ms": 1000}, "empty window"),
             ({"from_ms": 1 << 50}, "empty window"),
             ({"partitions": [0, 7]}, "no partition [7]"),
             ({"kinds": ("record-key", "HEADERS")}, "unknown key kind")]
    for kw, message in cases:
        topic = kw.pop("topic", TOPIC)
        opts = options(produced, tmp_path / "idx", master="no-such-master://", **kw)
        opts.topic = topic
        with pytest.raises(BuildError, match=message.replace("[", r"\[").replace("]", r"\]")):
            run_build(opts)
    assert not (tmp_path / "idx" / BUILDS).exists() or not pending_builds(tmp_path / "idx")
    # the CLI reports them as one line and exit code 2
    bad = subprocess.run([sys.executable, "-m", "api.cli.main", "spark-build", "--metadata", produced.meta_url,
                          "--store", produced.store_url, "--index-dir", str(tmp_path / "idx"), "--topic", TOPIC,
                          "--from", "2030-01-02T00:00:00", "--to", "2030-01-01T00:00:00", "--master", "bogus"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2, bad.stderr
    assert "is after --to" in bad.stderr and "Traceback" not in bad.stderr


def test_equivalence_with_the_online_index(produced: Produced, spark: Any, tmp_path: Path) -> None:
    out = io.StringIO()
    summary = run_build(options(produced, tmp_path / "spark-index"), spark=spark, out=out)
    log = out.getvalue()
    assert "[spark-build] done: files" in log and "records/s" in log
    assert summary.served and summary.files >= 3 * ROUNDS  # three files per window
    assert summary.records_read == len(produced.records) == summary.records_indexed
    files = build_files(tmp_path / "spark-index")
    assert len(files) == summary.files and all(m["items"] <= MAX_ITEMS for m in files.values())
    assert sum(m["items"] for m in files.values()) == summary.items
    assert len({m["min_ms"] // WINDOW_MS for m in files.values()}) >= ROUNDS
    assert all(m["min_ms"] // WINDOW_MS == m["max_ms"] // WINDOW_MS for m in files.values())  # one window each
    with IndexService.open(produced.online_index, store=produced.store_url, maintain_interval_s=0) as online, \
            IndexService.open(tmp_path / "spark-index", store=produced.store_url, maintain_interval_s=0) as built:
        assert {f.state.value for f in built.files()} == {"UPLOADED"}
        checked = 0
        for key in sample_keys(produced):
            a = online.query(TOPIC, key, max_count=100_000)
            b = built.query(TOPIC, key, max_count=100_000)
            assert a == b, key
            assert {(h.queue_id, h.offset) for h in b} == expected(produced, key), key
            assert built.query(TOPIC, key, max_count=3) == online.query(TOPIC, key, max_count=3)
            checked += len(b)
        assert checked > 5000
        # a time range inside the data: same hits, same order, same count limit
        times = sorted(r[2] for r in produced.records)
        lo, hi = times[len(times) // 3], times[2 * len(times) // 3]
        for key in ("order-5", "cust-3", "region-1"):
            assert built.query(TOPIC, key, 50, lo, hi) == online.query(TOPIC, key, 50, lo, hi)
            assert len(built.query(TOPIC, key, 100_000, lo, hi)) == len(expected(produced, key, lo, hi + 1))


def test_sub_window_with_one_key_kind(produced: Produced, spark: Any, tmp_path: Path) -> None:
    windows = sorted({r[2] // WINDOW_MS for r in produced.records})
    lo, hi = windows[1] * WINDOW_MS, windows[3] * WINDOW_MS
    summary = run_build(options(produced, tmp_path / "idx", from_ms=lo, to_ms=hi, kinds=("UNIQ_KEY",)),
                        spark=spark, out=io.StringIO())
    uniq = [k for k in produced.all_keys() if k.startswith("uniq-")]
    assert summary.records_indexed == sum(1 for r in produced.records if lo <= r[2] < hi and r[3]["UNIQ_KEY"])
    with IndexService.open(produced.online_index, store=produced.store_url, maintain_interval_s=0) as online, \
            IndexService.open(tmp_path / "idx", store=produced.store_url, maintain_interval_s=0) as built:
        found = 0
        for key in uniq:
            b = built.query(TOPIC, key, 10)
            assert b == online.query(TOPIC, key, 10, lo, hi - 1), key
            found += len(b)
        assert found == summary.records_indexed > 0
        assert built.query(TOPIC, "order-5", 10) == [] and built.query(TOPIC, "cust-3", 10) == []


def test_same_build_twice_leaves_one_set_and_a_failed_run_leaves_nothing(produced: Produced, spark: Any,
                                                                         tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    windows = sorted({r[2] // WINDOW_MS for r in produced.records})
    opts = options(produced, idx, to_ms=windows[3] * WINDOW_MS)
    first = run_build(opts, spark=spark, out=io.StringIO())
    files1 = build_files(idx)
    keys1 = store_keys(produced)
    assert len(files1) == first.files > 0
    assert objects_of(files1) == [k for k in keys1 if f"/{first.name}/" in k]  # each file and its key filter

    second = run_build(opts, spark=spark, out=io.StringIO())
    assert second.name == first.name and second.attempt != first.attempt
    assert second.replaced_files == first.files
    files2 = build_files(idx)
    assert len(files2) == second.files == first.files
    assert all(f"-{second.attempt}-" in s for s in files2)
    assert [k for k in store_keys(produced) if f"/{first.name}/" in k] == objects_of(files2)

    # an executor fails mid-build (after it uploaded a file): nothing registered, no object left
    with pytest.raises(BuildFailed, match="injected executor fault"):
        run_build(options(produced, idx, to_ms=windows[3] * WINDOW_MS, fault="build:1"), spark=spark,
                  out=io.StringIO())
    assert build_files(idx) == files2 and not pending_builds(idx)
    assert [k for k in store_keys(produced) if f"/{first.name}/" in k] == objects_of(files2)
    # the same fault in a new index directory: nothing at all
    fresh = tmp_path / "fresh"
    with pytest.raises(BuildFailed):
        run_build(options(produced, fresh, from_ms=windows[1] * WINDOW_MS, fault="build:0"), spark=spark,
                  out=io.StringIO())
    name = plan_build(options(produced, fresh, from_ms=windows[1] * WINDOW_MS)).name
    assert build_files(fresh) == {} and not pending_builds(fresh)
    assert [k for k in store_keys(produced) if f"/{name}/" in k] == []
    with IndexService.open(idx, store=produced.store_url, maintain_interval_s=0) as svc:
        hits = svc.query(TOPIC, "cust-1", 100_000)
        assert {(h.queue_id, h.offset) for h in hits} == expected(produced, "cust-1", 0, windows[3] * WINDOW_MS)


def test_running_service_adopts_the_build(produced: Produced, spark: Any, tmp_path: Path) -> None:
    idx = tmp_path / "live"
    with IndexService.open(idx, store=produced.store_url, maintain_interval_s=0.2) as svc:
        svc.put_batch([(TOPIC, 0, 10_000_000, 1, 5, ["cust-1"])])  # an online entry beside the build
        svc.flush()
        out = io.StringIO()
        summary = run_build(options(produced, idx, partitions=[1, 2]), spark=spark, out=out)
        assert "held by a running service" in out.getvalue()
        assert summary.served and not pending_builds(idx)
        hits = svc.query(TOPIC, "cust-1", 100_000)
        want = {(q, o) for q, o in expected(produced, "cust-1") if q in (1, 2)} | {(0, 10_000_000)}
        assert {(h.queue_id, h.offset) for h in hits} == want
        assert sum(1 for f in svc.files() if f.state.value == "UPLOADED") == summary.files


def test_cli_end_to_end(produced: Produced, tmp_path: Path) -> None:
    windows = sorted({r[2] // WINDOW_MS for r in produced.records})
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    r = subprocess.run([sys.executable, "-m", "api.cli.main", "spark-build", "--metadata", produced.meta_url,
                        "--store", produced.store_url, "--index-dir", str(tmp_path / "cli"), "--topic", TOPIC,
                        "--partitions", "0", "--from", str(windows[4] * WINDOW_MS), "--master", "local[1]",
                        "--conf", "spark.ui.enabled=false", "--window-ms", str(WINDOW_MS), "--progress-interval",
                        "0.5"], capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[spark-build] done: files" in r.stderr
    assert "served" in r.stdout
    n = sum(1 for rec in produced.records if rec[0] == 0 and rec[2] >= windows[4] * WINDOW_MS)
    assert f"from {n:,} records" in r.stdout
    with IndexService.open(tmp_path / "cli", store=produced.store_url, maintain_interval_s=0) as svc:
        hits = svc.query(TOPIC, "region-0", 100_000)
        assert {(h.queue_id, h.offset) for h in hits} == {
            (q, o) for q, o in expected(produced, "region-0", windows[4] * WINDOW_MS) if q == 0}


def test_merged_output_is_one_file_per_week_with_its_filter(produced: Produced, spark: Any, tmp_path: Path) -> None:
    # --merged: the service's top merge tier (a week, aligned as its tier windows are) and its merge size: the data
    # set, six windows of the hourly-style builds above, becomes one file per week it touches, with its key filter
    idx = tmp_path / "merged"
    opts = BuildOptions(metadata_url=produced.meta_url, store_url=produced.store_url, index_dir=str(idx),
                        topic=TOPIC, merged=True, progress_interval_s=0.5)
    assert (opts.window_ms, opts.max_items) == (MERGED_WINDOW_MS, MERGED_MAX_ITEMS)
    summary = run_build(opts, spark=spark, out=io.StringIO())
    files = build_files(idx)
    weeks = {r[2] // MERGED_WINDOW_MS for r in produced.records}
    assert summary.served and summary.files == len(files) == len(weeks)
    assert sum(m["items"] for m in files.values()) == summary.items
    with open_store(produced.store_url) as store:
        for stem, m in files.items():
            data = store.get(m["key"] + FILTER_SUFFIX)  # put by the executor beside the file
            verify_filter(data, m["key"])
            assert (idx / "uploaded" / f"{stem}.filter").read_bytes() == data  # kept by the service that adopted it
    with IndexService.open(produced.online_index, store=produced.store_url, maintain_interval_s=0) as online, \
            IndexService.open(idx, store=produced.store_url, maintain_interval_s=0) as built:
        for key in sample_keys(produced):
            assert built.query(TOPIC, key, max_count=100_000) == online.query(TOPIC, key, max_count=100_000), key
        meter = built.store.meter  # type: ignore[union-attr]
        before = meter.snapshot()
        for i in range(50):
            assert built.query(TOPIC, f"absent-{i}", 10) == []
        assert (meter.snapshot() - before)["GET"] <= 1  # the filter answers (a false positive is 2^-16 a file)


def test_cli_merged_flag_sets_the_top_tier_window_and_file_size() -> None:
    import argparse

    from api.cli import spark_build as cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    base = ["--metadata", "sqlite:///m.db", "--store", "file:///s", "--index-dir", "/i", "--topic", TOPIC]
    merged = cli.options(parser.parse_args([*base, "--merged"]))
    assert (merged.window_ms, merged.max_items, merged.merged) == (MERGED_WINDOW_MS, 16_000_000, True)
    hourly = cli.options(parser.parse_args(base))
    assert (hourly.window_ms, hourly.max_items) == (3_600_000, 1_000_000)
    explicit = cli.options(parser.parse_args([*base, "--merged", "--max-items", "5000", "--window-ms", "86400000"]))
    assert (explicit.window_ms, explicit.max_items) == (86_400_000, 5000)
