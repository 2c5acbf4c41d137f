"""Key predicates answered by the cluster's key index: the (partition, offset) of every record with a key.

The lookup asks an `mqindex serve` node, which answers from the whole cluster's index (every node's files, the
merged tiers), paged by cursor:
- `key = ...` / `key IN (...)`: `GET /v1/index/hits?topic=&key=`, the index's candidates without their records
  (the node reads none). The reader reads the candidates' blocks and keeps only records whose Kafka key is one
  of the keys asked, so a fingerprint collision or a record indexed under a header key gives no row, and each
  hit's block is read from the store once, by the reader. (`GET /v1/messages`, which checks each hit against
  its record, would have the node read the block too: twice the bytes.) A node older than that route is asked
  `/v1/messages`.
- `indexKeys` (records indexed under a `KEYS` header part or `UNIQ_KEY`): `GET /v1/messages?topic=&key=`, whose
  hits the node checked against their records; the reader keeps exactly those offsets.
Only the blocks holding the hits are read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import httpx

PAGE = 1000  # the node's largest page (api/http/models.MAX_PAGE)
HITS_PAGE = 10_000  # /v1/index/hits' largest (api/http/models.MAX_HITS_PAGE)
MESSAGES, HITS = "/v1/messages", "/v1/index/hits"
# each route's largest page and the (partition, offset) of the hits in its answer
_ROUTES: dict[str, tuple[int, Callable[[dict[str, Any]], Iterable[tuple[int, int]]]]] = {
    MESSAGES: (PAGE, lambda doc: ((m["partition"], m["offset"]) for m in doc["messages"])),
    HITS: (HITS_PAGE, lambda doc: ((p, o) for p, o in doc["hits"])),
}


class IndexLookupError(RuntimeError):
    """The node could not answer a key lookup (the message names the node, topic and key)."""


def key_hits(index_url: str, topic: str, keys: Iterable[bytes], token: str | None = None,
             timeout: float = 60.0, checked: bool = True) -> dict[int, set[int]]:
    """Offsets per partition of the records of `topic` indexed under any of `keys` (UTF-8 text keys); with
    `checked` false, the index's candidates (module doc: the caller checks the records' keys)."""
    out: dict[int, set[int]] = {}
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    path = MESSAGES if checked else HITS
    with httpx.Client(base_url=index_url.rstrip("/"), timeout=timeout, headers=headers) as client:
        for raw in keys:
            key = raw.decode("utf-8")
            cursor: str | None = None
            while True:
                page, hits_of = _ROUTES[path]
                params: dict[str, str | int] = {"topic": topic, "key": key, "max": page}
                if cursor:
                    params["cursor"] = cursor
                try:
                    r = client.get(path, params=params)
                except httpx.HTTPError as exc:
                    raise IndexLookupError(f"index {index_url}: key {key!r} of topic {topic!r}: {exc}") from None
                if r.status_code == 404 and not _unknown_topic(r):
                    if path != MESSAGES:
                        path, cursor = MESSAGES, None  # a node older than /v1/index/hits
                        continue
                    raise IndexLookupError(f"index {index_url}: key {key!r} of topic {topic!r}: HTTP 404 "
                                           f"{r.text[:300]}")
                if r.status_code == 404:
                    break  # a topic the node does not know: no hit
                if r.status_code != 200:
                    raise IndexLookupError(f"index {index_url}: key {key!r} of topic {topic!r}: HTTP {r.status_code} "
                                           f"{r.text[:300]}")
                doc = r.json()
                if doc.get("unreadable"):
                    raise IndexLookupError(f"index {index_url}: key {key!r} of topic {topic!r}: damaged hits "
                                           f"{doc['unreadable'][:3]}")
                for p, o in hits_of(doc):
                    out.setdefault(int(p), set()).add(int(o))
                cursor = doc.get("next_cursor")
                if not cursor:
                    break
    return out


def _unknown_topic(r: httpx.Response) -> bool:
    """Whether a 404 is the node's answer for a topic it does not know (`"field": "topic"`), not for a route it
    does not have (`{"error": "Not Found", "field": null}`, api/http/errors.py)."""
    try:
        body = r.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("field") == "topic"


def usable(keys: Iterable[bytes]) -> bool:
    """Whether the index can answer these keys: non-empty UTF-8 (the index holds no empty key)."""
    try:
        return all(k and k.decode("utf-8") for k in keys)
    except UnicodeDecodeError:
        return False
