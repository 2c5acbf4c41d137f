"""Principals and scopes. A scope names what a request does: `read` (fetch, look up, describe), `produce`
(append), `admin` (create and delete topics, change configs, cluster operations); `admin` includes the others.
The same scopes guard the HTTP routes and the Kafka APIs (KAFKA_API_SCOPES)."""

from __future__ import annotations

from dataclasses import dataclass

SCOPES = frozenset({"read", "produce", "admin"})

#: Kafka API name -> the scope it needs; names as in the Kafka protocol guide. An API not listed needs no
#: scope beyond being authenticated (ApiVersions, Metadata, SaslHandshake, SaslAuthenticate).
KAFKA_API_SCOPES: dict[str, str] = {
    "Produce": "produce", "InitProducerId": "produce",
    "Fetch": "read", "ListOffsets": "read", "OffsetFetch": "read", "OffsetCommit": "read",
    "FindCoordinator": "read", "JoinGroup": "read", "SyncGroup": "read", "Heartbeat": "read",
    "LeaveGroup": "read", "ListGroups": "read", "DescribeGroups": "read", "DescribeConfigs": "read",
    "CreateTopics": "admin", "DeleteTopics": "admin", "CreatePartitions": "admin", "DeleteRecords": "admin",
    "AlterConfigs": "admin", "IncrementalAlterConfigs": "admin", "DeleteGroups": "admin",
    "OffsetDelete": "admin", "CreateAcls": "admin", "DeleteAcls": "admin", "DescribeAcls": "admin",
    # a transaction's requests come from its producer
    "AddPartitionsToTxn": "produce", "AddOffsetsToTxn": "produce", "EndTxn": "produce", "TxnOffsetCommit": "produce",
}
#: Kafka APIs about the cluster rather than a topic: refused with CLUSTER_AUTHORIZATION_FAILED, the others with
#: TOPIC_AUTHORIZATION_FAILED (GROUP_AUTHORIZATION_FAILED for the group APIs).
KAFKA_CLUSTER_APIS = frozenset({"CreateTopics", "AlterConfigs", "IncrementalAlterConfigs", "InitProducerId",
                                "CreateAcls", "DeleteAcls", "DescribeAcls"})
KAFKA_GROUP_APIS = frozenset({"OffsetFetch", "OffsetCommit", "FindCoordinator", "JoinGroup", "SyncGroup",
                              "Heartbeat", "LeaveGroup", "ListGroups", "DescribeGroups", "DeleteGroups",
                              "OffsetDelete"})
#: Kafka APIs about a transactional id: refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED
KAFKA_TRANSACTION_APIS = frozenset({"AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn", "TxnOffsetCommit"})
# Kafka error codes (org.apache.kafka.common.protocol.Errors)
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


class ScopeError(ValueError):
    pass


def check_scopes(scopes: list[str] | tuple[str, ...] | frozenset[str], owner: str) -> frozenset[str]:
    bad = set(scopes) - SCOPES
    if bad:
        raise ScopeError(f"{owner}: unknown scopes {sorted(bad)}; use read, produce, admin")
    return frozenset(scopes)


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: `name` for logs (never a secret), the scopes it was granted."""

    name: str
    scopes: frozenset[str]

    def allows(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes


#: the caller when no authentication is configured (protected mode allows that on loopback or when asked)
ANONYMOUS = Principal("anonymous", SCOPES)


def kafka_denial(api: str, principal: Principal) -> int | None:
    """The Kafka error code refusing `api` to `principal`, None when allowed."""
    scope = KAFKA_API_SCOPES.get(api)
    if scope is None or principal.allows(scope):
        return None
    if api in KAFKA_CLUSTER_APIS:
        return CLUSTER_AUTHORIZATION_FAILED
    if api in KAFKA_TRANSACTION_APIS:
        return TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if api in KAFKA_GROUP_APIS:
        return GROUP_AUTHORIZATION_FAILED
    return TOPIC_AUTHORIZATION_FAILED
