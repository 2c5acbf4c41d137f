"""Compactor: one node's compaction cycle (stream set objects, then stream objects, then the deletion of
objects compacted more than a grace period ago), serialized, with running totals for /metrics."""

from __future__ import annotations

import logging
import threading
import time

from broker.compaction.config import CompactionConfig
from broker.compaction.report import CompactionReport, CompactionTotals
from broker.compaction.so_compaction import SoCompaction
from broker.compaction.sso_compaction import SsoCompaction, Step
from broker.metadata.client import MetadataClient
from broker.step_kill import kill_at_step
from storage_tier import BlobStore

log = logging.getLogger("mqindex.broker.compaction")


#: fault injection for the crash tests: when set to a step name ("uploaded": outputs written, before the
#: commit; "committed": after the commit, before any delete) the process kills itself with SIGKILL there
KILL_AT_ENV = "MQINDEX_TEST_KILL_AT_COMPACTION_STEP"


def _now_ms() -> int:
    return int(time.time() * 1000)


def kill_at_step_from_env() -> Step | None:
    """The on_step hook `KILL_AT_ENV` asks for, or None (the normal case)."""
    return kill_at_step(KILL_AT_ENV, "compaction")


class Compactor:
    def __init__(self, store: BlobStore, meta: MetadataClient, config: CompactionConfig | None = None,
                 on_step: Step | None = None) -> None:
        self.store = store
        self.meta = meta
        self.config = config or CompactionConfig()
        self.sso = SsoCompaction(store, meta, self.config, on_step or kill_at_step_from_env())
        self.so = SoCompaction(store, meta, self.config)
        self.totals = CompactionTotals()
        self._lock = threading.Lock()

    def run_once(self, now_ms: int | None = None) -> CompactionReport:
        """One cycle; a failing step is reported in `errors` (and logged), the next steps still run.
        `now_ms` (tests) moves the clock of the force-split age and of the grace period forward."""
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            started = time.monotonic()
            report = CompactionReport()
            for name, step in (("stream set objects", lambda: self.sso.run(now)), ("stream objects", self.so.run)):
                try:
                    report.add(step())
                except Exception as exc:  # noqa: BLE001 - reported; the next cycle retries from the metadata
                    log.warning("compaction step failed", extra={
                        "node_id": self.meta.node_id, "step": name, "error": f"{type(exc).__name__}: {exc}"})
                    report.errors.append(f"{name}: {type(exc).__name__}: {exc}")
            try:
                cleaned = self.meta.cleanup_objects(self.store, now_ms=max(now, _now_ms()))
                report.deleted = cleaned.deleted
            except Exception as exc:  # noqa: BLE001
                report.errors.append(f"cleanup: {type(exc).__name__}: {exc}")
            report.seconds = round(time.monotonic() - started, 3)
        self.totals.record(report)
        if report.objects_in or report.errors or report.deleted:
            log.info("compaction cycle", extra={"node_id": self.meta.node_id, **{
                k: v for k, v in report.as_dict().items() if k != "deleted"}, "deleted": len(report.deleted)})
        return report

    def object_counts(self) -> dict[str, int]:
        return self.meta.object_counts()
