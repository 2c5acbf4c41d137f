"""The audit log: one JSON line per admin change (topics, configs, ACLs, reassignments, deletions) and per
authorization denial, with the principal, the resource, the operation and the result, written to a file or to
stdout (the `audit_log` setting: empty for none, `stdout`, or a path). Lines are flushed as written, so a line
is in the file once the request is answered. A denial also counts in `denials` (exported as the metric
`mqindex_authorization_denials_total`)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from typing import IO, Any

STDOUT = "stdout"


class AuditLog:
    def __init__(self, target: str = "") -> None:
        """`target`: "" writes nothing (denials are still counted), "stdout", or a file path (appended to)."""
        self.target = target
        self._lock = threading.Lock()
        self._out: IO[str] | None = None
        if target == STDOUT:
            self._out = sys.stdout
        elif target:
            self._out = open(target, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the process
        self.denials: Counter[tuple[str, str]] = Counter()  # (interface, resource type) -> denials

    def record(self, event: str, principal: str, resource_type: str, resource_name: str, operation: str,
               result: str, **extra: Any) -> None:
        """One line: `event` is "denied" or an admin change ("acl_create", "topic_delete", ...)."""
        if result == "denied":
            with self._lock:
                self.denials[(str(extra.get("interface", "")), resource_type)] += 1
        if self._out is None:
            return
        line = json.dumps({"ts": round(time.time(), 3), "event": event, "principal": principal,
                           "resource_type": resource_type, "resource_name": resource_name,
                           "operation": operation, "result": result, **extra}, sort_keys=False)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()

    def close(self) -> None:
        with self._lock:
            if self._out is not None and self._out is not sys.stdout:
                self._out.close()
            self._out = None
