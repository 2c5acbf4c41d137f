"""The lag metrics' rows follow the committed offsets as they are applied (puts, moves, deletes, in any order):
after every step each committed offset of a coordinated group has exactly one row, with its offset and labels,
in the class of its (partition, offset) and in no other, and nothing else has one;
a value that is not a commit is left out without stopping the metadata image."""

from __future__ import annotations

import json
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from api.http.group_metrics import _Rows
from broker.partitions.kafka_clients.group_offsets import PREFIX

GROUPS = ["a", "b", "c/d", 'q"x', "e"]
KEYS = [f"{PREFIX}{g}/t{t}/{p}" for g in GROUPS for t in range(2) for p in range(3)]
IDS = [1, 2]
ME = 1


def coordinated(group: str) -> bool:
    return IDS[zlib.crc32(group.encode()) % len(IDS)] == ME


def commit(offset: int) -> str:
    return json.dumps({"offset": offset, "metadata": "", "at_ms": 1})


STEP = st.tuples(st.sampled_from(KEYS), st.none() | st.integers(0, 2**40).map(commit) | st.just("not json"))


@settings(max_examples=300, deadline=None)
@given(st.lists(STEP, max_size=120))
def test_rows_follow_every_put_and_delete(steps: list[tuple[str, str | None]]) -> None:
    rows = _Rows(IDS, ME)
    model: dict[str, int] = {}
    for key, value in steps:
        rows.apply(key, value)  # never raises
        group = key[len(PREFIX):].rsplit("/", 2)[0]
        if value is None or value == "not json" or not coordinated(group):
            model.pop(key, None)
        else:
            model[key] = json.loads(value)["offset"]
        view = rows.copy()
        assert len(view.offset) == len(model) == len(rows.index)
        for k, want in model.items():
            i = rows.index[k]
            group, topic, partition = k[len(PREFIX):].rsplit("/", 2)
            assert view.offset[i] == want
            assert view.tps[view.where[i]] == (topic, int(partition))
            escaped = group.replace('"', r"\"")
            assert view.lag_prefix[i] == (f'mqindex_group_lag{{group="{escaped}",partition="{partition}",'
                                          f'topic="{topic}"}} ').encode()
            assert view.age_prefix[i] == b"mqindex_group_lag_seconds" + view.lag_prefix[i][len(b"mqindex_group_lag"):]
        assert_classes(rows)


def assert_classes(rows: _Rows) -> None:
    """The rows by class: each row is in the class of its (partition, offset) with its two line prefixes, in no
    other, and no class is empty."""
    view = rows.copy()
    members: dict[tuple[int, int], dict[str, tuple[bytes, bytes]]] = {}
    for k, i in rows.index.items():
        members.setdefault((int(view.where[i]), int(view.offset[i])), {})[k] = (view.lag_prefix[i], view.age_prefix[i])
    assert set(rows.classes) == set(members)
    for key, c in rows.classes.items():
        assert (c.where, c.offset) == key
        assert {k: (c.lag[k], c.age[k]) for k in c.lag} == members[key]
        assert c.lag.keys() == c.age.keys()


def test_rows_grow_past_their_first_arrays() -> None:
    rows = _Rows([0], 0)
    for i in range(5000):
        rows.apply(f"{PREFIX}g{i}/t/0", commit(i))
    for i in range(0, 5000, 2):
        rows.apply(f"{PREFIX}g{i}/t/0", None)
    view = rows.copy()
    assert sorted(view.offset.tolist()) == list(range(1, 5000, 2))
    assert_classes(rows)
