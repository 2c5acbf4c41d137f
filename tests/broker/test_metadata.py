"""Controller metadata on SQLite and PostgreSQL: epochs and fencing, objects lifecycle, replay, lookup."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.errors import Fenced, InvalidRequest, OffsetOutOfRange, StreamNotFound
from broker.metadata import (
    CommitRange,
    MetadataClient,
    StreamObjectCommit,
    StreamSetObjectCommit,
    snapshot,
)
from broker.metadata.image import CLOSED, COMMITTED, MARK_DESTROYED, OPENED, PREPARED
from storage_tier import open_store

UrlFactory = Callable[[], str]


def _client(url: str, node: int) -> MetadataClient:
    c = MetadataClient(url, node, namespace="_kafka_test")
    c.register_node()
    return c


def _sso(c: MetadataClient, *ranges: tuple[int, int, int, int]) -> int:
    oid = c.prepare_objects(1)
    c.commit_objects(sso=StreamSetObjectCommit(oid, 1000 + oid, [CommitRange(*r) for r in ranges]))
    return oid


def _so(c: MetadataClient, sid: int, epoch: int, start: int, end: int) -> int:
    oid = c.prepare_objects(1)
    c.commit_objects(stream_objects=[StreamObjectCommit(oid, 2000 + oid, CommitRange(sid, epoch, start, end))])
    return oid


def build_fixture(url: str) -> tuple[MetadataClient, MetadataClient, int]:
    """The brief's fixture through real operations: stream start 10, ranges alternating between nodes 0 and 1."""
    n0, n1 = _client(url, 0), _client(url, 1)
    sid = n0.create_stream(start_offset=10)
    other = n0.create_stream()  # a second stream sharing some stream set objects
    n0.open_stream(sid, 0)
    n0.open_stream(other, 0)
    _so(n0, sid, 0, 10, 100)
    _sso(n0, (sid, 0, 100, 120), (other, 0, 0, 50))
    _sso(n0, (sid, 0, 120, 140))
    n0.close_stream(sid, 0)
    n1.open_stream(sid, 1)
    _sso(n1, (sid, 1, 140, 160))
    _sso(n1, (sid, 1, 160, 180))
    n1.close_stream(sid, 1)
    n0.open_stream(sid, 2)
    _sso(n0, (other, 0, 50, 60), (sid, 2, 180, 200))
    _so(n0, sid, 2, 200, 300)
    _so(n0, sid, 2, 300, 400)
    _sso(n0, (sid, 2, 400, 420))
    n0.close_stream(sid, 2)
    n1.open_stream(sid, 3)
    _sso(n1, (sid, 3, 420, 520))
    n1.close_stream(sid, 3)
    n0.open_stream(sid, 4)
    _sso(n0, (sid, 4, 520, 600))
    n0.close_stream(sid, 4)
    n1.open_stream(sid, 5)
    _sso(n1, (sid, 5, 600, 700))
    return n0, n1, sid


def _spans(lookup) -> list[tuple[str, int, int]]:  # type: ignore[no-untyped-def]
    return [(o.kind, o.start, o.end) for o in lookup.objects]


def test_read_path_lookup_fixture(meta_url_factory: UrlFactory) -> None:
    n0, n1, sid = build_fixture(meta_url_factory())
    reader = MetadataClient(meta_url_factory(), 7)  # a third broker that only replays the log
    s = reader.get_stream(sid)
    assert [(g.node_id, g.epoch, g.start, g.end) for g in s.ranges] == [
        (0, 0, 10, 140), (1, 1, 140, 180), (0, 2, 180, 420), (1, 3, 420, 520), (0, 4, 520, 600), (1, 5, 600, 700)]
    assert (s.start_offset, s.end_offset) == (10, 700)

    # node 1 has acknowledged data up to 888 that this image has no objects for yet (metadata lag)
    img = copy.deepcopy(reader.image)
    img.streams[sid].end_offset = 888
    img.streams[sid].ranges[-1].end = 888

    full = img.get_objects(sid, 10, 600)
    assert _spans(full) == [("SO", 10, 100), ("SSO", 100, 120), ("SSO", 120, 140), ("SSO", 140, 160),
                            ("SSO", 160, 180), ("SSO", 180, 200), ("SO", 200, 300), ("SO", 300, 400),
                            ("SSO", 400, 420), ("SSO", 420, 520), ("SSO", 520, 600)]
    assert all(a.end == b.start for a, b in zip(full.objects, full.objects[1:], strict=False))
    assert (full.next_offset, full.partial) == (600, False)

    with pytest.raises(OffsetOutOfRange, match="below the stream start 10"):
        img.get_objects(sid, 0, 600)

    limited = img.get_objects(sid, 10, 600, limit=5)
    assert len(limited.objects) == 5 and limited.next_offset == 180 and limited.partial

    tail = img.get_objects(sid, 399, 1000)
    assert tail.objects[0].kind == "SO" and (tail.objects[0].start, tail.objects[0].end) == (300, 400)
    assert _spans(tail)[-1] == ("SSO", 600, 700)
    assert tail.next_offset == 700 and tail.partial

    # the same answers from the clients' own images, which saw the log in real time
    assert _spans(n1.get_objects(sid, 10, 600)) == _spans(full)
    assert _spans(reader.get_objects(sid, 10, 700)) == _spans(full) + [("SSO", 600, 700)]
    for c in (n0, n1, reader):
        c.close()


def test_stream_epoch_rules(meta_url_factory: UrlFactory) -> None:
    a, b = _client(meta_url_factory(), 0), _client(meta_url_factory(), 1)
    sid = a.create_stream()
    assert a.get_stream(sid).state == CLOSED
    a.open_stream(sid, 0)
    a.open_stream(sid, 0)  # idempotent for the owner
    assert len(a.get_stream(sid).ranges) == 1
    with pytest.raises(Fenced, match="belongs to node 0"):
        b.open_stream(sid, 0)  # same epoch, another node
    with pytest.raises(InvalidRequest, match="still opened by node 0"):
        b.open_stream(sid, 1)  # higher epoch while OPENED: refused until closed
    _sso(a, (sid, 0, 0, 10))
    with pytest.raises(Fenced):
        b.close_stream(sid, 0)  # not the owner
    a.close_stream(sid, 0)
    a.close_stream(sid, 0)  # idempotent
    s = b.open_stream(sid, 1)
    s = b.get_stream(sid)
    assert (s.state, s.epoch, s.owner) == (OPENED, 1, 1)
    assert [(g.index, g.node_id, g.start, g.end) for g in s.ranges] == [(0, 0, 0, 10), (1, 1, 10, 10)]
    for stale in (lambda: a.open_stream(sid, 0), lambda: a.close_stream(sid, 0),
                  lambda: a.trim_stream(sid, 0, 5), lambda: _sso(a, (sid, 0, 10, 20))):
        with pytest.raises(Fenced):
            stale()
    b.close_stream(sid, 1)
    with pytest.raises(Fenced, match="was closed"):
        b.open_stream(sid, 1)  # an epoch is spent once closed: the next owner uses epoch + 1
    with pytest.raises(StreamNotFound):
        a.open_stream(999, 0)
    assert b.get_stream(sid).end_offset == 10  # nothing stale was applied
    a.close()
    b.close()


def test_node_epoch_fences_the_old_incarnation(meta_url_factory: UrlFactory) -> None:
    old = _client(meta_url_factory(), 3)
    sid = old.create_stream()
    old.open_stream(sid, 0)
    oid = old.prepare_objects(1)
    new = _client(meta_url_factory(), 3)  # the node restarted
    assert new.node_epoch == old.node_epoch + 1  # type: ignore[operator]
    with pytest.raises(Fenced, match="node 3 epoch 0 is stale"):
        old.commit_objects(sso=StreamSetObjectCommit(oid, 10, [CommitRange(sid, 0, 0, 5)]))
    with pytest.raises(Fenced):
        old.create_stream()
    new.commit_objects(sso=StreamSetObjectCommit(oid, 10, [CommitRange(sid, 0, 0, 5)]))  # same node, new epoch
    assert new.get_stream(sid).end_offset == 5
    old.close()
    new.close()


def test_commit_checks_are_atomic(meta_url_factory: UrlFactory) -> None:
    c = _client(meta_url_factory(), 0)
    s1, s2 = c.create_stream(), c.create_stream()
    c.open_stream(s1, 0)
    c.open_stream(s2, 0)
    first = c.prepare_objects(2)
    # s2 has a gap: the whole commit, s1 and the stream object included, is refused
    with pytest.raises(InvalidRequest, match="does not continue"):
        c.commit_objects(sso=StreamSetObjectCommit(first, 10, [CommitRange(s1, 0, 0, 5), CommitRange(s2, 0, 3, 9)]),
                         stream_objects=[StreamObjectCommit(first + 1, 99, CommitRange(s1, 0, 5, 50))])
    assert (c.get_stream(s1).end_offset, c.image.objects[first].state) == (0, PREPARED)
    c.commit_objects(sso=StreamSetObjectCommit(first, 10, [CommitRange(s1, 0, 0, 5), CommitRange(s2, 0, 0, 9)]),
                     stream_objects=[StreamObjectCommit(first + 1, 99, CommitRange(s1, 0, 5, 50))])
    assert (c.get_stream(s1).end_offset, c.get_stream(s2).end_offset) == (50, 9)
    assert c.image.objects[first].state == c.image.objects[first + 1].state == COMMITTED
    with pytest.raises(InvalidRequest, match="not PREPARED"):
        c.commit_objects(sso=StreamSetObjectCommit(first, 10, [CommitRange(s1, 0, 50, 60)]))
    c.close()


def test_object_lifecycle_and_cleanup(meta_url_factory: UrlFactory, tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/objects")
    c = _client(meta_url_factory(), 0)
    s1, s2 = c.create_stream(), c.create_stream()
    c.open_stream(s1, 0)
    c.open_stream(s2, 0)

    def upload(oid: int) -> None:
        store.put(c.object_key(oid), b"object bytes")

    leaked = c.prepare_objects(1, ttl_ms=1000)
    upload(leaked)  # the broker crashed after the upload, before the commit
    so = _so(c, s1, 0, 0, 100)
    shared = _sso(c, (s1, 0, 100, 150), (s2, 0, 0, 30))
    for oid in (so, shared):
        upload(oid)
    now = c.image.objects[leaked].expires_at
    r = c.cleanup_objects(store, now_ms=now - 1)
    assert (r.expired, r.deleted) == ([], [])
    r = c.cleanup_objects(store, now_ms=now)
    assert (r.expired, r.deleted) == ([leaked], [leaked])
    assert not store.exists(c.object_key(leaked)) and leaked not in c.image.objects
    with pytest.raises(InvalidRequest, match="not PREPARED|unknown"):
        c.commit_objects(sso=StreamSetObjectCommit(leaked, 1, [CommitRange(s1, 0, 150, 160)]))

    c.trim_stream(s1, 0, 120)  # the stream object [0, 100) is garbage; the shared SSO still holds s2
    assert c.image.objects[so].state == MARK_DESTROYED and c.image.objects[shared].state == COMMITTED
    with pytest.raises(OffsetOutOfRange):
        c.get_objects(s1, 50, 200)
    assert [(o.object_id, o.start) for o in c.get_objects(s1, 120, 200).objects] == [(shared, 100)]
    r = c.cleanup_objects(store)
    assert r.deleted == [so] and not store.exists(c.object_key(so)) and store.exists(c.object_key(shared))

    c.trim_stream(s1, 0, 150)
    assert c.image.objects[shared].state == COMMITTED  # s2 still lives in it
    c.delete_stream(s2, 0)
    assert c.image.objects[shared].state == MARK_DESTROYED
    assert c.cleanup_objects(store).deleted == [shared]
    assert store.list("") == []
    replay = MetadataClient(meta_url_factory(), 5)
    assert replay.image.objects == c.image.objects and s2 not in replay.image.streams
    c.close()
    replay.close()
    store.close()


def test_kv_first_writer_wins(meta_url_factory: UrlFactory) -> None:
    a, b = _client(meta_url_factory(), 0), _client(meta_url_factory(), 1)
    assert a.kv_put_if_absent("topic-a/0", "17") == "17"
    assert b.kv_put_if_absent("topic-a/0", "99") == "17"
    assert b.kv_get("topic-a/0") == "17" and a.kv_get("missing") is None
    a.kv_delete("topic-a/0")
    assert b.kv_get("topic-a/0") is None
    a.close()
    b.close()


def test_replay_gives_the_same_image(meta_url_factory: UrlFactory) -> None:
    n0, n1, sid = build_fixture(meta_url_factory())
    fresh = MetadataClient(meta_url_factory(), 9)
    assert fresh.image.offset == n0.catch_up() == n1.catch_up()
    assert fresh.image.streams == n0.image.streams == n1.image.streams
    assert fresh.image.nodes == n0.image.nodes and fresh.image.objects == n1.image.objects
    for c in (n0, n1, fresh):
        c.close()


def test_concurrent_open_has_one_winner(meta_url_factory: UrlFactory) -> None:
    url = meta_url_factory()
    creator = _client(url, 0)
    sid = creator.create_stream()
    clients = [_client(url, n) for n in range(1, 5)]
    outcomes: list[str] = []
    barrier = threading.Barrier(len(clients))

    def race(c: MetadataClient) -> None:
        barrier.wait()
        try:
            c.open_stream(sid, 1)
            outcomes.append("opened")
        except (Fenced, InvalidRequest) as exc:
            outcomes.append(type(exc).__name__)

    threads = [threading.Thread(target=race, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("opened") == 1, outcomes
    assert len(creator.get_stream(sid).ranges) == 1
    for c in [creator, *clients]:
        c.close()


def test_two_brokers_on_postgresql(pg_dsn: str, pg_schema_factory: Callable[[], str]) -> None:
    url = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}schema={pg_schema_factory()}"
    broker_a, broker_b = _client(url, 0), _client(url, 1)
    sid = broker_a.create_stream()
    broker_a.open_stream(sid, 0)
    pending = broker_a.prepare_objects(1)  # broker A is uploading when the partition moves
    broker_a.close_stream(sid, 0)
    broker_b.open_stream(sid, 1)
    with pytest.raises(Fenced):
        broker_a.open_stream(sid, 0)
    with pytest.raises(Fenced):
        broker_a.commit_objects(sso=StreamSetObjectCommit(pending, 10, [CommitRange(sid, 0, 0, 10)]))
    b_obj = _sso(broker_b, (sid, 1, 0, 25))
    assert broker_a.get_stream(sid).end_offset == 25
    assert [o.object_id for o in broker_a.get_objects(sid, 0, 25).objects] == [b_obj]
    assert broker_a.image.objects[pending].state == PREPARED  # never committed; expires and is cleaned up
    broker_a.close()
    broker_b.close()


def test_objects_of_an_ended_incarnation_expire_at_once(meta_url_factory: UrlFactory, tmp_path: Path) -> None:
    """A node killed between an upload's PUT and its commit leaves a PREPARED object: once the node re-registers
    (or a survivor fences it) that incarnation can never commit it, so the next cleanup deletes it without
    waiting for its TTL. A live incarnation's prepared object is left alone until it expires."""
    url = meta_url_factory()
    store = open_store(f"file://{tmp_path}/objects")
    killed, live = _client(url, 0), _client(url, 1)
    leaked = killed.prepare_objects(1)  # the default TTL: 10 minutes
    in_flight = live.prepare_objects(1)
    for c, oid in ((killed, leaked), (live, in_flight)):
        store.put(c.object_key(oid), b"object bytes")
    assert (killed.image.objects[leaked].node_id, killed.image.objects[leaked].node_epoch) == (0, 0)
    assert live.cleanup_objects(store).expired == []  # both incarnations are current
    restarted = _client(url, 0)  # the same node, a new incarnation
    with pytest.raises(Fenced):
        killed.commit_objects(sso=StreamSetObjectCommit(leaked, 12, []))
    r = restarted.cleanup_objects(store)
    assert (r.expired, r.deleted) == ([leaked], [leaked])
    assert not store.exists(restarted.object_key(leaked)) and store.exists(restarted.object_key(in_flight))
    assert restarted.image.objects[in_flight].state == PREPARED
    # fenced by a survivor: the same
    restarted.fence_node(1, live.node_epoch)  # type: ignore[arg-type]
    assert restarted.cleanup_objects(store).deleted == [in_flight]
    for c in (killed, live, restarted):
        c.close()
    store.close()


def test_snapshot_keeps_the_preparing_incarnation(meta_url_factory: UrlFactory) -> None:
    c = _client(meta_url_factory(), 3)
    oid = c.prepare_objects(2)
    payload = snapshot.encode(c.image)
    image = snapshot.decode(payload, snapshot.checksum(payload), "test")
    assert image.objects == c.image.objects and image.objects[oid + 1].node_id == 3
    # an image written before the incarnation was recorded (object rows of 7) still opens, without an owner
    state = snapshot.image_state(c.image)
    state["objects"] = [row[:7] for row in state["objects"]]
    old = zlib.compress(json.dumps(state).encode())
    image = snapshot.decode(old, snapshot.checksum(old), "test")
    assert image.objects[oid].node_id is None and image.objects[oid].state == PREPARED
    c.close()


_CLOSE_WHILE_READ = """
import sys, threading
from broker.metadata import MetadataClient
from broker.metadata.log_store import LogClosed
c = MetadataClient(sys.argv[1], 5, namespace="_kafka_test")
c.register_node()
started, ended = threading.Barrier(3), []
def read():
    started.wait()
    try:
        while True:
            c.log.read_since(0)
            c.kv_get("k")
    except LogClosed as exc:
        ended.append(str(exc))
threads = [threading.Thread(target=read) for _ in range(2)]
for t in threads:
    t.start()
started.wait()
c.close()
c.close()
for t in threads:
    t.join(30)
print(len(ended), ended[0])
"""


def test_closing_while_other_threads_read(meta_url_factory: UrlFactory) -> None:
    """A node stopping closes its metadata while its threads may still read it: they get LogClosed, naming the
    log, and the process goes on (a SQLite connection closed under a running statement crashed it). In a child
    process, so that a crash fails this test instead of ending the run."""
    url = meta_url_factory()
    run = subprocess.run([sys.executable, "-c", _CLOSE_WHILE_READ, url], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr[-2000:]}"
    count, _, message = run.stdout.strip().partition(" ")
    assert count == "2" and message == f"the metadata log {url} is closed"
