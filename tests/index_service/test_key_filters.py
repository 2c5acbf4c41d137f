"""Key filters on real SeaweedFS: a lookup of a key held by one uploaded file out of a hundred makes one GET,
an absent key none; filters survive a cold restart (from local disk, else the store); a damaged or missing
filter still gives the complete answer and is logged once; the memory held for filters stays under its
setting; /metrics figures count what the filters saved."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from index_file.key_filter import MappedKeyFilter
from index_service import FileState, IndexService
from index_service.key_filters import check_filter_object
from index_service.lookup_stats import LookupCollector
from index_service.query import QueryStats
from tests.index_service.helpers import ManualClock, open_service

FILES = 100
PER_FILE = 20  # max_items of the test service: one key per record


def _fill(svc: IndexService, clock: ManualClock, files: int = FILES) -> None:
    for i in range(files * PER_FILE):
        svc.put("orders", i % 4, i, 64, [f"o{i}"], clock.now + i)
    svc.flush()
    svc.roll()  # the last file is full but rolls only at the next put
    rep = svc.maintain()
    assert len(rep.uploaded) == files and not rep.failed


def _lookup(svc: IndexService, key: str) -> tuple[list[int], int, QueryStats]:
    """(offsets found, store GETs made, the lookup's stats)."""
    before = svc.store.meter.snapshot()  # type: ignore[union-attr]
    stats = QueryStats()
    hits = svc.query_async("orders", key, 10, stats=stats).result()
    gets = (svc.store.meter.snapshot() - before)["GET"]  # type: ignore[union-attr]
    return [h.offset for h in hits], gets, stats


def _uploaded(svc: IndexService) -> list[tuple[str, str]]:
    return [(f.name, f.location) for f in svc.files() if f.state is FileState.UPLOADED]


@pytest.fixture
def url(store_url_factory: Callable[[str], str]) -> str:
    return store_url_factory("s3")


def test_a_key_in_one_file_of_a_hundred_costs_one_get(tmp_path: Path, url: str) -> None:
    clock = ManualClock()
    svc = open_service(tmp_path / "idx", url, clock)
    try:
        _fill(svc, clock)
        for i in (0, 19, 20, 777, 1500, FILES * PER_FILE - 1):
            offsets, gets, stats = _lookup(svc, f"o{i}")
            assert offsets == [i]
            assert gets == 1 and stats.gets == 1 and stats.files_read == 1
            assert stats.files_filtered == FILES - 1
        for i in range(100):  # absent keys read no file at all
            offsets, gets, stats = _lookup(svc, f"absent-{i}")
            assert offsets == [] and gets == 0 and stats.files_read == 0
        # without the filters every file in range may be read (the fence alone rules out some)
        svc.config.key_filters = False
        _offsets, gets, _stats = _lookup(svc, "o777")
        assert gets > 10
    finally:
        svc.close()


def test_filters_survive_a_cold_restart_from_disk_then_from_the_store(tmp_path: Path, url: str) -> None:
    clock = ManualClock()
    idx = tmp_path / "idx"
    svc = open_service(idx, url, clock)
    try:
        _fill(svc, clock, files=30)
    finally:
        svc.close()
    svc = open_service(idx, url, clock)
    try:
        assert len(svc.filters) == 0  # loaded lazily
        offsets, gets, _ = _lookup(svc, "o333")
        assert offsets == [333] and gets == 1  # every filter came from local disk
        assert len(svc.filters) == 30
    finally:
        svc.close()
    for p in (idx / "uploaded").glob("*.filter"):
        p.unlink()
    svc = open_service(idx, url, clock)
    try:
        offsets, gets, _ = _lookup(svc, "o333")
        assert offsets == [333] and gets == 30 + 1  # each filter fetched once from the store, then one read
        offsets, gets, _ = _lookup(svc, "o334")
        assert offsets == [334] and gets == 1
        assert len(list((idx / "uploaded").glob("*.filter"))) == 30  # kept locally again
    finally:
        svc.close()


@pytest.mark.parametrize("damage", ["flipped", "missing"])
def test_a_damaged_or_missing_filter_still_answers_and_is_logged_once(
        tmp_path: Path, url: str, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    idx = tmp_path / "idx"
    svc = open_service(idx, url, clock)
    try:
        _fill(svc, clock, files=20)
        files = _uploaded(svc)
    finally:
        svc.close()
    stem, key = files[7]  # holds o140..o159
    local = idx / "uploaded" / f"{stem}.filter"
    from storage_tier import open_store

    store = open_store(url)
    try:
        if damage == "flipped":
            data = bytearray(local.read_bytes())
            data[len(data) // 2] ^= 0xFF
            local.write_bytes(bytes(data))
            store.put(key + ".filter", bytes(data))
            assert check_filter_object(store, key) == "filter crc32c"
        else:
            local.unlink()
            store.delete([key + ".filter"])
            assert check_filter_object(store, key) == "missing"
    finally:
        store.close()
    caplog.set_level(logging.WARNING, logger="mqindex.index_service.filters")
    svc = open_service(idx, url, clock)
    try:
        offsets, gets, stats = _lookup(svc, "o150")
        assert offsets == [150]  # the complete answer
        assert stats.files_read == 1 and gets == 1 + 1  # the filter asked of the store, then the file
        offsets, gets, stats = _lookup(svc, "o15")  # another file's key: the unfiltered file is read too
        assert offsets == [15] and stats.files_read == 2 and gets == 2
        assert _lookup(svc, "absent")[2].files_read == 1
        logged = [r for r in caplog.records if "no usable key filter" in r.getMessage()]
        assert len(logged) == 1 and logged[0].file == stem  # type: ignore[attr-defined]
        assert svc.lookup_stats.filters_unusable == 1
    finally:
        svc.close()


def test_memory_held_for_filters_stays_under_the_setting(tmp_path: Path, url: str) -> None:
    clock = ManualClock()
    bound = 4096  # a 20-key filter takes about 100 bytes: room for a few dozen of the 100
    svc = open_service(tmp_path / "idx", url, clock, filter_cache_bytes=bound)
    try:
        _fill(svc, clock)
        for i in range(0, FILES * PER_FILE, 37):
            fps = svc.lookup_stats.false_positives
            offsets, _gets, stats = _lookup(svc, f"o{i}")
            # (o1517 is a false positive of another file's filter: 1 in 65,536 keys, counted as such)
            assert offsets == [i] and stats.files_read == 1 + svc.lookup_stats.false_positives - fps
            assert 0 < svc.filters.bytes_held <= bound
        assert len(svc.filters) < FILES
    finally:
        svc.close()


def test_mapped_filters_evicted_and_mapped_again_answer_under_the_bound(tmp_path: Path, url: str) -> None:
    clock = ManualClock()
    bound = 4096
    svc = open_service(tmp_path / "idx", url, clock, filter_cache_bytes=bound)
    try:
        _fill(svc, clock)
    finally:
        svc.close()
    svc = open_service(tmp_path / "idx", url, clock, filter_cache_bytes=bound)  # cold: filters from local disk
    svc.filters.map_min_bytes = 0  # every filter file mapped, not read
    try:
        for rnd in range(2):  # the second round maps again what the first evicted (no payload check again)
            for i in range(rnd, FILES * PER_FILE, 53):
                fps = svc.lookup_stats.false_positives
                offsets, gets, stats = _lookup(svc, f"o{i}")
                assert offsets == [i] and stats.files_read == 1 + svc.lookup_stats.false_positives - fps
                assert gets == stats.files_read  # filters come from local disk: no GET for them
                assert 0 < svc.filters.bytes_held <= bound
            assert _lookup(svc, "absent")[2].files_read <= 1
        held = list(svc.filters._lru.values())
        assert held and all(isinstance(f, MappedKeyFilter) for f in held) and len(held) < FILES
        assert len(svc.filters._verified) == FILES  # each file's payload checked whole once
    finally:
        svc.close()


def test_compacted_files_consult_their_filters_without_a_store(tmp_path: Path) -> None:
    clock = ManualClock()
    svc = open_service(tmp_path / "idx", None, clock)
    try:
        for i in range(10 * PER_FILE):
            svc.put("orders", 0, i, 64, [f"o{i}"], clock.now + i)
        svc.flush()
        svc.roll()
        assert len(svc.maintain().compacted) == 10
        assert len(list((tmp_path / "idx" / "compacted").glob("*.filter"))) == 10
        stats = QueryStats()
        assert [h.offset for h in svc.query_async("orders", "o42", 5, stats=stats).result()] == [42]
        assert stats.files_read == 1 and stats.files_filtered == 9
    finally:
        svc.close()


def test_metrics_count_filter_answers_files_and_gets(tmp_path: Path, url: str) -> None:
    clock = ManualClock()
    svc = open_service(tmp_path / "idx", url, clock)
    try:
        _fill(svc, clock, files=10)
        for i in range(5):
            assert _lookup(svc, f"o{i * 40}")[0] == [i * 40]
        for i in range(5):
            assert _lookup(svc, f"absent-{i}")[0] == []
        s = svc.lookup_stats.snapshot()
        assert s["lookups"] == 10 and s["filter_maybe"] == 5 and s["filter_no"] == 5 * 9 + 5 * 10
        assert s["files_read"] == 5 and s["gets"] == 5 and s["false_positives"] == 0
        registry = CollectorRegistry()
        registry.register(LookupCollector(svc.lookup_stats))
        text = generate_latest(registry).decode()
        assert 'mqindex_index_filter_checks_total{verdict="no"} 95.0' in text
        assert 'mqindex_index_filter_checks_total{verdict="maybe"} 5.0' in text
        assert "mqindex_index_lookup_gets_count 10.0" in text and "mqindex_index_lookup_gets_sum 5.0" in text
        assert 'mqindex_index_lookup_files_bucket{le="1"} 10.0' in text
    finally:
        svc.close()


def test_files_built_outside_the_service_get_their_filter_when_adopted(tmp_path: Path, url: str) -> None:
    """A Spark-style build (compacted files uploaded by the builder, then registered) is served with a key
    filter built from the objects at adoption: a lookup reads the one file holding the key."""
    from index_file import NativeIndexWriter, compact
    from index_service import external_builds as eb
    from jobs import spark_build as sb
    from storage_tier import open_store

    store = open_store(url)
    name, attempt = "0123456789abcdef", "aaaaaaaaaaaa"
    manifests = []
    for seq in range(12):
        begin = 1_000 + 1_000 * seq
        stem = sb.build_stem(begin, name, attempt, seq)
        src, dst = tmp_path / f"{stem}.mqxu", tmp_path / f"{stem}.mqxc"
        w = NativeIndexWriter.create(src, begin, 64, 3000)
        w.put_batch([("orders", 0, begin + i, 10, begin + i, [f"b{seq}-{i}"]) for i in range(3000)])
        w.seal()
        w.close()
        stats = compact(src, dst, items_per_block=256)  # 12 blocks a file
        key = sb.build_key(name, attempt, stem)
        size, crc = sb._upload(store, dst, key, 1 << 20, sb.abort_marker(name, attempt))
        manifests.append(sb._manifest(dst, key, stem, crc, size, stats.items, begin))
    eb.register_build(tmp_path / "idx", name, attempt, manifests)
    svc = open_service(tmp_path / "idx", url)
    try:
        assert len(list((tmp_path / "idx" / "uploaded").glob("b*.filter"))) == 12
        offsets, gets, stats = _lookup(svc, "b7-1234")
        assert offsets == [8_000 + 1234] and gets == 1 and stats.files_read == 1
        assert _lookup(svc, "b7-absent")[1] == 0
    finally:
        svc.close()
        store.close()


def test_filters_of_published_files_are_read_from_the_store(tmp_path: Path, url: str) -> None:
    """Files another node uploaded and published are known by store key only: their filters come from the
    store, once each, and rule out the files without the key."""
    from index_service.key_filters import ObjectFilters
    from storage_tier import open_store

    clock = ManualClock()
    svc = open_service(tmp_path / "idx", url, clock)
    try:
        _fill(svc, clock, files=10)
        keys = [loc for _stem, loc in _uploaded(svc)]
    finally:
        svc.close()
    store = open_store(url)
    try:
        filters = ObjectFilters(store, max_bytes=1 << 20)
        before = store.meter.snapshot()
        assert [k for k in keys if filters.may_contain(k, "orders", "o55")] == [keys[2]]
        assert [k for k in keys if filters.may_contain(k, "orders", "o56")] == [keys[2]]
        assert (store.meter.snapshot() - before)["GET"] == 10  # one per filter, then held
        store.delete([keys[0] + ".filter"])
        assert ObjectFilters(store).may_contain(keys[0], "orders", "anything")  # no filter: read the file
    finally:
        store.close()
