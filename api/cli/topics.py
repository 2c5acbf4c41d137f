"""`mqindex topics`: create, list, describe and alter topics (their configs, their partition count)
through a server.
Tables by default, `--json` on every action.

    mqindex topics create orders --partitions 3 --retention-ms 172800000
    mqindex topics list
    mqindex topics alter orders --retention-ms 604800000 --retention-bytes -1
    mqindex topics alter orders --max-message-bytes 3000000      (Kafka producers' record batches up to 3 MB)
    mqindex topics alter orders --delete-config retention.ms      (back to the server default)
    mqindex topics alter orders --partitions 6                   (only grows; keys hash over the new count)
    mqindex topics describe orders                               (configs and partitions: leader, offsets, bytes)
    mqindex topics delete orders                                 (its partitions, data, configs, group offsets)
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from api.cli.client import _common, _request, _table, at_least


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = sub.add_parser("create", help="create a topic")
    create.add_argument("name", help="topic name: 1-249 letters, digits, '.', '_' and '-'")
    create.add_argument("--partitions", type=at_least(1), default=None,
                        help="number of partitions (default: the server's default_partitions, 1 unless set)")
    alter = sub.add_parser("alter", help="set or remove configs of a topic, or add partitions to it")
    alter.add_argument("name", help="the topic")
    alter.add_argument("--partitions", type=at_least(1), default=None,
                       help="grow the topic to this many partitions (more than it has; default: unchanged)")
    alter.add_argument("--delete-config", action="append", default=[], metavar="NAME",
                       help="remove a config (the server default applies again); repeatable (default: none)")
    describe = sub.add_parser("describe", help="show a topic, its configs and its partitions")
    describe.add_argument("name", help="the topic")
    listing = sub.add_parser("list", help="list the topics")
    delete = sub.add_parser("delete", help="delete a topic: its partitions, data, configs and group offsets")
    delete.add_argument("name", help="the topic")
    for q in (create, alter):
        q.add_argument("--retention-ms", type=int,
                       help="keep records this long, ms (-1 = forever; default: the server's default)")
        q.add_argument("--retention-bytes", type=int,
                       help="keep at most this many bytes per partition (-1 = no limit; default: the server's default)")
        q.add_argument("--max-message-bytes", type=int,
                       help="the largest record batch a Kafka producer may send, bytes (Kafka's max.message.bytes; "
                            "default: the server's message_max_bytes)")
    for q in (create, alter, describe, listing, delete):
        _common(q)


def _configs(args: argparse.Namespace) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    if args.retention_ms is not None:
        out["retention.ms"] = args.retention_ms
    if args.retention_bytes is not None:
        out["retention.bytes"] = args.retention_bytes
    if args.max_message_bytes is not None:
        out["max.message.bytes"] = args.max_message_bytes
    return out


def _show(args: argparse.Namespace, body: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(body, indent=2))
        return
    print(f"{body['name']}  partitions={body['partitions']}  topic_id={body['topic_id']}")
    for name, c in sorted(body.get("configs", {}).items()):
        print(f"  {name}={c['value']}  ({c['source']})")
    if body.get("partition_details"):
        print()
        print(_table(body["partition_details"], ["partition", "leader", "leader_epoch", "stream_epoch",
                                                 "start_offset", "end_offset", "bytes", "objects"]))


def _list(args: argparse.Namespace) -> int:
    topics = _request(args, "GET", "/v1/topics")
    if args.json:
        print(json.dumps(topics, indent=2))
    elif topics:
        print(_table(sorted(topics, key=lambda t: t["name"]), ["name", "partitions", "topic_id"]))
    else:
        print("no topics")
    return 0


def _delete(args: argparse.Namespace) -> int:
    body = _request(args, "DELETE", f"/v1/topics/{args.name}")
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        print(_table([body], ["name", "partitions", "topic_id", "deleted"]))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        return _list(args)
    if args.action == "delete":
        return _delete(args)
    if args.action == "create":
        send = {"name": args.name, "configs": _configs(args)}
        if args.partitions is not None:
            send["partitions"] = args.partitions
        _request(args, "POST", "/v1/topics", send=send)
    elif args.action == "alter":
        change = _configs(args)
        for name in args.delete_config:
            change[name] = None
        if not change and args.partitions is None:
            raise ValueError("nothing to alter: give --partitions, --retention-ms, --retention-bytes, "
                             "--max-message-bytes or --delete-config")
        if args.partitions is not None:
            _request(args, "POST", f"/v1/topics/{args.name}/partitions", send={"partitions": args.partitions})
        if change:
            _request(args, "PATCH", f"/v1/topics/{args.name}/configs", send={"configs": change})
    body = _request(args, "GET", f"/v1/topics/{args.name}")
    if args.action == "describe":
        parts = _request(args, "GET", "/v1/console/partitions", params={"topic": args.name})["partitions"]
        body["partition_details"] = [{k: v for k, v in p.items() if k != "topic"} for p in parts]
    _show(args, body)
    return 0
