"""The failover reports kept in the metadata KV: one per failover, the newest ones of each node.

A failover's report is stored under `failovers/<node>/<fenced epoch>` (the epoch the survivor fenced the node
at, unique per failover of that node). Recording one deletes, in the same metadata transaction, the node's
oldest reports beyond the history kept (FAILOVER_HISTORY_PER_NODE by default). A report written by a version
that kept only the latest failover per node (`failovers/<node>`) is read as one entry of that node's history
and pruned like the others. `GET /v1/cluster/failovers` lists them all, newest first.
"""

from __future__ import annotations

import json
from typing import Any

FAILOVERS_PREFIX = "failovers/"
# how many failover reports are kept per node id (the newest); older ones are deleted as new ones are recorded
FAILOVER_HISTORY_PER_NODE = 20


def report_key(report: dict[str, Any]) -> str:
    return f"{FAILOVERS_PREFIX}{int(report['node'])}/{int(report['fenced_epoch'])}"


def _node_of(key: str) -> int | None:
    rest = key[len(FAILOVERS_PREFIX):]
    head = rest.split("/", 1)[0]
    return int(head) if head.isdigit() else None


def _newest_first(items: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    docs = [(k, json.loads(v)) for k, v in items.items()]
    return sorted(docs, key=lambda kd: (int(kd[1].get("at_ms", 0)), int(kd[1].get("fenced_epoch", 0)), kd[0]),
                  reverse=True)


def record_failover(meta: Any, report: dict[str, Any], keep: int = FAILOVER_HISTORY_PER_NODE) -> None:
    """Store `report` and drop the node's reports beyond the newest `keep`, in one metadata transaction."""
    if keep < 1:
        raise ValueError("the failover history must keep at least 1 report per node")
    key = report_key(report)
    value = json.dumps(report, sort_keys=True)
    node = int(report["node"])
    mine = {k: v for k, v in meta.kv_items(FAILOVERS_PREFIX).items() if _node_of(k) == node and k != key}
    mine[key] = value
    drop = [k for k, _ in _newest_first(mine)[keep:]]
    meta.kv_update({key: value} if key not in drop else {}, drop)


def update_failover(meta: Any, report: dict[str, Any]) -> None:
    """Rewrite a recorded report (the index rescue's outcome added); not when it was pruned meanwhile."""
    key = report_key(report)
    old = meta.kv_get(key)
    if old is not None:
        meta.kv_set_if({key: old}, key, json.dumps(report, sort_keys=True))


def failover_reports(meta: Any) -> list[dict[str, Any]]:
    """Every kept failover report, newest first."""
    return [doc for _, doc in _newest_first(meta.kv_items(FAILOVERS_PREFIX))]
