"""The cluster fixture: three `mqindex serve` nodes, stopped (kill) at the end whatever happens."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import Cluster


@pytest.fixture
def cluster(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", f"cluster-{uuid.uuid4().hex[:8]}"), pg_url())
    try:
        for i in range(3):
            c.start(i)
        yield c
    finally:
        c.stop_all()


