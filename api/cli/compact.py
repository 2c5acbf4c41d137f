"""`mqindex compact [--now]`: a server's compaction totals, or (--now) run one cycle and print what it did."""

from __future__ import annotations

import argparse
import json

from api.cli.client import _common, _request


def add_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--now", action="store_true", help="run a compaction cycle now (admin token)")


def run(args: argparse.Namespace) -> int:
    if args.now:
        out = _request(args, "POST", "/v1/admin/compaction")
    else:
        out = _request(args, "GET", "/v1/admin/compaction")
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            if k == "deleted":
                v = len(v)
            print(f"{k:20} {v}")
    return 1 if out.get("errors") else 0
