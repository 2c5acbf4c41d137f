"""Kafka's error codes (org.apache.kafka.common.protocol.Errors) the handlers answer, and broker errors mapped.

A condition that waiting or a failover heals is answered with a code clients retry (docs/KAFKA.md, "Error codes"):
a failed WAL, a full disk or an unreachable store is KAFKA_STORAGE_ERROR, as Kafka answers for a failed log dir
(librdkafka and kafka-python refresh the metadata and retry it); a node fenced out of its partitions, or closing
(a clean stop hands its partitions over), is NOT_LEADER_OR_FOLLOWER, and NOT_COORDINATOR for a coordinator's
request. UNKNOWN_SERVER_ERROR, which clients take as permanent, is left for the unforeseen."""

from __future__ import annotations

from broker.errors import Fenced, NodeClosed, NotLeader, NotOwner, RecordFormatError, WalError
from broker.partitions.topic_errors import InvalidTopicName, PartitionNotFound, TopicExists, TopicNotFound
from storage_tier import OutOfSpace, StorageUnavailable

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
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNSUPPORTED_VERSION = 35
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
KAFKA_STORAGE_ERROR = 56
INVALID_TXN_STATE = 48
OPERATION_NOT_ATTEMPTED = 55
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
TOPIC_DELETION_DISABLED = 73
INVALID_RECORD = 87
UNSTABLE_OFFSET_COMMIT = 88

BY_NAME = {"NONE": NONE, "OUT_OF_ORDER_SEQUENCE_NUMBER": OUT_OF_ORDER_SEQUENCE_NUMBER,
           "INVALID_PRODUCER_EPOCH": INVALID_PRODUCER_EPOCH, "PRODUCER_FENCED": PRODUCER_FENCED,
           "INVALID_PRODUCER_ID_MAPPING": INVALID_PRODUCER_ID_MAPPING, "INVALID_TXN_STATE": INVALID_TXN_STATE,
           "INVALID_TRANSACTION_TIMEOUT": INVALID_TRANSACTION_TIMEOUT,
           "COORDINATOR_NOT_AVAILABLE": COORDINATOR_NOT_AVAILABLE}


#: the APIs a group or transaction coordinator answers (Kafka routes InitProducerId to one, also without a
#: transactional id): while this node cannot serve them, COORDINATOR_NOT_AVAILABLE, which clients retry after
#: looking the coordinator up again
COORDINATOR_APIS = frozenset({8, 9, 10, 11, 12, 13, 14, 15, 16, 22, 24, 25, 26, 28, 42, 47})


FIND_COORDINATOR = 10


def unavailable_code(api_key: int, exc: BaseException | None, closing: bool = False) -> int:
    """The code answering a whole request of `api_key` that met a fault that heals (docs/KAFKA.md, "Error codes
    for faults that heal"). The node closing (a clean stop: the others take its partitions and groups over), as
    Kafka's broker that no longer leads or coordinates: NOT_COORDINATOR for a coordinator's API
    (COORDINATOR_NOT_AVAILABLE for FindCoordinator: ask again), NOT_LEADER_OR_FOLLOWER for the others. Else (the
    metadata database not answering): COORDINATOR_NOT_AVAILABLE for a coordinator's API, `code_for` for the others
    (KAFKA_STORAGE_ERROR for `MetadataUnavailable`)."""
    if closing or isinstance(exc, NodeClosed):
        if api_key == FIND_COORDINATOR:
            return COORDINATOR_NOT_AVAILABLE
        return NOT_COORDINATOR if api_key in COORDINATOR_APIS else NOT_LEADER_OR_FOLLOWER
    if api_key in COORDINATOR_APIS:
        return COORDINATOR_NOT_AVAILABLE
    return KAFKA_STORAGE_ERROR if exc is None else code_for(exc)


def code_for(exc: BaseException) -> int:
    """The Kafka error code a broker exception stands for."""
    if isinstance(exc, NotOwner | NotLeader | Fenced | NodeClosed):  # another node serves it now, or soon
        return NOT_LEADER_OR_FOLLOWER
    if isinstance(exc, TopicNotFound | PartitionNotFound):
        return UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, TopicExists):
        return TOPIC_ALREADY_EXISTS
    if isinstance(exc, InvalidTopicName):
        return INVALID_TOPIC_EXCEPTION
    if isinstance(exc, WalError | OutOfSpace | StorageUnavailable):  # OutOfDisk is a WalError
        return KAFKA_STORAGE_ERROR
    if isinstance(exc, RecordFormatError):
        return CORRUPT_MESSAGE if "CRC" in str(exc) else INVALID_RECORD
    return UNKNOWN_SERVER_ERROR
