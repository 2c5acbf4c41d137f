"""Topic deletion in a cluster: three `mqindex serve` processes on one PostgreSQL metadata database and one
SeaweedFS bucket. A topic deleted through a node that leads none of its partitions stops being served by
every node, its objects leave the store after compaction and the grace period (the stream set objects it
shared with another topic are rewritten without its blocks), the other topic is untouched, and a topic
created again under the name starts empty and is found by key from every node without any old record."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker.metadata import MetadataClient
from broker.partitions.object_listing import open_topic
from storage_tier import open_store
from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import wait_for
from tests.cluster.harness import Cluster

NODES = 3


@pytest.fixture
def cluster(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    # uploads every 0.2 s; compaction on request only, splitting every stream set object (so one run rewrites
    # the objects a deleted topic shared), compacted sources deleted 0.5 s after the commit
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", f"topicdel-{uuid.uuid4().hex[:8]}"), pg_url(),
                "--upload-interval-s", "0.2", "--compaction-interval-s", "0", "--compaction-force-split-ms", "0",
                "--compaction-grace-ms", "500")
    try:
        errors: list[BaseException] = []

        def start(i: int) -> None:
            try:
                c.start(i)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        c.start(0)  # creates the metadata tables; the others start side by side
        threads = [threading.Thread(target=start, args=(i,)) for i in range(1, NODES)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        yield c
    finally:
        c.stop_all()


def produce(c: Cluster, topic: str, partition: int, values: list[str]) -> list[dict[str, Any]]:
    """Through node 0, following the 421 to the partition's leader."""
    base = c.url(0)
    body = {"messages": [{"key": f"k{i % 3}", "value": v, "partition": partition} for i, v in enumerate(values)]}
    for _ in range(5):
        r = httpx.post(f"{base}/v1/topics/{topic}/messages", json=body, timeout=30)
        if r.status_code == 421:
            base = r.json()["leader_url"]
            continue
        assert r.status_code == 200, r.text
        return r.json()["results"]  # type: ignore[no-any-return]
    raise AssertionError(f"{topic}-{partition}: no leader answered")


def by_key(base: str, topic: str, key: str) -> list[str]:
    r = httpx.get(f"{base}/v1/messages", params={"topic": topic, "key": key, "max": 100}, timeout=30)
    assert r.status_code == 200, r.text
    return sorted(m["value"] for m in r.json()["messages"])


def object_keys_of(meta: MetadataClient, stream_ids: list[int]) -> set[str]:
    """Store keys of every committed object holding any of the streams (stream objects and stream set objects)."""
    meta.catch_up()
    img = meta.image
    ids = {o.object_id for sid in stream_ids for o in img.streams[sid].stream_objects}
    ids |= {oid for node in img.nodes.values() for sid in stream_ids for _, _, oid in node.parts.get(sid, [])}
    return {meta.object_key(oid) for oid in ids}


def test_delete_through_a_non_leader_every_node_stops_objects_go_and_the_name_comes_back_empty(
        cluster: Cluster) -> None:
    c = cluster
    for name, n in (("keep", NODES), ("events", 2)):
        assert httpx.post(f"{c.url(0)}/v1/topics", json={"name": name, "partitions": n}, timeout=60).status_code == 201
    leaders = {p: n for n, ps in c.leaders().items() for p in ps}
    event_leaders = {leaders["events-0"], leaders["events-1"]}
    outsider = next(n for n in range(NODES) if n not in event_leaders)

    kept = [m for p in range(NODES) for m in produce(c, "keep", p, [f"keep-{p}-{i}" for i in range(20)])]
    old = [m for p in range(2) for m in produce(c, "events", p, [f"old-{p}-{i}" for i in range(30)])]
    assert len(kept) == 3 * 20 and len(old) == 2 * 30
    for n in range(NODES):
        assert len(by_key(c.url(n), "events", "k0")) == 20

    meta = MetadataClient(c.meta, 90 + uuid.uuid4().int % 1000, namespace="_kafka_mqindex")
    try:
        info = open_topic(meta, "events")
        streams = [sid for s in info.streams for sid in (s.meta_stream, s.data_stream)]

        def uploaded() -> bool:
            meta.catch_up()
            return all(meta.image.streams[s.data_stream].end_offset == 30 for s in info.streams)

        wait_for("the events partitions uploaded", uploaded, timeout=60)
        doomed = object_keys_of(meta, streams)
        store = open_store(c.store)
        try:
            assert doomed and doomed <= set(store.list(""))

            # -- delete through a node that leads none of the topic's partitions
            r = httpx.delete(f"{c.url(outsider)}/v1/topics/events", timeout=60)
            assert r.status_code == 200, r.text
            assert (r.json()["name"], r.json()["partitions"], r.json()["deleted"]) == ("events", 2, True)

            def nobody_serves() -> bool:
                for n in range(NODES):
                    base = c.url(n)
                    # the node's own view: the others forget the topic at their watcher's next look
                    if httpx.get(f"{base}/v1/topics/events", timeout=10).status_code != 404:
                        return False
                    parts = httpx.get(f"{base}/v1/console/partitions", timeout=10).json()["partitions"]
                    if any(p["topic"] == "events" for p in parts):
                        return False
                    if any(p.startswith("events-") for ps in c.leaders(via=n).values() for p in ps):
                        return False
                return True

            wait_for("every node stops serving events", nobody_serves, timeout=10)
            for n in range(NODES):
                base = c.url(n)
                assert httpx.get(f"{base}/v1/topics/events", timeout=10).status_code == 404
                r = httpx.post(f"{base}/v1/topics/events/messages", json={"messages": [{"value": "x"}]}, timeout=10)
                assert r.status_code == 404, r.text
                assert httpx.get(f"{base}/v1/messages", params={"topic": "events", "key": "k0"}).status_code == 404
                assert httpx.get(f"{base}/v1/messages/{old[0]['msg_id']}", timeout=10).status_code == 404
                assert "events" not in [t["name"] for t in httpx.get(f"{base}/v1/topics", timeout=10).json()]
            meta.catch_up()
            assert not any(sid in meta.image.streams for sid in streams)
            assert not [k for k in meta.image.kv if k.startswith((f"leaders/{info.topic_id}/",
                                                                  f"partitions/{info.topic_id}/", "topics/events"))]

            # -- compaction on each node rewrites what the topic shared; after the grace period its objects go
            def objects_gone() -> bool:
                for n in range(NODES):
                    r = httpx.post(f"{c.url(n)}/v1/admin/compaction", json={}, timeout=60)
                    assert r.status_code == 200, r.text
                    assert not r.json().get("errors"), r.json()
                return not doomed & set(store.list(""))

            wait_for("the deleted topic's objects leave the store", objects_gone, timeout=60)
        finally:
            store.close()
    finally:
        meta.close()

    # -- the other topic is whole, read from objects rewritten by the compaction
    for p in range(NODES):
        r = httpx.get(f"{c.url(0)}/v1/topics/keep/partitions/{p}/messages", params={"offset": 0, "max": 100},
                      timeout=30)
        if r.status_code == 421:
            r = httpx.get(f"{r.json()['leader_url']}/v1/topics/keep/partitions/{p}/messages",
                          params={"offset": 0, "max": 100}, timeout=30)
        assert [m["value"] for m in r.json()["messages"]] == [f"keep-{p}-{i}" for i in range(20)]
    assert len(by_key(c.url(outsider), "keep", "k1")) == sum(1 for m in range(20) if m % 3 == 1) * NODES

    # -- created again under the name: empty, and found by key from every node without the old records
    assert httpx.post(f"{c.url(outsider)}/v1/topics", json={"name": "events", "partitions": 2},
                      timeout=60).status_code == 201
    new = produce(c, "events", 0, [f"new-{i}" for i in range(6)])
    assert [m["offset"] for m in new] == list(range(6))
    for n in range(NODES):
        assert by_key(c.url(n), "events", "k0") == ["new-0", "new-3"]
        assert httpx.get(f"{c.url(n)}/v1/messages/{old[0]['msg_id']}", timeout=10).status_code == 404
