"""A Kafka responder that answers a producer at once and stores nothing: NOT a broker. `mqindex bench kafka
--transactions` runs the same producers against it to measure the client's own time per round (its produce
loop, its thread hand-offs, librdkafka's wait before AddPartitionsToTxn), i.e. what a transaction of that
client costs whatever the server: the ceiling any server could reach with it on this machine.

It speaks the protocol through the listener's own schemas (api/kafka/schemas.py, kafka-python's classes) and
answers ApiVersions, Metadata (every topic asked for with --partitions partitions, led by itself),
FindCoordinator, InitProducerId, AddPartitionsToTxn, Produce (NONE, base offsets counted per partition) and
EndTxn; any other request closes the connection. It runs in a process of its own (`python -m
bench.kafka_null_peer --partitions N`, the port on its first line of output), so it does not share the
benchmark client's interpreter lock.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

from api.kafka import errors
from api.kafka.framing import frame, read_frame
from api.kafka.metadata import api_versions_body
from api.kafka.produce import _response as produce_response
from api.kafka.schemas import APIS, build
from api.kafka.server import decode_request
from broker.partitions.records import batch_slices

PRODUCE, METADATA, FIND_COORDINATOR, API_VERSIONS = 0, 3, 10, 18
INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN = 22, 24, 26


class Answers:
    """The answer to each request (a response object, or the framed bytes of a Produce answer)."""

    def __init__(self, port: int, partitions: int) -> None:
        self.port, self.partitions = port, partitions
        self.next_offset: dict[tuple[str, int], int] = {}

    def answer(self, api: int, req: Any, version: int) -> Any:
        if api == API_VERSIONS:
            return build(APIS[18].response, version, **api_versions_body(version))
        if api == METADATA:
            names = [t.name for t in req.topics or []]
            return build(APIS[3].response, version, throttle_time_ms=0, cluster_id="null-peer", controller_id=0,
                         brokers=[dict(node_id=0, host="127.0.0.1", port=self.port, rack=None)],
                         topics=[dict(error_code=errors.NONE, name=n, is_internal=False, partitions=[
                             dict(error_code=errors.NONE, partition_index=i, leader_id=0, leader_epoch=0,
                                  replica_nodes=[0], isr_nodes=[0], offline_replicas=[])
                             for i in range(self.partitions)]) for n in names])
        if api == FIND_COORDINATOR:
            return build(APIS[10].response, version, throttle_time_ms=0, error_code=errors.NONE, error_message=None,
                         node_id=0, host="127.0.0.1", port=self.port)
        if api == INIT_PRODUCER_ID:
            return build(APIS[22].response, version, throttle_time_ms=0, error_code=errors.NONE, producer_id=1000,
                         producer_epoch=0)
        if api == ADD_PARTITIONS:
            return build(APIS[24].response, version, throttle_time_ms=0, results_by_topic_v3_and_below=[
                dict(name=t.name, results_by_partition=[dict(partition_index=p, partition_error_code=errors.NONE)
                                                        for p in t.partitions])
                for t in req.v3_and_below_topics])
        if api == END_TXN:
            return build(APIS[26].response, version, throttle_time_ms=0, error_code=errors.NONE, producer_id=-1,
                         producer_epoch=-1)
        if api == PRODUCE:
            done = {}
            for t in req.topic_data:
                for pd in t.partition_data:
                    key = (t.name, pd.index)
                    base = self.next_offset.get(key, 0)
                    self.next_offset[key] = base + _records_in(pd.records or b"")
                    done[key] = (errors.NONE, base, None)
            return produce_response(done, version, req.header.correlation_id).framed
        raise ValueError(f"the null peer does not answer {APIS[api].name}")


def _records_in(records: bytes) -> int:
    """The records of the batches in a Produce request's partition data (each batch's last offset delta + 1)."""
    return sum(h.last_offset_delta + 1 for _pos, h, _raw in batch_slices(records))


async def serve(partitions: int) -> None:
    answers: Answers | None = None

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert answers is not None
        try:
            while (data := await read_frame(reader, 100 << 20)) is not None:
                decoded = decode_request(data)
                if isinstance(decoded, bytes):
                    writer.write(decoded)
                    continue
                api, req, correlation_id = decoded
                resp = answers.answer(api.key, req, req.API_VERSION)
                if isinstance(resp, memoryview):
                    writer.write(resp)
                else:
                    resp.with_header(correlation_id=correlation_id)
                    writer.write(frame(resp.encode(header=True)))
        except (ConnectionError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    answers = Answers(port, partitions)
    print(port, flush=True)
    async with server:
        await server.serve_forever()


class NullPeer:
    """The responder in a process of its own, with the bench's server interface (`bootstrap`, `cpu_s`; no
    `url`: no /metrics)."""

    url = None

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    def start(self) -> NullPeer:
        root = Path(__file__).resolve().parents[1]
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.kafka_null_peer", "--partitions",
                                      str(self.partitions)], cwd=root, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError(f"the null peer did not start (it printed {line!r})")
        self.port = int(line)
        return self

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_s(self) -> float:
        from bench.common import process_cpu_s

        assert self.proc is not None
        return process_cpu_s(self.proc.pid)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    try:
        asyncio.run(serve(args.partitions))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
