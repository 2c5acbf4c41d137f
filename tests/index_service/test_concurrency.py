"""4 writer threads and 4 query threads for a bounded run while the background thread rolls,
compacts and uploads 20-item files: every answer equals the model's.

Each writer owns one queue and takes strictly increasing store times from a shared counter; after
each flush it publishes the newest time it has flushed. Records at or below the minimum of the
published times are all flushed (each writer's times increase), so a query bounded by that
watermark has exactly one right answer, which the model computes.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from pathlib import Path

from tests.index_service.helpers import Model, as_tuples, open_service

KEYS = [f"key{i}" for i in range(12)]
WRITERS, QUERIERS, RECORDS_PER_WRITER = 4, 4, 400


def test_four_writers_four_queriers_match_the_model(tmp_path: Path) -> None:
    svc = open_service(tmp_path / "idx", f"file://{tmp_path}/blobs", None, maintain_interval_s=0.01,
                       retry_initial_s=0.01)
    t0 = int(time.time() * 1000)  # near the wall clock: retention must not expire the files
    times = itertools.count(t0)
    model = Model()
    model_lock = threading.Lock()
    flushed_upto = [t0 - 1] * WRITERS
    done = threading.Event()
    errors: list[BaseException] = []
    checked = [0]

    def writer(w: int) -> None:
        try:
            rng = random.Random(w)
            for off in range(RECORDS_PER_WRITER):
                t = next(times)
                keys = rng.sample(KEYS, 2)
                with model_lock:
                    model.add("t", w, off, off + 1, t, keys)
                svc.put("t", w, off, off + 1, keys, t)
                if off % 10 == 9 or off == RECORDS_PER_WRITER - 1:
                    svc.flush()
                    with model_lock:
                        flushed_upto[w] = t
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def querier(qid: int) -> None:
        rng = random.Random(100 + qid)
        try:
            while not done.is_set() or checked[0] < 50:
                with model_lock:
                    watermark = min(flushed_upto)
                if watermark < t0:
                    continue
                key = rng.choice(KEYS)
                max_count = rng.choice([1, 3, 10, 50, 1000])
                begin = rng.choice([0, t0 + rng.randrange(0, max(1, watermark - t0 + 1))])
                got = svc.query("t", key, max_count, begin_ms=begin, end_ms=watermark)
                with model_lock:
                    want = model.query("t", key, max_count, begin, watermark)
                if as_tuples(got) != want:
                    again = svc.query("t", key, max_count, begin_ms=begin, end_ms=watermark)
                    raise AssertionError(f"{key} {max_count} [{begin}, {watermark}]: got {as_tuples(got)}, "
                                         f"want {want}, again {as_tuples(again)}; {svc.files()}")
                checked[0] += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    threads += [threading.Thread(target=querier, args=(q,)) for q in range(QUERIERS)]
    try:
        for th in threads:
            th.start()
        for th in threads[:WRITERS]:
            th.join(120)
        uploaded_during_run = sum(f.state.value == "UPLOADED" for f in svc.files())
        done.set()
        for th in threads[WRITERS:]:
            th.join(120)
        assert not any(th.is_alive() for th in threads)
        assert not errors, errors[0]
        assert checked[0] >= 50
        assert uploaded_during_run >= 10  # the background compacted and uploaded while queries ran
        svc.maintain()
        for key in KEYS:  # and the final answers, from every state, are the model's
            assert as_tuples(svc.query("t", key, 10_000)) == model.query("t", key, 10_000)
    finally:
        svc.close()
