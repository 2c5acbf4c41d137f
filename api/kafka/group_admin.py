"""Consumer groups as an operator sees them: list, describe (members, assignments, offsets, lag), delete, reset.

Shared by the Kafka admin APIs (groups.py: ListGroups, DescribeGroups, DeleteGroups, OffsetDelete) and HTTP
(api/http/group_routes.py). A group's membership lives in memory on its coordinator node (group_coordinator.py,
on the Kafka listener's event loop); its committed offsets in the metadata KV (every node reads them). So:
- the functions named `*_now` read the coordinator and must run on the listener's loop; `on_loop` runs them there
  from any other thread;
- the rest runs on a worker thread (it reads the metadata and, for the lag in time, one record per partition).
A node answers for the groups it coordinates; HTTP forwards the others to their coordinator.

Deleting a group and resetting its offsets are refused while it has members, as Kafka refuses them
(GroupNotEmpty): a running consumer would overwrite the reset with its next commit. The member check and the
change are atomic: `hold_now` checks on the loop and, for an empty group, makes every JoinGroup of it wait until
`release_now`, after the change is stored.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from api.kafka.context import Context
from api.kafka.group_coordinator import EMPTY
from broker.partitions.kafka_clients import group_admin, group_offsets

T = TypeVar("T")
log = logging.getLogger("mqindex.kafka.groups")
#: fault injection for the race tests of a change against a joining member: a directory (see `_change_gate`)
CHANGE_GATE_ENV = "MQINDEX_TEST_GROUP_CHANGE_GATE"
GATE_TIMEOUT_S = 30.0
DEAD = "Dead"  # Kafka's state of a group that does not exist
LOOP_TIMEOUT_S = 10.0


class GroupNotFound(LookupError):
    def __init__(self, group: str) -> None:
        super().__init__(f"group {group!r} does not exist (no members, no committed offsets)")
        self.field = "group"


class GroupNotEmpty(ValueError):
    def __init__(self, group: str, members: int, what: str) -> None:
        super().__init__(f"group {group!r} has {members} active member(s): stop its consumers before {what} "
                         "(as Kafka refuses it)")
        self.field = "group"


class NothingToReset(ValueError):
    def __init__(self, group: str) -> None:
        super().__init__(f"name the topics to reset: group {group!r} has no committed offsets")
        self.field = "topics"


@dataclass
class MemberView:
    member_id: str
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes

    def partitions(self) -> list[tuple[str, int]]:
        return decode_assignment(self.assignment)


@dataclass
class GroupView:
    """A copy of a group's state taken on the listener's loop."""
    group_id: str
    state: str = EMPTY
    protocol_type: str = ""
    protocol: str = ""
    generation: int = 0
    members: list[MemberView] = field(default_factory=list)


def on_loop(ctx: Context, fn: Callable[..., T], *args: Any) -> T:
    """Run `fn(*args)` on the Kafka listener's event loop from another thread and return its result."""
    async def call() -> T:
        return fn(*args)

    return asyncio.run_coroutine_threadsafe(call(), ctx.coordinator.loop).result(LOOP_TIMEOUT_S)


def decode_assignment(raw: bytes) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of a consumer protocol assignment (ConsumerProtocolAssignment: int16
    version, [topic string, [int32 partition]], user data); [] for bytes that are not one."""
    out: list[tuple[str, int]] = []
    try:
        pos = 2
        (n,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        for _ in range(max(n, 0)):
            (ln,) = struct.unpack_from(">h", raw, pos)
            pos += 2
            topic = raw[pos:pos + ln].decode("utf-8")
            pos += ln
            (count,) = struct.unpack_from(">i", raw, pos)
            pos += 4
            for _ in range(max(count, 0)):
                out.append((topic, struct.unpack_from(">i", raw, pos)[0]))
                pos += 4
    except (struct.error, UnicodeDecodeError):
        return []
    return out


def decode_subscription(raw: bytes) -> list[str]:
    """The topics of a consumer protocol subscription (int16 version, [topic string], ...); [] otherwise."""
    try:
        (n,) = struct.unpack_from(">i", raw, 2)
        pos, out = 6, []
        for _ in range(max(n, 0)):
            (ln,) = struct.unpack_from(">h", raw, pos)
            out.append(raw[pos + 2:pos + 2 + ln].decode("utf-8"))
            pos += 2 + ln
        return out
    except (struct.error, UnicodeDecodeError):
        return []


# -- on the listener's loop -----------------------------------------------------------------------
def view_now(ctx: Context, group: str) -> GroupView | None:
    g = ctx.coordinator.groups.get(group)
    if g is None:
        return None
    return GroupView(g.group_id, g.state, g.protocol_type or "", g.protocol or "", g.generation,
                     [MemberView(m.member_id, m.client_id, m.client_host, m.metadata(g.protocol), m.assignment)
                      for m in g.members.values()])


def views_now(ctx: Context) -> list[GroupView]:
    return [v for g in list(ctx.coordinator.groups) if (v := view_now(ctx, g)) is not None]


def hold_now(ctx: Context, group: str) -> tuple[int, bool]:
    """GroupCoordinator.hold: (members, existed); with 0 members the group is held until `release_now`."""
    return ctx.coordinator.hold(group)


def release_now(ctx: Context, group: str, drop: bool = False) -> None:
    ctx.coordinator.release(group, drop)


def members_now(ctx: Context, group: str) -> int:
    g = ctx.coordinator.groups.get(group)
    return len(g.members) if g is not None else 0


# -- on a worker thread ---------------------------------------------------------------------------
def coordinated_here(ctx: Context, group: str) -> bool:
    return ctx.coordinator_for(group) == ctx.node_id


def summary(v: GroupView, coordinator: int) -> dict[str, Any]:
    return dict(group=v.group_id, state=v.state, protocol_type=v.protocol_type, protocol=v.protocol,
                members=len(v.members), coordinator=coordinator)


def list_local(ctx: Context, views: list[GroupView]) -> list[dict[str, Any]]:
    """The groups this node coordinates: those with state here (`views`, taken on the loop) and those that only
    have committed offsets (state Empty)."""
    me = ctx.node_id
    out = {v.group_id: summary(v, me) for v in views if coordinated_here(ctx, v.group_id)}
    for g in group_admin.group_ids(ctx.node.meta):
        if g not in out and coordinated_here(ctx, g):
            out[g] = summary(GroupView(g, protocol_type="consumer"), me)
    return [out[g] for g in sorted(out)]


def describe(ctx: Context, group: str, view: GroupView | None, with_time: bool = True) -> dict[str, Any]:
    """A group: its state, members (client id, host, assigned partitions) and each partition's committed offset,
    end offset and lag (`lag_ms`: the age of the oldest unconsumed message). GroupNotFound when it has neither
    state nor committed offsets."""
    committed = group_offsets.fetch(ctx.node.meta, group)
    if (view is None or (not view.members and view.state == EMPTY and not view.protocol_type)) and not committed:
        raise GroupNotFound(group)
    view = view or GroupView(group, protocol_type="consumer")
    owner = {tp: m.member_id for m in view.members for tp in m.partitions()}
    rows = group_admin.partition_lag(ctx.node.partitions, committed, set(owner), with_time)
    for r in rows:
        m_id = owner.get((r["topic"], r["partition"]))
        m = next((x for x in view.members if x.member_id == m_id), None)
        r.update(member_id=m_id, client_id=m.client_id if m else None, client_host=m.client_host if m else None)
    return dict(summary(view, ctx.node_id), generation=view.generation, **group_lag(rows),
                member_details=[dict(member_id=m.member_id, client_id=m.client_id, client_host=m.client_host,
                                     assignment=[dict(topic=t, partition=p) for t, p in m.partitions()])
                                for m in view.members],
                offsets=rows)


def group_lag(rows: list[dict[str, Any]]) -> dict[str, int | None]:
    """A group's `lag` (the sum over its partitions with a committed offset) and `lag_ms` (the oldest of theirs):
    null when no partition has a committed offset, as kafka-consumer-groups shows `-` for a partition's LAG then
    (0 would say the group is caught up)."""
    known = [r["lag"] for r in rows if r["lag"] is not None]
    times = [r["lag_ms"] for r in rows if r["lag_ms"] is not None]
    return {"lag": sum(known) if known else None, "lag_ms": max(times) if times else None}


def _change_gate(group: str) -> None:
    """Test hook, for the race tests only: with CHANGE_GATE_ENV naming a directory that holds `<group>.gate`
    (the group's name URL-quoted), a reset or delete of the group that passed its member check says so
    (`<group>.checked`) and waits for `<group>.go` (GATE_TIMEOUT_S at most) before its change is stored, so that a
    test can land a JoinGroup between the check and the change. Unset (the normal case): nothing."""
    where = os.environ.get(CHANGE_GATE_ENV)
    if not where:
        return
    gate = str(Path(where) / urllib.parse.quote(group, safe=""))
    if not Path(gate + ".gate").exists():
        return
    log.warning("test hook: group change held between its member check and its change",
                extra={"group": group, "env": CHANGE_GATE_ENV})
    Path(gate + ".checked").touch()
    deadline = time.monotonic() + GATE_TIMEOUT_S
    while not Path(gate + ".go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def delete(ctx: Context, group: str, members: int, had_state: bool) -> int:
    """Delete an empty group's committed offsets (its state was dropped on the loop: `members` is what that
    found). Returns how many offsets were deleted."""
    if members:
        raise GroupNotEmpty(group, members, "deleting it")
    _change_gate(group)
    deleted = group_admin.delete_offsets(ctx.node.meta, group)
    if not deleted and not had_state:
        raise GroupNotFound(group)
    return deleted


def reset_topics(ctx: Context, group: str, topics: list[str]) -> list[str]:
    """The topics a reset of `topics` touches (every topic the group has committed when none is named)."""
    if topics:
        return sorted({t.partition(":")[0] for t in topics})
    return sorted({t for t, _ in group_offsets.fetch(ctx.node.meta, group)})


def reset(ctx: Context, group: str, topics: list[str], spec: group_admin.ResetSpec, dry_run: bool,
          members: int, leaders: dict[tuple[str, int], group_admin.LeaderFigures] | None = None
          ) -> list[dict[str, Any]]:
    """Plan (and unless `dry_run`, commit) new offsets: [{topic, partition, current_offset, new_offset}];
    `leaders`: the figures of partitions led by other nodes, as their leaders gave them."""
    if members and not dry_run:
        raise GroupNotEmpty(group, members, "resetting its offsets")
    if not dry_run:
        _change_gate(group)
    committed = group_offsets.fetch(ctx.node.meta, group)
    targets = group_admin.targets_of(ctx.node.partitions, committed, topics)
    if not targets:
        raise NothingToReset(group)
    plan = group_admin.plan_reset(ctx.node.partitions, committed, targets, spec, leaders)
    if not dry_run:
        group_admin.store_offsets(ctx.node.meta, group, {(r["topic"], r["partition"]): r["new_offset"]
                                                         for r in plan})
    return plan


def delete_offsets_of(ctx: Context, group: str, which: list[tuple[str, int]]) -> int:
    return group_admin.delete_offsets(ctx.node.meta, group, which)
