"""Key filters: what is put in is always found (no false negatives), the encoding round-trips, absent keys
are almost always ruled out, and any damage to the encoded bytes is detected rather than trusted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from index_file import CompactedIndexReader, FormatError, IndexEntry, NativeIndexWriter, compact, fingerprint
from index_file.key_filter import (
    HEADER_SIZE,
    KeyFilter,
    MappedKeyFilter,
    compacted_fingerprints,
    encode_filter,
    filter_for_compacted,
    verify_filter,
)

u64 = st.integers(0, (1 << 64) - 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(u64, max_size=3000))
def test_round_trip_finds_every_key(keys: list[int]) -> None:
    data = encode_filter(np.array(keys, dtype=np.uint64))
    f = KeyFilter(data, "t")
    assert f.keys == len(set(keys))
    assert all(f.may_contain(k) for k in keys)
    again = KeyFilter(bytes(data), "t")  # decoding the same bytes twice gives the same answers
    assert all(again.may_contain(k) for k in keys)


@settings(max_examples=200, deadline=None)
@given(st.lists(u64, min_size=1, max_size=500), st.data())
def test_any_damage_is_detected(keys: list[int], data: st.DataObject) -> None:
    enc = bytearray(encode_filter(np.array(keys, dtype=np.uint64)))
    how = data.draw(st.sampled_from(["flip", "truncate", "extend"]))
    if how == "flip":
        i = data.draw(st.integers(0, len(enc) - 1))
        enc[i] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "truncate":
        del enc[data.draw(st.integers(0, len(enc) - 1)):]
    else:
        enc += bytes(data.draw(st.integers(1, 64)))
    with pytest.raises(FormatError):
        verify_filter(bytes(enc), "t")
    with pytest.raises(FormatError):
        KeyFilter(bytes(enc), "t")


def test_empty_set_says_no_to_everything() -> None:
    data = encode_filter(np.empty(0, dtype=np.uint64))
    assert len(data) == HEADER_SIZE
    f = KeyFilter(data)
    assert f.keys == 0 and not f.may_contain(0) and not f.may_contain(12345)


def test_absent_keys_are_ruled_out_and_size_is_about_two_bytes_a_key() -> None:
    rng = np.random.default_rng(7)
    present = rng.integers(0, np.iinfo(np.uint64).max, size=200_000, dtype=np.uint64)
    data = encode_filter(present)
    f = KeyFilter(data)
    assert all(f.may_contain(int(k)) for k in present[:20_000])
    absent = rng.integers(0, np.iinfo(np.uint64).max, size=200_000, dtype=np.uint64)
    false_positives = sum(f.may_contain(int(k)) for k in absent)
    assert false_positives <= 20  # 2^-16 of 200,000 is about 3
    assert len(data) / 200_000 < 2.4
    assert f.nbytes <= len(data) + 64


def test_filter_of_a_compacted_file_holds_its_keys(tmp_path: Path) -> None:
    w = NativeIndexWriter.create(tmp_path / "a.mqxu", 1_000, slots=64, max_items=20_000)
    entries = [IndexEntry("orders", i % 4, i, 10, 1_000 + i, (f"k{i % 3000}", f"id-{i}")) for i in range(5000)]
    w.put_batch(entries)
    w.seal()
    w.close()
    compact(tmp_path / "a.mqxu", tmp_path / "a.mqxc", items_per_block=512)
    with CompactedIndexReader(str(tmp_path / "a.mqxc")) as r:
        fps = compacted_fingerprints(r)
        f = KeyFilter(filter_for_compacted(r))
    assert len(fps) == 3000 + 5000
    assert all(f.may_contain_key("orders", k) for e in entries for k in e.keys)
    assert sum(f.may_contain_key("orders", f"absent-{i}") for i in range(5000)) <= 2
    assert not any(fingerprint("orders", f"absent-{i}") in set(fps.tolist()) for i in range(100))



@settings(max_examples=60, deadline=None)
@given(st.lists(u64, max_size=3000), st.lists(u64, max_size=200))
def test_a_mapped_filter_answers_as_the_decoded_one(tmp_path_factory: pytest.TempPathFactory, keys: list[int],
                                                     others: list[int]) -> None:
    data = encode_filter(np.array(keys, dtype=np.uint64))
    path = tmp_path_factory.mktemp("f") / "a.filter"
    path.write_bytes(data)
    verified: set[tuple[int, int, int, int]] = set()
    mapped, decoded = MappedKeyFilter(path, verified), KeyFilter(data, "t")
    assert mapped.keys == decoded.keys == len(set(keys)) and mapped.nbytes == len(data)
    assert all(mapped.may_contain(k) for k in keys)
    assert [mapped.may_contain(k) for k in others] == [decoded.may_contain(k) for k in others]
    assert len(verified) == 1  # checked whole once; mapped again it answers the same
    assert all(MappedKeyFilter(path, verified).may_contain(k) for k in keys)


@settings(max_examples=100, deadline=None)
@given(st.lists(u64, min_size=1, max_size=500), st.data())
def test_a_damaged_filter_file_is_not_mapped(tmp_path_factory: pytest.TempPathFactory, keys: list[int],
                                             data: st.DataObject) -> None:
    enc = bytearray(encode_filter(np.array(keys, dtype=np.uint64)))
    how = data.draw(st.sampled_from(["flip", "truncate", "extend"]))
    if how == "flip":
        i = data.draw(st.integers(0, len(enc) - 1))
        enc[i] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "truncate":
        del enc[data.draw(st.integers(0, len(enc) - 1)):]
    else:
        enc += bytes(data.draw(st.integers(1, 64)))
    path = tmp_path_factory.mktemp("f") / "a.filter"
    path.write_bytes(bytes(enc))
    verified: set[tuple[int, int, int, int]] = set()
    with pytest.raises(FormatError):
        MappedKeyFilter(path, verified)
    assert not verified


def test_a_replaced_filter_file_is_checked_whole_again(tmp_path: Path) -> None:
    keys = np.arange(1, 5000, dtype=np.uint64)
    good = encode_filter(keys)
    path = tmp_path / "a.filter"
    path.write_bytes(good)
    verified: set[tuple[int, int, int, int]] = set()
    assert MappedKeyFilter(path, verified).may_contain(7)
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x10  # the payload only: header and geometry still pass
    tmp = tmp_path / "b.tmp"
    tmp.write_bytes(bytes(bad))
    tmp.replace(path)  # as filters are written: a new file renamed over the old one
    with pytest.raises(FormatError) as err:
        MappedKeyFilter(path, verified)
    assert err.value.check == "filter crc32c"
