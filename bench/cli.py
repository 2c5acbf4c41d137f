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
    parser.add_argument("name", help="benchmark to run: " + ", ".join(names() + ["all"]) + " (cli: cli_startup)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the benchmark (default: none)")


def run(args: argparse.Namespace) -> int:
    aliases = {"storage": "storage_tier", "cli": "cli_startup"}
    chosen = names() if args.name == "all" else [aliases.get(args.name, args.name)]
    for name in chosen:
        if name not in names():  # after the aliases: `cli` is this dispatcher's module, the benchmark cli_startup
            raise ValueError(f"no benchmark {args.name!r}; choose from {', '.join(names() + ['all'])}")
        rc = importlib.import_module(f"bench.{name}").main(list(args.args))
        if rc:
            return int(rc)
    return 0
