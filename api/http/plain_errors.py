"""A validation error of a request (pydantic's, as FastAPI reports it) in the words a client is told: one plain
sentence that names the field once and says what it must be, never a regular expression or a validator's name.

    name "has space" is not a valid topic name: topic names are 1-249 characters of letters, digits, '.', '_'
    and '-'
    partitions must be at least 1 (got 0)
    configs.cleanup.policy is not a supported config: the supported configs are retention.ms and retention.bytes
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from api.http.models import CONFIG_NAMES, CURSOR_PATTERN, MSG_ID_PATTERN, TOPIC_PATTERN, MessageIn

#: what a value refused by a pattern is not, and what it must be
PATTERNS = {
    TOPIC_PATTERN: ("is not a valid topic name: topic names are 1-249 characters of letters, digits, '.', '_' and '-' "
                    "(not '.' or '..')"),
    MSG_ID_PATTERN: "is not a message id: ids are 32 hex digits, as produce answers them",
    CURSOR_PATTERN: "is not a cursor: pass the next_cursor of the previous page",
}
WHOLE_BODY = "body"
BODY_OBJECT = "must be a JSON object, sent with content-type application/json"
_SOURCES = ("body", "query", "path", "header")


def field_of(loc: Sequence[Any]) -> str | None:
    """The dotted name of the field at `loc` (messages.0.value), without where it came from (body, query...)."""
    return ".".join(str(p) for p in loc if p not in _SOURCES) or None


def shown(value: Any, raw: bool = False) -> str:
    """A client's value as it could have written it (`raw`: text of a URL, shown as is), cut to a readable
    length."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    text = value if raw and isinstance(value, str) else json.dumps(value)
    if len(text) <= 60:
        return text
    return text[:56] + '..."' if text.startswith('"') and not raw else text[:57] + "..."


def _sentence_start(text: str) -> str:
    """`text` to go on after a colon: its first letter lower-cased when it starts an ordinary word ("Expecting
    value"), kept when the word is written in capitals ("EOF while parsing a value", "JSON ...")."""
    if text[:1].isupper() and not text[1:2].isupper():
        return text[:1].lower() + text[1:]
    return text


def _joined(names: Sequence[str]) -> str:
    return " and ".join(names) if len(names) <= 2 else ", ".join(names[:-1]) + " and " + names[-1]


def _number(n: Any) -> str:
    return str(int(n)) if isinstance(n, float) and n.is_integer() else str(n)


def _bound(ctx: Mapping[str, Any]) -> str:
    if "ge" in ctx:
        return f"at least {_number(ctx['ge'])}"
    if "gt" in ctx:
        return f"more than {_number(ctx['gt'])}"
    if "le" in ctx:
        return f"at most {_number(ctx['le'])}"
    return f"less than {_number(ctx['lt'])}"


def _too(kind: str, ctx: Mapping[str, Any], value: Any) -> str:
    short = kind.endswith("too_short")
    limit = ctx.get("min_length" if short else "max_length")
    if isinstance(value, str):
        if short and limit == 1:
            return "must not be empty"
        return f"must be {'at least' if short else 'at most'} {limit} characters long"
    count = f" (got {len(value)})" if isinstance(value, list | dict) else ""
    return f"must hold {'at least' if short else 'at most'} {limit} item{'s' if limit != 1 else ''}{count}"


def _predicate(kind: str, ctx: Mapping[str, Any], value: Any, msg: str, raw: bool) -> str:
    """What is wrong with the field, as the rest of a sentence that starts with its name."""
    got = f" (got {shown(value, raw)})"
    if kind == "missing":
        return "is required"
    if kind == "string_pattern_mismatch":
        return PATTERNS.get(ctx.get("pattern", ""), "is not in the expected form")
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        return f"must be {_bound(ctx)}{got}"
    if kind.startswith("int_"):
        return f"must be an integer{got}"
    if kind.startswith("float_"):
        return f"must be a number{got}"
    if kind.startswith("bool_"):
        return f"must be true or false{got}"
    if kind.startswith("string_too") or kind in ("too_short", "too_long"):
        return _too(kind, ctx, value)
    if kind.startswith("string_"):
        return f"must be a string{got}"
    if kind in ("dict_type", "model_type", "model_attributes_type", "mapping_type"):
        return f"must be a JSON object{got}"
    if kind in ("list_type", "tuple_type", "iterable_type"):
        return f"must be a JSON array{got}"
    if kind in ("literal_error", "enum"):
        return f"must be {ctx.get('expected', 'one of the documented values')}{got}"
    if kind == "value_error":
        return str(ctx.get("error", msg.removeprefix("Value error, ")))
    return f"is not valid: {_sentence_start(msg)}"


def _json_reason(error: Mapping[str, Any], doc: Any = None) -> str:
    """Why a body is not valid JSON, from the json module's parser (FastAPI's body parsing, the produce route's:
    its reason, the error's position in the loc and the text parsed, `doc`) as "<reason> at line L column C", or
    from pydantic's ("Invalid JSON: <reason> at line L column C")."""
    ctx = error.get("ctx") or {}
    reason = str(ctx.get("error") or error.get("msg", "")).removeprefix("Invalid JSON: ")
    position = [p for p in error.get("loc", ()) if isinstance(p, int)]
    where = ""
    if position and "JSON decode error" in error.get("msg", ""):
        pos = position[0]
        if isinstance(doc, str) and 0 <= pos <= len(doc):  # counted as the json module counts them
            where = f" at line {doc.count(chr(10), 0, pos) + 1} column {pos - doc.rfind(chr(10), 0, pos)}"
        else:
            where = f" at character {pos}"
    return f"{_sentence_start(reason)}{where}"


def plain(error: Mapping[str, Any], doc: Any = None) -> tuple[str, str]:
    """(sentence, field) for one validation error; the field is "body" for an error of the whole body. `doc` is
    the text of a body the json module could not parse (where its error is told by line and column)."""
    kind = str(error.get("type", ""))
    loc = list(error.get("loc", ()))
    ctx = error.get("ctx") or {}
    value = error.get("input")
    msg = str(error.get("msg", "bad request"))
    if kind == "json_invalid":
        return f"body is not valid JSON: {_json_reason(error, doc)}", WHOLE_BODY
    if loc and loc[-1] == "[key]":  # a key of an object (a header's name): named by the object, not itself
        owner = field_of(loc[:-2]) or WHOLE_BODY
        return f"{owner} has a name that {_predicate(kind, ctx, value, msg, False)}", owner
    field = field_of(loc)
    if field is None:  # the body as a whole
        if kind == "missing":
            return f"body is required: it {BODY_OBJECT}", WHOLE_BODY
        if kind in ("dict_type", "model_type", "model_attributes_type"):
            return f"body {BODY_OBJECT}", WHOLE_BODY
        return f"body is not valid: {_sentence_start(msg)}", WHOLE_BODY
    if kind == "extra_forbidden":
        parent = field_of(loc[:-1]) or ""
        if parent.endswith("configs"):
            return (f"{field} is not a supported config: the supported configs are {_joined(CONFIG_NAMES)}",
                    field)
        return f"{field} is not a field of {parent or 'the body'}", field
    raw = bool(loc) and loc[0] in ("query", "path")  # text of the URL, not a JSON value
    if kind == "string_pattern_mismatch" and isinstance(value, str):
        return f"{field} {shown(value)} {_predicate(kind, ctx, value, msg, raw)}", field
    return f"{field} {_predicate(kind, ctx, value, msg, raw)}", field


#: the produce body's shape, as a client sending another one is told it
PRODUCE_SHAPE = '{"messages": [{"key": ..., "value": ...}, ...]}'
MESSAGE_FIELDS = tuple(MessageIn.model_fields)


def _got(value: Any) -> str:
    if isinstance(value, dict):
        return f"an object of {_joined([json.dumps(k) for k in value])}" if value else "an empty object"
    return shown(value)


def _unknown(name: str, known: Sequence[str]) -> str:
    """An unknown field's name, with the known one it most likely misspells."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6) or \
        difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.6)
    return f"{json.dumps(name)}" + (f" (did you mean {json.dumps(close[0])}?)" if close else "")


def produce_error(errors: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(sentence, field) for a produce body pydantic refused (`ProduceIn`'s errors; not a JSON error). The
    error told is the one a client most likely has to fix first: a body not of the produce shape (a bare
    message, an array), then a field a message does not have (a misspelled "vaule" is why its `value` is
    missing), then the first error in the body's order."""
    for e in errors:
        loc, kind = tuple(e.get("loc", ())), str(e.get("type", ""))
        if loc == () or (loc == ("messages",) and kind == "missing"):  # the body itself, or no messages array
            return f"body must be {PRODUCE_SHAPE} (got {_got(e.get('input'))})", WHOLE_BODY
    for e in errors:
        loc, kind = tuple(e.get("loc", ())), str(e.get("type", ""))
        if kind == "extra_forbidden" and len(loc) == 1:
            return (f"body has an unknown field {_unknown(str(loc[0]), ['messages'])}: body must be "
                    f"{PRODUCE_SHAPE}", str(loc[0]))
    for e in errors:
        loc, kind = tuple(e.get("loc", ())), str(e.get("type", ""))
        if kind == "extra_forbidden" and len(loc) == 3 and loc[0] == "messages":
            return (f"messages.{loc[1]} has an unknown field {_unknown(str(loc[2]), MESSAGE_FIELDS)}: a message's "
                    f"fields are {_joined(MESSAGE_FIELDS)}", f"messages.{loc[1]}.{loc[2]}")
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    if first.get("type") == "missing" and len(loc) == 3 and loc[0] == "messages" and loc[2] == "value":
        return f"messages.{loc[1]}.value is required (null for a message without a value, a tombstone)", \
            f"messages.{loc[1]}.value"
    return plain(first)
