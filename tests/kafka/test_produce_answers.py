"""Produce answers come from per-shape templates (api/kafka/produce.py), and an all-success answer from the
shape's success frame with its numbers written in: whatever a shape answered before, each answer's bytes are
those of a response built afresh from its own outcomes, at every supported version."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from api.kafka import errors
from api.kafka.framing import frame
from api.kafka.produce import _TEMPLATES, _response
from api.kafka.schemas import APIS, build

PRODUCE = APIS[0]

keys = st.lists(st.tuples(st.sampled_from(["orders", "t", "ü-topic"]), st.integers(0, 5)), min_size=1, max_size=6,
                unique=True)
any_outcome = st.tuples(st.sampled_from([errors.NONE, errors.CORRUPT_MESSAGE, errors.KAFKA_STORAGE_ERROR,
                                         errors.INVALID_REQUIRED_ACKS, errors.MESSAGE_TOO_LARGE]),
                        st.integers(-1, 2**63 - 1), st.one_of(st.none(), st.text(max_size=40)))
success = st.tuples(st.just(errors.NONE), st.integers(-1, 2**63 - 1), st.none())  # written into a success frame
outcome = st.one_of(success, any_outcome)


def fresh(done: dict[tuple[str, int], tuple[int, int, str | None]], version: int, correlation_id: int) -> bytes:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), (code, base, message) in done.items():
        by_topic.setdefault(topic, []).append(dict(index=index, error_code=code, base_offset=base,
                                                   log_append_time_ms=-1, log_start_offset=-1, record_errors=[],
                                                   error_message=message))
    resp = build(PRODUCE.response, version, throttle_time_ms=0,
                 responses=[dict(name=t, partition_responses=ps) for t, ps in by_topic.items()])
    resp.with_header(correlation_id=correlation_id)
    return frame(resp.encode(header=True))


@settings(max_examples=300, deadline=None)
@given(version=st.integers(PRODUCE.min_version, PRODUCE.max_version), shape=keys, data=st.data(),
       correlation_id=st.integers(0, 2**31 - 1))
def test_each_answer_is_its_own_outcomes_whatever_the_shape_answered_before(
        version: int, shape: list[tuple[str, int]], data: st.DataObject, correlation_id: int) -> None:
    for _ in range(3):  # later answers of a shape fill the template (or success frame) an earlier one left
        done = {key: data.draw(outcome) for key in shape}
        answer = _response(done, version, correlation_id)
        assert answer.correlation_id == correlation_id
        assert bytes(answer.framed) == fresh(done, version, correlation_id)
        if all(code == errors.NONE and message is None for code, _, message in done.values()):
            assert _TEMPLATES.success[(version, *done)] is not None  # answered from the success frame
