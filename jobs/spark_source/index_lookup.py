"""Key predicates answered by the cluster's key index: the (partition, offset) of every record with a key.

The lookup asks an `mqindex serve` node (`GET /v1/messages?topic=&key=`, paged by cursor), which answers
from the whole cluster's index (every node's files, the merged tiers) and checks each hit against the
record, so a hit is a record whose key, `KEYS` header part or `UNIQ_KEY` is the key; the reader then keeps
only records whose Kafka key is one of the keys asked. Only the blocks holding the hits are read.
"""

from __future__ import annotations

from collections.abc import Iterable

import httpx

PAGE = 1000  # the node's largest page (api/http/models.MAX_PAGE)


class IndexLookupError(RuntimeError):
    """The node could not answer a key lookup (the message names the node, topic and key)."""


def key_hits(index_url: str, topic: str, keys: Iterable[bytes], token: str | None = None,
             timeout: float = 60.0) -> dict[int, set[int]]:
    """Offsets per partition of the records of `topic` indexed under any of `keys` (UTF-8 text keys)."""
    out: dict[int, set[int]] = {}
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=index_url.rstrip("/"), timeout=timeout, headers=headers) as client:
        for raw in keys:
            key = raw.decode("utf-8")
            cursor: str | None = None
            while True:
                params: dict[str, str | int] = {"topic": topic, "key": key, "max": PAGE}
                if cursor:
                    params["cursor"] = cursor
                try:
                    r = client.get("/v1/messages", params=params)
                except httpx.HTTPError as exc:
                    raise IndexLookupError(f"index {index_url}: key {key!r} of topic {topic!r}: {exc}") from None
                if r.status_code == 404:
                    break  # a topic the node does not know: no hit
                if r.status_code != 200:
                    raise IndexLookupError(f"index {index_url}: key {key!r} of topic {topic!r}: HTTP {r.status_code} "
                                           f"{r.text[:300]}")
                doc = r.json()
                if doc.get("unreadable"):
                    raise IndexLookupError(f"index {index_url}: key {key!r} of topic {topic!r}: damaged hits "
                                           f"{doc['unreadable'][:3]}")
                for m in doc["messages"]:
                    out.setdefault(int(m["partition"]), set()).add(int(m["offset"]))
                cursor = doc.get("next_cursor")
                if not cursor:
                    break
    return out


def usable(keys: Iterable[bytes]) -> bool:
    """Whether the index can answer these keys: non-empty UTF-8 (the index holds no empty key)."""
    try:
        return all(k and k.decode("utf-8") for k in keys)
    except UnicodeDecodeError:
        return False
