"""A SeaweedFS server started again over its data (as the store-outage tests do) comes back on the same S3
endpoint with its objects, even when another process took one of its internal ports while it was down."""

from __future__ import annotations

import socket
from pathlib import Path

import boto3
import pytest

from storage_tier.seaweedfs_server import SeaweedFS


def s3(weed: SeaweedFS):  # noqa: ANN201 - a boto3 client
    return boto3.client("s3", endpoint_url=weed.endpoint, region_name="us-east-1", aws_access_key_id="mqindex",
                        aws_secret_access_key="mqindex")


@pytest.mark.slow(seconds=15)
def test_restart_over_a_taken_internal_port_keeps_the_endpoint_and_the_objects(tmp_path: Path) -> None:
    weed = SeaweedFS(tmp_path / "weed")
    squatter = socket.socket()
    try:
        weed.start(bucket="restarted")
        s3(weed).put_object(Bucket="restarted", Key="kept", Body=b"before the restart")
        endpoint, volume_grpc = weed.endpoint, weed.volume_grpc
        weed.stop()
        squatter.bind(("127.0.0.1", volume_grpc))  # another process takes the port while weed is down
        squatter.listen()
        weed.start(bucket="restarted")
        assert weed.endpoint == endpoint
        assert weed.volume_grpc != volume_grpc
        assert s3(weed).get_object(Bucket="restarted", Key="kept")["Body"].read() == b"before the restart"
    finally:
        squatter.close()
        weed.stop()


@pytest.mark.parametrize("taken", ["s3_grpc", "master_port"])
def test_a_first_start_whose_port_was_taken_before_weed_bound_it_starts_on_another(tmp_path: Path,
                                                                                   taken: str) -> None:
    """Another process (the other test worker starting its own server) takes a port chosen free before `weed`
    binds it: `weed` exits at once ("address already in use"); the start tries again with a free port instead of
    failing every test that needs the server (a CI run lost a worker's tests so)."""
    weed = SeaweedFS(tmp_path / "weed")
    squatter = socket.socket()
    try:
        port = getattr(weed, taken)
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        weed.start(bucket="moved")
        assert getattr(weed, taken) != port
        s3(weed).put_object(Bucket="moved", Key="k", Body=b"served")
        assert s3(weed).get_object(Bucket="moved", Key="k")["Body"].read() == b"served"
        assert b"address already in use" in (tmp_path / "weed" / "weed.log").read_bytes()
    finally:
        squatter.close()
        weed.stop()
