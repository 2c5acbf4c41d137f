"""`mqindex bench NAME [args]`: runs bench/NAME.py's main(argv)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

import bench

#: modules of bench/ that the benchmarks share, not benchmarks themselves
SHARED = ("cli", "common", "serve_process")


def names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name not in SHARED)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="benchmark to run: " + ", ".join(names() + ["all"]))
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the benchmark")


def run(args: argparse.Namespace) -> int:
    aliases = {"storage": "storage_tier"}
    chosen = names() if args.name == "all" else [aliases.get(args.name, args.name)]
    for name in chosen:
        if name not in names():
            raise ValueError(f"no benchmark {args.name!r}; choose from {', '.join(names() + ['all'])}")
        rc = importlib.import_module(f"bench.{name}").main(list(args.args))
        if rc:
            return int(rc)
    return 0
