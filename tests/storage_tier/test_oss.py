"""oss:// URLs: Alibaba Cloud OSS through its S3-compatible API, which only takes virtual-hosted requests
(https://BUCKET.oss-REGION.aliyuncs.com/KEY).

The server is a real SeaweedFS started with `-s3.domainName=oss-local.test`, so it takes the bucket from the
Host header exactly as OSS does. There is no DNS on the test machine (and `*.localhost` does not resolve), so
the store URL names the server as an HTTP proxy (`proxy=`): boto3 sends each request in absolute form
(`PUT http://mqindex.oss-local.test:PORT/KEY`) to 127.0.0.1:PORT, and SeaweedFS's HTTP server reads the virtual
host from it. No /etc/hosts entry and no resolver patching: the requests on the wire are the virtual-hosted
ones a real OSS endpoint gets, which the tests check on every request.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.config import Config
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_tier import BlobStore, UnsupportedStoreURL, open_store
from storage_tier.s3_store import S3Store
from storage_tier.seaweedfs_server import SeaweedFS
from tests.storage_tier.test_contract import (  # noqa: F401 - the BlobStore contract, run here on an oss:// store
    test_batch_delete_and_overwrite,
    test_list_by_prefix,
    test_meter_counts_match_requests,
    test_missing_keys,
    test_multipart_small_parts_and_copies,
    test_multipart_three_parts_with_server_side_copy,
    test_ranged_reads_at_every_edge,
    test_round_trip_empty_and_small,
)

DOMAIN = "oss-local.test"


@pytest.fixture(scope="module")
def oss_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs-oss"), domain_name=DOMAIN)
    try:
        server.start(bucket="mqindex")
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"could not start SeaweedFS: {exc}", pytrace=False)
    yield server
    server.stop()


def oss_url(server: SeaweedFS, prefix: str) -> str:
    return (f"oss://mqindex/{prefix}?endpoint=http://{DOMAIN}:{server.s3_port}&region=cn-hangzhou"
            f"&proxy=http://127.0.0.1:{server.s3_port}")


class Requests:
    """Every URL the store's client sends, recorded as it goes out."""

    def __init__(self, store: S3Store) -> None:
        self.urls: list[str] = []
        store.client.meta.events.register("before-send.s3", self._seen)

    def _seen(self, request, **_: object) -> None:  # type: ignore[no-untyped-def]
        self.urls.append(request.url)


@pytest.fixture
def store(oss_server: SeaweedFS) -> Iterator[BlobStore]:
    """The contract's `store`: a fresh prefix of an oss:// store; afterwards every request it sent must have
    been virtual-hosted."""
    s = open_store(oss_url(oss_server, f"t-{uuid.uuid4().hex[:10]}"))
    assert isinstance(s, S3Store)
    seen = Requests(s)
    yield s
    s.close()
    assert seen.urls, "the store sent no request"
    hosts = {urlsplit(u).hostname for u in seen.urls}
    assert hosts == {f"mqindex.{DOMAIN}"}, hosts


def test_objects_land_in_the_bucket_named_by_the_host(oss_server: SeaweedFS) -> None:
    prefix = f"v-{uuid.uuid4().hex[:10]}"
    s = open_store(oss_url(oss_server, prefix))
    assert isinstance(s, S3Store)
    seen = Requests(s)
    s.put("a/b", b"virtual")
    assert s.get("a/b") == b"virtual"
    # the path carries the key only: the bucket is in the host
    assert urlsplit(seen.urls[0]).path == f"/{prefix}/a/b"
    plain = boto3.client("s3", endpoint_url=oss_server.endpoint, region_name="us-east-1",
                         aws_access_key_id="mqindex", aws_secret_access_key="mqindex",
                         config=Config(s3={"addressing_style": "path"}))
    assert plain.get_object(Bucket="mqindex", Key=f"{prefix}/a/b")["Body"].read() == b"virtual"


def test_multipart_abort_leaves_no_pending_upload(store: BlobStore) -> None:
    assert isinstance(store, S3Store)
    w = store.multipart("mp/aborted")
    w.write_part(b"x" * (6 * 1024 * 1024))
    w.abort()
    assert not store.exists("mp/aborted")
    pending = store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=store.prefix).get("Uploads", [])
    assert pending == []


def test_the_documented_url_is_virtual_hosted_https_with_the_region_of_the_endpoint() -> None:
    s = open_store("oss://my-bucket/mq/objects?endpoint=oss-cn-hangzhou.aliyuncs.com&access_key=AK&secret_key=SK")
    assert isinstance(s, S3Store) and s.name == "oss"
    assert (s.bucket, s.prefix) == ("my-bucket", "mq/objects/")
    assert s.client.meta.endpoint_url == "https://oss-cn-hangzhou.aliyuncs.com"
    assert s.client.meta.region_name == "cn-hangzhou"
    assert s.client.meta.config.s3 == {"addressing_style": "virtual"}
    for host, region in [("s3.oss-eu-central-1.aliyuncs.com", "eu-central-1"),
                         ("oss-cn-beijing-internal.aliyuncs.com", "cn-beijing")]:
        other = open_store(f"oss://my-bucket?endpoint={host}")
        assert isinstance(other, S3Store) and other.client.meta.region_name == region and other.prefix == ""


@pytest.mark.parametrize("url, says", [
    ("oss://bucket/p", "endpoint"),
    ("oss:///p?endpoint=oss-cn-hangzhou.aliyuncs.com", "bucket name"),
    ("oss://Bad_Bucket/p?endpoint=oss-cn-hangzhou.aliyuncs.com", "bucket name"),
    ("oss://bucket/p?endpoint=storage.example.com", "region="),
    ("oss://bucket/p?endpoint=oss-cn-hangzhou.aliyuncs.com&bogus=1", "bogus"),
])
def test_bad_oss_urls_are_clear_errors(url: str, says: str) -> None:
    with pytest.raises(UnsupportedStoreURL) as err:
        open_store(url)
    assert says in str(err.value) and "oss" in str(err.value)


@settings(deadline=None, max_examples=60)  # a boto3 client per example: slow to build, not to run
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.A", min_size=0, max_size=70))
def test_any_bucket_name_opens_or_is_refused_clearly(bucket: str) -> None:
    url = f"oss://{bucket}/p?endpoint=oss-cn-shanghai.aliyuncs.com"
    try:
        s = open_store(url)
    except UnsupportedStoreURL as exc:
        assert "bucket" in str(exc) or "endpoint" in str(exc)
        return
    assert isinstance(s, S3Store) and s.bucket == bucket and 3 <= len(bucket) <= 63
