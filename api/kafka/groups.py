"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup, answered by this node's GroupCoordinator."""

from __future__ import annotations

from typing import Any

from api.kafka import errors
from api.kafka.context import Context
from api.kafka.schemas import APIS, build


async def join_group(ctx: Context, req: Any, version: int) -> Any:
    base = dict(throttle_time_ms=0, generation_id=-1, protocol_type=None, protocol_name=None, leader="",
                member_id=req.member_id, members=[])
    if await ctx.not_coordinator(req.group_id):
        return build(APIS[11].response, version, **{**base, "error_code": errors.NOT_COORDINATOR})
    rebalance = req.rebalance_timeout_ms if version >= 1 else req.session_timeout_ms
    out = await ctx.coordinator.join(req.group_id, req.member_id, ctx_client_id(req), req.protocol_type,
                                     [(p.name, bytes(p.metadata)) for p in req.protocols],
                                     req.session_timeout_ms, rebalance)
    return build(APIS[11].response, version, **{**base, **out})


def ctx_client_id(req: Any) -> str:
    h = getattr(req, "header", None)
    return (getattr(h, "client_id", None) or "member") if h is not None else "member"


async def sync_group(ctx: Context, req: Any, version: int) -> Any:
    if await ctx.not_coordinator(req.group_id):
        return build(APIS[14].response, version, throttle_time_ms=0, error_code=errors.NOT_COORDINATOR,
                     protocol_type=None, protocol_name=None, assignment=b"")
    code, assignment = await ctx.coordinator.sync(req.group_id, req.generation_id, req.member_id,
                                                  {a.member_id: bytes(a.assignment) for a in req.assignments})
    g = ctx.coordinator.groups.get(req.group_id)
    return build(APIS[14].response, version, throttle_time_ms=0, error_code=code,
                 protocol_type=g.protocol_type if g else None, protocol_name=g.protocol if g else None,
                 assignment=assignment)


async def heartbeat(ctx: Context, req: Any, version: int) -> Any:
    if await ctx.not_coordinator(req.group_id):
        code = errors.NOT_COORDINATOR
    else:
        code = ctx.coordinator.heartbeat(req.group_id, req.generation_id, req.member_id)
    return build(APIS[12].response, version, throttle_time_ms=0, error_code=code)


async def leave_group(ctx: Context, req: Any, version: int) -> Any:
    if await ctx.not_coordinator(req.group_id):  # the whole request, as Kafka answers it: no member is removed
        return build(APIS[13].response, version, throttle_time_ms=0, error_code=errors.NOT_COORDINATOR, members=[])
    ids = [req.member_id] if version < 3 else [m.member_id for m in req.members]
    codes = [ctx.coordinator.leave(req.group_id, mid) for mid in ids]
    top = codes[0] if version < 3 and codes else errors.NONE
    return build(APIS[13].response, version, throttle_time_ms=0, error_code=top,
                 members=[dict(member_id=mid, group_instance_id=None, error_code=c) for mid, c in zip(ids, codes,
                                                                                                     strict=True)])
