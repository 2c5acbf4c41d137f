"""A stream close whose outcome is unknown because the metadata database stopped answering (review of the reconnect
change): on a real PostgreSQL database of the test's own that refuses connections during the close, then accepts
again. The node waits for the answer and, the close not applied, has the streams open again (a hand-off then
serves its partition again). Before, they stayed closed here and open in the metadata, and the partition was
served by no one until the node restarted."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from broker.errors import MetadataUnavailable
from broker.metadata import MetadataClient
from broker.metadata.image import OPENED
from broker.streams import StreamStorage
from broker.streams.stream import Stream
from storage_tier import open_store
from tests.api.test_metadata_reconnect import OwnDatabase, own_db  # noqa: F401 - the fixture


def test_a_close_the_database_did_not_take_leaves_the_streams_open_here(tmp_path: Path,
                                                                         own_db: OwnDatabase) -> None:  # noqa: F811
    meta = MetadataClient(f"{own_db.dsn}?schema=m", node_id=0)
    storage = None
    try:
        meta.register_node()
        sid = meta.create_stream()
        storage = StreamStorage.open(tmp_path / "wal", open_store(f"file://{tmp_path / 'objects'}"), meta,
                                     upload_threshold=1 << 20, upload_interval_s=60, so_threshold=1 << 20,
                                     block_cache_bytes=1 << 20, max_cache_bytes=1 << 24)
        stream = storage.open_streams([(sid, 0)])[sid]
        assert isinstance(stream, Stream)
        own_db.refuse()
        back = threading.Timer(1.5, own_db.accept)  # the database answers again while the close waits for it
        back.start()
        try:
            with pytest.raises(MetadataUnavailable):
                storage.close_streams([stream])
        finally:
            back.join()
        assert not stream.closed
        meta.catch_up()
        m = meta.image.streams[sid]
        assert (m.state, m.owner) == (OPENED, 0)
        storage.close_streams([stream])  # tried again once the database answers: closed in both places
        assert stream.closed and meta.image.streams[sid].state != OPENED
    finally:
        if storage is not None:
            storage.close()
        meta.close()
