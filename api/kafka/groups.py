"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup, answered by this node's GroupCoordinator; ListGroups,
DescribeGroups, DeleteGroups and OffsetDelete for admin clients (group_admin.py)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from api.kafka import errors, group_admin
from api.kafka.context import Context
from api.kafka.group_coordinator import EMPTY
from api.kafka.schemas import APIS, build
from broker.partitions.kafka_clients import group_offsets


async def join_group(ctx: Context, req: Any, version: int) -> Any:
    base = dict(throttle_time_ms=0, generation_id=-1, protocol_type=None, protocol_name=None, leader="",
                member_id=req.member_id, members=[])
    if await ctx.not_coordinator(req.group_id):
        return build(APIS[11].response, version, **{**base, "error_code": errors.NOT_COORDINATOR})
    rebalance = req.rebalance_timeout_ms if version >= 1 else req.session_timeout_ms
    out = await ctx.coordinator.join(req.group_id, req.member_id, ctx_client_id(req), req.protocol_type,
                                     [(p.name, bytes(p.metadata)) for p in req.protocols],
                                     req.session_timeout_ms, rebalance, CLIENT_HOST.get())
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


# -- the admin APIs: ListGroups, DescribeGroups, DeleteGroups, OffsetDelete (group_admin.py) --------------
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC = 68, 69, 86
#: the peer's address of the connection a request came on (set by the listener per connection): a member's host
CLIENT_HOST: ContextVar[str] = ContextVar("client_host", default="")


def client_host(peer: object) -> str:
    """Kafka's form of a member's host: "/" and the address."""
    host = peer[0] if isinstance(peer, tuple) and peer else ""
    return f"/{host}" if host else ""


async def list_groups(ctx: Context, req: Any, version: int) -> Any:
    """The groups this node coordinates (as a Kafka broker answers; an admin client asks every broker)."""
    views = group_admin.views_now(ctx)
    rows = await ctx.run(group_admin.list_local, ctx, views)
    states = set(getattr(req, "states_filter", None) or [])
    return build(APIS[16].response, version, throttle_time_ms=0, error_code=errors.NONE, groups=[
        dict(group_id=r["group"], protocol_type=r["protocol_type"], group_state=r["state"], group_type="classic")
        for r in rows if not states or r["state"] in states])


async def describe_groups(ctx: Context, req: Any, version: int) -> Any:
    out = []
    for group in req.groups:
        base = dict(group_id=group, group_state="", protocol_type="", protocol_data="", members=[],
                    error_message=None)
        if await ctx.not_coordinator(group):
            out.append(dict(base, error_code=errors.NOT_COORDINATOR))
            continue
        v = group_admin.view_now(ctx, group)
        if v is None:
            has_offsets = bool(await ctx.run(group_offsets.fetch, ctx.node.meta, group))
            v = group_admin.GroupView(group, EMPTY if has_offsets else group_admin.DEAD,
                                      "consumer" if has_offsets else "")
        out.append(dict(base, error_code=errors.NONE, group_state=v.state, protocol_type=v.protocol_type,
                        protocol_data=v.protocol, members=[
                            dict(member_id=m.member_id, group_instance_id=None, client_id=m.client_id,
                                 client_host=m.client_host, member_metadata=m.metadata,
                                 member_assignment=m.assignment) for m in v.members]))
    return build(APIS[15].response, version, throttle_time_ms=0, groups=out)


async def delete_groups(ctx: Context, req: Any, version: int) -> Any:
    results = []
    for group in req.groups_names:
        if await ctx.not_coordinator(group):
            code = errors.NOT_COORDINATOR
        else:
            members, had_state = group_admin.hold_now(ctx, group)  # no member joins until the delete is done
            try:
                await ctx.run(group_admin.delete, ctx, group, members, had_state)
                code = errors.NONE
            except group_admin.GroupNotEmpty:
                code = NON_EMPTY_GROUP
            except group_admin.GroupNotFound:
                code = GROUP_ID_NOT_FOUND
            except Exception:  # noqa: BLE001 - the metadata store refused: the client may retry
                code = errors.COORDINATOR_NOT_AVAILABLE
            finally:
                if not members:
                    group_admin.release_now(ctx, group, drop=True)
        results.append(dict(group_id=group, error_code=code))
    return build(APIS[42].response, version, throttle_time_ms=0, results=results)


async def offset_delete(ctx: Context, req: Any, version: int) -> Any:
    """Delete committed offsets of a group; refused per partition (GROUP_SUBSCRIBED_TO_TOPIC) for a topic the
    group's members subscribe to, as Kafka does."""
    def answer(top: int, codes: dict[tuple[str, int], int]) -> Any:
        return build(APIS[47].response, version, throttle_time_ms=0, error_code=top, topics=[
            dict(name=t.name, partitions=[dict(partition_index=p.partition_index,
                                               error_code=codes.get((t.name, p.partition_index), errors.NONE))
                                          for p in t.partitions]) for t in req.topics])

    if await ctx.not_coordinator(req.group_id):
        return answer(errors.NOT_COORDINATOR, {})
    v = group_admin.view_now(ctx, req.group_id)
    subscribed = {t for m in (v.members if v else []) for t in group_admin.decode_subscription(m.metadata)}
    committed = await ctx.run(group_offsets.fetch, ctx.node.meta, req.group_id)
    if v is None and not committed:
        return answer(GROUP_ID_NOT_FOUND, {})
    codes = {(t.name, p.partition_index): GROUP_SUBSCRIBED_TO_TOPIC
             for t in req.topics if t.name in subscribed for p in t.partitions}
    which = [(t.name, p.partition_index) for t in req.topics if t.name not in subscribed for p in t.partitions]
    await ctx.run(group_admin.delete_offsets_of, ctx, req.group_id, which)
    return answer(errors.NONE, codes)
