"""Spark batch builder: compacted native index files built from the broker's objects, served as UPLOADED.

Driver (`run_build`):
1. `plan_build` (no Spark yet): checks the arguments, reads the controller metadata (topic ->
   partitions -> data streams -> the committed objects holding them, see broker/partitions/object_listing.py),
   prunes objects committed before the window, and fails with `BuildError` on an unknown topic or
   partition, a window whose start is after its end, or a window no object can hold records of.
2. Extract (Spark job 1): the object parts, large ones cut into offset ranges (`split_parts`), are packed
   into Spark tasks of about equal offsets, largest first (`balanced_slices`). Executors read each piece
   through storage_tier (ranged GETs of the blocks) and decode its Kafka record batches a column at a time
   with aiokafka's C reader (broker/partitions/batch_columns.py): for each record stored in [from, to)
   with at least one selected key, the entry the broker's dispatcher indexes online (partition, offset,
   size, store time, keys) becomes numpy item rows (one per key, the key's fingerprint computed here;
   jobs/index_items.py) grouped by time window (`window_ms`, aligned to the epoch; by default the online
   files' roll age). Entries cross the stages as these arrays, never as per-entry Python objects. The
   result stays in Spark (persisted); the driver collects only a histogram of items per 10 ms of store time.
3. Plan the files (`merged`: windows of a week and files of up to 16,000,000 items, the service's top merge
   tier, so months of backfill make a few large files): each window is cut into as many time-contiguous
   ranges as its items need files of at most `max_items` items (the online files' size), of about equal
   size; the number of ranges is the progress total.
4. Build (Spark job 2, one task per file range, so one busy hour still spreads over the executors):
   sort the item rows by store time (numpy), write them with NativeIndexWriter.put_items, seal, compact,
   upload to the index store under `index-builds/<name>/<attempt>/` (verified by size and CRC32C read
   back), put the file's key filter beside it (`<key>.filter`) and return the file's manifest.
5. Register: one atomic build document in the index directory (index_service/external_builds.py); a
   service adopts it on open or on its next maintenance cycle, all files in one step, replacing any
   earlier attempt of the same build. When no service holds the directory, the driver opens one briefly
   so the build is adopted before it returns.

Build name = hash of (index directory, topic, partitions, window, key kinds, window size, file size): the
same build run twice replaces the first run's files. A failed run cancels its Spark jobs, deletes every object its
attempt uploaded and registers nothing; objects left by a driver that died are deleted by the next run
of the same build (a per-build lock in the index directory keeps two runs of one build apart).

Executor functions import only storage_tier, index_file and the broker's object/record codecs. The session
is made by jobs/spark_session.py (spark.pyspark.python reaches the executors; Spark's console progress bar
off); with `ship_code` the project's packages go to the executors as a zip (jobs/code_zip.py).

The package, one module per step:
- `options.py`: BuildOptions, PartTask, BuildPlan, BuildSummary, the build's name and its files' stems and keys;
- `plan.py`: step 1 (`plan_build`);
- `extract.py`: step 2, the executor side of the extract and how its tasks are cut and packed;
- `file_ranges.py`: step 3, the store-time histogram and the file ranges;
- `files.py`: step 4, one file range built, uploaded and verified;
- `attempts.py`: a build's lock, an aborted attempt's objects deleted, an earlier attempt's leftovers cleaned;
- `driver.py`: step 5 and `run_build`, which runs the steps in order.
"""

from __future__ import annotations

from jobs.spark_build.attempts import abort_attempt, clean_leftovers, delete_attempt
from jobs.spark_build.driver import run_build
from jobs.spark_build.extract import ExecutorParams, balanced_slices, extract_parts, settle_worker_heap, split_parts
from jobs.spark_build.file_ranges import BUCKET_MS, add_counts, assign_ranges, bucket_counts, file_chunks, plan_files
from jobs.spark_build.files import AttemptAborted, abort_marker, build_window_files
from jobs.spark_build.files import _manifest as _manifest  # the registration tests build a manifest as an executor does
from jobs.spark_build.files import _upload as _upload
from jobs.spark_build.options import (
    BUILD_PREFIX,
    DEFAULT_MAX_ITEMS,
    DEFAULT_NAMESPACE,
    DEFAULT_PART_BYTES,
    DEFAULT_SLOTS,
    HOUR_MS,
    MERGED_MAX_ITEMS,
    MERGED_WINDOW_MS,
    BuildError,
    BuildFailed,
    BuildOptions,
    BuildPlan,
    BuildSummary,
    Entry,
    PartTask,
    build_key,
    build_name,
    build_stem,
    parse_time,
)
from jobs.spark_build.plan import plan_build

__all__ = [
    "AttemptAborted", "BUCKET_MS", "BUILD_PREFIX", "BuildError", "BuildFailed", "BuildOptions", "BuildPlan",
    "BuildSummary", "DEFAULT_MAX_ITEMS", "DEFAULT_NAMESPACE", "DEFAULT_PART_BYTES", "DEFAULT_SLOTS", "Entry",
    "ExecutorParams", "HOUR_MS", "MERGED_MAX_ITEMS", "MERGED_WINDOW_MS", "PartTask", "abort_attempt",
    "abort_marker", "add_counts", "assign_ranges", "balanced_slices", "bucket_counts", "build_key", "build_name",
    "build_stem", "build_window_files", "clean_leftovers", "delete_attempt", "extract_parts", "file_chunks",
    "parse_time", "plan_build", "plan_files", "run_build", "settle_worker_heap", "split_parts",
]
