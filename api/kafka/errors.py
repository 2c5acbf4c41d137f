"""Kafka's error codes (org.apache.kafka.common.protocol.Errors) the handlers answer, and broker errors mapped."""

from __future__ import annotations

from broker.errors import NotLeader, NotOwner, OutOfDisk, RecordFormatError
from broker.partitions.topic_errors import InvalidTopicName, PartitionNotFound, TopicExists, TopicNotFound

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
MESSAGE_TOO_LARGE = 10
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNSUPPORTED_VERSION = 35
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
KAFKA_STORAGE_ERROR = 56
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
TOPIC_DELETION_DISABLED = 73
INVALID_RECORD = 87

# Transactions are not served: FindCoordinator(TRANSACTION) and InitProducerId with a transactional id answer
# TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which librdkafka, kafka-python and aiokafka all report at once as fatal
# (COORDINATOR_NOT_AVAILABLE is retried until the client's timeout, UNSUPPORTED_VERSION too by librdkafka)
TRANSACTIONS_UNSUPPORTED = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
TRANSACTIONS_MESSAGE = ("transactions are not supported by this server "
                        "(an idempotent producer is: leave transactional.id unset)")

BY_NAME = {"OUT_OF_ORDER_SEQUENCE_NUMBER": OUT_OF_ORDER_SEQUENCE_NUMBER,
           "INVALID_PRODUCER_EPOCH": INVALID_PRODUCER_EPOCH}


def code_for(exc: BaseException) -> int:
    """The Kafka error code a broker exception stands for."""
    if isinstance(exc, NotOwner | NotLeader):
        return NOT_LEADER_OR_FOLLOWER
    if isinstance(exc, TopicNotFound | PartitionNotFound):
        return UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, TopicExists):
        return TOPIC_ALREADY_EXISTS
    if isinstance(exc, InvalidTopicName):
        return INVALID_TOPIC_EXCEPTION
    if isinstance(exc, OutOfDisk):
        return KAFKA_STORAGE_ERROR
    if isinstance(exc, RecordFormatError):
        return CORRUPT_MESSAGE if "CRC" in str(exc) else INVALID_RECORD
    return UNKNOWN_SERVER_ERROR
