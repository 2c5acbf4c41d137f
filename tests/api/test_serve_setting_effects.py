"""Each node, index and metadata setting of `mqindex serve` changes the behaviour it names, seen from outside a
real process: /metrics, the HTTP API, files in the data directory and rows of the metadata database.

Five servers start at once and run the same workload; each setting is checked by comparing a server that
sets it against one that leaves it at its default (one test per setting, all sharing the servers). Settings already
proven elsewhere: retention_ms, maintenance_interval_s, upload_interval_s, index_max_items
(test_serve_settings.py), compaction_* (test_compaction_setting_effects.py, test_compaction_settings.py).
index_query_threads: test_query_threads_setting.py (the server's query threads listed by py-spy).
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.api.server import ServerProcess, get, post, wait_for

BATCH = 4  # keyed messages per produce
VALUE = "x" * 600  # one batch is about 2.4 KB: above the 2048-byte upload threshold of the "threshold" server
FAST = ["--upload-interval-s", "0.3", "--maintenance-interval-s", "0.2"]
SLOW_UPLOAD = ["--upload-interval-s", "3600", "--maintenance-interval-s", "0.2"]
SERVERS: dict[str, list[str]] = {
    # every setting at its default but the upload interval: the peer of "small"
    "peer": FAST,
    "small": [*FAST, "--so-threshold", "1024", "--index-slots", "16", "--index-roll-age-ms", "300",
              "--block-cache-bytes", "0", "--metadata-snapshots-kept", "1"],  # + every_records in a config file
    # uploads only when the cache passes a threshold: "idle" (no upload within the test) is the peer of
    # "threshold" and "backpressure"; it also proves index-only retention and read_your_writes_s against "peer"
    "idle": [*SLOW_UPLOAD, "--index-roll-age-ms", "300", "--index-retention-ms", "1000", "--read-your-writes-s", "0"],
    "threshold": [*SLOW_UPLOAD, "--upload-threshold", "2048", "--retention-bytes", "3000", "--index-roll-age-ms",
                  "300", "--index-maintain-interval-s", "3600", "--metadata-snapshot-interval-s", "0.5"],
    "backpressure": [*SLOW_UPLOAD, "--max-cache-bytes", "1", "--index-roll-age-ms", "300"],
}
ENV = {"threshold": {"MQINDEX_METADATA_SNAPSHOTS_KEPT": "3"}}  # settings from the environment and a file reach it
CONFIG_FILE = {"small": "metadata_snapshot_every_records = 5\n"}


def produce(url: str, topic: str, tag: str, n: int = BATCH, value: str = VALUE) -> None:
    r = post(f"{url}/v1/topics/{topic}/messages",
                   json={"messages": [{"key": f"{tag}-{j}", "value": value} for j in range(n)]})
    assert r.status_code == 200, r.text


def metric(url: str, name: str, **labels: str) -> float:
    text = get(url + "/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if m and ",".join(sorted(m.group(1).split(","))) == want:
            return float(m.group(2))
    raise AssertionError(f"{name}{{{want}}} not in /metrics")


def broker_requests(url: str, kind: str) -> float:
    return metric(url, "mqindex_object_store_requests_total", backend="local", component="broker", kind=kind)


def snapshot_rows(server: ServerProcess) -> tuple[list[int], int | None]:
    """(log offsets of the metadata snapshots, first log offset kept) from the server's SQLite metadata."""
    with sqlite3.connect(server.data_dir / "metadata.sqlite", timeout=10, isolation_level=None) as db:
        db.execute("BEGIN")  # one read transaction: the snapshot rows and the log as one writer left them
        snaps = [r[0] for r in db.execute("SELECT log_offset FROM meta_snapshot ORDER BY log_offset")]
        first = db.execute("SELECT min(log_offset) FROM meta_log").fetchone()[0]
        db.execute("COMMIT")
    return snaps, first


def index_files(url: str) -> list[dict]:  # type: ignore[type-arg]
    return [f for f in get(url + "/v1/index/files").json()["files"] if f["items"]]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    root = tmp_path_factory.mktemp("setting-effects")
    made = {}
    for name, args in SERVERS.items():
        if name in CONFIG_FILE:
            (root / f"{name}.toml").write_text(CONFIG_FILE[name])
            args = [*args, "--config", str(root / f"{name}.toml")]
        made[name] = ServerProcess(root / name, *args, env=ENV.get(name))
    try:
        with ThreadPoolExecutor(len(made)) as pool:
            for f in [pool.submit(s.start) for s in made.values()]:
                f.result()
        for s in made.values():
            for topic, partitions in (("t", 1), ("u", 2)):
                r = post(s.url + "/v1/topics", json={"name": topic, "partitions": partitions})
                assert r.status_code == 201, r.text
        for i in range(3):  # three batches, each in its own upload where uploads are quick, 0.4 s apart
            for s in made.values():
                produce(s.url, "t", f"b{i}")
            time.sleep(0.4)  # lets the 300 ms index roll age pass between batches
        yield made
    finally:
        with ThreadPoolExecutor(len(made)) as pool:
            for f in [pool.submit(s.stop) for s in made.values() if s.proc is not None]:
                f.result()


def test_upload_threshold(servers: dict[str, ServerProcess]) -> None:
    # the upload interval is an hour on both: only the 2048-byte threshold uploads the ~2.4 KB batches
    wait_for("the threshold server uploads", lambda: broker_requests(servers["threshold"].url, "PUT") >= 3)
    assert broker_requests(servers["idle"].url, "PUT") == 0
    objs = get(servers["threshold"].url + "/v1/console/objects").json()
    assert objs["stream_set_objects"]["count"] + objs["stream_objects"]["count"] >= 1


def test_max_cache_bytes(servers: dict[str, ServerProcess]) -> None:
    # a 1-byte cache limit makes every produce after the first wait for an upload; the idle peer keeps it cached
    url = servers["backpressure"].url
    wait_for("back-pressure uploads", lambda: broker_requests(url, "PUT") >= 2)
    node = get(url + "/v1/console/node").json()
    idle = get(servers["idle"].url + "/v1/console/node").json()
    assert idle["wal_bytes_not_uploaded"] >= 3 * BATCH * len(VALUE)
    assert node["wal_bytes_not_uploaded"] < idle["wal_bytes_not_uploaded"]
    assert broker_requests(servers["idle"].url, "PUT") == 0


def test_so_threshold(servers: dict[str, ServerProcess]) -> None:
    # topic u's two partitions (~1.2 KB each) in one upload share a stream set object by default; with a 1 KB
    # threshold each goes to its own stream object (only small meta records stay in a shared one)
    def objects(name: str) -> dict:  # type: ignore[type-arg]
        return get(servers[name].url + "/v1/console/objects").json()  # type: ignore[no-any-return]

    def uploaded(name: str) -> bool:
        return get(servers[name].url + "/v1/console/node").json()["wal_bytes_not_uploaded"] == 0  # type: ignore[no-any-return]

    u_bytes = 4 * len(VALUE)
    for _ in range(5):  # an upload may fall between the two partitions' appends: then try again
        for name in ("peer", "small"):
            r = post(servers[name].url + "/v1/topics/u/messages", json={"messages": [
                {"value": VALUE, "partition": p} for p in (0, 0, 1, 1)]})
            assert r.status_code == 200, r.text
        wait_for("uploaded", lambda: uploaded("peer") and uploaded("small"))
        if objects("peer")["stream_set_objects"]["bytes"] >= u_bytes:
            break
    assert objects("peer")["stream_set_objects"]["bytes"] >= u_bytes
    assert objects("small")["stream_objects"]["bytes"] >= u_bytes
    assert objects("small")["stream_set_objects"]["bytes"] < u_bytes // 2


def test_retention_bytes(servers: dict[str, ServerProcess]) -> None:
    # 3000 bytes kept per partition: of three ~2.4 KB uploads the oldest go; without the setting all stay
    url = servers["threshold"].url

    def first_offset(u: str) -> int:
        msgs = get(f"{u}/v1/topics/t/partitions/0/messages", params={"offset": 0}).json()["messages"]
        return int(msgs[0]["offset"]) if msgs else -1

    wait_for("the oldest upload trimmed by size", lambda: first_offset(url) >= BATCH)
    assert first_offset(url) < 3 * BATCH  # the newest records are kept
    assert first_offset(servers["idle"].url) == 0


def test_index_slots(servers: dict[str, ServerProcess]) -> None:
    # the hash slots (4 bytes each) are laid out at the head of every index file being written: 16 slots
    # instead of the default 262,144 make it about 1 MiB smaller (same max_items on both)
    def writing_size(name: str) -> int:
        files = list((servers[name].data_dir / "index" / "writing").glob("*.mqxu"))
        return files[0].stat().st_size if files else 0

    wait_for("index files being written", lambda: writing_size("small") > 0 and writing_size("peer") > 0)
    assert writing_size("peer") - writing_size("small") >= (262_144 - 16) * 4


def test_index_roll_age_ms(servers: dict[str, ServerProcess]) -> None:
    # a 300 ms roll age seals the file being written at the next maintenance cycle, so a batch produced after
    # that goes to a new file; the default hour keeps one. (The fixture's batches 0.4 s apart may all land in
    # one file before the first cycle after it aged: the cycle runs every second.)
    small, peer = servers["small"].url, servers["peer"].url
    wait_for("the first index file rolled by age", lambda: any(
        f["state"] != "WRITING" for f in index_files(small)))
    for url in (small, peer):
        produce(url, "t", "late")
    wait_for("a second index file", lambda: len(index_files(small)) >= 2)
    wait_for("the late batch indexed on the peer", lambda: get(peer + "/v1/messages", params={
        "topic": "t", "key": "late-0"}).json()["messages"] != [])
    assert len(index_files(peer)) == 1


def test_index_retention_ms(servers: dict[str, ServerProcess]) -> None:
    # index-only retention of 1 s: the first batch's index file is deleted while its records are still stored,
    # so they are no longer found by key, yet fetched by offset; without it the index keeps what is stored
    def by_key(name: str, key: str) -> list[dict]:  # type: ignore[type-arg]
        r = get(servers[name].url + "/v1/messages", params={"topic": "t", "key": key})
        return r.json()["messages"]  # type: ignore[no-any-return]

    wait_for("the first batch's index file expired", lambda: by_key("idle", "b0-0") == [])
    fetched = get(servers["idle"].url + "/v1/topics/t/partitions/0/messages", params={"offset": 0}).json()
    assert fetched["messages"][0]["offset"] == 0 and fetched["messages"][0]["key"] == "b0-0"
    assert len(by_key("peer", "b0-0")) == 1


def test_index_maintain_interval_s(servers: dict[str, ServerProcess]) -> None:
    # the maintenance cycle rolls files past their age and uploads them: every second by default, so the 300 ms
    # roll age gives uploaded files; at one cycle an hour the same roll age leaves the one file being written
    wait_for("rolled index files uploaded", lambda: any(
        f["state"] == "UPLOADED" for f in index_files(servers["small"].url)))
    files = index_files(servers["threshold"].url)
    assert [f["state"] for f in files] == ["WRITING"]
    assert metric(servers["threshold"].url, "mqindex_object_store_requests_total", backend="local",
                  component="index", kind="PUT") == 0


def test_block_cache_bytes(servers: dict[str, ServerProcess]) -> None:
    # reading uploaded records again: with no block cache every read goes to the object store
    def gets_per_read(name: str) -> list[float]:
        url = servers[name].url
        # every record uploaded (not only a first object): a read before then is answered from the log cache, and
        # an upload between two reads sends the next one to the store
        wait_for(f"{name} uploaded the batches", lambda: broker_requests(url, "PUT") >= 1 and get(
            url + "/v1/console/node").json()["wal_bytes_not_uploaded"] == 0)
        out = []
        for _ in range(3):
            before = broker_requests(url, "GET")
            r = get(f"{url}/v1/topics/t/partitions/0/messages", params={"offset": 0})
            assert len(r.json()["messages"]) >= BATCH
            out.append(broker_requests(url, "GET") - before)
        return out

    assert all(n >= 1 for n in gets_per_read("small"))
    assert gets_per_read("peer")[1:] == [0, 0]


def test_read_your_writes_s(servers: dict[str, ServerProcess]) -> None:
    # by default a key lookup right after a produce waits until the records are indexed and finds the key;
    # at 0 s a lookup made while records are still being indexed answers at once, logging that the index lags
    peer, lax = servers["peer"].url, servers["idle"]
    assert post(lax.url + "/v1/topics", json={"name": "load"}).status_code == 201
    for i in range(3):
        produce(peer, "t", f"ryw{i}", n=1000, value="v")
        r = get(peer + "/v1/messages", params={"topic": "t", "key": f"ryw{i}-999"})
        assert len(r.json()["messages"]) == 1
    assert "index lags" not in servers["peer"].log.read_text()
    rounds = iter(range(1 << 20))

    def looked_up_while_indexing() -> bool:
        # 1,000 messages of 100 index keys each (KEYS): the lookup sent right after the acknowledgement arrives
        # while the dispatcher is still indexing those 100,000 entries. A small request is indexed before any
        # lookup gets in, on a fast or a slow machine, so producing without pause does not make the index lag.
        i = next(rounds)
        keys = [" ".join(f"load{i}-{j}-{x}" for x in range(100)) for j in range(1000)]
        r = post(f"{lax.url}/v1/topics/load/messages",
                 json={"messages": [{"key": f"load{i}-{j}", "value": "v", "headers": {"KEYS": k}}
                                    for j, k in enumerate(keys)]})
        assert r.status_code == 200, r.text
        assert get(lax.url + "/v1/messages", params={"topic": "load", "key": f"load{i}-1"}).status_code == 200
        return "index lags" in lax.log.read_text()

    wait_for("a lookup answered while indexing lags", looked_up_while_indexing)


def test_metadata_snapshot_every_records_and_kept(servers: dict[str, ServerProcess]) -> None:
    # a snapshot every 5 log records, one kept: the log is truncated right below the one snapshot
    s = servers["small"]
    wait_for("a metadata snapshot", lambda: snapshot_rows(s)[0] != [] and (snapshot_rows(s)[1] or 0) > 0)
    snaps, first = snapshot_rows(s)
    assert len(snaps) == 1 and first == snaps[0]
    assert snapshot_rows(servers["peer"])[0] == []  # defaults: 10,000 records or an hour
    r = get(f"{s.url}/v1/topics/t/partitions/0/messages", params={"offset": 0}).json()
    assert [m["offset"] for m in r["messages"][:3 * BATCH]] == list(range(3 * BATCH))


def test_metadata_snapshot_interval_s_and_kept(servers: dict[str, ServerProcess]) -> None:
    # a snapshot every 0.5 s (far fewer than 10,000 records), three kept, the log truncated below the oldest
    s = servers["threshold"]

    def produce_until(what: str, done: Callable[[list[int]], bool]) -> None:
        deadline = time.monotonic() + 30
        i = 0
        while not done(snapshot_rows(s)[0]):
            assert time.monotonic() < deadline, f"{what} after 30 s: {snapshot_rows(s)}"
            produce(s.url, "t", f"more{i}")  # new records for the next snapshot (one upload each)
            i += 1
            time.sleep(0.3)  # paces the records; the loop ends on the condition, bounded by the deadline

    produce_until("three snapshots", lambda snaps: len(snaps) >= 3)
    three = snapshot_rows(s)[0]
    produce_until("two snapshots newer than the three", lambda snaps: len(set(snaps) - set(three)) >= 2)
    snaps, first = snapshot_rows(s)
    assert len(snaps) == 3, snaps  # the older ones deleted as newer ones came
    assert min(snaps) > min(three)
    assert first == snaps[0]
