"""The pieces of the Spark build that need no Spark: key extraction equal to the broker's, file cutting,
and the index_service registration API (register_build + adoption on open/maintain), on a real local
store (file://) and real index files."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from broker.partitions.record_entries import ALL_KINDS, parse_kinds, record_keys
from broker.partitions.records import ProducerRecord, build_batch, index_keys, parse_batches
from index_file import NativeIndexWriter, compact
from index_service import IndexService
from index_service import external_builds as eb
from index_service.file_map import FileMap
from index_service.managed_file import ManagedFile
from index_service.model import FileState
from jobs import spark_build as sb
from storage_tier import open_store


def test_record_keys_equal_the_broker_index_keys() -> None:
    rng = random.Random(7)
    words = [b"a", b"b", b"order-1", b"", b"x y", b"caf\xc3\xa9", b"\xff\xfe"]
    recs = []
    for _ in range(500):
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(rng.randint(0, 4)):
            name = rng.choice(["KEYS", "UNIQ_KEY", "other"])
            value = b" ".join(rng.choice(words) for _ in range(rng.randint(0, 3))) if rng.random() < 0.9 else None
            headers.append((name, value))
        recs.append(ProducerRecord(b"v", rng.choice(words + [None]), headers, 1000))
    decoded = [r for b in parse_batches(build_batch(recs)) for r in b.records]
    assert len(decoded) == 500
    for r in decoded:
        assert record_keys(r, ALL_KINDS) == index_keys(r)
    r = decoded[0]
    assert set(record_keys(r, ("UNIQ_KEY",))) <= set(index_keys(r))
    assert parse_kinds("UNIQ_KEY, record-key") == ("record-key", "UNIQ_KEY")
    with pytest.raises(ValueError, match="unknown key kind"):
        parse_kinds("record-key,TAGS")


def test_file_chunks_hold_at_most_max_items_and_are_balanced() -> None:
    rng = random.Random(3)
    entries = [(0, i, 1, i, [f"k{j}" for j in range(rng.randint(1, 3))]) for i in range(1000)]
    total = sum(len(e[4]) for e in entries)
    for max_items in (3, 10, 97, 500, total, 10 * total):
        chunks = sb.file_chunks(entries, max_items)
        assert [e for c in chunks for e in c] == entries
        sizes = [sum(len(e[4]) for e in c) for c in chunks]
        assert max(sizes) <= max_items
        if max_items >= 97:  # records of up to 3 keys: about as many files as the items need
            assert len(chunks) <= -(-total // max_items) + 1
    with pytest.raises(ValueError, match="more than a file holds"):
        sb.file_chunks([(0, 0, 1, 0, ["a", "b"])], 1)


def test_stems_and_keys_agree_between_builder_and_service() -> None:
    stem = sb.build_stem(1234, "00ff00ff00ff00ff", "abcdef012345", 7)
    assert eb.parse_build_stem(stem) == ("00ff00ff00ff00ff", "abcdef012345")
    assert eb.build_stem(1234, "00ff00ff00ff00ff", "abcdef012345", 7) == stem
    assert sb.build_key("00ff00ff00ff00ff", "abcdef012345", stem) == eb.build_key("00ff00ff00ff00ff",
                                                                                 "abcdef012345", stem)
    assert sb.BUILD_PREFIX == eb.BUILD_PREFIX
    assert eb.parse_build_stem("0000000000001234") is None


def _make_file(tmp: Path, store: Any, name: str, attempt: str, seq: int, begin: int, keys: list[str]) -> dict[str,
                                                                                                           Any]:
    stem = sb.build_stem(begin, name, attempt, seq)
    src, dst = tmp / f"{stem}.mqxu", tmp / f"{stem}.mqxc"
    w = NativeIndexWriter.create(src, begin, 64, len(keys))
    w.put_batch([("t", 0, begin + i, 10, begin + i, [k]) for i, k in enumerate(keys)])
    w.seal()
    w.close()
    stats = compact(src, dst)
    key = sb.build_key(name, attempt, stem)
    size, crc = sb._upload(store, dst, key, 1 << 20, sb.abort_marker(name, attempt))
    return sb._manifest(dst, key, stem, crc, size, stats.items, begin)


def test_register_and_adopt_on_open_and_on_maintain(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'blobs'}"
    store = open_store(url)
    idx = tmp_path / "idx"
    name, a1, a2 = "0123456789abcdef", "aaaaaaaaaaaa", "bbbbbbbbbbbb"
    files1 = [_make_file(tmp_path, store, name, a1, s, 1000 + 100 * s, ["k", f"only{s}"]) for s in range(3)]
    with pytest.raises(eb.BuildRegistrationError, match="does not belong"):
        eb.register_build(idx, name, a2, files1)
    with pytest.raises(eb.BuildRegistrationError, match="lacks"):
        eb.register_build(idx, name, a1, [{k: v for k, v in files1[0].items() if k != "tail"}])
    eb.register_build(idx, name, a1, files1)
    assert eb.pending_builds(idx) == [name] and eb.registered_attempts(idx, name) == {a1}
    # a crash in the middle of an earlier adoption: one manifest already written
    from index_service.state_folders import StateFolders

    StateFolders(idx).write_document(StateFolders(idx).manifest(files1[0]["stem"]), files1[0])
    with IndexService.open(idx, store=url, maintain_interval_s=0) as svc:
        assert eb.pending_builds(idx) == []
        assert len([f for f in svc.files() if f.state is FileState.UPLOADED]) == 3
        assert [(h.offset, h.key) for h in svc.query("t", "k", 10)] == [(1200, "k"), (1100, "k"), (1000, "k")]
        # an online file that begins at the same millisecond as a build file does not collide
        svc.put_batch([("t", 1, 5, 1, 1000, ["k"])])
        svc.flush()
        # the same build again (another attempt) while the service runs: adopted by maintain(), replacing
        files2 = [_make_file(tmp_path, store, name, a2, s, 1000 + 100 * s, ["k"]) for s in range(2)]
        eb.register_build(idx, name, a2, files2)
        rep = svc.maintain()
        assert rep.adopted == [name]
        stems = sorted(f.name for f in svc.files() if f.state is FileState.UPLOADED)
        assert stems == sorted(m["stem"] for m in files2)
        assert [h.offset for h in svc.query("t", "k", 10)] == [1100, 1000, 5]
        assert svc.query("t", "only2", 10) == []
    assert sorted(store.list(eb.BUILD_PREFIX)) == sorted(m["key"] for m in files2)  # the replaced objects deleted
    assert eb.registered_attempts(idx, name) == {a2}
    # a damaged build document is quarantined, never served
    eb.register_build(idx, "feedfeedfeedfeed", a1, [_make_file(tmp_path, store, "feedfeedfeedfeed", a1, 0, 5000,
                                                               ["z"])])
    doc = idx / eb.BUILDS / "feedfeedfeedfeed.json"
    doc.write_bytes(doc.read_bytes().replace(b"5000", b"5001", 1))
    with IndexService.open(idx, store=url, maintain_interval_s=0) as svc:
        assert svc.query("t", "z", 10) == []
        assert len([f for f in svc.files() if f.state is FileState.UPLOADED]) == 2
    assert any(p.name.startswith("feedfeedfeedfeed.json") for p in (idx / "quarantine").iterdir())
    store.close()


def test_add_many_adds_all_or_nothing() -> None:
    fm = FileMap()
    a = ManagedFile("a", 10, FileState.UPLOADED, None, "x", sort_tag="a")
    b = ManagedFile("b", 10, FileState.UPLOADED, None, "x", sort_tag="b")
    fm.add(a)
    with pytest.raises(ValueError, match="collide"):
        fm.add_many([b, ManagedFile("a2", 10, FileState.UPLOADED, None, "x", sort_tag="a")])
    assert fm.files() == [a]
    fm.add_many([b])
    assert fm.files() == [a, b]


def test_plan_files_cuts_windows_into_balanced_time_ranges() -> None:
    rng = random.Random(5)
    window_ms = 1000
    entries = [(0, i, 1, t, ["k"] * rng.randint(1, 3)) for i, t in enumerate(sorted(rng.randrange(0, 5000)
                                                                                   for _ in range(20_000)))]
    items = [(e[3] // window_ms, [e]) for e in entries]
    buckets: dict[tuple[int, int], tuple[int, int]] = {}
    for k, c in sb.bucket_counts(items):
        buckets[k] = sb.add_counts(buckets.get(k, (0, 0)), c)
    starts = sb.plan_files(buckets, 2000, window_ms)
    ranges = dict(sb.assign_ranges(starts)(items))
    assert sorted(ranges) == list(range(len(starts)))
    for es in ranges.values():
        assert len({e[3] // window_ms for e in es}) == 1  # never two windows in one file
        assert sum(len(e[4]) for e in es) <= 2000 + max(n for _r, n in buckets.values())
    per_window = {}
    for e in entries:
        per_window[e[3] // window_ms] = per_window.get(e[3] // window_ms, 0) + len(e[4])
    assert len(starts) == sum(-(-n // 2000) for n in per_window.values())
