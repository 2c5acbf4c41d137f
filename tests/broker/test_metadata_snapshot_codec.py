"""The snapshot codec: round trip of a real image, and damaged, truncated or foreign payloads refused clearly."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.metadata import MetadataImage, SnapshotDamaged
from broker.metadata.snapshot import NewerSnapshot, checksum, decode, encode, image_state
from tests.broker.test_metadata import build_fixture

WHERE = "metadata snapshot at log offset 7"


@pytest.fixture(scope="module")
def payload(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The payload of a real image: streams with ranges and stream objects, two nodes, objects, KV."""
    n0, n1, _ = build_fixture(f"sqlite:///{tmp_path_factory.mktemp('codec')}/meta.db")
    n0.kv_put("topics/a", "{}")
    n1.catch_up()
    data = encode(n0.image)
    assert image_state(decode(data, checksum(data), WHERE)) == image_state(n0.image)
    n0.close()
    n1.close()
    return data


def test_round_trip_keeps_the_lookup_index(tmp_path: Path) -> None:
    n0, n1, sid = build_fixture(f"sqlite:///{tmp_path}/meta.db")
    data = encode(n0.image)
    img = decode(data, checksum(data), WHERE)
    assert img.nodes == n0.image.nodes and img.streams == n0.image.streams and img.objects == n0.image.objects
    assert img.get_objects(sid, 10, 700) == n0.image.get_objects(sid, 10, 700)
    n0.close()
    n1.close()


def test_empty_image_round_trip() -> None:
    data = encode(MetadataImage())
    assert image_state(decode(data, checksum(data), WHERE)) == image_state(MetadataImage())


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_damaged_payload_fails_the_checksum(payload: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(payload) - 1), label="truncated to")
    flip = data.draw(st.integers(0, len(payload) - 1), label="flipped byte")
    bit = data.draw(st.integers(0, 7), label="bit")
    flipped = bytearray(payload)
    flipped[flip] ^= 1 << bit
    for bad in (payload[:cut], bytes(flipped)):
        with pytest.raises(SnapshotDamaged, match="log offset 7: checksum mismatch"):
            decode(bad, checksum(payload), WHERE)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_undecodable_payload_with_a_matching_checksum_is_refused(payload: bytes, data: st.DataObject) -> None:
    """A payload whose checksum matches but which is not an image (a writer's bug, another format) is refused
    with a clear error, never a crash or a half-built image."""
    cut = data.draw(st.integers(0, len(payload) - 1), label="truncated to")
    for bad in (payload[:cut], data.draw(st.binary(max_size=200), label="random bytes")):
        with pytest.raises(SnapshotDamaged, match="log offset 7: the payload does not decode"):
            decode(bad, checksum(bad), WHERE)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids,
                                                                                    max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(state=json_values, field=st.sampled_from(["offset", "kv", "streams", "nodes", "objects", "v"]))
def test_wrong_structure_is_refused(payload: bytes, state: object, field: str) -> None:
    """Valid JSON of the wrong shape (any field replaced by a random value) never decodes silently."""
    good = json.loads(zlib.decompress(payload))
    good[field] = state
    bad = zlib.compress(json.dumps(good).encode())
    try:
        img = decode(bad, checksum(bad), WHERE)
    except SnapshotDamaged as exc:
        assert "log offset 7" in str(exc)
    except NewerSnapshot as exc:  # a later version ("v" above 1, or a KV value's): refused, not taken for damage
        assert field in ("v", "kv") and "log offset 7" in str(exc) and "newer than this version" in str(exc)
    else:  # only a value that is itself well formed may pass (an empty list, a plain integer offset, ...)
        assert type(state) in (int, list), f"{field} = {state!r} decoded"
        again = encode(img)
        assert image_state(decode(again, checksum(again), WHERE)) == image_state(img)
