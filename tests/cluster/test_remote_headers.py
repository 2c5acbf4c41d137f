"""A message another node leads and has not uploaded yet is read from that node's page (broker/cluster/peers.py)
for a key lookup and a read by id: its headers come back whole there too (docs/MESSAGES.md), a binary value, a
name given twice and a null value, exactly as the leader answers them. Two real `mqindex serve` processes."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import Cluster, started_with_topic

HEADER_LIST = [{"name": "trace", "value": "AAH//g==", "encoding": "base64"}, {"name": "KEYS", "value": "c-1"},
               {"name": "KEYS", "value": "c-2"}, {"name": "gone", "value": None}]


def test_another_nodes_message_keeps_its_headers(tmp_path: Path, seaweedfs: SeaweedFS,
                                                 pg_url: Callable[[], str]) -> None:
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", f"headers-{uuid.uuid4().hex[:8]}"), pg_url(),
                "--upload-interval-s", "600")  # nothing uploaded: the other node reads the leader's page
    with started_with_topic(c, "traced", 1, nodes=2):
        leader = next(n for n, ps in c.leaders().items() if "traced-0" in ps)
        other = 1 - leader
        r = httpx.post(f"{c.url(leader)}/v1/topics/traced/messages", timeout=60,
                       json={"messages": [{"key": "order-1", "value": "v", "header_list": HEADER_LIST}]})
        assert r.status_code == 200, r.text
        msg_id = r.json()["results"][0]["msg_id"]
        want = httpx.get(f"{c.url(leader)}/v1/messages/{msg_id}", timeout=60).json()
        assert want["header_list"] == [{**h, "encoding": h.get("encoding", "utf-8")} for h in HEADER_LIST]

        by_id = httpx.get(f"{c.url(other)}/v1/messages/{msg_id}", timeout=60)
        assert by_id.status_code == 200 and by_id.json() == want, by_id.text
        for key in ("order-1", "c-2"):
            found = httpx.get(f"{c.url(other)}/v1/messages", params={"topic": "traced", "key": key}, timeout=60)
            assert found.status_code == 200 and found.json()["messages"] == [want], (key, found.text)
