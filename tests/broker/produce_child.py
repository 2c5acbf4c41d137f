"""Child process of the SIGKILL test: opens a BrokerNode and produces until killed, printing every
acknowledged record as `ACK <partition> <offset> <key>` (one line, flushed, after produce() returned)."""

from __future__ import annotations

import sys
import threading

from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from broker.partitions.topic_errors import TopicExists


def main(argv: list[str]) -> int:
    data_dir, store_url, meta_url, tag = argv
    node = BrokerNode.open(data_dir, store_url, meta_url, upload_threshold=48 << 10, upload_interval_s=0.1,
                           index_config={"flush_interval_ms": 5})
    try:
        node.create_topic("crash", 3)
    except TopicExists:
        pass
    out_lock = threading.Lock()
    print("READY", flush=True)

    def run(worker: int) -> None:
        i = 0
        while True:
            n = 1 + i % 4
            keys = [f"{tag}-{worker}-{i}-{j}" for j in range(n)]
            msgs = [InMessage(b"v" * (200 + 50 * j), key=k.encode(), headers=[("KEYS", b"common " + k.encode())])
                    for j, k in enumerate(keys)]
            res = node.produce("crash", msgs)
            with out_lock:
                sys.stdout.write("".join(f"ACK {r.partition} {r.offset} {k}\n" for r, k in zip(res, keys, strict=True)))
                sys.stdout.flush()
            i += 1

    threads = [threading.Thread(target=run, args=(w,), daemon=True) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
