"""A value search: the records of a topic matching keys and/or any SQL predicate, as a Spark job reading the
topic straight from the object store (jobs/spark_source). Shared by `mqindex search` (api/cli/search.py) and
the searches the HTTP API runs for the console (api/http/search_routes.py).

The predicate sees a text view of each record: `key` and `value` as text (UTF-8, invalid bytes replaced),
`headers` a map of text to text (a name given twice: its last value), and `topic`, `partition`, `offset`,
`timestamp` as in the Spark source. Keys are matched on the raw key and pushed to the source (answered
through the key index when `index` names a node). The raw bytes ride along (`RAW_KEY`, `RAW_VALUE`,
`RAW_HEADERS`) for callers that show values as the key search does (`match_message`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from broker.partitions.client_messages import OutMessage
from broker.partitions.message_id import encode_message_id
from jobs.spark_source.options import SourceOptionError, parse_options
from jobs.spark_source.plan import ScanPlan, open_metadata, plan_scan, resolve_topics

RAW_KEY, RAW_VALUE, RAW_HEADERS = "__raw_key", "__raw_value", "__raw_headers"
# Spark SQL functions a predicate run by a server may not call: they call Java methods by name in its JVM
DENIED_FUNCTIONS = frozenset({"reflect", "java_method", "try_reflect"})


class SearchError(ValueError):
    """Bad search input, named by its field (`topic`, `where`, `from`, `to`, ...)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field, self.message = field_name, message


def parse_time(value: str | int | None, what: str) -> int | None:
    """Milliseconds since the epoch, or ISO 8601 (UTC unless an offset is given); SearchError otherwise."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise SearchError(what, f"expected milliseconds since the epoch or ISO 8601, got {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(value)
    except ValueError:
        raise SearchError(what, f"expected milliseconds since the epoch or ISO 8601, got {value!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


@dataclass(frozen=True)
class SearchSpec:
    topic: str
    metadata: str
    store: str
    keys: tuple[str, ...] = ()
    where: str | None = None
    from_ms: int | None = None
    to_ms: int | None = None  # exclusive
    index: str | None = None  # HTTP URL of a node: keys through the cluster's key index
    partitions: str | None = None  # comma-separated

    def source_options(self) -> dict[str, str]:
        opts = {"metadata": self.metadata, "store": self.store, "topic": self.topic}
        if self.from_ms is not None:
            opts["startingTimestamp"] = str(self.from_ms)
        if self.to_ms is not None:
            opts["endingTimestamp"] = str(self.to_ms)
        if self.index:
            opts["index"] = self.index
        if self.partitions:
            opts["partitions"] = self.partitions
        return opts


@dataclass
class Planned:
    """What the metadata says the search reads (no object read yet)."""

    plan: ScanPlan
    topic_ids: dict[str, int] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return self.plan.describe()


def plan_search(spec: SearchSpec) -> Planned:
    """Check the input against the metadata (an unknown topic, a bad option) before any Spark work."""
    if spec.from_ms is not None and spec.to_ms is not None and spec.from_ms > spec.to_ms:
        raise SearchError("to", f"the window ends ({spec.to_ms}) before it starts ({spec.from_ms})")
    try:
        opts = parse_options(spec.source_options())
        meta = open_metadata(opts)
        try:
            meta.catch_up()
            ids = {t.name: t.topic_id for t in resolve_topics(meta, opts)}
            plan = plan_scan(opts, meta=meta)
        finally:
            meta.close()
    except SourceOptionError as exc:
        name, _, message = str(exc).partition(": ")
        raise SearchError("topic" if name in ("topic", "subscribe") else name, message or str(exc)) from None
    return Planned(plan, ids)


def check_predicate(spark: Any, where: str) -> None:
    """A predicate a server may run for a caller: it parses, reads no other table (no subquery) and calls no
    Java method by name. SearchError("where", ...) otherwise. Column names are checked later, by analysis."""
    try:
        expr = spark._jsparkSession.sessionState().sqlParser().parseExpression(where)
    except Exception as exc:  # noqa: BLE001 - a Py4J error carrying Spark's ParseException
        raise SearchError("where", _first_line(exc)) from None
    todo = [expr]
    while todo:
        node = todo.pop()
        kind = str(node.getClass().getSimpleName())
        if "Subquery" in kind or kind in ("Exists", "ListQuery", "LateralSubquery"):
            raise SearchError("where", "a subquery is not allowed in a search predicate")
        if kind == "UnresolvedFunction":
            parts = node.nameParts()
            name = str(parts.apply(parts.length() - 1)).lower()
            if name in DENIED_FUNCTIONS:
                raise SearchError("where", f"{name}() is not allowed in a search predicate")
        children = node.children()
        todo += [children.apply(i) for i in range(children.length())]


def _first_line(exc: BaseException) -> str:
    """Spark's message of an analysis or parse error (a Py4J error converted as pyspark does), one line."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        from pyspark.errors.exceptions.captured import convert_exception

        exc = convert_exception(java)
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def is_bad_predicate(exc: BaseException) -> bool:
    """Whether Spark refused the predicate (pyspark's AnalysisException or ParseException): bad input."""
    return type(exc).__name__ in ("AnalysisException", "ParseException")


def bad_predicate_message(exc: BaseException) -> str:
    return _first_line(exc)


def matches_frame(spark: Any, spec: SearchSpec, limit: int | None = None, raw: bool = False) -> Any:
    """The DataFrame of matches: keys on the raw key (pushed to the source), `where` on the text view; with
    `raw` the raw key, value and headers too (RAW_KEY, RAW_VALUE, RAW_HEADERS). Analysis errors of `where`
    surface here (AnalysisException / ParseException: see is_bad_predicate)."""
    from pyspark.sql import functions as F

    from jobs.spark_source import register

    register(spark)
    spark.conf.set("spark.sql.mapKeyDedupPolicy", "LAST_WIN")  # a header name given twice: its last value
    df = spark.read.format("mqindex").options(**spec.source_options()).load()
    if spec.keys:
        df = df.where(F.col("key").isin([k.encode() for k in spec.keys]))
    cols = [F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("value"),
            "topic", "partition", "offset", "timestamp",
            F.map_from_entries(F.transform("headers", lambda h: F.struct(h["key"], h["value"].cast(
                "string")))).alias("headers")]
    if raw:
        cols += [F.col("key").alias(RAW_KEY), F.col("value").alias(RAW_VALUE), F.col("headers").alias(RAW_HEADERS)]
    text = df.select(*cols)
    if spec.where:
        text = text.where(spec.where)
    if limit:
        text = text.limit(limit)
    return text


def epoch_ms(ts: dt.datetime) -> int:
    """A row's timestamp (Spark hands a naive local or an aware datetime) as ms since the epoch."""
    aware = ts if ts.tzinfo else ts.astimezone()
    return int(aware.timestamp() * 1000)


def _raw(data: Any) -> bytes | None:
    return bytes(data) if data is not None else None


def match_message(row: Any, topic_id: int) -> OutMessage:
    """A match of a `raw` frame as the stored message, its bytes whole (raw key, value, headers in order with
    their null values): what the key search and the id lookup answer for it (api/http/message_json.py)."""
    headers = [(h["key"], _raw(h["value"])) for h in (row[RAW_HEADERS] or [])]
    return OutMessage(row.topic, row.partition, row.offset, encode_message_id(topic_id, row.partition, row.offset),
                      _raw(row[RAW_KEY]), _raw(row[RAW_VALUE]), headers, epoch_ms(row.timestamp))


@dataclass
class GroupProgress:
    """Spark's view of one job group: jobs (one per partition of the scan, as toLocalIterator runs them)."""

    jobs_done: int = 0
    jobs_failed: int = 0
    jobs_active: int = 0
    tasks_running: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"jobs_done": self.jobs_done, "jobs_failed": self.jobs_failed, "jobs_active": self.jobs_active,
                "tasks_running": self.tasks_running}


def group_progress(sc: Any, group: str) -> GroupProgress:
    """The status tracker's jobs of `group` (what Spark itself reports)."""
    tracker = sc.statusTracker()
    out = GroupProgress()
    for jid in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(jid)
        if info is None:
            continue
        status = str(info.status)
        if status == "SUCCEEDED":
            out.jobs_done += 1
        elif status == "FAILED":
            out.jobs_failed += 1
        else:
            out.jobs_active += 1
            for sid in info.stageIds:
                stage = tracker.getStageInfo(sid)
                if stage is not None:
                    out.tasks_running += stage.numActiveTasks
    return out
