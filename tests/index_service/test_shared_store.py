"""Several index services (one per broker node) on one store: each sweeps orphans under its own prefix only,
so none deletes another's uploaded files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from index_service import FileState
from storage_tier import open_store
from tests.index_service.helpers import ManualClock, open_service


def test_two_services_on_one_store_keep_each_others_files(tmp_path: Path,
                                                          store_url_factory: Callable[[str], str]) -> None:
    url = store_url_factory("s3")
    clock = ManualClock()
    svcs = [open_service(tmp_path / f"node{n}", url, clock, remote_prefix=f"index-node-{n}/") for n in (0, 1)]
    try:
        for n, svc in enumerate(svcs):
            for i in range(45):  # two full 20-item files and a WRITING one
                svc.put("orders", n, i, 64, [f"n{n}-o{i}"], clock.now + i)
            svc.flush()
            assert len(svc.maintain().uploaded) == 2
        # every service sweeps several times; none may touch the other's objects
        for _ in range(2):
            for svc in svcs:
                assert svc.maintain().orphans_deleted == []
        remote = open_store(url)
        for n, svc in enumerate(svcs):
            keys = remote.list(f"index-node-{n}/")
            files = sorted(f.location for f in svc.files() if f.state is FileState.UPLOADED)
            assert len(files) == 2  # each with its key filter beside it, which the sweep keeps too
            assert sorted(k + s for k in files for s in ("", ".filter")) == sorted(keys)
            assert [h.offset for h in svc.query("orders", f"n{n}-o3", 5)] == [3]
        remote.close()
    finally:
        for svc in svcs:
            svc.close()


@pytest.mark.parametrize("prefix", ["", "no-slash", "/abs/", "a/../b/"])
def test_bad_remote_prefix_is_refused(tmp_path: Path, prefix: str) -> None:
    with pytest.raises(ValueError, match="remote_prefix"):
        open_service(tmp_path / "x", None, remote_prefix=prefix)
