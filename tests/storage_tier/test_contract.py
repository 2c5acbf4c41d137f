"""The BlobStore contract, run against every backend on its real server (local dir, SeaweedFS, SQLite, PostgreSQL)."""

from __future__ import annotations

import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from storage_tier import BlobNotFound, BlobStore, InvalidKey, InvalidRange, open_store

MiB = 1024 * 1024


def rand(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def test_round_trip_empty_and_small(store: BlobStore) -> None:
    store.put("empty", b"")
    store.put("small/one", b"hello, world")
    assert store.get("empty") == b""
    assert store.size("empty") == 0
    assert store.get("small/one") == b"hello, world"
    assert store.size("small/one") == 12
    assert store.exists("small/one") and store.exists("empty")


def test_round_trip_64_mib(store: BlobStore) -> None:
    data = os.urandom(64 * MiB)
    store.put("big/blob", data)
    assert store.size("big/blob") == len(data)
    assert store.get("big/blob") == data
    # a range across the 1 MiB chunk boundary of the database backends
    assert store.get("big/blob", MiB - 3, MiB + 5) == data[MiB - 3 : MiB + 5]
    assert store.get("big/blob", 63 * MiB + 17) == data[63 * MiB + 17 :]


@pytest.mark.parametrize(
    ("start", "end"),
    [(0, 0), (0, 1), (0, 10), (0, None), (9, 10), (9, None), (3, 7), (10, None), (10, 10), (4, 4), (3, 1000)],
)
def test_ranged_reads_at_every_edge(store: BlobStore, start: int, end: int | None) -> None:
    data = b"0123456789"
    store.put("r", data)
    assert store.get("r", start, end) == data[start:end]


@pytest.mark.parametrize(("start", "end"), [(11, None), (11, 20), (5, 3), (-1, 4), (100, 200)])
def test_ranged_reads_outside_the_blob_are_errors(store: BlobStore, start: int, end: int | None) -> None:
    store.put("r", b"0123456789")
    with pytest.raises(InvalidRange) as err:
        store.get("r", start, end)
    assert "'r'" in str(err.value)


def test_list_by_prefix(store: BlobStore) -> None:
    for k in ["a/1", "a/2", "ab/1", "b/1", "b/c/d"]:
        store.put(k, k.encode())
    assert store.list("a/") == ["a/1", "a/2"]
    assert store.list("a") == ["a/1", "a/2", "ab/1"]
    assert store.list("b/c") == ["b/c/d"]
    assert store.list("") == ["a/1", "a/2", "ab/1", "b/1", "b/c/d"]
    assert store.list("zzz") == []


def test_list_many_keys_pages(store: BlobStore) -> None:
    keys = [f"many/{i:05d}" for i in range(1100)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: store.put(k, k.encode()), keys))
    store.put("other/x", b"x")
    before = store.meter.snapshot()
    assert store.list("many/") == keys
    lists = (store.meter.snapshot() - before)["LIST"]
    # S3 returns at most 1000 keys a page, so 1100 keys take two LIST requests; the others take one
    assert lists == (2 if store.name == "s3" else 1)


def test_batch_delete_and_overwrite(store: BlobStore) -> None:
    for i in range(5):
        store.put(f"d/{i}", b"v1-%d" % i)
    store.put("d/2", b"v2")
    assert store.get("d/2") == b"v2" and store.size("d/2") == 2
    store.delete(["d/0", "d/2", "d/4", "d/never-existed"])
    assert store.list("d/") == ["d/1", "d/3"]
    store.delete("d/1")
    assert store.list("d/") == ["d/3"]
    store.delete([])  # nothing to do is not an error


def test_missing_keys(store: BlobStore) -> None:
    for call in (lambda: store.get("nope"), lambda: store.get("nope", 1, 2), lambda: store.size("nope")):
        with pytest.raises(BlobNotFound) as err:
            call()
        assert "'nope'" in str(err.value) and store.name in str(err.value)
    assert not store.exists("nope")
    # one exception type for every backend, usable as a KeyError too
    assert issubclass(BlobNotFound, KeyError)


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "./a", "x\ny"])
def test_bad_keys_are_refused_and_store_nothing(store: BlobStore, key: str) -> None:
    with pytest.raises(InvalidKey):
        store.put(key, b"x")
    assert store.list("") == []


def test_multipart_three_parts_with_server_side_copy(store: BlobStore) -> None:
    src = rand(8 * MiB, 1)
    store.put("mp/src", src)
    part1, part3 = rand(6 * MiB, 2), rand(1000, 3)
    before = store.meter.snapshot()
    w = store.multipart("mp/dst")
    w.write_part(part1)
    w.copy_part("mp/src", MiB, 7 * MiB + 123)
    w.write_part(part3)
    assert not store.exists("mp/dst")  # nothing visible before complete()
    w.complete()
    assert store.get("mp/dst") == part1 + src[MiB : 7 * MiB + 123] + part3
    assert (store.meter.snapshot() - before)["COPY"] == 1


def test_multipart_small_parts_and_copies(store: BlobStore) -> None:
    store.put("mp/s", b"abcdefghij")
    with store.multipart("mp/small") as w:
        w.write_part(b"12")
        w.copy_part("mp/s", 2, 5)
        w.write_part(b"")
        w.copy_part("mp/s", 8)
    assert store.get("mp/small") == b"12cdeij"
    with store.multipart("mp/empty"):
        pass
    assert store.get("mp/empty") == b""


def _pending_uploads(store: BlobStore) -> int:
    if store.name == "s3":
        resp = store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=store.prefix)  # type: ignore[attr-defined]
        return len(resp.get("Uploads", []))
    if store.name == "local":
        return len(os.listdir(store.scratch))  # type: ignore[attr-defined]
    conn = store._conn()  # type: ignore[attr-defined]
    return int(conn.execute("SELECT count(*) FROM mqindex_upload_chunks").fetchone()[0])


def test_multipart_abort_leaves_nothing(store: BlobStore) -> None:
    store.put("mp/src", rand(6 * MiB, 4))
    w = store.multipart("mp/aborted")
    w.write_part(rand(6 * MiB, 5))
    w.copy_part("mp/src", 0, 6 * MiB)
    w.abort()
    assert not store.exists("mp/aborted")
    assert store.list("mp/") == ["mp/src"]
    assert _pending_uploads(store) == 0
    # an exception inside the with-block aborts too
    with pytest.raises(RuntimeError), store.multipart("mp/failed") as w2:
        w2.write_part(b"x" * 100)
        raise RuntimeError("producer failed")
    assert not store.exists("mp/failed")
    assert _pending_uploads(store) == 0


def test_meter_counts_match_requests(store: BlobStore) -> None:
    store.meter.reset()
    store.put("m/a", b"aaaa")
    store.put("m/b", b"bb")
    store.put("m/c", b"")
    assert store.get("m/a") == b"aaaa"
    assert store.get("m/a", 1, 3) == b"aa"
    assert store.size("m/b") == 2
    assert store.exists("m/c")
    assert store.list("m/") == ["m/a", "m/b", "m/c"]
    store.delete(["m/a", "m/b"])
    snap = store.meter.snapshot()
    assert snap.requests == {"PUT": 3, "GET": 2, "HEAD": 2, "LIST": 1, "DELETE": 1, "COPY": 0}
    assert snap.bytes_in == 6
    assert snap.bytes_out == 6


def test_eight_threads_distinct_keys(store: BlobStore) -> None:
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in range(15):
                data = rand(1000 + 997 * i, seed=t * 100 + i)
                key = f"conc/{t}/{i}"
                store.put(key, data)
                assert store.get(key) == data
                assert store.get(key, 10, 500) == data[10:500]
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors[0]
    assert len(store.list("conc/")) == 8 * 15
    for t in range(8):
        for i in range(15):
            assert store.get(f"conc/{t}/{i}") == rand(1000 + 997 * i, seed=t * 100 + i)


def test_data_survives_reopening(store: BlobStore) -> None:
    store.put("persist/x", b"durable")
    again = open_store(store.url)
    try:
        assert again.get("persist/x") == b"durable"
    finally:
        again.close()
