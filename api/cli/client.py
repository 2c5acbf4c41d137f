"""`mqindex produce | consume | query | get | nodes | reassign | rebalance`: talk to a server over HTTP.

Readable tables by default, `--json` for scripts; an error prints one line and exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

import httpx

DEFAULT_URL = os.environ.get("MQINDEX_URL", "http://127.0.0.1:8080")


class ClientError(RuntimeError):
    pass


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=DEFAULT_URL, help=f"server URL (default {DEFAULT_URL}, or MQINDEX_URL)")
    p.add_argument("--token", default=os.environ.get("MQINDEX_TOKEN"), help="bearer token (or MQINDEX_TOKEN)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_produce_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("topic")
    p.add_argument("value", help="the message value, or - to read it from standard input")
    p.add_argument("--key")
    p.add_argument("--header", action="append", default=[], metavar="K=V", help="a header (repeatable)")
    p.add_argument("--partition", type=int)


def add_consume_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("topic")
    p.add_argument("-p", "--partition", type=int, required=True)
    p.add_argument("-o", "--offset", type=int, default=0)
    p.add_argument("-n", "--count", type=int, default=20, help="messages to read (default 20)")


def add_query_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("topic")
    p.add_argument("key")
    p.add_argument("--begin", help="store time from: ms since epoch or ISO 8601")
    p.add_argument("--end", help="store time to: ms since epoch or ISO 8601")
    p.add_argument("--max", type=int, default=64, help="messages to show in all (pages are followed)")


def add_get_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("msg_id")


def _time(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    if value.isdigit():
        return int(value)
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise ClientError(f"--{name} {value!r} is neither milliseconds nor an ISO 8601 time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def _request(args: argparse.Namespace, method: str, path: str, **kw: Any) -> Any:
    """One request; a 421 (another node leads the partition) is followed to the leader it names."""
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    base = args.url.rstrip("/")
    for _ in range(3):
        try:
            resp = httpx.request(method, base + path, headers=headers, timeout=60, **kw)
        except httpx.HTTPError as exc:
            raise ClientError(f"cannot reach {base}: {exc}") from None
        try:
            body = resp.json()
        except ValueError:
            body = {"error": resp.text.strip()[:200]}
        if resp.status_code == 421 and body.get("leader_url"):
            base = str(body["leader_url"]).rstrip("/")
            continue
        break
    if resp.status_code >= 400:
        raise ClientError(f"{resp.status_code}: {body.get('error', body)}")
    return body


def _table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    cells = [[str(r.get(c, "")) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def _show_messages(args: argparse.Namespace, messages: list[dict[str, Any]]) -> None:
    if args.json:
        print(json.dumps(messages, indent=2))
        return
    rows = [{**m, "time": datetime.fromtimestamp(m["timestamp"] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
             "value": (m["value"] or "")[:60]} for m in messages]
    print(_table(rows, ["msg_id", "partition", "offset", "key", "time", "value"]))


def run_produce(args: argparse.Namespace) -> int:
    value = sys.stdin.read() if args.value == "-" else args.value
    headers = {}
    for h in args.header:
        k, sep, v = h.partition("=")
        if not sep or not k:
            raise ClientError(f"--header {h!r} must be KEY=VALUE")
        headers[k] = v
    msg: dict[str, Any] = {"key": args.key, "value": value, "headers": headers}
    if args.partition is not None:
        msg["partition"] = args.partition
    body = _request(args, "POST", f"/v1/topics/{args.topic}/messages", json={"messages": [msg]})
    if args.json:
        print(json.dumps(body["results"], indent=2))
    else:
        print(_table(body["results"], ["msg_id", "partition", "offset", "timestamp"]))
    return 0


def run_consume(args: argparse.Namespace) -> int:
    out: list[dict[str, Any]] = []
    offset = args.offset
    while len(out) < args.count:
        body = _request(args, "GET", f"/v1/topics/{args.topic}/partitions/{args.partition}/messages",
                        params={"offset": offset, "max": min(1000, args.count - len(out))})
        if not body["messages"]:
            break
        out += body["messages"]
        offset = body["next_offset"]
    _show_messages(args, out)
    return 0


def run_query(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"topic": args.topic, "key": args.key}
    begin, end = _time(args.begin, "begin"), _time(args.end, "end")
    if begin is not None:
        params["begin"] = begin
    if end is not None:
        params["end"] = end
    out: list[dict[str, Any]] = []
    cursor = None
    while len(out) < args.max:
        params["max"] = min(1000, args.max - len(out))
        if cursor:
            params["cursor"] = cursor
        body = _request(args, "GET", "/v1/messages", params=params)
        out += body["messages"]
        cursor = body["next_cursor"]
        if not cursor:
            break
    _show_messages(args, out)
    return 0


def run_get(args: argparse.Namespace) -> int:
    m = _request(args, "GET", f"/v1/messages/{args.msg_id}")
    if args.json:
        print(json.dumps(m, indent=2))
    else:
        _show_messages(args, [m])
        print("headers:", json.dumps(m["headers"]))
        print(f"value ({m['encoding']}):", m["value"])
    return 0


def add_nodes_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)


def add_reassign_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("topic")
    p.add_argument("partition", type=int)
    p.add_argument("--to", type=int, required=True, help="the node that leads the partition from now on")


def add_rebalance_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--execute", action="store_true", help="run the plan (default: print it only)")


def run_nodes(args: argparse.Namespace) -> int:
    nodes = _request(args, "GET", "/v1/cluster/nodes")["nodes"]
    if args.json:
        print(json.dumps(nodes, indent=2))
    else:
        print(_table([{**n, "partitions": " ".join(n["partitions"]) or "-"} for n in nodes],
                     ["node_id", "epoch", "state", "http", "partitions"]))
    return 0


def run_reassign(args: argparse.Namespace) -> int:
    body = _request(args, "POST", "/v1/admin/reassignments",
                    json={"topic": args.topic, "partition": args.partition, "to": args.to})
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        print(f"{body['topic']}-{body['partition']}: node {body['from']} -> node {body['to']} "
              f"(leader epoch {body['leader_epoch']}) in {body['seconds']:.3f}s")
    return 0


def run_rebalance(args: argparse.Namespace) -> int:
    plan = _request(args, "POST", "/v1/admin/rebalance", json={"execute": False})["plan"]
    if args.json and not args.execute:
        print(json.dumps(plan, indent=2))
        return 0
    print(f"plan: {len(plan)} move(s)", file=sys.stderr)
    if plan and not args.json:
        print(_table(plan, ["topic", "partition", "from", "to"]))
    if not args.execute or not plan:
        return 0
    done = []
    for i, m in enumerate(plan, 1):  # one move at a time, progress on stderr
        done.append(_request(args, "POST", "/v1/admin/reassignments",
                             json={"topic": m["topic"], "partition": m["partition"], "to": m["to"]}))
        print(f"[{i}/{len(plan)}] {m['topic']}-{m['partition']} -> node {m['to']} "
              f"in {done[-1]['seconds']:.3f}s", file=sys.stderr)
    if args.json:
        print(json.dumps(done, indent=2))
    return 0
