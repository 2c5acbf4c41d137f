"""`mqindex produce | consume | query | get | nodes | reassign | rebalance`: talk to a server over HTTP.

Readable tables by default, `--json` for scripts; an error prints one line and exits non-zero. Times in
tables are ISO 8601 with their zone. Requests go through the standard library's HTTP client, imported at the
first request: the command starts in a tenth of a second.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from api.cli.main import UsageError
from api.store_time_text import parse_store_time

DEFAULT_URL = "http://127.0.0.1:8080"


class ClientError(RuntimeError):
    pass


def _url_problem(value: str) -> str | None:
    """What is wrong with a server URL, or None: urllib's own words for a URL without a scheme ("unknown url type:
    localhost") say nothing of what to give."""
    if value.lower().startswith(("http://", "https://")):
        return None
    if "://" in value:
        return "the URL must start with http:// or https://"
    return f"give the scheme, e.g. http://{value} (the URL must start with http:// or https://)"


def _url_arg(value: str) -> str:
    """--url as argparse reads it: a URL without http:// or https:// is a usage error."""
    problem = _url_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(f"{value}: {problem}")
    return value


def server_url(args: argparse.Namespace) -> str:
    """The server's URL: --url, else MQINDEX_URL (a usage error naming it when it has no http(s) scheme), else
    the default."""
    if args.url is not None:
        return str(args.url)
    env = os.environ.get("MQINDEX_URL")
    if not env:
        return DEFAULT_URL
    problem = _url_problem(env)
    if problem:
        raise UsageError(f"MQINDEX_URL={env} (from the environment; --url overrides it): {problem}")
    return env


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number, at least `low` (a usage error naming the flag otherwise; the server would
    refuse it, or, for a count, nothing would be asked and the answer would look like an empty result)."""

    def whole_number(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if n < low:
            raise argparse.ArgumentTypeError(f"must be at least {low} (got {n})")
        return n

    return whole_number


def store_time(text: str) -> int:
    """An argparse type: a store time as ms since the epoch, given as such or as ISO 8601 (UTC when it has no
    zone; a date alone is its midnight), read by the server's own parser; a usage error naming the flag otherwise."""
    try:
        return parse_store_time(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time (ISO 8601 like 2026-11-28T10:00:00, UTC without "
                                         f"a zone, or milliseconds since the epoch)") from None


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", type=_url_arg,
                   help=f"server URL, http:// or https:// (default: MQINDEX_URL, else {DEFAULT_URL})")
    p.add_argument("--token", default=os.environ.get("MQINDEX_TOKEN"),
                   help="bearer token (default: MQINDEX_TOKEN, else none)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_produce_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("topic", help="topic to write to")
    p.add_argument("value", help="the message value, or - to read it from standard input as bytes "
                                 "(sent as base64 when it is not UTF-8 text)")
    p.add_argument("--key", help="message key (default: none)")
    p.add_argument("--key-base64", action="store_true",
                   help="--key is the base64 of the key's bytes (a key that is not UTF-8, shown as base64:... by "
                        "query and consume; given with or without that prefix)")
    p.add_argument("--header", action="append", default=[], metavar="K=V",
                   help="a header (repeatable, a name too; default: none)")
    p.add_argument("--partition", type=at_least(0),
                   help="partition to write to (default: the key's, else the server picks)")


def add_consume_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("topic", help="topic to read")
    p.add_argument("-p", "--partition", type=at_least(0), required=True, help="partition to read")
    p.add_argument("-o", "--offset", type=at_least(0), default=0, help="first offset to read (default: %(default)s)")
    p.add_argument("-n", "--count", type=at_least(1), default=20, help="messages to read (default: %(default)s)")


def add_query_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("topic", help="topic to search")
    p.add_argument("key", help="the key: a record key, a word of header KEYS or header UNIQ_KEY")
    p.add_argument("--base64", action="store_true",
                   help="KEY is the base64 of the key's bytes (a key that is not UTF-8, shown as base64:... by query "
                        "and consume; given with or without that prefix)")
    p.add_argument("--begin", type=store_time,
                   help="store time from (when the broker stored the message, not the producer's timestamp shown "
                        "as TIME): ms since epoch or ISO 8601 (default: the oldest)")
    p.add_argument("--end", type=store_time, help="store time to (as --begin): ms since epoch or ISO 8601 "
                                                   "(default: now)")
    p.add_argument("--max", type=at_least(1), default=64,
                   help="messages to show in all, pages are followed (default: %(default)s)")


def add_get_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("msg_id", help="message id, as produce, query and consume print it")


def iso_time(ms: int | None) -> str:
    """A store time (ms since the epoch) as ISO 8601 with its zone: 2026-04-07T01:12:26.370+00:00."""
    if ms is None:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return str(ms)


def _hint(status: int, error: object) -> str:
    """What to do about a refusal, after the server's words (which say what was lacking: not said twice)."""
    if status == 401:
        return " (give a token with --token or MQINDEX_TOKEN)"
    if status == 403:
        if "superuser" in str(error):  # a cluster refusal says its two fixes
            return " (or give a token allowed to do this with --token or MQINDEX_TOKEN)"
        if "scope" in str(error):  # "token lacks the 'admin' scope"
            return " (give a token that has it with --token or MQINDEX_TOKEN)"
        return " (give a token allowed to do this with --token or MQINDEX_TOKEN)"  # an ACL's refusal
    return ""


def _send(method: str, url: str, headers: dict[str, str], params: dict[str, Any] | None,
          body: Any) -> tuple[int, Any]:
    """(status, JSON body) of one request. The standard library's client: a third of httpx's start-up time."""
    from urllib import error, request
    from urllib.parse import urlencode

    if params:
        url += "?" + urlencode(params)
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers = {**headers, "Content-Type": "application/json"}
    req = request.Request(url, data=data, method=method, headers={"Accept": "application/json", **headers})
    try:
        with request.urlopen(req, timeout=60) as resp:  # noqa: S310 - the URL is the user's --url
            status, raw = resp.status, resp.read()
    except error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, {"error": raw.decode("utf-8", "replace").strip()[:200]}


def _request(args: argparse.Namespace, method: str, path: str, params: dict[str, Any] | None = None,
             send: Any = None) -> Any:
    """One request (`send`: its JSON body); a 421 (another node leads the partition) is followed to the leader
    it names."""
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    base = server_url(args).rstrip("/")
    for _ in range(3):
        try:
            status, body = _send(method, base + path, headers, params, send)
        except (OSError, ValueError) as exc:  # URLError is an OSError; a malformed URL a ValueError
            reason = getattr(exc, "reason", exc)
            raise ClientError(f"cannot reach {base}: {reason}; is `mqindex serve` running there? "
                              f"(give its address with --url or MQINDEX_URL)") from None
        if status == 421 and isinstance(body, dict) and body.get("leader_url"):
            base = str(body["leader_url"]).rstrip("/")
            continue
        break
    if status >= 400:
        error = body.get("error", body) if isinstance(body, dict) else body
        raise ClientError(f"{status}: {error}{_hint(status, error)}")
    return body


def _table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    # a missing value (null: a message without a key, a group without a commit) shows as "-", as in every table
    cells = [["-" if r.get(c) is None else str(r[c]) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _show_messages(args: argparse.Namespace, messages: list[dict[str, Any]]) -> None:
    if args.json:
        print(json.dumps(messages, indent=2))
        return
    # a key that is not UTF-8 comes as base64 (key_encoding): shown as such, never as if it were the key's text
    rows = [{**m, "time": iso_time(m["timestamp"]), "value": None if m["value"] is None else m["value"][:60],
             "key": f"base64:{m['key']}" if m.get("key_encoding") == "base64" else m["key"]} for m in messages]
    print(_table(rows, ["msg_id", "partition", "offset", "key", "time", "value"]))


def message_headers(m: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's headers in order, each {"name", "value", "encoding"}: its `header_list`, or its `headers` object
    when it has none (the object holds them exactly then: docs/MESSAGES.md)."""
    if m.get("header_list") is not None:
        return list(m["header_list"])
    return [{"name": k, "value": v, "encoding": "utf-8"} for k, v in (m.get("headers") or {}).items()]


def header_lines(m: dict[str, Any]) -> list[str]:
    """`name: value` a header, on one line each: a value that is not UTF-8 as `base64:...` (as a key is shown), a
    null value as `(null)`."""
    from api.cli.one_line import visible

    def shown(h: dict[str, Any]) -> str:
        if h["value"] is None:
            return "(null)"
        return f"base64:{h['value']}" if h.get("encoding") == "base64" else visible(h["value"])

    return [f"{visible(h['name'])}: {shown(h)}" for h in message_headers(m)]


def _value(args: argparse.Namespace) -> bytes:
    if args.value == "-":
        return sys.stdin.buffer.read()
    return os.fsencode(args.value)  # an argument's undecodable bytes come back as they were given


def run_produce(args: argparse.Namespace) -> int:
    raw = _value(args)
    pairs = []
    for h in args.header:
        k, sep, v = h.partition("=")
        if not sep or not k:
            raise ClientError(f"--header {h!r} must be KEY=VALUE")
        pairs.append((k, v))
    msg: dict[str, Any] = {"key": args.key}
    if args.key_base64:
        if args.key is None:
            raise UsageError("--key-base64: give the key's base64 with --key")
        msg["key"] = _base64_key("--key", args.key, empty=True)
        msg["key_encoding"] = "base64"
    if len({k for k, _ in pairs}) < len(pairs):  # a name given twice: each one sent, in order
        msg["header_list"] = [{"name": k, "value": v} for k, v in pairs]
    else:
        msg["headers"] = dict(pairs)
    try:
        msg["value"] = raw.decode("utf-8")
    except UnicodeDecodeError:  # binary: the body's base64 form
        msg["value"], msg["encoding"] = base64.b64encode(raw).decode("ascii"), "base64"
    if args.partition is not None:
        msg["partition"] = args.partition
    body = _request(args, "POST", f"/v1/topics/{args.topic}/messages", send={"messages": [msg]})
    if args.json:
        print(json.dumps(body["results"], indent=2))
    else:
        rows = [{**r, "time": iso_time(r["timestamp"])} for r in body["results"]]
        print(_table(rows, ["msg_id", "partition", "offset", "time"]))
    return 0


def _partition_offsets(args: argparse.Namespace) -> tuple[int, int] | None:
    """(start, end) offsets of the partition read, or None when the server does not say."""
    try:
        parts = _request(args, "GET", "/v1/console/partitions", params={"topic": args.topic})["partitions"]
    except ClientError:
        return None
    for p in parts:
        if p.get("partition") == args.partition:
            return int(p["start_offset"]), int(p["end_offset"])
    return None


def run_consume(args: argparse.Namespace) -> int:
    out: list[dict[str, Any]] = []
    offset = args.offset
    while len(out) < args.count:
        body = _request(args, "GET", f"/v1/topics/{args.topic}/partitions/{args.partition}/messages",
                        params={"offset": offset, "max": min(1000, args.count - len(out))})
        offset = body["next_offset"]
        if not body["messages"]:
            break
        out += body["messages"]
    bounds = _partition_offsets(args) if not out or args.json else None
    if args.json:
        doc: dict[str, Any] = {"messages": out, "next_offset": offset}
        if bounds is not None:
            doc["start_offset"], doc["end_offset"] = bounds
        print(json.dumps(doc, indent=2))
        return 0
    if out:
        _show_messages(args, out)
        return 0
    where, o = f"{args.topic}-{args.partition}", args.offset
    if bounds is None:
        print(f"no messages in {where} from offset {o}")
        return 0
    start, end = bounds
    if o < start:
        why = f"offset {o} is below its start offset {start} (older messages were removed)"
    elif o >= end:
        why = f"offset {o} is at or past its end offset {end} (the next message produced gets offset {end})"
    else:
        why = "none could be read there"
    holds = f"it holds offsets {start} to {end - 1}" if end > start else "it holds no messages"
    print(f"no messages in {where} from offset {o}: {why}; {holds}")
    return 0


def _base64_key(what: str, key: str, empty: bool) -> str:
    """A key given as base64, without the `base64:` prefix query and consume show it with; a UsageError naming
    `what` when it is not base64 (or names an empty key, unless `empty` is allowed: a produced key may be empty,
    a looked-up one not)."""
    key = key.removeprefix("base64:")
    try:
        if not base64.b64decode(key.encode("ascii"), validate=True) and not empty:
            raise ValueError("an empty key")
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise UsageError(f"{what} {key!r} is not the base64 of a key (standard alphabet, with its = padding)") \
            from None
    return key


def run_query(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"topic": args.topic, "key": args.key}
    if args.base64:
        args.key = _base64_key("--base64: KEY", args.key, empty=False)
        params["key_encoding"] = "base64"
    begin, end = args.begin, args.end
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
    if not out and not args.json:
        window = "" if begin is None and end is None else f" stored from {iso_time(begin) if begin else 'the start'}" \
                                                          f" to {iso_time(end) if end is not None else 'now'}"
        shown = f"base64:{args.key}" if args.base64 else args.key
        print(f"no messages with key {shown!r} in topic {args.topic}{window}")
        return 0
    _show_messages(args, out)
    if cursor and not args.json:  # more messages have the key: say so, past the table (stderr: not part of it)
        print(f"(the newest {len(out)} shown; more have this key: --max N shows more)", file=sys.stderr)
    return 0


def run_get(args: argparse.Namespace) -> int:
    m = _request(args, "GET", f"/v1/messages/{args.msg_id}")
    if args.json:
        print(json.dumps(m, indent=2))
    else:
        _show_messages(args, [m])
        print("headers:" + ("".join(f"\n  {line}" for line in header_lines(m)) or " (none)"))
        print(f"value ({m['encoding']}):", m["value"])
    return 0


def add_nodes_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)


def add_reassign_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("topic", help="topic of the partition")
    p.add_argument("partition", type=at_least(0), help="the partition to move")
    p.add_argument("--to", type=at_least(0), required=True, help="the node that leads the partition from now on")


def add_rebalance_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--execute", action="store_true", help="run the plan (default: print it only)")
    p.add_argument("--by", choices=("load", "count"), default="load",
                   help="even out the nodes' measured load (default, the self-balancer's plan) or their partition "
                        "counts")


def run_nodes(args: argparse.Namespace) -> int:
    nodes = _request(args, "GET", "/v1/cluster/nodes")["nodes"]
    if args.json:
        print(json.dumps(nodes, indent=2))
    else:
        print(_table([{**n, "kafka": n.get("kafka") or "-", "lease_expires": iso_time(n.get("lease_expires_ms")),
                       "partitions": " ".join(n["partitions"]) or "-"} for n in nodes],
                     ["node_id", "epoch", "state", "http", "kafka", "lease_expires", "partitions"]))
    return 0


def run_reassign(args: argparse.Namespace) -> int:
    body = _request(args, "POST", "/v1/admin/reassignments",
                    send={"topic": args.topic, "partition": args.partition, "to": args.to})
    if args.json:
        print(json.dumps(body, indent=2))
    elif body.get("unchanged"):
        print(f"{body['topic']}-{body['partition']}: node {body['to']} leads it already; nothing moved "
              f"(leader epoch {body['leader_epoch']})")
    else:
        print(f"{body['topic']}-{body['partition']}: node {body['from']} -> node {body['to']} "
              f"(leader epoch {body['leader_epoch']}) in {body['seconds']:.3f}s")
    return 0


def run_rebalance(args: argparse.Namespace) -> int:
    plan = _request(args, "POST", "/v1/admin/rebalance", send={"execute": False, "by": args.by})["plan"]
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
                             send={"topic": m["topic"], "partition": m["partition"], "to": m["to"]}))
        print(f"[{i}/{len(plan)}] {m['topic']}-{m['partition']} -> node {m['to']} "
              f"in {done[-1]['seconds']:.3f}s", file=sys.stderr)
    if args.json:
        print(json.dumps(done, indent=2))
    return 0
