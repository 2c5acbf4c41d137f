"""Versions of metadata KV values (topics, partitions, topic configs, leaders, index claims, published and rescued
index lists, failover reports, group offsets, transactions, ACL rules, move documents, ...).

A value that is a JSON object may carry its format version in a top-level "v"; a value without one (every value
written so far, and every value that is not a JSON object) is version 1. A later format of a value writes
"v": 2 or above, and a node that reads only version 1 refuses it where it enters the image (a kv_put record of
the metadata log, a snapshot's KV rows) with `NewerValueVersion` naming the key and both versions, instead of
reading a document it does not understand. A writer takes a newer value format into use only once every live
node announces that it reads it (the `reads` list of its lease row, as stream records of magic 0x23 do).

The check costs one substring search per value: only a JSON object that holds `"v":` is parsed.
"""

from __future__ import annotations

import json

from broker.errors import MetadataError

VALUE_VERSION = 1  # the newest KV value format this version reads (and the only one it writes)


class NewerValueVersion(MetadataError):
    """A metadata KV value written in a format newer than this version of mqindex reads."""

    def __init__(self, key: str, version: int) -> None:
        self.key = key
        self.version = version
        super().__init__(f"metadata key {key!r} holds a value of version {version}, newer than this version of "
                         f"mqindex reads ({VALUE_VERSION}): written by a newer version? Upgrade this node "
                         "(docs/OPERATIONS.md, Upgrading a cluster)")


def value_version(value: str) -> int:
    """The format version of a KV value: its top-level "v" when it is a JSON object that has one, else 1."""
    if not value.startswith("{") or '"v"' not in value:
        return 1
    try:
        doc = json.loads(value)
    except ValueError:
        return 1  # not JSON: read as it always was
    v = doc.get("v") if isinstance(doc, dict) else None
    return v if type(v) is int else 1


def check_value(key: str, value: str) -> None:
    """Raise `NewerValueVersion` when `value` (stored at `key`) is of a version this node does not read."""
    v = value_version(value)
    if v > VALUE_VERSION:
        raise NewerValueVersion(key, v)
