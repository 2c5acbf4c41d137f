"""Metadata snapshots: snapshot + tail == full replay, truncation under concurrent writers, damaged snapshots,
clients that were down across truncations, and an image that holds only live state."""

from __future__ import annotations

import logging
import random
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from broker.errors import Fenced, InvalidRequest, StreamNotFound
from broker.metadata import (
    CommitRange,
    MetadataClient,
    SnapshotDamaged,
    StreamObjectCommit,
    StreamSetObjectCommit,
)
from broker.metadata.image import OPENED
from broker.metadata.log_store import open_log
from broker.metadata.snapshot import image_state
from storage_tier import BlobStore, open_store

UrlFactory = Callable[[], str]
OPS = ["create", "open", "close", "sso", "so", "trim", "delete", "kv_put", "kv_del", "cleanup", "snapshot",
       "lagger"]
Op = tuple[str, int, int, int]


def _pg_url(pg_dsn: str, schema: str) -> str:
    return f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}schema={schema}"


def _assert_same(a: MetadataClient, b: MetadataClient) -> None:
    assert image_state(a.image) == image_state(b.image)
    assert a.image.streams == b.image.streams and a.image.nodes == b.image.nodes  # includes the derived parts
    assert a.image.objects == b.image.objects and a.image.kv == b.image.kv


def _apply_op(nodes: list[MetadataClient], store: BlobStore, lagger: MetadataClient, op: Op) -> None:
    kind, who, pick, size = op
    c = nodes[who % len(nodes)]
    img = c.image
    sids = sorted(img.streams)
    sid = sids[pick % len(sids)] if sids else -1
    owned = [s for s in sorted(img.streams) if img.streams[s].state == OPENED and img.streams[s].owner == c.node_id]
    try:
        if kind == "create":
            c.create_stream(start_offset=size)
        elif kind == "open" and sid >= 0:
            c.open_stream(sid, img.streams[sid].epoch + 1)
        elif kind == "close" and sid >= 0:
            c.close_stream(sid, img.streams[sid].epoch)
        elif kind == "sso" and owned:
            chosen = owned[pick % len(owned):][:2]
            oid = c.prepare_objects(1)
            ranges = [CommitRange(s, img.streams[s].epoch, img.streams[s].end_offset,
                                  img.streams[s].end_offset + size) for s in chosen]
            c.commit_objects(sso=StreamSetObjectCommit(oid, 100 + size, ranges))
        elif kind == "so" and owned:
            s = owned[pick % len(owned)]
            oid = c.prepare_objects(1)
            end = img.streams[s].end_offset
            c.commit_objects(stream_objects=[StreamObjectCommit(oid, 50 + size, CommitRange(
                s, img.streams[s].epoch, end, end + size))])
        elif kind == "trim" and owned:
            s = img.streams[owned[pick % len(owned)]]
            c.trim_stream(s.stream_id, s.epoch, min(s.end_offset, s.start_offset + size))
        elif kind == "delete" and sid >= 0:
            c.delete_stream(sid, img.streams[sid].epoch)
        elif kind == "kv_put":
            c.kv_put(f"k{pick}", f"v{size}")
        elif kind == "kv_del":
            c.kv_delete(f"k{pick}")
        elif kind == "cleanup":
            c.cleanup_objects(store, now_ms=1 << 50)  # far future: every prepared object has expired
        elif kind == "snapshot":
            nodes[0].maybe_snapshot(force=True)
        elif kind == "lagger":
            lagger.catch_up()
    except (Fenced, InvalidRequest, StreamNotFound):
        pass  # a refused request appends nothing; the sequence goes on
    c.catch_up()


def run_and_compare(url: str, store: BlobStore, ops: list[Op]) -> tuple[MetadataClient, MetadataClient]:
    """Run `ops` on two writer nodes (node 0 also snapshots), then check a fresh client and a lagging one
    against node 0's image, which applied every record since offset 0 (a full replay)."""
    lagger = MetadataClient(url, 7)  # opened on the empty log; catches up only at "lagger" steps and at the end
    nodes = [MetadataClient(url, n, snapshots_kept=2) for n in (0, 1)]
    for c in nodes:
        c.register_node()
    for op in ops:
        _apply_op(nodes, store, lagger, op)
    nodes[0].catch_up()
    assert nodes[0].reloads == 0  # node 0 never fell behind: its image is the full replay
    fresh = MetadataClient(url, 9)
    lagger.catch_up()
    for c in (fresh, lagger):
        _assert_same(c, nodes[0])
    for c in (*nodes, lagger):
        c.close()
    return fresh, lagger


op_lists = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 1), st.integers(0, 5), st.integers(1, 40)),
                    max_size=15)
SNAPSHOT: Op = ("snapshot", 0, 0, 0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments=st.lists(op_lists, min_size=2, max_size=5))
def test_snapshot_plus_tail_equals_full_replay_sqlite(segments: list[list[Op]]) -> None:
    """Random operations in segments with a snapshot after each (and more at random inside them): several
    snapshots and truncations per example, a tail after the last, a lagging client behind them."""
    ops = [op for seg in segments for op in [*seg, ("kv_put", 0, 9, len(seg)), SNAPSHOT]][:-1]
    tmp = Path(tempfile.mkdtemp(prefix="mqsnap"))
    try:
        fresh, lagger = run_and_compare(f"sqlite:///{tmp}/meta.db", open_store(f"file://{tmp}/objects"), ops)
        event(f"snapshots kept: {len(fresh.log.snapshots())}, lagging client reloads: {lagger.reloads}")
        fresh.close()
    finally:
        shutil.rmtree(tmp)


def _random_ops(seed: int, n: int) -> list[Op]:
    rnd = random.Random(seed)
    ops: list[Op] = [("create", 0, 0, 0), ("create", 1, 0, 5), ("open", 0, 0, 1), ("open", 1, 1, 1)]
    ops += [(rnd.choice(OPS), rnd.randint(0, 1), rnd.randint(0, 5), rnd.randint(1, 40)) for _ in range(n)]
    return ops


def test_snapshot_plus_tail_equals_full_replay_postgresql(pg_dsn: str, pg_schema_factory: UrlFactory,
                                                          tmp_path: Path) -> None:
    url = _pg_url(pg_dsn, pg_schema_factory())
    fresh, lagger = run_and_compare(url, open_store(f"file://{tmp_path}/objects"), _random_ops(19, 160))
    assert fresh.log.snapshots(), "the sequence wrote snapshots"
    assert fresh.log.first_offset() not in (None, 0), "and truncated the log"
    fresh.close()


def test_truncation_under_concurrent_writers_postgresql(pg_dsn: str, pg_schema_factory: UrlFactory) -> None:
    url = _pg_url(pg_dsn, pg_schema_factory())
    writers = [MetadataClient(url, n) for n in range(3)]
    for w in writers:
        w.register_node()
    snapper = MetadataClient(url, 5, snapshots_kept=2)
    reader = MetadataClient(url, 6)  # catches up without the lock while the log is truncated under it
    sid = writers[0].create_stream()
    writers[0].open_stream(sid, 0)
    per_writer = 60
    errors: list[BaseException] = []
    done = threading.Event()
    truncated: list[int] = []

    def write(n: int) -> None:
        try:
            w = writers[n]
            for i in range(per_writer):
                w.kv_put(f"w{n}/{i}", str(i))
                if n == 0:
                    oid = w.prepare_objects(1)
                    end = w.image.streams[sid].end_offset
                    w.commit_objects(sso=StreamSetObjectCommit(oid, 10, [CommitRange(sid, 0, end, end + 3)]))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    def snapshots() -> None:
        try:
            while not done.is_set():
                r = snapper.maybe_snapshot(force=True)
                if r is not None:
                    truncated.append(r.records_truncated)
                reader.catch_up()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(3)]
    side = threading.Thread(target=snapshots)
    side.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    done.set()
    side.join(timeout=120)
    assert not any(t.is_alive() for t in (*threads, side)), "writers or snapshotter did not finish in 120 s"
    assert not errors, errors
    assert sum(1 for n in truncated if n > 0) >= 3, f"the log was truncated while writing: {truncated}"
    fresh = MetadataClient(url, 9)
    for n in range(3):
        assert {k: v for k, v in fresh.image.kv.items() if k.startswith(f"w{n}/")} == {
            f"w{n}/{i}": str(i) for i in range(per_writer)}
    assert fresh.image.streams[sid].end_offset == 3 * per_writer
    for c in (*writers, snapper, reader):
        c.catch_up()
        _assert_same(c, fresh)
    assert fresh.log.first_offset() > 0 and len(fresh.log.snapshots()) <= 3
    for c in (*writers, snapper, reader, fresh):
        c.close()


def _damage(url: str, offset: int) -> None:
    """Flip one byte of the stored payload of the snapshot at `offset` (the checksum is left as it was)."""
    log = open_log(url)
    ph = "?" if url.startswith("sqlite") else "%s"
    with log.locked() as txn:
        stored = txn.read_snapshot(offset)
        assert stored is not None
        bad = bytearray(stored[1])
        bad[len(bad) // 2] ^= 0x40
        txn.conn.execute(f"UPDATE meta_snapshot SET payload = {ph} WHERE log_offset = {ph}",  # type: ignore[attr-defined]
                         (bytes(bad), offset))
    log.close()


def test_damaged_snapshot_falls_back(meta_url_factory: UrlFactory, caplog: pytest.LogCaptureFixture) -> None:
    url = meta_url_factory()
    w = MetadataClient(url, 0, snapshots_kept=2)
    w.register_node()
    offsets = []
    for round_ in range(3):
        for i in range(5):
            w.kv_put(f"r{round_}/{i}", "x")
        offsets.append(w.maybe_snapshot(force=True).log_offset)  # type: ignore[union-attr]
    w.kv_put("tail", "y")
    kept = [s.log_offset for s in w.log.snapshots()]
    assert kept == offsets[:0:-1] and w.log.first_offset() == offsets[1]  # two kept, log truncated below them
    _damage(url, offsets[2])
    with caplog.at_level(logging.ERROR, logger="mqindex.broker.metadata"):
        fresh = MetadataClient(url, 9)
    _assert_same(fresh, w)
    assert any(getattr(r, "snapshot_offset", None) == offsets[2] for r in caplog.records)
    assert [s.log_offset for s in fresh.log.snapshots() if s.damaged] == [offsets[2]]
    # the next snapshot keeps two undamaged ones, so a fallback is still there
    w.kv_put("more", "z")
    w.maybe_snapshot(force=True)
    assert [s.log_offset for s in w.log.snapshots() if not s.damaged][1] == offsets[1]
    # with every kept snapshot damaged and the log truncated, opening fails naming the damage
    _damage(url, offsets[1])
    _damage(url, w.image.offset)
    with pytest.raises(SnapshotDamaged, match=f"log offset {offsets[1]}"):
        MetadataClient(url, 10)
    for c in (w, fresh):
        c.close()


def test_client_down_across_truncations_rejoins(meta_url_factory: UrlFactory) -> None:
    url = meta_url_factory()
    w = MetadataClient(url, 0, snapshots_kept=2)
    w.register_node()
    down = MetadataClient(url, 1)
    down.register_node()
    idle_reader = MetadataClient(url, 2)
    sid = w.create_stream()
    w.open_stream(sid, 0)
    behind = down.image.offset
    for round_ in range(5):
        oid = w.prepare_objects(1)
        end = w.image.streams[sid].end_offset
        w.commit_objects(sso=StreamSetObjectCommit(oid, 10, [CommitRange(sid, 0, end, end + 10)]))
        w.kv_put(f"round/{round_}", "done")
        w.maybe_snapshot(force=True)
    assert w.log.first_offset() > behind + 1  # what `down` would read next is gone
    down.kv_put("back", "1")  # a write: catches up under the log lock, reloading from a snapshot
    idle_reader.catch_up()  # a read without the lock does the same
    w.catch_up()
    for c in (down, idle_reader):
        assert c.reloads == 1
        _assert_same(c, w)
    assert down.get_objects(sid, 0, 50).next_offset == 50
    for c in (w, down, idle_reader):
        c.close()


def test_image_holds_only_live_state(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    store = open_store(f"file://{tmp_path}/objects")
    c = MetadataClient(url, 0)
    c.register_node()
    other = MetadataClient(url, 1)
    other.register_node()
    sids = c.create_streams(3)
    idle, doomed = c.create_streams(2)
    for s in (*sids, doomed):
        c.open_stream(s, 0)
    sizes = []
    for round_ in range(120):
        oid = c.prepare_objects(1)
        ranges = [CommitRange(s, 0, c.image.streams[s].end_offset, c.image.streams[s].end_offset + 10)
                  for s in (*sids, doomed)]
        c.commit_objects(sso=StreamSetObjectCommit(oid, 10, ranges))
        if round_ % 10 == 9:  # retention: keep the newest 20 commits of every stream
            for s in (*sids, doomed):
                c.trim_stream(s, 0, c.image.streams[s].end_offset - 200)
            c.cleanup_objects(store)
            sizes.append(len(c.image.objects))
        # a partition of the idle stream moves back and forth without writing
        (c if round_ % 2 == 0 else other).open_stream(idle, round_ + 1)
        (c if round_ % 2 == 0 else other).close_stream(idle, round_ + 1)
        c.catch_up()
    assert max(sizes) <= 21 and sizes[-1] == sizes[3], sizes  # bounded by live objects, not by history
    assert len(c.image.streams[idle].ranges) == 1  # the empty ranges of 120 epochs are gone
    c.delete_stream(doomed, 0)
    c.cleanup_objects(store)
    for node in c.image.nodes.values():
        assert doomed not in node.parts
        assert all(doomed not in o.ranges for o in node.sso.values())
    assert len(c.image.objects) <= 21
    fresh = MetadataClient(url, 9)
    _assert_same(fresh, c)
    for x in (c, other, fresh):
        x.close()
