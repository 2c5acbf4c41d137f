"""open_store(url): every documented URL form, and clear errors for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_tier import UnsupportedStoreURL, open_store
from storage_tier.db_store import DBStore
from storage_tier.local_store import LocalStore
from storage_tier.s3_store import S3Store


def test_file_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = open_store(f"file://{tmp_path}/abs")
    assert isinstance(s, LocalStore) and s.root == tmp_path / "abs"
    monkeypatch.chdir(tmp_path)
    rel = open_store("file://./rel/dir")
    assert isinstance(rel, LocalStore) and rel.root == tmp_path / "rel" / "dir"


def test_sqlite_url(tmp_path: Path) -> None:
    s = open_store(f"sqlite:///{tmp_path}/x.sqlite?chunk_size=4")
    assert isinstance(s, DBStore) and s.name == "sqlite" and s.chunk_size == 4
    s.put("k", b"0123456789")
    assert s.get("k", 3, 9) == b"345678"
    assert (tmp_path / "x.sqlite").exists()


def test_s3_url_parts() -> None:
    s = open_store("s3://bucket/some/prefix?endpoint=http://127.0.0.1:1&region=eu-west-1&retry_seconds=1")
    assert isinstance(s, S3Store)
    assert (s.bucket, s.prefix, s.retry.deadline_s) == ("bucket", "some/prefix/", 1.0)


@pytest.mark.parametrize(
    "url",
    ["ftp://host/x", "file://", "s3:///nobucket", "sqlite://", "file:///tmp/x?bogus=1", "mem://",
     "file:///tmp/x?retry_seconds=soon", "sqlite:///tmp/x.db?chunk_size=big"],
)
def test_bad_urls_are_clear_errors(url: str) -> None:
    with pytest.raises(UnsupportedStoreURL) as err:
        open_store(url)
    assert url.split("?")[0].split("://")[0] in str(err.value)
