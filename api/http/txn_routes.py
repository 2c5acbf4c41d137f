"""The internal route a transaction coordinator on another node writes commit and abort markers through
(broker/cluster/txn_markers.py): POST /v1/internal/txn/markers.

Only another node of the cluster may call it: when tokens are configured, the bearer token must be this
cluster's token (`cluster_token`, compared in constant time); a user's token, whatever its scopes, is refused
with 403, since a marker ends any producer's transaction. Without tokens (a loopback-only node) it is open, as
every route is. The markers are written only on partitions led here (never forwarded again); the answer lists
those not written, with why, and the caller writes them again later.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from api.http.auth import authenticator
from api.http.models import TOPIC_PATTERN
from broker.cluster.txn_markers import ROUTE, TxnMarkers

router = APIRouter()

TopicName = Annotated[str, Field(pattern=TOPIC_PATTERN)]
PartitionIndex = Annotated[int, Field(ge=0, lt=2**31)]


class MarkersIn(BaseModel):
    producer_id: int = Field(ge=0, lt=2**63)
    epoch: int = Field(ge=0, lt=2**15)
    commit: bool
    seq: int = Field(0, ge=0, lt=2**31)  # the coordinator's transaction number (0: unnumbered)
    partitions: list[tuple[TopicName, PartitionIndex]] = Field(min_length=1, max_length=100_000)


class MarkerFailure(BaseModel):
    topic: str
    partition: int
    error: str


class MarkersOut(BaseModel):
    failed: list[MarkerFailure]


def require_cluster_token(request: Request) -> None:
    """Refuse (403) any caller but another node of the cluster when tokens are configured (module doc)."""
    if not len(authenticator(request.app).tokens):
        return
    mine = str(getattr(request.app.state.settings, "cluster_token", "") or "")
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if not mine or scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), mine.encode()):
        raise HTTPException(403, detail={"error": "only another node of the cluster (its cluster token) may write "
                                                  "transaction markers", "field": "authorization"})


@router.post(ROUTE, response_model=MarkersOut, include_in_schema=False,
             dependencies=[Depends(require_cluster_token)])
async def write_markers(body: MarkersIn, request: Request) -> MarkersOut:
    """Write a transaction's marker on each listed partition led here; the ones not written, with why."""
    node = request.app.state.backend
    markers = TxnMarkers(node.partitions, node.client_batches, None)
    failed = await run_in_threadpool(markers.write_here, [(t, p) for t, p in body.partitions], body.producer_id,
                                     body.epoch, body.commit, body.seq)
    return MarkersOut(failed=[MarkerFailure(topic=t, partition=p, error=e) for (t, p), e in failed.items()])
