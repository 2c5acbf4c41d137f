"""Writing a transaction's commit or abort markers on its partitions, wherever in the cluster they are led.

    markers = TxnMarkers(parts, client_batches, peers)
    failed = markers.write([("orders", 0), ("orders", 1)], producer_id, epoch, commit=True)

A partition led here gets its marker from this node's ClientBatches; a partition another live node leads gets it
through that node's internal route (POST /v1/internal/txn/markers, api/http/txn_routes.py, which presents this
node's cluster token and writes only to partitions led there: a request is never forwarded twice). Every marker
is queued before any is waited for, and one request goes to each other node. `write` answers the partitions
whose marker is not durable (led by nobody live, moving, a node that did not answer, a failed append) with why;
the coordinator keeps the transaction prepared and writes those again later. Writing a marker twice is harmless:
a second marker for a closed transaction changes nothing a reader sees.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import Any

from broker.cluster.peers import Peers
from broker.errors import NotLeader
from broker.partitions.kafka_clients.client_batches import ClientBatches
from broker.partitions.partition_map import PartitionMap

log = logging.getLogger("mqindex.broker.txn_markers")

ROUTE = "/v1/internal/txn/markers"
WAIT_S = 30.0  # how long a marker may take to become durable


class TxnMarkers:
    def __init__(self, parts: PartitionMap, client_batches: ClientBatches, peers: Peers | None) -> None:
        self.parts = parts
        self.client_batches = client_batches
        self.peers = peers

    def write(self, partitions: list[tuple[str, int]], producer_id: int, epoch: int, commit: bool, seq: int = 0
              ) -> dict[tuple[str, int], str]:
        """Write the marker (of the coordinator's transaction number `seq`: a partition that has it durable
        already skips it) on every partition, here or on its leader; the ones not written, with why."""
        failed: dict[tuple[str, int], str] = {}
        remote: dict[str, list[tuple[str, int]]] = {}
        queued = self._queue(partitions, producer_id, epoch, commit, failed, remote, seq)
        for base, tps in remote.items():
            failed.update(self._remote(base, tps, producer_id, epoch, commit, seq))
        failed.update(self._wait(queued))
        return failed

    def write_here(self, partitions: list[tuple[str, int]], producer_id: int, epoch: int, commit: bool,
                   seq: int = 0) -> dict[tuple[str, int], str]:
        """Write the marker on the partitions led here only (another node's request); the others fail."""
        failed: dict[tuple[str, int], str] = {}
        queued = self._queue(partitions, producer_id, epoch, commit, failed, None, seq)
        failed.update(self._wait(queued))
        return failed

    def _queue(self, partitions: list[tuple[str, int]], producer_id: int, epoch: int, commit: bool,
               failed: dict[tuple[str, int], str], remote: dict[str, list[tuple[str, int]]] | None, seq: int = 0
               ) -> dict[tuple[str, int], Future[Any]]:
        queued: dict[tuple[str, int], Future[Any]] = {}
        for tp in partitions:
            try:
                p = self.parts.get(*tp)
                queued[tp] = self.client_batches.append_marker(p, producer_id, epoch, commit, seq)
            except NotLeader as exc:
                if remote is not None and exc.leader_url:
                    remote.setdefault(exc.leader_url, []).append(tp)
                else:
                    failed[tp] = str(exc)
            except Exception as exc:  # noqa: BLE001 - not served now (moving, no such topic, out of disk)
                failed[tp] = str(exc)
        return queued

    @staticmethod
    def _wait(queued: dict[tuple[str, int], Future[Any]]) -> dict[tuple[str, int], str]:
        failed = {}
        for tp, f in queued.items():
            try:
                f.result(WAIT_S)
            except Exception as exc:  # noqa: BLE001 - the append failed or took too long: written again later
                failed[tp] = str(exc) or type(exc).__name__
        return failed

    def _remote(self, base: str, tps: list[tuple[str, int]], producer_id: int, epoch: int, commit: bool,
                seq: int = 0) -> dict[tuple[str, int], str]:
        if self.peers is None:
            return {tp: f"led by the node at {base}, and this node has no peers" for tp in tps}
        try:
            r = self.peers.post(base + ROUTE, {"producer_id": producer_id, "epoch": epoch, "commit": commit, "seq": seq,
                                               "partitions": [[t, p] for t, p in tps]})
        except Exception as exc:  # noqa: BLE001 - the node did not answer: written again later
            return {tp: str(exc) for tp in tps}
        if r.status_code != 200:
            return {tp: f"the node at {base} answered {r.status_code}: {r.text[:200]}" for tp in tps}
        failed = {(str(f["topic"]), int(f["partition"])): str(f["error"]) for f in r.json()["failed"]}
        if failed:
            log.warning("transaction markers not written on another node",
                        extra={"node_url": base, "producer_id": producer_id, "failed": len(failed)})
        return failed
