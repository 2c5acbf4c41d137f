"""aiokafka consumer group over 4 partitions: two members split them, one leaves and the other takes all,
committed offsets survive a server restart; kafka-python's producer feeds it."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from tests.kafka.conftest import KafkaServerProcess


def produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(start, start + n):
        p.send(topic, value=str(i).encode(), partition=i % 4)
    p.flush(30)
    p.close()


async def wait_for(cond, what: str, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def group_run(bootstrap: str) -> set[int]:
    opts = dict(bootstrap_servers=bootstrap, group_id="g1", enable_auto_commit=False, auto_offset_reset="earliest",
                session_timeout_ms=6000, heartbeat_interval_ms=300)
    a, b = AIOKafkaConsumer("grp", **opts), AIOKafkaConsumer("grp", **opts)
    await a.start()
    await b.start()
    seen: set[int] = set()
    try:
        async def pump(c: AIOKafkaConsumer) -> None:
            batch = await c.getmany(timeout_ms=200)
            for msgs in batch.values():
                seen.update(int(m.value) for m in msgs)
            if batch:
                await c.commit()

        await wait_for(lambda: len(a.assignment()) + len(b.assignment()) == 4 and a.assignment() and b.assignment(),
                       "two members sharing 4 partitions")
        deadline = time.monotonic() + 30
        while len(seen) < 40 and time.monotonic() < deadline:
            await asyncio.gather(pump(a), pump(b))
        assert len(seen) == 40
        await b.stop()  # LeaveGroup: a takes every partition
        await wait_for(lambda: len(a.assignment()) == 4, "the remaining member owning all 4 partitions")
        await pump(a)
    finally:
        await a.stop()
    return seen


async def resume(bootstrap: str) -> list[int]:
    c = AIOKafkaConsumer("grp", bootstrap_servers=bootstrap, group_id="g1", enable_auto_commit=False,
                         auto_offset_reset="earliest")
    await c.start()
    got: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            for msgs in (await c.getmany(timeout_ms=200)).values():
                got += [int(m.value) for m in msgs]
    finally:
        await c.stop()
    return got


def test_group_rebalance_and_resume_after_restart(kafka_server: KafkaServerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap)
    admin.create_topics([NewTopic("grp", 4, 1)])
    admin.close()
    produce(kafka_server.bootstrap, "grp", 0, 40)
    assert asyncio.run(group_run(kafka_server.bootstrap)) == set(range(40))
    kafka_server.restart()
    produce(kafka_server.bootstrap, "grp", 40, 20)
    # committed offsets came back from the metadata: only the 20 new records are read
    assert sorted(asyncio.run(resume(kafka_server.bootstrap))) == list(range(40, 60))
