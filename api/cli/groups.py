"""`mqindex groups`: consumer groups through a server, the way kafka-consumer-groups shows and changes them.
Tables by default, `--json` on every action.

    mqindex groups list
    mqindex groups describe orders-app                 (members, and per partition committed/end offset and lag)
    mqindex groups delete orders-app                   (refused while the group has members)
    mqindex groups reset-offsets orders-app --to-earliest --topic orders --dry-run
    mqindex groups reset-offsets orders-app --shift-by -100 --topic orders:0,2
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from api.cli.client import _common, _request, _table, at_least, store_time


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="list the consumer groups: state, protocol, members, coordinator")
    describe = sub.add_parser("describe", help="a group's members and each partition's offsets and lag")
    describe.add_argument("group", help="the group id")
    delete = sub.add_parser("delete", help="delete a group and its committed offsets (it must have no members)")
    delete.add_argument("group", help="the group id")
    reset = sub.add_parser("reset-offsets", help="move a stopped group's committed offsets")
    reset.add_argument("group", help="the group id")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="to each partition's first offset")
    to.add_argument("--to-latest", action="store_true", help="to each partition's end (skip everything)")
    to.add_argument("--to-datetime", metavar="ISO", type=store_time, help="to the first message at or after this time "
                                                         "(ISO 8601, UTC without a zone, or ms)")
    to.add_argument("--to-offset", type=at_least(0), metavar="N", help="to offset N (clamped into the partition)")
    to.add_argument("--shift-by", type=int, metavar="N", help="move the committed offset by N (+/-)")
    reset.add_argument("--topic", action="append", default=[], metavar="T",
                       help="a topic (T) or some of its partitions (T:0,2); repeatable "
                            "(default: every partition the group has committed)")
    reset.add_argument("--dry-run", action="store_true", help="show the new offsets, store nothing")
    for q in (listing, describe, delete, reset):
        _common(q)


def _reset_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"topics": args.topic, "dry_run": args.dry_run}
    if args.to_earliest:
        body["to"] = "earliest"
    elif args.to_latest:
        body["to"] = "latest"
    elif args.to_datetime is not None:
        body |= {"to": "datetime", "datetime": args.to_datetime}
    elif args.to_offset is not None:
        body |= {"to": "offset", "offset": args.to_offset}
    else:
        body |= {"to": "shift", "shift_by": args.shift_by}
    return body


def _or_dash(value: Any) -> Any:
    """`-` for a figure there is none of (no committed offset: no lag), as kafka-consumer-groups prints it."""
    return "-" if value is None else value


def _dash(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: _or_dash(v) for k, v in r.items()} for r in rows]


def _describe(body: dict[str, Any]) -> None:
    print(f"group {body['group']}  state={body['state']}  protocol={body['protocol'] or '-'}  "
          f"members={body['members']}  coordinator={body['coordinator']}  lag={_or_dash(body['lag'])}  "
          f"lag_ms={_or_dash(body['lag_ms'])}")
    if body["offsets"]:
        print()
        print(_table(_dash(body["offsets"]), ["topic", "partition", "committed_offset", "end_offset", "lag",
                                              "lag_ms", "client_id", "client_host", "member_id"]))
    if body["member_details"]:
        print()
        rows = [dict(m, assignment=",".join(f"{a['topic']}:{a['partition']}" for a in m["assignment"]) or "-")
                for m in body["member_details"]]
        print(_table(rows, ["member_id", "client_id", "client_host", "assignment"]))


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        body = _request(args, "GET", "/v1/groups")
    elif args.action == "describe":
        body = _request(args, "GET", f"/v1/groups/{args.group}")
    elif args.action == "delete":
        body = _request(args, "DELETE", f"/v1/groups/{args.group}")
    else:
        body = _request(args, "POST", f"/v1/groups/{args.group}/offsets", send=_reset_body(args))
    if args.json:
        print(json.dumps(body, indent=2))
    elif args.action == "list":
        print(_table(body, ["group", "state", "protocol_type", "protocol", "members", "coordinator"])
              if body else "no groups")
    elif args.action == "describe":
        _describe(body)
    elif args.action == "delete":
        print(_table([body], ["group", "deleted", "offsets_deleted"]))
    else:
        print(_table(_dash(body["offsets"]), ["topic", "partition", "current_offset", "new_offset"]))
        print("dry run: nothing stored" if body["dry_run"] else "stored")
    return 0
