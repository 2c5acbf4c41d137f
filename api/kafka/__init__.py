"""The Kafka wire protocol in front of the broker: `KafkaServer` (server.py) and one module per API group."""

from api.kafka.server import KafkaServer

__all__ = ["KafkaServer"]
