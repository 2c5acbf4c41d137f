"""bench/kafka_null_peer.py, the peer `mqindex bench kafka --transactions` measures the client alone against: a
real confluent-kafka producer, idempotent and transactional, gets every record acknowledged, at offsets that
continue per partition from 0 (the peer counts each batch's records), and the peer's process is stopped."""

from __future__ import annotations

from confluent_kafka import Producer

from bench.kafka_null_peer import NullPeer


def test_a_transactional_and_an_idempotent_producer_are_answered_in_order() -> None:
    peer = NullPeer(3).start()
    try:
        offsets: dict[int, list[int]] = {}
        failed: list[str] = []

        def done(err: object, msg: object) -> None:
            if err is not None:
                failed.append(str(err))
            else:
                offsets.setdefault(msg.partition(), []).append(msg.offset())  # type: ignore[attr-defined]

        txn = Producer({"bootstrap.servers": peer.bootstrap, "transactional.id": "null-peer-test", "linger.ms": 5})
        txn.init_transactions(30)
        for t in range(3):
            txn.begin_transaction()
            for i in range(100):
                txn.produce("t", b"v" * 100, key=f"{t}-{i}".encode(), on_delivery=done)
            txn.commit_transaction(30)
        idem = Producer({"bootstrap.servers": peer.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        for i in range(300):
            idem.produce("t", b"v" * 100, key=f"i-{i}".encode(), on_delivery=done)
        assert idem.flush(30) == 0
        assert not failed
        assert sum(len(v) for v in offsets.values()) == 600
        for got in offsets.values():
            assert sorted(got) == list(range(len(got)))
    finally:
        peer.stop()
    assert peer.proc is not None and peer.proc.poll() is not None
