"""`mqindex acls`: the access control rules through a server (/v1/admin/acls), as kafka-acls manages them.
Tables by default, `--json` on every action.

    mqindex acls add --principal User:alice --topic team-a. --prefixed --operation read
    mqindex acls add --principal User:alice --group orders-app --operation read
    mqindex acls add --principal User:* --topic hr-events --operation all --deny
    mqindex acls list [--principal User:alice] [--topic T | --group G | --cluster | --transactional-id X]
    mqindex acls remove --principal User:alice --topic team-a. --prefixed
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from api.cli.client import _common, _request, _table

COLUMNS = ["principal", "resource_type", "pattern_type", "resource_name", "operation", "permission", "host"]


def _resource(p: argparse.ArgumentParser, required: bool) -> None:
    which = p.add_mutually_exclusive_group(required=required)
    which.add_argument("--topic", help="a topic name (or prefix, with --prefixed; * for every topic)")
    which.add_argument("--group", help="a consumer group id (or prefix, with --prefixed)")
    which.add_argument("--transactional-id", dest="transactional_id", help="a transactional id (or prefix)")
    which.add_argument("--cluster", action="store_true", help="the cluster (create topics, ACLs, admin routes)")
    p.add_argument("--prefixed", action="store_true", help="the name is a prefix (default: literal)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = sub.add_parser("add", help="add a rule")
    add.add_argument("--principal", required=True, help="User:NAME (a user or token-<fingerprint>), or User:*")
    _resource(add, required=True)
    add.add_argument("--operation", action="append", required=True,
                     help="read, write, create, delete, alter, describe, describe_configs, alter_configs, all "
                          "(repeatable)")
    add.add_argument("--deny", action="store_true", help="a DENY rule (deny beats allow) (default: ALLOW)")
    add.add_argument("--host", default="*", help="the client address the rule is for")
    listing = sub.add_parser("list", help="list the rules (all, or those matching the options)")
    remove = sub.add_parser("remove", help="remove the rules matching the options")
    for q in (listing, remove):
        q.add_argument("--principal", help="only this principal's rules")
        q.add_argument("--operation", help="only rules for this operation")
        _resource(q, required=False)
    for q in (add, listing, remove):
        _common(q)


def _named(args: argparse.Namespace) -> tuple[str | None, str | None]:
    if args.topic is not None:
        return "topic", args.topic
    if args.group is not None:
        return "group", args.group
    if args.transactional_id is not None:
        return "transactional_id", args.transactional_id
    if args.cluster:
        return "cluster", "kafka-cluster"
    return None, None


def _params(args: argparse.Namespace) -> dict[str, Any]:
    rtype, name = _named(args)
    params = {"principal": args.principal, "resource_type": rtype, "resource_name": name,
              "operation": args.operation, "pattern_type": ("prefixed" if args.prefixed else "literal") if name
              else None}
    return {k: v for k, v in params.items() if v is not None}


def run(args: argparse.Namespace) -> int:
    if args.action == "add":
        rtype, name = _named(args)
        rules = [dict(principal=args.principal, resource_type=rtype, resource_name=name, operation=op,
                      permission="deny" if args.deny else "allow", host=args.host,
                      pattern_type="prefixed" if args.prefixed else "literal") for op in args.operation]
        body = _request(args, "POST", "/v1/admin/acls", send={"rules": rules})
        rows = body["rules"]
        if body.get("warning"):
            print(f"mqindex acls: warning: {body['warning']}", file=sys.stderr)
    elif args.action == "list":
        body = _request(args, "GET", "/v1/admin/acls", params=_params(args))
        rows = body["rules"]
    else:
        body = _request(args, "DELETE", "/v1/admin/acls", params=_params(args))
        rows = body["removed"]
    if args.json:
        print(json.dumps(body, indent=2))
    elif rows:
        print(_table(rows, COLUMNS))
    else:
        print("no rules" if args.action == "list" else "nothing removed")
    return 0
