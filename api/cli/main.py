"""The `mqindex` command line: one sub-command per module, imported only when used.

Each command module exposes `add_arguments(parser)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys

from api.cli import log_format

# command -> (module, one-line help). A command appears once its module exists.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("api.cli.serve", "start broker + index + HTTP on one process"),
    "produce": ("api.cli.client", "produce a message through a server"),
    "consume": ("api.cli.client", "read a partition from an offset"),
    "query": ("api.cli.client", "find messages by key"),
    "get": ("api.cli.client", "fetch one message by id"),
    "nodes": ("api.cli.client", "list the cluster's nodes and the partitions each leads"),
    "reassign": ("api.cli.client", "move a partition to another node"),
    "rebalance": ("api.cli.client", "plan (and with --execute run) moves that even out the partitions"),
    "topics": ("api.cli.topics", "create, list, describe and alter topics (retention configs)"),
    "inspect-index": ("api.cli.inspect_index", "dump an index file (native or RocketMQ format)"),
    "inspect-object": ("api.cli.inspect_object", "dump a stream object's data blocks and index block"),
    "import-rocketmq": ("api.cli.import_rocketmq", "register a directory of RocketMQ tiered index files"),
    "scrub": ("api.cli.scrub", "verify every checksum of the stored objects and index files; list the damaged"),
    "spark-build": ("api.cli.spark_build", "batch-build compacted indexes from the broker's objects"),
    "compact": ("api.cli.compact", "run a broker compaction cycle (--now) or show its totals"),
    "security": ("api.cli.security", "print the stored (hashed) form of a token or a SCRAM password"),
    "bench": ("bench.cli", "run benchmarks against their peers"),
}


def available() -> dict[str, tuple[str, str]]:
    return {name: spec for name, spec in COMMANDS.items() if importlib.util.find_spec(spec[0]) is not None}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqindex", description="Find messages by key or id on object storage.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in available().items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod = importlib.import_module(module)
        add = getattr(mod, f"add_{name.replace('-', '_')}_arguments", None) or mod.add_arguments
        add(p)
        p.set_defaults(_module=module, _name=name)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    log_format.configure(logging.DEBUG if args.verbose else logging.INFO)
    if not args.verbose:
        logging.getLogger("httpx").setLevel(logging.WARNING)  # the client commands print their own results
    mod = importlib.import_module(args._module)
    run = getattr(mod, f"run_{args._name.replace('-', '_')}", None) or mod.run
    try:
        return int(run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - one clear line for the user, not a traceback
        if args.verbose:
            raise
        from api.security.redact import REDACTOR  # no password or key of a URL in the message

        print(f"mqindex {args._name}: error: {REDACTOR.text(str(exc))}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
