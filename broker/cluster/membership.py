"""Membership: this node's lease (register, heartbeat, shut down) and the view of every node's lease."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from broker.metadata.leases import ALIVE, LeaseTable, NodeLease
from broker.periodic import Periodic

log = logging.getLogger("mqindex.broker.cluster")

DEFAULT_LEASE_MS = 10_000


class Membership:
    def __init__(self, leases: LeaseTable, node_id: int, node_epoch: int, http: str | None, kafka: str | None,
                 lease_ms: int = DEFAULT_LEASE_MS, on_fenced: Callable[[], None] | None = None) -> None:
        self.leases = leases
        self.node_id = node_id
        self.node_epoch = node_epoch
        self.http = http
        self.kafka = kafka
        self.lease_ms = lease_ms
        self.on_fenced = on_fenced or (lambda: None)
        self.fenced = False
        self._view: tuple[float, dict[int, NodeLease]] = (0.0, {})
        self._beat = Periodic("broker-heartbeat", max(lease_ms / 3000, 0.05), self.heartbeat)

    def start(self) -> None:
        self.leases.register(self.node_id, self.node_epoch, self.http, self.kafka, self.lease_ms)
        self._beat.start()
        log.info("node registered", extra={"node_id": self.node_id, "node_epoch": self.node_epoch,
                                           "http": self.http, "lease_ms": self.lease_ms})

    def heartbeat(self) -> None:
        if self.fenced:
            return
        if not self.leases.heartbeat(self.node_id, self.node_epoch, self.lease_ms):
            self.fenced = True
            log.error("lease lost: a newer incarnation of this node registered", extra={
                "node_id": self.node_id, "node_epoch": self.node_epoch})
            self.on_fenced()

    def nodes(self) -> list[NodeLease]:
        return self.leases.nodes()

    def alive(self, max_age_s: float = 0.5) -> dict[int, NodeLease]:
        """Live nodes (this one included), from a view at most `max_age_s` old."""
        at, view = self._view
        if time.monotonic() - at > max_age_s:
            view = {n.node_id: n for n in self.leases.nodes() if n.state == ALIVE}
            self._view = (time.monotonic(), view)
        return view

    def address(self, node_id: int) -> str | None:
        n = self.alive().get(node_id)
        return n.http if n is not None else None

    def stop(self, shut_down: bool = True) -> None:
        self._beat.stop()
        if shut_down and not self.fenced:
            self.leases.shut_down(self.node_id, self.node_epoch)
        self.leases.close()
