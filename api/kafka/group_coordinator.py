"""The classic consumer group protocol's coordinator: membership, generations and rebalances, in memory.

Written by hand (the protocol library encodes messages, it does not coordinate groups). States per group:
EMPTY -> PREPARING (a member joined or left: every member must rejoin within the rebalance timeout) ->
AWAITING_SYNC (generation + 1, the leader got the member list) -> STABLE (the leader's assignment handed to
every member). Members that stop heartbeating for their session timeout are removed, which rebalances the
rest. Runs on the listener's event loop; committed offsets are not here but in the metadata KV.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

from api.kafka import errors

log = logging.getLogger("mqindex.kafka.groups")

EMPTY, PREPARING, AWAITING_SYNC, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"


@dataclass
class Member:
    member_id: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_seen: float = field(default_factory=time.monotonic)
    join: asyncio.Future[dict] | None = None
    sync: asyncio.Future[tuple[int, bytes]] | None = None
    assignment: bytes = b""
    client_id: str = ""
    client_host: str = ""

    def metadata(self, protocol: str | None) -> bytes:
        """The member's metadata for the group's chosen protocol (its subscription), b"" before one is chosen."""
        return dict(self.protocols).get(protocol or "", b"")


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    holds: int = 0  # admin changes under way (offset reset, delete): JoinGroup waits until they end
    released: asyncio.Event = field(default_factory=asyncio.Event)
    held_only: bool = False  # created by a hold (no state before it): dropped when the hold ends memberless


class GroupCoordinator:
    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self._reaper: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the listener's: group state is read and changed there

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._reaper = self.loop.create_task(self._expire_loop())

    def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()

    # -- join and sync ----------------------------------------------------------------------------
    async def join(self, group_id: str, member_id: str, client_id: str, protocol_type: str,
                   protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
                   client_host: str = "") -> dict:
        if not group_id:
            return dict(error_code=errors.INVALID_GROUP_ID)
        g = self.groups.setdefault(group_id, Group(group_id))
        while g.holds:  # an admin change of the empty group is under way: this member joins after it
            log.info("JoinGroup waits for an admin change of the group", extra={"group": group_id})
            await g.released.wait()
            g = self.groups.setdefault(group_id, Group(group_id))
        g.held_only = False
        if g.protocol_type is not None and g.members and protocol_type != g.protocol_type:
            return dict(error_code=errors.INCONSISTENT_GROUP_PROTOCOL)
        if member_id and member_id not in g.members:
            return dict(error_code=errors.UNKNOWN_MEMBER_ID, member_id=member_id)
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        m = g.members.get(member_id)
        if m is None:
            m = g.members[member_id] = Member(member_id, protocols, session_timeout_ms, rebalance_timeout_ms)
        m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms = protocols, session_timeout_ms, rebalance_timeout_ms
        m.client_id, m.client_host = client_id, client_host
        m.last_seen = time.monotonic()
        g.protocol_type = protocol_type
        if m.join is not None and not m.join.done():
            # a second JoinGroup of the member while its first waits (a client that gave up on the first, or
            # retried it on a new connection): the newer one stands for the member, the older one is answered
            # now, with the error that makes a client that still waits for it join again under its member id
            m.join.set_result(dict(error_code=errors.REBALANCE_IN_PROGRESS, member_id=member_id))
        m.join = asyncio.get_running_loop().create_future()
        fut = m.join
        if g.state != PREPARING:
            self._prepare(g)
        self._maybe_complete(g)
        return await fut

    def _prepare(self, g: Group) -> None:
        """Start a rebalance: pending syncs are told to rejoin, the join phase is bounded by the rebalance timeout."""
        g.state = PREPARING
        for m in g.members.values():
            if m.sync is not None and not m.sync.done():
                m.sync.set_result((errors.REBALANCE_IN_PROGRESS, b""))
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000
        loop = asyncio.get_running_loop()
        loop.call_later(max(timeout, 0.1), self._complete_join, g, g.generation)
        log.info("group rebalancing", extra={"group": g.group_id, "generation": g.generation,
                                             "members": len(g.members)})

    def _maybe_complete(self, g: Group) -> None:
        if g.state == PREPARING and all(m.join is not None and not m.join.done() for m in g.members.values()):
            self._complete_join(g, g.generation)

    def _complete_join(self, g: Group, generation: int) -> None:
        if g.state != PREPARING or g.generation != generation:
            return
        for mid in [mid for mid, m in g.members.items() if m.join is None or m.join.done()]:
            del g.members[mid]  # did not rejoin in time
        if not g.members:
            g.state, g.leader, g.protocol = EMPTY, None, None
            g.generation += 1
            return
        g.generation += 1
        first = next(iter(g.members.values()))
        names = [n for n, _ in first.protocols if all(n in dict(m.protocols) for m in g.members.values())]
        if not names:
            for m in g.members.values():
                assert m.join is not None
                m.join.set_result(dict(error_code=errors.INCONSISTENT_GROUP_PROTOCOL, member_id=m.member_id))
                m.join = None
            g.members.clear()
            g.state = EMPTY
            return
        g.protocol = names[0]
        if g.leader not in g.members:
            g.leader = first.member_id
        g.state = AWAITING_SYNC
        everyone = [dict(member_id=m.member_id, group_instance_id=None, metadata=dict(m.protocols)[g.protocol])
                    for m in g.members.values()]
        for m in g.members.values():
            assert m.join is not None
            m.join.set_result(dict(error_code=errors.NONE, generation_id=g.generation, protocol_type=g.protocol_type,
                                   protocol_name=g.protocol, leader=g.leader, member_id=m.member_id,
                                   members=everyone if m.member_id == g.leader else []))
            m.join = None
            m.last_seen = time.monotonic()
        log.info("group generation", extra={"group": g.group_id, "generation": g.generation,
                                            "members": len(g.members), "leader": g.leader})

    async def sync(self, group_id: str, generation: int, member_id: str,
                   assignments: dict[str, bytes]) -> tuple[int, bytes]:
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return errors.UNKNOWN_MEMBER_ID, b""
        if generation != g.generation:
            return errors.ILLEGAL_GENERATION, b""
        if g.state == PREPARING:
            return errors.REBALANCE_IN_PROGRESS, b""
        m = g.members[member_id]
        m.last_seen = time.monotonic()
        if g.state == STABLE:
            return errors.NONE, m.assignment
        if member_id == g.leader:
            for mid, other in g.members.items():
                other.assignment = assignments.get(mid, b"")
            g.state = STABLE
            for other in g.members.values():
                if other.sync is not None and not other.sync.done():
                    other.sync.set_result((errors.NONE, other.assignment))
                other.sync = None
            return errors.NONE, m.assignment
        m.sync = asyncio.get_running_loop().create_future()
        return await m.sync

    # -- admin changes ----------------------------------------------------------------------------
    def hold(self, group_id: str) -> tuple[int, bool]:
        """Begin an admin change of a group (offset reset, delete), atomic with the member check Kafka makes:
        (members, existed). With 0 members the group is held: a JoinGroup of it waits (on this loop) until
        `release`, so no member joins between the check and the change. With members nothing is held (the
        caller refuses). Every hold granted must be released."""
        g = self.groups.get(group_id)
        existed = g is not None
        if g is not None and g.members:
            return len(g.members), existed
        if g is None:
            g = self.groups[group_id] = Group(group_id, held_only=True)
        g.holds += 1
        g.released.clear()
        return 0, existed

    def release(self, group_id: str, drop: bool = False) -> None:
        """End a hold; with `drop` (a deleted group), or for a group the hold created, the group's state goes
        once no hold remains. The JoinGroups that waited go on."""
        g = self.groups.get(group_id)
        if g is None or not g.holds:
            return
        g.holds -= 1
        if g.holds:
            return
        if (drop or g.held_only) and not g.members:
            del self.groups[group_id]
        g.released.set()

    # -- liveness ---------------------------------------------------------------------------------
    def heartbeat(self, group_id: str, generation: int, member_id: str) -> int:
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return errors.UNKNOWN_MEMBER_ID
        g.members[member_id].last_seen = time.monotonic()
        if g.state == PREPARING:
            return errors.REBALANCE_IN_PROGRESS
        if generation != g.generation:
            return errors.ILLEGAL_GENERATION
        return errors.NONE

    def leave(self, group_id: str, member_id: str) -> int:
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return errors.UNKNOWN_MEMBER_ID
        self._remove(g, member_id, "left")
        return errors.NONE

    def _remove(self, g: Group, member_id: str, why: str) -> None:
        m = g.members.pop(member_id)
        if m.join is not None and not m.join.done():
            m.join.set_result(dict(error_code=errors.UNKNOWN_MEMBER_ID, member_id=member_id))
        if m.sync is not None and not m.sync.done():  # no longer a member: its SyncGroup gets no assignment
            m.sync.set_result((errors.UNKNOWN_MEMBER_ID, b""))
        log.info("group member removed", extra={"group": g.group_id, "member": member_id, "reason": why})
        if not g.members:
            g.state, g.leader = EMPTY, None
            g.generation += 1
        elif g.state == PREPARING:
            self._maybe_complete(g)
        else:
            self._prepare(g)

    def check_commit(self, group_id: str, generation: int, member_id: str) -> int:
        """May this OffsetCommit be stored now? Kafka's rules (GroupCoordinator.handleCommitOffsets):

        - generation < 0 into a group without members: a commit outside group management (a consumer that
          assign()s its partitions, an admin client), accepted;
        - generation >= 0 or a member id: the member must be current (UNKNOWN_MEMBER_ID) at the current
          generation (ILLEGAL_GENERATION; also for a group this coordinator does not know); accepted while the
          group is Stable and while it prepares a rebalance (the commit before rejoining, or in a revocation
          callback, must go through: the member learns of the rebalance from its heartbeat), refused with
          REBALANCE_IN_PROGRESS while the group awaits its SyncGroup;
        - generation < 0 without a member id into a group that has members: UNKNOWN_MEMBER_ID (only members
          commit into an active group).
        An accepted commit counts as a sign of life of the member, as a heartbeat does."""
        g = self.groups.get(group_id)
        if g is None or not g.members:
            if generation < 0:
                return errors.NONE
            return errors.ILLEGAL_GENERATION if g is None else errors.UNKNOWN_MEMBER_ID
        if generation < 0 and not member_id:
            return errors.UNKNOWN_MEMBER_ID
        m = g.members.get(member_id)
        if m is None:
            return errors.UNKNOWN_MEMBER_ID
        if generation != g.generation:
            return errors.ILLEGAL_GENERATION
        if g.state == AWAITING_SYNC:
            return errors.REBALANCE_IN_PROGRESS
        m.last_seen = time.monotonic()
        return errors.NONE

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            for g in list(self.groups.values()):
                for mid, m in list(g.members.items()):
                    waiting = m.join is not None and not m.join.done()
                    if not waiting and now - m.last_seen > m.session_timeout_ms / 1000:
                        self._remove(g, mid, "session timeout")
