"""`mqindex import-rocketmq DIR`: register a directory of RocketMQ tiered index files (unsealed or
compacted IndexStoreFile) so the index service serves them read-only.

Where it registers: the index directory is `--index-dir`, or `<--data-dir>/index` where the data
directory defaults to $MQINDEX_DATA_DIR or ./data (the same default as `mqindex serve`). Files are
referenced in place (absolute path, size and mtime recorded; never written) unless `--copy` copies
them into <index-dir>/imported/files/. A running service picks the registrations up on its next
background cycle; a service opened later picks them up on open. Works whether or not a service is
running: it only writes manifests (atomically) into <index-dir>/imported/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from api.cli import data_dir
from index_service.rocketmq_import import register_directory


def index_dir(args: argparse.Namespace) -> Path:
    if args.index_dir:
        return Path(args.index_dir)
    return Path(args.data_dir or data_dir.default()) / "index"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", help="directory holding RocketMQ tiered index files")
    parser.add_argument("--data-dir", dest="data_dir", help=data_dir.HELP + "; the index lives in DATA_DIR/index")
    parser.add_argument("--index-dir", dest="index_dir",
                        help="the index service directory itself (default: DATA_DIR/index)")
    parser.add_argument("--slots", type=int, default=None,
                        help="slot count of unsealed files (default RocketMQ's 5,000,000; compacted files "
                             "carry theirs)")
    parser.add_argument("--copy", action="store_true", help="copy the files into the index directory "
                                                            "instead of referencing them in place")


def run(args: argparse.Namespace) -> int:
    target = index_dir(args)
    done = register_directory(target, args.directory, slot_count=args.slots, copy=args.copy)
    for r in done:
        print(f"registered {r.name}: {r.layout}, {r.items} items, store times {r.min_ms}..{r.max_ms}, {r.path}")
    print(f"{len(done)} RocketMQ index file(s) registered in {target.resolve()}", file=sys.stderr)
    return 0
