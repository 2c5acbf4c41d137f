"""Moving a partition between nodes (reference/003, the six steps), source side and target side.

Source (`hand_off`): stop accepting writes for the partition (produce answers "not leader" from now on),
wait for its in-flight WAL appends, wait until the index holds everything acknowledged, write a clean
partition state record with the index checkpoint to the meta stream, then
- with the shared WAL (ObjectWal): record in the metadata where the records not yet uploaded lie in this
  node's WAL objects (broker/cluster/handoff_wal.py) and close both streams at the partition's epoch at once:
  nothing is uploaded first, so the time of a move does not grow with what the partition holds unuploaded;
  this node keeps those WAL objects until the next owner has committed the range;
- with a local WAL (no other node can read it): force-upload the cached data, then close the streams.

Target (`take_over`): when both streams are closed, open them at a higher epoch (`PartitionMap.claim`);
with a hand-off doc, the streams continue at the source's acknowledged end: the meta stream's moved records
are read from the source's WAL now (they hold the state record), the data stream's in the background once
the partition is served and its first new records are acknowledged (at most a second later: the reading of a
large range does not slow the move down; reads of that range wait for them, StreamStorage.borrow). Load the
state record, resume index dispatch after the index checkpoint the source recorded (so nothing is indexed twice or
skipped), write a state record, serve. The higher epoch fences the source at once: a commit or close of its
streams at the old epoch is refused.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable

from broker.cluster import handoff_wal
from broker.cluster.failover import REPLAYS_PREFIX
from broker.metadata.image import OPENED
from broker.partitions.dispatcher import CatchUp
from broker.partitions.partition import Partition
from broker.partitions.partition_map import PartitionMap, now_ms
from broker.partitions.partition_state import PartitionState
from broker.step_kill import kill_at_step

log = logging.getLogger("mqindex.broker.cluster")

#: fault injection for the crash tests: when set to a step of `hand_off` ("state_record": the partition is no longer
#: served and its state record written, nothing recorded for the target yet; "lend_doc": the doc naming the WAL
#: ranges is stored, the streams still open; "close": the streams are closed) or of `take_over` ("claim", "borrow",
#: "state"), the process kills itself with SIGKILL right after that step
KILL_AT_ENV = "MQINDEX_TEST_KILL_AT_HANDOFF_STEP"
_kill_at = kill_at_step(KILL_AT_ENV, "hand-off")  # read once: the variable is set when the process starts


def hand_off(parts: PartitionMap, p: Partition, target: int, sync_index: Callable[[], None],
             timeout_s: float = 30.0, lend: bool = True) -> bool:
    """Source steps; True when the partition's streams are closed here. On a failure the partition is
    served again and the error logged (the caller retries later). lend: with a shared WAL, the target reads
    what is not uploaded from this node's WAL; False (a target of an earlier release, which would open the
    partition at its committed end): it is uploaded first, as with a local WAL."""
    started = time.monotonic()
    with p.lock:
        if not p.owned or p.data is None or p.meta is None:
            return False
        p.owned, p.why_not_owned = False, f"moving to node {target}"
    data, meta = p.data, p.meta
    wal = handoff_wal.shared_wal(parts) if lend else None
    key = handoff_wal.doc_key(p.topic.topic_id, p.index)
    doc: str | None = None
    unuploaded = 0
    steps: dict[str, float] = {}  # seconds of each step, logged (where a move's time goes)
    try:
        deadline = time.monotonic() + timeout_s
        while data.confirmed_end < data.next_offset:  # appends queued before the stop are acknowledged first
            if time.monotonic() > deadline:
                raise TimeoutError(f"WAL appends of {p.name} not durable after {timeout_s}s")
            time.sleep(0.002)
        mark = _step(steps, "appends", started)
        sync_index()
        mark = _step(steps, "index", mark)
        ck = parts.checkpoint(p.topic.name, p.index)
        state = PartitionState(parts.start_offset(p), True, ck, parts.node_id, p.epoch, now_ms())
        p.write_state(state).result(timeout_s)
        mark = _step(steps, "state_record", mark)
        unuploaded = parts.storage.cached_bytes(data.stream_id) + parts.storage.cached_bytes(meta.stream_id)
        if wal is not None:  # the next owner reads what is not uploaded from this node's WAL objects
            doc = json.dumps(handoff_wal.lend_doc(parts, p, wal))
            parts.meta.kv_put(key, doc)
            mark = _step(steps, "lend_doc", mark)
        else:
            parts.storage.force_upload()
            if parts.storage.cached_bytes(data.stream_id) or parts.storage.cached_bytes(meta.stream_id):
                raise RuntimeError(f"{p.name}: data still cached after the upload")
            mark = _step(steps, "upload", mark)
        parts.storage.close_streams([meta, data])
        _step(steps, "close", mark)
    except Exception as exc:  # noqa: BLE001 - keep serving; the watcher tries again
        closed = meta.fenced or data.fenced or meta.closed or data.closed  # (closed: the close went through)
        with p.lock:
            if not closed:
                p.owned, p.why_not_owned = True, ""
        if doc is not None:
            if closed:
                parts.storage.lend({s.stream_id: s.confirmed_end for s in (meta, data)})
            else:  # still served here: the doc names nothing anyone reads
                with contextlib.suppress(Exception):
                    parts.meta.kv_set_if({key: doc}, key, None)
        log.error("partition hand-off failed; serving it again", extra={
            "topic": p.topic.name, "partition": p.index, "target": target, "error": f"{type(exc).__name__}: {exc}"})
        return False
    if doc is not None:
        parts.storage.lend({s.stream_id: s.confirmed_end for s in (meta, data)})
    p.meta = p.data = None
    if parts.index_claims is not None:
        parts.index_claims.release(p.topic.name, p.index, ck)
    log.info("partition handed off", extra={"topic": p.topic.name, "partition": p.index, "target": target,
                                            "epoch": p.epoch, "end_offset": data.confirmed_end,
                                            "index_checkpoint": ck, "unuploaded_bytes": unuploaded,
                                            "upload": "lent from the shared WAL" if doc is not None else "uploaded",
                                            "seconds": round(time.monotonic() - started, 3), "steps": steps})
    return True


def _step(steps: dict[str, float], name: str, since: float) -> float:
    now = time.monotonic()
    steps[name] = round(now - since, 3)
    if _kill_at is not None:
        _kill_at(name)
    return now


def take_over(parts: PartitionMap, p: Partition, catch_up: Callable[[CatchUp], None]) -> bool:
    """Target steps; False while the source still holds a stream (try again on the next look)."""
    if p.owned:
        return True
    ms = parts.meta.get_stream(p.meta_stream, refresh=False)
    ds = parts.meta.get_stream(p.data_stream, refresh=False)
    if OPENED in (ms.state, ds.state) and parts.node_id not in (ms.owner, ds.owner):
        return False
    if replay_pending(parts, {ms.owner, ds.owner}):
        return False
    started = time.monotonic()
    wal = handoff_wal.shared_wal(parts)
    entries = handoff_wal.stream_entries(parts.meta) if wal is not None else {}  # the image the streams came from
    parts.claim([p], serve=False)  # served after the catch-up is queued (a live entry first would skip it)
    if p.data is None or p.meta is None:
        return False
    steps: dict[str, float] = {}
    mark = _step(steps, "claim", started)
    served = threading.Event()  # the data range is read from the source's WAL once the take-over is done
    try:
        borrowed = handoff_wal.borrow(parts, wal.store, p, entries, served) if wal is not None else []
        mark = _step(steps, "borrow", mark)
        parts.load_states([p], served=False)
        _step(steps, "state", mark)
    except Exception as exc:  # noqa: BLE001 - closed again (nothing committed changed): the next look retries
        log.error("partition take-over failed reading the source's WAL; retried", extra={
            "topic": p.topic.name, "partition": p.index, "error": f"{type(exc).__name__}: {exc}"})
        with contextlib.suppress(Exception):
            parts.storage.close_streams(p.streams)
        p.meta = p.data = None
        p.why_not_owned = "not opened"
        served.set()
        return False
    try:
        return _serve(parts, p, catch_up, started, bool(borrowed), steps)
    finally:
        served.set()


def replay_pending(parts: PartitionMap, owners: set[int | None]) -> bool:
    """Whether a failover is replaying the shared WAL of a node that held these streams last. Its fencing closed
    them in the same transaction that recorded the replay (cluster/failover.py), and the survivor claims the
    partition and puts that node's acknowledged records in it only after it has made itself the leader (a
    transaction later): a target that opened the streams in between would open them at their committed end,
    without the records the dead source acknowledged and had not uploaded, and the survivor, finding them open,
    would leave them out of its replay and delete the WAL objects that held them. The target waits instead; the
    survivor serves the partition and hands it on."""
    others = {o for o in owners if o is not None and o != parts.node_id}
    return any(parts.meta.kv_get(f"{REPLAYS_PREFIX}{o}", refresh=False) is not None for o in others)


def _serve(parts: PartitionMap, p: Partition, catch_up: Callable[[CatchUp], None], started: float,
           borrowed: bool, steps: dict[str, float]) -> bool:
    own = parts.index_checkpoint(p)
    moved = p.state.index_checkpoint
    start = max(-1 if own is None else own, -1 if moved is None else moved) + 1
    start = max(start, parts.start_offset(p))
    catch_up(CatchUp(p.topic.name, p.index, start, p.acked_end))
    parts.serve([p])
    if not p.owned:
        return False
    steps["served_at"] = round(time.monotonic() - started, 3)
    parts.write_states([p], clean=False)
    log.info("partition taken over", extra={"topic": p.topic.name, "partition": p.index, "epoch": p.epoch,
                                            "end_offset": p.acked_end, "index_from": start,
                                            "moved_range_from_wal": borrowed,
                                            "seconds": round(time.monotonic() - started, 3), "steps": steps})
    return True
