"""Topic bodies over HTTP follow Kafka's types, on a real `mqindex serve`: a config value may be a string of an
integer (Kafka's config values are strings on the wire; `"retention.ms": "1000"` was refused), a partition count
is a JSON integer only (`"partitions": "4"` was taken at creation while adding partitions refused it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from api.http.models import MAX_CONFIG_INT, MAX_MESSAGE_BYTES, TopicConfigsChange, TopicIn
from tests.api.server import ServerProcess

COUNT_IS_A_NUMBER = "counts are JSON numbers; only topic config values may be given as strings"
STRING_FORM = 'as a string, an integer is its decimal digits: "1000", "-1"'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(Path(tmp_path_factory.mktemp("config-strings")) / "node").start()
    try:
        yield s
    finally:
        s.stop()


def configs(server: ServerProcess, topic: str) -> dict[str, object]:
    r = httpx.get(f"{server.url}/v1/topics/{topic}", timeout=30)
    assert r.status_code == 200, r.text
    return {k: v["value"] for k, v in r.json()["configs"].items() if v["source"] == "topic"}


def test_config_values_may_be_strings_and_counts_may_not(server: ServerProcess) -> None:
    url = server.url
    r = httpx.post(f"{url}/v1/topics", timeout=30, json={"name": "strs", "partitions": 2, "configs": {
        "retention.ms": "1000", "retention.bytes": "-1", "max.message.bytes": "2000"}})
    assert r.status_code == 201, r.text
    assert configs(server, "strs") == {"retention.ms": 1000, "retention.bytes": -1, "max.message.bytes": 2000}
    r = httpx.patch(f"{url}/v1/topics/strs/configs", json={"configs": {"retention.ms": "-1",
                                                                       "max.message.bytes": 3000}}, timeout=30)
    assert r.status_code == 200, r.text
    assert configs(server, "strs") == {"retention.ms": -1, "retention.bytes": -1, "max.message.bytes": 3000}

    refused = [
        ("POST", "/v1/topics", {"name": "n1", "partitions": "4"}, "partitions",
         f'partitions must be an integer, not a string (got "4"): {COUNT_IS_A_NUMBER}'),
        ("POST", "/v1/topics", {"name": "n2", "partitions": True}, "partitions",
         "partitions must be an integer (got a boolean)"),
        ("POST", "/v1/topics/strs/partitions", {"partitions": "4"}, "partitions",
         f'partitions must be an integer, not a string (got "4"): {COUNT_IS_A_NUMBER}'),
        ("POST", "/v1/topics", {"name": "n3", "configs": {"retention.ms": "1 000"}}, "configs.retention.ms",
         f'configs.retention.ms must be -1 (unlimited) or an integer from 1 to {MAX_CONFIG_INT} (got "1 000"; '
         f'{STRING_FORM})'),
        ("POST", "/v1/topics", {"name": "n4", "configs": {"retention.ms": "0"}}, "configs.retention.ms",
         f'configs.retention.ms must be -1 (unlimited) or an integer from 1 to {MAX_CONFIG_INT} (got "0")'),
        ("PATCH", "/v1/topics/strs/configs", {"configs": {"max.message.bytes": "-1"}}, "configs.max.message.bytes",
         f'configs.max.message.bytes must be an integer from 0 to {MAX_MESSAGE_BYTES}, bytes of a record batch '
         '(got "-1")'),
        ("PATCH", "/v1/topics/strs/configs", {"configs": {"retention.bytes": "1e3"}}, "configs.retention.bytes",
         f'configs.retention.bytes must be -1 (unlimited) or an integer from 1 to {MAX_CONFIG_INT} (got "1e3"; '
         f'{STRING_FORM})'),
    ]
    for method, path, body, field, error in refused:
        r = httpx.request(method, url + path, json=body, timeout=30)
        assert (r.status_code, r.json()) == (400, {"error": error, "field": field}), (body, r.text)
    names = {t["name"] for t in httpx.get(f"{url}/v1/topics", timeout=30).json()}
    assert not {"n1", "n2", "n3", "n4"} & names  # nothing created
    assert httpx.get(f"{url}/v1/topics/strs", timeout=30).json()["partitions"] == 2
    assert configs(server, "strs") == {"retention.ms": -1, "retention.bytes": -1, "max.message.bytes": 3000}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ms=st.one_of(st.just(-1), st.integers(1, MAX_CONFIG_INT)), as_string=st.booleans())
def test_a_config_given_as_a_string_is_stored_as_its_number(server: ServerProcess, ms: int, as_string: bool) -> None:
    r = httpx.post(f"{server.url}/v1/topics", json={"name": "prop", "partitions": 1}, timeout=30)
    assert r.status_code in (201, 409), r.text
    r = httpx.patch(f"{server.url}/v1/topics/prop/configs",
                    json={"configs": {"retention.ms": str(ms) if as_string else ms}}, timeout=30)
    assert r.status_code == 200, r.text
    assert configs(server, "prop")["retention.ms"] == ms


@settings(max_examples=500, deadline=None)
@given(value=st.one_of(st.integers(-(2**64), 2**64), st.text(max_size=25),
                       st.integers(-5, 2**54).map(str), st.booleans(), st.floats(allow_nan=False)))
def test_a_config_string_means_what_its_number_means(value: object) -> None:
    """The parser of config values: a string of decimal digits (and - for -1) is taken exactly as the integer it
    writes; any other string is refused naming the string form; a partition count given as a string never is."""
    def parsed(v: object) -> object:
        try:
            return TopicConfigsChange.model_validate({"retention.ms": v}).as_dict()["retention.ms"]
        except ValidationError as exc:
            return ("refused", str(exc.errors()[0]["ctx"]["error"]))

    got = parsed(value)
    if isinstance(value, str):
        digits = value.removeprefix("-")
        if digits.isascii() and digits.isdigit() and len(digits) <= 19:
            number = parsed(int(value))  # taken as the same integer, or refused as it is (its own words quoted)
            assert got == number if not isinstance(number, tuple) else \
                (isinstance(got, tuple) and STRING_FORM not in got[1]), (value, got, number)
        else:
            assert isinstance(got, tuple) and STRING_FORM in got[1], (value, got)
        with pytest.raises(ValidationError, match="not a string"):
            TopicIn.model_validate({"name": "t", "partitions": value})
    elif isinstance(value, int) and not isinstance(value, bool) and (value == -1 or 1 <= value <= MAX_CONFIG_INT):
        assert got == value and parsed(json.loads(json.dumps(str(value)))) == value
    elif not (isinstance(value, float) and value.is_integer()):
        assert isinstance(got, tuple), (value, got)
