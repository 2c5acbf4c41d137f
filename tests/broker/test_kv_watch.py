"""A watcher of a KV segment (MetadataClient.kv_watch) keeps a view equal to the segment after any sequence of
puts and deletes, its own node's and another node's (seen when it catches up), and sees no other segment."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.metadata import MetadataClient
from broker.metadata.image import KeyValues

KEYS = st.sampled_from([f"group_offsets/g{g}/t/{p}" for g in range(3) for p in range(3)] + ["topics/t", "leaders/t"])
STEPS = st.lists(st.tuples(KEYS, st.none() | st.text(max_size=5)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(STEPS, STEPS)
def test_a_watcher_sees_every_put_and_delete_of_its_segment(before: list, after: list) -> None:
    kv = KeyValues()
    for key, value in before:
        kv.pop(key, None) if value is None else kv.__setitem__(key, value)
    view = kv.items_with("group_offsets/")
    calls: list[tuple[str, str | None]] = []

    def watcher(key: str, value: str | None) -> None:
        calls.append((key, value))
        view.pop(key, None) if value is None else view.__setitem__(key, value)

    kv.watch("group_offsets/", watcher)
    for key, value in after:
        kv.pop(key, None) if value is None else kv.__setitem__(key, value)
    assert view == kv.items_with("group_offsets/")
    assert all(k.startswith("group_offsets/") for k, _ in calls)
    kv.unwatch("group_offsets/", watcher)
    kv["group_offsets/g0/t/0"] = "late"
    assert calls[-1:] != [("group_offsets/g0/t/0", "late")]


def test_kv_watch_follows_another_nodes_writes(meta_url_factory: Callable[[], str]) -> None:
    a, b = MetadataClient(meta_url_factory(), 0), MetadataClient(meta_url_factory(), 1)
    try:
        a.kv_put_many({"group_offsets/g/t/0": "1", "group_offsets/g/t/1": "2", "topics/t": "{}"})
        b.catch_up()
        view: dict[str, str] = {}
        watched = b.kv_watch("group_offsets/", lambda k, v: view.pop(k) if v is None else view.__setitem__(k, v))
        assert view == {"group_offsets/g/t/0": "1", "group_offsets/g/t/1": "2"}  # what was there, at once
        a.kv_update({"group_offsets/g/t/0": "5"}, ["group_offsets/g/t/1"])
        b.catch_up()
        assert view == {"group_offsets/g/t/0": "5"}
        assert b.image is watched
    finally:
        a.close()
        b.close()
