"""Nodes stopping cleanly, announced in the metadata as the stop begins:

    leaving/<node id>   the epoch of the incarnation that is stopping

A node stopping cleanly hands its partitions to the other live nodes and waits (bounded) until they have
committed what they read from its shared WAL (Cluster.drain). Nodes stopped together (`kill $NODE0 $NODE1`) would
hand their partitions to each other and each wait for the other to commit, which a stopping node never does:
both waited out the whole bound. With the announcement, a stopping node hands nothing to a node that is stopping
too, and stops waiting once the nodes it handed partitions to have stopped or are stopping. Partitions left
led by a stopped node are served again when it starts (from its WAL, as after any stop), or moved to a live node
with `mqindex reassign`. A failover spreads a dead node's partitions over live nodes that are not stopping.

The key is the incarnation's: a node started again registers a newer epoch, so an old announcement means
nothing and is overwritten by the next stop.
"""

from __future__ import annotations

import logging

from broker.errors import MetadataUnavailable
from broker.metadata import MetadataClient
from broker.metadata.leases import NodeLease

log = logging.getLogger("mqindex.broker.leaving")

PREFIX = "leaving/"


def announce(meta: MetadataClient, node_id: int, epoch: int) -> None:
    """Best effort: while the metadata does not answer, the stop goes on unannounced (the others may hand this
    node partitions, or wait for it, as before the announcement existed)."""
    try:
        meta.kv_put(f"{PREFIX}{node_id}", str(epoch))
    except MetadataUnavailable as exc:
        log.warning("could not announce that this node is stopping", extra={"node_id": node_id, "error": str(exc)})


def staying(meta: MetadataClient, alive: dict[int, NodeLease], refresh: bool = True) -> set[int]:
    """The live nodes whose incarnation has not announced that it is stopping (from the announcements last read
    while the metadata does not answer; `refresh=False`: the caller has just caught up)."""
    try:
        flags = meta.kv_items(PREFIX, refresh=refresh)
    except MetadataUnavailable:
        flags = meta.kv_items(PREFIX, refresh=False)
    return {n for n, lease in alive.items() if flags.get(f"{PREFIX}{n}") != str(lease.epoch)}
