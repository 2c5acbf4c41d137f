"""Calls from this node to the others over their HTTP API: index queries, single-message reads and POSTs of
internal requests (transaction markers).

httpx (a dependency already) with short timeouts; a peer that does not answer is a StorageUnavailable
(retriable 503 to the client), never a silently shorter answer.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx

from broker.partitions.client_messages import OutMessage
from index_file import IndexHit
from storage_tier import StorageUnavailable

PAST_THE_END = 1 << 62  # an offset no partition reaches: a read there answers at once, with nothing


class Peers:
    def __init__(self, token: str | None = None, timeout_s: float = 10.0) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers)

    def _get(self, url: str, params: dict[str, Any]) -> httpx.Response:
        try:
            return self._client.get(url, params=params)
        except httpx.HTTPError as exc:
            raise StorageUnavailable("cluster", url, f"node at {url} did not answer: {exc}") from exc

    def post(self, url: str, body: dict[str, Any]) -> httpx.Response:
        """POST a JSON body to another node (an internal call: this node's cluster token is presented)."""
        try:
            return self._client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise StorageUnavailable("cluster", url, f"node at {url} did not answer: {exc}") from exc

    def index_query(self, base: str, topic: str, key: str, max_count: int, begin_ms: int,
                    end_ms: int | None) -> list[IndexHit]:
        params: dict[str, Any] = {"topic": topic, "key": key, "max": max_count, "begin": begin_ms}
        if end_ms is not None:
            params["end"] = end_ms
        r = self._get(f"{base}/v1/internal/index/query", params)
        if r.status_code != 200:
            raise StorageUnavailable("cluster", base, f"index query on {base} answered {r.status_code}: {r.text[:200]}")
        return [IndexHit(topic, int(p), int(o), int(s), int(t), key, True) for p, o, s, t in r.json()["hits"]]

    def message(self, base: str, topic: str, partition: int, offset: int) -> OutMessage | None:
        r = self._get(f"{base}/v1/topics/{topic}/partitions/{partition}/messages", {"offset": offset, "max": 1})
        if r.status_code != 200:
            raise StorageUnavailable("cluster", base, f"read on {base} answered {r.status_code}: {r.text[:200]}")
        for m in r.json()["messages"]:
            if m["offset"] == offset:
                return _message(m)
        return None

    def serves(self, base: str, topic: str, partition: int) -> bool:
        """Whether the node at `base` serves the partition now: a read past its end answers 200 there (503 while
        it opens the partition, 421 when it does not lead it)."""
        try:
            r = self._client.get(f"{base}/v1/topics/{topic}/partitions/{partition}/messages",
                                 params={"offset": PAST_THE_END, "max": 1})
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    def close(self) -> None:
        self._client.close()


def _bytes(text: str | None, encoding: str | None) -> bytes | None:
    """The bytes of a key, value or header value of the message JSON: text, or base64 when `encoding` says so."""
    if text is None:
        return None
    return base64.b64decode(text) if encoding == "base64" else str(text).encode()


def _message(m: dict[str, Any]) -> OutMessage:
    """A message of another node's page, its bytes whole (docs/MESSAGES.md): key and value by their encodings,
    the headers from `header_list` when the page gives it (`headers` holds them exactly otherwise)."""
    if m.get("header_list") is not None:
        headers = [(h["name"], _bytes(h["value"], h.get("encoding"))) for h in m["header_list"]]
    else:
        headers = [(k, str(v).encode()) for k, v in (m.get("headers") or {}).items()]
    return OutMessage(topic=m["topic"], partition=m["partition"], offset=m["offset"], msg_id=m["msg_id"],
                      key=_bytes(m.get("key"), m.get("key_encoding")), value=_bytes(m.get("value"), m.get("encoding")),
                      headers=headers, timestamp=m["timestamp"])
