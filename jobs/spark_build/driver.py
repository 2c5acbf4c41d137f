"""Step 5 and the whole run (`run_build`): plan, the two Spark jobs, registration, serving, progress lines."""

from __future__ import annotations

import contextlib
import itertools
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from jobs.code_zip import ship_code, write_code_zip
from jobs.spark_build.attempts import _build_lock, abort_attempt, clean_leftovers, delete_attempt
from jobs.spark_build.extract import ExecutorParams, balanced_slices, extract_parts, settle_worker_heap, split_parts
from jobs.spark_build.file_ranges import add_counts, assign_ranges, bucket_counts, plan_files
from jobs.spark_build.files import build_window_files
from jobs.spark_build.options import BuildError, BuildFailed, BuildOptions, BuildPlan, BuildSummary
from jobs.spark_build.plan import plan_build
from jobs.spark_session import describe_session, session_setup, spark_session
from storage_tier import open_store


# -- driver ----------------------------------------------------------------------------------------
class _Progress:
    """A driver thread printing progress lines from the Spark accumulators."""

    def __init__(self, out: TextIO, interval: float) -> None:
        self.out = out
        self.interval = interval
        self.phase = "plan"
        self.started = time.perf_counter()
        self.records: Any = None
        self.objects: Any = None
        self.files: Any = None
        self.total_parts = 0
        self.total_files = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spark-build-progress", daemon=True)

    def line(self) -> str:
        el = max(time.perf_counter() - self.started, 1e-9)
        recs = self.records.value if self.records is not None else 0
        parts = self.objects.value if self.objects is not None else 0
        files = self.files.value if self.files is not None else 0
        if self.phase == "extract":
            return (f"[spark-build] extract: object parts {parts}/{self.total_parts}, records {recs:,} "
                    f"({recs / el:,.0f} records/s)")
        return (f"[spark-build] build: files {files}/{self.total_files} done, records {recs:,} "
                f"({recs / el:,.0f} records/s overall)")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            print(self.line(), file=self.out, flush=True)

    def start(self) -> None:
        if self.interval > 0:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()



def _serve(opts: BuildOptions, plan: BuildPlan, summary: BuildSummary, out: TextIO) -> None:
    """Make the registered build served: adopt it here when no service holds the directory, else wait
    for the running service's next maintenance cycle."""
    from index_service import IndexService
    from index_service.external_builds import pending_builds

    try:
        svc = IndexService.open(opts.index_dir, store=opts.index_store, maintain_interval_s=0)
    except RuntimeError as exc:
        if "in use" not in str(exc):
            raise
        print(f"[spark-build] {opts.index_dir} is held by a running service; it serves the build after its next "
              f"maintenance cycle", file=out, flush=True)
        deadline = time.monotonic() + opts.wait_served_s
        while time.monotonic() < deadline:
            if plan.name not in pending_builds(opts.index_dir):
                summary.served = True
                return
            time.sleep(0.2)
        return
    try:
        adopted = svc.adopted
        summary.served = plan.name in adopted.builds
        summary.replaced_files = adopted.files_replaced
        if adopted.failed:
            raise BuildFailed(f"the index service could not adopt build(s) {adopted.failed}; see its log")
    finally:
        svc.close()


def run_build(opts: BuildOptions, spark: Any = None, out: TextIO | None = None,
              plan: BuildPlan | None = None) -> BuildSummary:
    """Plan (raises BuildError before Spark starts), build with Spark, upload, register, serve."""
    from index_service.external_builds import register_build

    out = out if out is not None else sys.stderr
    plan = plan or plan_build(opts)
    index_dir = Path(opts.index_dir).resolve()
    try:
        index_store = open_store(opts.index_store)
        open_store(opts.store_url).close()
    except Exception as exc:  # noqa: BLE001
        raise BuildError(f"cannot open the object store: {exc}") from None
    summary = BuildSummary(plan.name, plan.attempt)
    started = time.perf_counter()
    print(f"[spark-build] build {plan.name} attempt {plan.attempt}: topic {plan.topic!r} partitions "
          f"{plan.partitions}, {plan.objects} objects ({len(plan.tasks)} parts, {plan.offsets:,} offsets, "
          f"{plan.pruned} pruned by time){'; ' + plan.uncommitted_note if plan.uncommitted_note else ''}",
          file=out, flush=True)
    with _build_lock(index_dir, plan.name):
        clean_leftovers(index_store, index_dir, plan.name)
        own_session = False
        if spark is None:
            from pyspark.sql import SparkSession

            own_session = SparkSession.getActiveSession() is None  # an embedding app keeps its session
            setup = session_setup(opts.master, opts.spark_conf, ships_code=opts.ship_code)
            for note in setup.notes:
                print(f"[spark-build] note: {note}", file=out, flush=True)
            spark = spark_session(opts.master, setup)
        sc = spark.sparkContext
        if opts.ship_code:
            code = write_code_zip()
            ship_code(sc, code)
            print(f"[spark-build] shipping the project's packages to the executors as {code}", file=out, flush=True)
        print(f"[spark-build] {describe_session(sc)}", file=out, flush=True)
        fault_window = int(opts.fault.split(":", 1)[1]) if opts.fault else None
        params = ExecutorParams(opts.store_url, opts.index_store, plan.topic, plan.name, plan.attempt, plan.kinds,
                                plan.from_ms, plan.to_ms, opts.window_ms, opts.max_items, opts.slots,
                                fault_window=fault_window)
        progress = _Progress(out, opts.progress_interval_s)
        records_acc, bytes_acc, parts_acc, files_acc = (sc.accumulator(0) for _ in range(4))
        progress.records, progress.objects, progress.files = records_acc, parts_acc, files_acc
        # pieces of at most about total / (4 x cores) offsets, packed into 4 tasks per core of equal offsets
        pieces = split_parts(plan.tasks, sc.defaultParallelism * 4)
        progress.total_parts = len(pieces)
        extracted = None
        try:
            progress.start()
            progress.phase = "extract"
            t0 = time.perf_counter()
            groups = balanced_slices(pieces, sc.defaultParallelism * 4)
            counters = (records_acc, bytes_acc, parts_acc)
            extracted = sc.parallelize(groups, len(groups)).mapPartitions(
                lambda it: extract_parts(params, itertools.chain.from_iterable(it), counters))
            from pyspark import StorageLevel

            extracted.persist(StorageLevel.MEMORY_AND_DISK)
            buckets = dict(extracted.mapPartitions(bucket_counts)
                           .reduceByKey(add_counts, numPartitions=sc.defaultParallelism).collect())
            summary.extract_seconds = time.perf_counter() - t0
            summary.records_read, summary.bytes_read = records_acc.value, bytes_acc.value
            summary.records_indexed = sum(c[0] for c in buckets.values())
            summary.windows = len({w for w, _b in buckets})
            if not buckets:
                print("[spark-build] no record with keys is stored in the window; nothing built or registered",
                      file=out, flush=True)
                summary.seconds = time.perf_counter() - started
                return summary
            starts = plan_files(buckets, opts.max_items, opts.window_ms)
            progress.total_files = len(starts)
            progress.phase = "build"
            t1 = time.perf_counter()

            def build_partition(it: Iterator[tuple[int, np.ndarray]]) -> Iterator[dict[str, Any]]:
                merged: dict[int, list[np.ndarray]] = {}
                for r, rows in it:
                    merged.setdefault(r, []).append(rows)
                for r, parts in merged.items():
                    yield from build_window_files(params, r, np.concatenate(parts), lambda: files_acc.add(1))
                settle_worker_heap()

            manifests = (extracted.mapPartitions(assign_ranges(starts))
                         .partitionBy(len(starts), lambda r: r)
                         .mapPartitions(build_partition).collect())
            summary.build_seconds = time.perf_counter() - t1
        except BaseException as exc:
            progress.stop()
            deleted = abort_attempt(sc, index_store, plan.name, plan.attempt)
            print(f"[spark-build] FAILED: {_first_cause(exc)}; deleted {deleted} uploaded object(s), nothing "
                  f"registered", file=out, flush=True)
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise BuildFailed(f"build {plan.name} attempt {plan.attempt} failed: {_first_cause(exc)}") from exc
        finally:
            progress.stop()
            if extracted is not None:
                with contextlib.suppress(Exception):
                    extracted.unpersist()
            if own_session:
                spark.stop()
        manifests.sort(key=lambda m: (m["begin_ms"], m["stem"]))
        summary.manifests = manifests
        summary.files = len(manifests)
        summary.items = sum(int(m["items"]) for m in manifests)
        summary.bytes_uploaded = sum(int(m["size"]) for m in manifests)
        try:
            register_build(index_dir, plan.name, plan.attempt, manifests, info=plan.describe())
        except BaseException:
            delete_attempt(index_store, plan.name, plan.attempt)
            raise
        _serve(opts, plan, summary, out)
    index_store.close()
    summary.seconds = time.perf_counter() - started
    print(progress.line().replace("build:", "done:"), file=out, flush=True)
    return summary


_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Aborted|Failed)\w*: ")


def _first_cause(exc: BaseException) -> str:
    """The executor's own error line out of a Py4J/Spark error (the rest is a JVM stack trace)."""
    text = str(exc)
    for line in text.splitlines():
        s = line.strip()
        if _EXC_LINE.match(s) and not s.startswith(("org.", "py4j", "java.", "pyspark.", "scala.")):
            return s
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
