"""AutoMQ's S3Stream layer: streams over a WAL, a log cache and object storage; knows nothing of Kafka."""

from broker.streams.storage import StreamStorage
from broker.streams.stream import Stream

__all__ = ["Stream", "StreamStorage"]
