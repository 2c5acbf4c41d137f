"""The APIs served and their versions, with kafka-python's schema-driven message classes.

kafka-python 3.x generates its request/response classes from Apache Kafka's own JSON message schemas
(flexible versions and tagged fields included), so no wire layout is written by hand here; it is pinned in
pyproject.toml. The version ranges below are what the handlers really implement: the minimums are the
schemas' own, the maximums stop before topic ids (Fetch 13+, Produce 13), the batched FindCoordinator and
OffsetFetch forms we do not serve, and the transaction APIs' broker-to-broker (AddPartitionsToTxn 4+) and
KIP-890 (EndTxn 4+, epoch bumped per transaction) forms.

`build(cls, version, **fields)` turns nested dicts and lists of dicts into the schema's data classes, keeping only
the fields the version has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    request: Any
    response: Any
    min_version: int
    max_version: int

    def flexible(self, version: int) -> bool:
        return bool(self.request.flexible_version_q(version))


def _api(request: Any, response: Any, max_version: int) -> Api:
    low = int(str(request.json["validVersions"]).split("-")[0].rstrip("+"))
    return Api(request.API_KEY, request.name.removesuffix("Request"), request, response, low, max_version)


APIS: dict[int, Api] = {a.key: a for a in (
    _api(ProduceRequest, ProduceResponse, 9),
    _api(FetchRequest, FetchResponse, 12),
    _api(ListOffsetsRequest, ListOffsetsResponse, 7),
    _api(MetadataRequest, MetadataResponse, 12),
    _api(OffsetCommitRequest, OffsetCommitResponse, 8),
    _api(OffsetFetchRequest, OffsetFetchResponse, 7),
    _api(FindCoordinatorRequest, FindCoordinatorResponse, 3),
    _api(JoinGroupRequest, JoinGroupResponse, 9),
    _api(HeartbeatRequest, HeartbeatResponse, 4),
    _api(LeaveGroupRequest, LeaveGroupResponse, 5),
    _api(SyncGroupRequest, SyncGroupResponse, 5),
    _api(ApiVersionsRequest, ApiVersionsResponse, 4),
    _api(CreateTopicsRequest, CreateTopicsResponse, 7),
    _api(DeleteTopicsRequest, DeleteTopicsResponse, 5),
    _api(InitProducerIdRequest, InitProducerIdResponse, 4),
    _api(SaslHandshakeRequest, SaslHandshakeResponse, 1),
    _api(SaslAuthenticateRequest, SaslAuthenticateResponse, 2),
    _api(DescribeConfigsRequest, DescribeConfigsResponse, 4),
    _api(AlterConfigsRequest, AlterConfigsResponse, 2),
    _api(IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 1),
    _api(DescribeGroupsRequest, DescribeGroupsResponse, 6),
    _api(ListGroupsRequest, ListGroupsResponse, 5),
    _api(DeleteGroupsRequest, DeleteGroupsResponse, 2),
    _api(OffsetDeleteRequest, OffsetDeleteResponse, 0),
    _api(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 3),
    _api(AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 3),
    _api(EndTxnRequest, EndTxnResponse, 3),
    _api(TxnOffsetCommitRequest, TxnOffsetCommitResponse, 3),
    _api(DescribeAclsRequest, DescribeAclsResponse, 3),
    _api(CreateAclsRequest, CreateAclsResponse, 3),
    _api(DeleteAclsRequest, DeleteAclsResponse, 3),
    _api(CreatePartitionsRequest, CreatePartitionsResponse, 3),
)}


def build(cls: Any, version: int, **fields: Any) -> Any:
    """An instance of the schema class `cls` at `version`; nested structs may be given as dicts.

    Handlers give every field any version of the answer has; only the fields `version` has are set (a nested
    struct that `version` does not have is never built: its class refuses versions outside its own range), so
    one call serves every version an API advertises. A name the schema does not know at all is a KeyError."""
    struct_fields = cls._struct.fields
    kwargs: dict[str, Any] = {}
    for name, value in fields.items():
        f = struct_fields[name]
        if not f.for_version_q(version):
            continue
        if f.is_struct_array():
            value = None if value is None else [build(f.data_class, version, **v) if isinstance(v, dict) else v
                                                for v in value]
        elif f.is_struct() and isinstance(value, dict):
            value = build(f.data_class, version, **value)
        kwargs[name] = value
    return cls(version=version, **kwargs)
