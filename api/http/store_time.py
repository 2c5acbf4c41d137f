"""A store time as a client writes it in a query: the query parameter's type and the ISO form of a time. The forms
accepted (milliseconds since the epoch, ISO 8601, a date) and how they are read are api/store_time_text.py's,
which the CLI shares."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from pydantic import BeforeValidator, WithJsonSchema

from api.store_time_text import ACCEPTED, EPOCH, MAX_STORE_TIME, parse_store_time

__all__ = ["ACCEPTED", "EPOCH", "MAX_STORE_TIME", "StoreTime", "iso", "parse_store_time"]

def _store_time(value: object) -> object:
    """A query's text parsed (an integer given in Python passes through for the range check)."""
    if isinstance(value, str):
        return parse_store_time(value)
    if type(value) is int and 0 <= value <= MAX_STORE_TIME:
        return value
    raise ValueError(f"is not a time: give {ACCEPTED}")


#: a query parameter holding a store time (module doc), documented in OpenAPI as either form
StoreTime = Annotated[int, BeforeValidator(_store_time), WithJsonSchema({"anyOf": [
    {"type": "integer", "minimum": 0, "maximum": MAX_STORE_TIME, "description": "milliseconds since the epoch"},
    {"type": "string", "format": "date-time", "description": "ISO 8601; UTC when it has no zone"},
    {"type": "string", "format": "date", "description": "a date: its midnight, UTC"}]})]


def iso(ms: int) -> str:
    """A store time as ISO 8601 in UTC with milliseconds: 2026-04-07T01:12:26.370Z (the milliseconds when it is
    past what a date holds)."""
    try:
        return (EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except OverflowError:
        return f"{ms} ms"
