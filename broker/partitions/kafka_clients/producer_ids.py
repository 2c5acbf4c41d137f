"""Producer ids for idempotent Kafka producers, allocated in the controller metadata KV.

    producer_ids/<id>   <node id that allocated it>

The first writer of a key wins (put-if-absent), so two nodes never hand out the same id.
"""

from __future__ import annotations

from broker.metadata import MetadataClient

PREFIX = "producer_ids/"


def allocate(meta: MetadataClient, node_id: int) -> int:
    ids = [int(k[len(PREFIX):]) for k in meta.kv_items(PREFIX)]
    pid = max(ids, default=999) + 1
    while meta.kv_put_if_absent(f"{PREFIX}{pid}", str(node_id)) != str(node_id):
        pid += 1
    return pid
