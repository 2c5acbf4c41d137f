"""`begin` and `end` of a key lookup (GET /v1/messages) take milliseconds or ISO 8601, as `mqindex query` does: a
time with a zone, one without (UTC), a date alone (its midnight, UTC); anything else is a 400 saying what is
accepted. The parser's properties, then the lookups a client makes against a real server."""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.http.store_time import MAX_STORE_TIME, iso, parse_store_time
from tests.api.server import ServerProcess, wait_for

ZONES = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59).map(
    lambda minutes: timezone(timedelta(minutes=minutes)))
AFTER_EPOCH = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30))
RUNS = settings(max_examples=300, deadline=None, database=None)


def expected_ms(moment: datetime) -> int:
    """Milliseconds since the epoch of an aware datetime, computed another way than the parser does."""
    return calendar.timegm(moment.utctimetuple()) * 1000 + moment.microsecond // 1000


@RUNS
@given(naive=AFTER_EPOCH, zone=ZONES, sep=st.sampled_from(["T", " "]),
       spec=st.sampled_from(["auto", "seconds", "milliseconds", "microseconds"]))
def test_a_time_with_a_zone_is_that_instant(naive: datetime, zone: timezone, sep: str, spec: str) -> None:
    moment = naive.replace(tzinfo=zone)
    text = moment.isoformat(sep=sep, timespec=spec)
    truncated = moment if spec in ("auto", "microseconds") else moment.replace(
        microsecond=moment.microsecond // 1000 * 1000 if spec == "milliseconds" else 0)
    assert parse_store_time(text) == expected_ms(truncated)
    # the same instant written in UTC, with Z, is the same store time
    assert parse_store_time(truncated.astimezone(UTC).isoformat().replace("+00:00", "Z")) == expected_ms(truncated)


@RUNS
@given(naive=AFTER_EPOCH)
def test_a_time_without_a_zone_is_utc(naive: datetime) -> None:
    assert parse_store_time(naive.isoformat()) == parse_store_time(naive.replace(tzinfo=UTC).isoformat())


@RUNS
@given(day=st.dates(min_value=date(1970, 1, 1), max_value=date(9999, 12, 31)))
def test_a_date_is_its_midnight_utc(day: date) -> None:
    assert parse_store_time(day.isoformat()) == calendar.timegm(day.timetuple()) * 1000


@RUNS
@given(ms=st.integers(min_value=0, max_value=MAX_STORE_TIME))
def test_digits_are_milliseconds(ms: int) -> None:
    assert parse_store_time(str(ms)) == ms
    assert parse_store_time(f"{ms}.0") == ms  # an integer as JSON Schema allows it


@RUNS
@given(ms=st.integers(min_value=0, max_value=expected_ms(datetime(9999, 12, 31, tzinfo=UTC))))
def test_the_shown_time_reads_back(ms: int) -> None:
    assert parse_store_time(iso(ms)) == ms


@RUNS
@given(naive=st.datetimes(max_value=datetime(1969, 12, 31, 23, 59, 59)), zone=ZONES)
def test_before_1970_is_the_start(naive: datetime, zone: timezone) -> None:
    if naive.replace(tzinfo=zone) < datetime(1970, 1, 1, tzinfo=UTC):
        assert parse_store_time(naive.replace(tzinfo=zone).isoformat()) == 0


@RUNS
@given(text=st.text(max_size=40))
def test_any_text_is_a_store_time_or_a_sentence_saying_what_is_accepted(text: str) -> None:
    try:
        ms = parse_store_time(text)
    except ValueError as exc:
        assert "ISO 8601" in str(exc) or "at most" in str(exc), exc
    else:
        assert 0 <= ms <= MAX_STORE_TIME


# -- against a real server ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, int]]:
    """A server holding two messages under key k, stored in two different milliseconds: (url, first's store
    time, second's)."""
    server = ServerProcess(tmp_path_factory.mktemp("store-time") / "data").start()
    try:
        url = server.url
        assert httpx.post(f"{url}/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
        first = httpx.post(f"{url}/v1/topics/t/messages", json={"messages": [{"key": "k", "value": "first"}]},
                           timeout=60).json()["results"][0]["timestamp"]
        wait_for("the clock passes the first message's millisecond", lambda: time.time() * 1000 > first + 1)
        second = httpx.post(f"{url}/v1/topics/t/messages", json={"messages": [{"key": "k", "value": "second"}]},
                            timeout=60).json()["results"][0]["timestamp"]
        assert second > first
        yield url, first, second
    finally:
        server.stop()


def values(url: str, **params: str) -> list[str]:
    r = httpx.get(f"{url}/v1/messages", params={"topic": "t", "key": "k", **params}, timeout=60)
    assert r.status_code == 200, r.text
    return [m["value"] for m in r.json()["messages"]]


def at(ms: int, minutes: int = 0) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone(timedelta(minutes=minutes))).replace(
        microsecond=ms % 1000 * 1000)


def test_lookups_by_iso_time_window(produced: tuple[str, int, int]) -> None:
    url, first, second = produced
    assert values(url) == ["second", "first"]
    for minutes in (0, 120, -330):  # UTC, +02:00, -05:30: the same instants
        assert values(url, begin=at(second, minutes).isoformat()) == ["second"]
        assert values(url, end=at(first, minutes).isoformat()) == ["first"]
    assert values(url, begin=at(second).isoformat().replace("+00:00", "Z")) == ["second"]
    assert values(url, begin=at(second).replace(tzinfo=None).isoformat()) == ["second"]  # no zone: UTC
    assert values(url, begin=str(second)) == ["second"]  # milliseconds, as before
    assert values(url, begin=str(first), end=at(first).isoformat()) == ["first"]  # the two forms mixed
    today = at(first).date()
    assert values(url, begin=today.isoformat()) == ["second", "first"]
    assert values(url, end=(today - timedelta(days=1)).isoformat()) == []
    assert values(url, begin="1960-01-01T00:00:00Z") == ["second", "first"]  # before 1970: from the start


@pytest.mark.parametrize("params, field, error", [
    ({"begin": "yesterday"}, "begin", 'begin is not a time (got "yesterday"): give milliseconds since 1970-01-01 '
                                      "UTC, or an ISO 8601 time such as 2026-04-07T01:12:26Z (UTC when it has no "
                                      "zone) or a date such as 2026-04-07"),
    ({"end": "2026-13-01"}, "end", 'end is not a time (got "2026-13-01"): give milliseconds since 1970-01-01 UTC, '
                                   "or an ISO 8601 time such as 2026-04-07T01:12:26Z (UTC when it has no zone) or a "
                                   "date such as 2026-04-07"),
    ({"begin": "-5"}, "begin", 'begin is not a time (got "-5"): give milliseconds since 1970-01-01 UTC, or an ISO '
                               "8601 time such as 2026-04-07T01:12:26Z (UTC when it has no zone) or a date such as "
                               "2026-04-07"),
    ({"end": str(2**63)}, "end", f"end must be at most {2**63 - 1} milliseconds (got {2**63})"),
    ({"begin": "2026-04-08", "end": "2026-04-07T12:00:00+02:00"}, "begin",
     "begin (2026-04-08T00:00:00.000Z) is after end (2026-04-07T10:00:00.000Z)"),
])
def test_bad_times_are_a_400_saying_what_is_accepted(produced: tuple[str, int, int], params: dict[str, str],
                                                     field: str, error: str) -> None:
    url, _first, _second = produced
    r = httpx.get(f"{url}/v1/messages", params={"topic": "t", "key": "k", **params}, timeout=60)
    assert r.status_code == 400 and r.json() == {"error": error, "field": field}, r.text
