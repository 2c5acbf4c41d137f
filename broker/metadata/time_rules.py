"""Small rules the metadata operations share: the wall clock in ms and whether the incarnation that prepared an
object has ended."""

from __future__ import annotations

import time

from broker.metadata.image import MetadataImage, ObjectMeta


def wall_ms() -> int:
    return int(time.time() * 1000)


def incarnation_ended(img: MetadataImage, o: ObjectMeta) -> bool:
    """Whether the incarnation that prepared `o` has ended (its node's epoch moved past it)."""
    if o.node_id is None or o.node_epoch is None:
        return False
    node = img.nodes.get(o.node_id)
    return node is not None and node.epoch > o.node_epoch
