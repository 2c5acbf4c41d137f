"""The value searches a node runs for its HTTP API (api/http/search_routes.py): each one a Spark job of
jobs/value_search.py in one SparkSession the node starts on the first search (its driver is this process,
its master the `search_master` setting: local[2] by default, or a cluster's spark://... URL).

Bounds (api/node_settings.py): `search_max_concurrent` searches run at a time (a search past it is refused,
not queued), `search_max_rows` matches kept per search (the search stops there, `truncated`); the last
`KEPT_FINISHED` finished searches are kept for GET. Each search's Spark jobs carry its id as their job group:
cancelling sets the search's flag (no further partition is asked for) and cancels the group's running jobs
(`SparkContext.cancelJobGroup`, which interrupts their tasks).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from api.http.message_json import message_dict
from jobs.spark_source import PUSHDOWN_CONF
from jobs.value_search import (
    Planned,
    SearchError,
    SearchSpec,
    bad_predicate_message,
    check_predicate,
    group_progress,
    is_bad_predicate,
    match_message,
    matches_frame,
)

log = logging.getLogger("mqindex.searches")

KEPT_FINISHED = 50
ACTIVE = ("queued", "running")
DEFAULT_MASTER = "local[2]"
SETTLE_S = 30.0


class SearchBusy(RuntimeError):
    """As many searches as the setting allows are running."""


def message_of(row: Any, topic_id: int) -> dict[str, Any]:
    """A match as the key search shows a message (api/http/message_json.message_dict): key, value and headers
    text or base64, `header_list` when `headers` does not hold the headers exactly."""
    return message_dict(match_message(row, topic_id))


def failure_message(exc: BaseException) -> str:
    """Spark's first line, and the last line of a Python traceback it carries (the error a source raised)."""
    first = bad_predicate_message(exc)
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    inner = [line for line in lines if not line.startswith(("File ", "at ", "Traceback", "^", "~"))
             and ("Error:" in line or "Exception:" in line or "Loss:" in line)]
    return f"{first} ... {inner[-1]}" if inner and inner[-1] not in first else first


@dataclass
class Search:
    id: str
    spec: SearchSpec
    limit: int
    owner: str
    planned: dict[str, Any]
    topic_id: int
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    state: str = "queued"
    error: str | None = None
    matches: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False
    partitions_total: int | None = None
    ended_ms: int | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)

    def view(self, sc: Any, after: int = 0) -> dict[str, Any]:
        spark = group_progress(sc, self.id) if sc is not None else None
        total = self.partitions_total
        done = min(spark.jobs_done, total) if spark is not None and total is not None else 0
        if self.state == "done" and total is not None and not self.truncated:
            done = total
        return {
            "id": self.id, "topic": self.spec.topic, "where": self.spec.where, "key": list(self.spec.keys),
            "from": self.spec.from_ms, "to": self.spec.to_ms, "limit": self.limit, "owner": self.owner,
            "state": self.state, "cancel_requested": self.cancel.is_set(), "error": self.error,
            "created_ms": self.created_ms, "ended_ms": self.ended_ms,
            "progress": {"partitions_done": done, "partitions_total": total,
                         "tasks_running": spark.tasks_running if spark else 0,
                         "objects": self.planned.get("objects"), "splits": self.planned.get("splits"),
                         "bytes": self.planned.get("bytes")},
            "spark": {"job_group": self.id, **(spark.as_dict() if spark else {})},
            "matches_total": len(self.matches), "truncated": self.truncated,
            "matches": self.matches[after:],
        }


class SearchManager:
    def __init__(self, master: str = DEFAULT_MASTER, max_concurrent: int = 1, max_rows: int = 1000) -> None:
        self.master, self.max_concurrent, self.max_rows = master or DEFAULT_MASTER, max_concurrent, max_rows
        self.lock = threading.Lock()
        self.session_lock = threading.Lock()
        self.searches: OrderedDict[str, Search] = OrderedDict()
        self._spark: Any = None
        atexit.register(self.close)

    @property
    def sc(self) -> Any:
        return self._spark.sparkContext if self._spark is not None else None

    def spark(self) -> Any:
        """The node's SparkSession, started on first use (a JVM: seconds)."""
        with self.session_lock:
            if self._spark is None:
                from jobs.spark_session import describe_session, session_setup, spark_session

                # session-wide from the start: a search thread's SQL conf must not depend on which session
                # Spark thinks is active in it
                conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                        PUSHDOWN_CONF: "true", "spark.sql.mapKeyDedupPolicy": "LAST_WIN"}
                spark = spark_session(self.master, session_setup(self.master, conf), app_name="mqindex-serve-search")
                spark.sparkContext.setLogLevel("ERROR")
                log.info("search session started: %s", describe_session(spark.sparkContext),
                         extra={"master": self.master})
                self._spark = spark
            return self._spark

    def get(self, search_id: str) -> Search | None:
        return self.searches.get(search_id)

    def recent(self) -> list[Search]:
        return list(reversed(self.searches.values()))

    def start(self, spec: SearchSpec, planned: Planned, limit: int, owner: str) -> Search:
        """Reserve a slot (SearchBusy), check the predicate and analyse the query in the session (SearchError:
        the search is forgotten, nothing ran), then run it in a thread."""
        s = Search(uuid.uuid4().hex[:16], spec, limit, owner, planned.describe(), planned.topic_ids[spec.topic])
        with self.lock:
            active = sum(1 for x in self.searches.values() if x.state in ACTIVE)
            if active >= self.max_concurrent:
                raise SearchBusy(f"{active} search(es) running, the most this node runs at a time "
                                 f"(search_max_concurrent={self.max_concurrent}); try again when one ends")
            self.searches[s.id] = s
        try:
            spark = self.spark()
            if spec.where:
                check_predicate(spark, spec.where)
            try:
                df = matches_frame(spark, spec, raw=True)
            except Exception as exc:
                if is_bad_predicate(exc):
                    raise SearchError("where", bad_predicate_message(exc)) from None
                raise
        except BaseException:
            with self.lock:
                self.searches.pop(s.id, None)
            raise
        from pyspark import InheritableThread

        InheritableThread(target=self._run, args=(s, df), daemon=True, name=f"search-{s.id}").start()
        log.info("search started", extra={"search": s.id, "topic": spec.topic, "where": spec.where,
                                          "keys": list(spec.keys), "owner": owner})
        self._forget_old()
        return s

    def _run(self, s: Search, df: Any) -> None:
        sc = self.sc
        spark = self._spark
        spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)  # this thread's SQL conf: the session's
        sc.setJobGroup(s.id, f"mqindex search {s.id} of {s.spec.topic}", interruptOnCancel=True)
        s.state = "running"
        try:
            s.partitions_total = df.rdd.getNumPartitions()
            for row in df.toLocalIterator():
                if s.cancel.is_set():
                    break
                s.matches.append(message_of(row, s.topic_id))
                if len(s.matches) >= s.limit:
                    s.truncated = True
                    break
        except Exception as exc:  # noqa: BLE001 - reported as the search's error
            if s.cancel.is_set():
                s.state = "cancelled"
            else:
                s.state, s.error = "failed", failure_message(exc)
                log.warning("search failed", extra={"search": s.id, "topic": s.spec.topic, "error": s.error,
                                                    "detail": str(exc)[-4000:]})
        else:
            s.state = "cancelled" if s.cancel.is_set() else "done"
        finally:
            sc.cancelJobGroup(s.id)  # a job still running after the loop stopped (limit reached, cancelled)
            # Spark's status tracker learns of job ends from its listener bus, a moment later: the search is
            # reported ended once Spark reports none of its jobs running (bounded)
            deadline = time.monotonic() + SETTLE_S
            while group_progress(sc, s.id).jobs_active and time.monotonic() < deadline:
                time.sleep(0.05)
            s.ended_ms = int(time.time() * 1000)
            s.finished.set()
            log.info("search ended", extra={"search": s.id, "topic": s.spec.topic, "state": s.state,
                                            "matches": len(s.matches)})

    def cancel(self, s: Search, wait_s: float = 30.0) -> None:
        """Stop the search: no further partition is read, its running Spark jobs are cancelled; waits (at most
        `wait_s`) for its thread to end."""
        if s.finished.is_set():
            return
        s.cancel.set()
        if self.sc is not None:
            self.sc.cancelJobGroup(s.id)
        s.finished.wait(wait_s)

    def _forget_old(self) -> None:
        with self.lock:
            done = [k for k, v in self.searches.items() if v.state not in ACTIVE]
            for k in done[:max(0, len(done) - KEPT_FINISHED)]:
                del self.searches[k]

    def close(self) -> None:
        for s in list(self.searches.values()):
            if s.state in ACTIVE:
                s.cancel.set()
        spark, self._spark = self._spark, None
        if spark is not None:
            try:
                spark.stop()
            except Exception:  # noqa: BLE001 - the JVM may be gone already at exit
                log.warning("stopping the search session failed", exc_info=True)
