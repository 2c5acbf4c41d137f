"""The lag metrics read a stored commit's offset without a JSON parse when it has group_offsets.commit's form, and
parse anything else: both agree with json.loads for every value (Hypothesis)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from api.http.group_metrics import _offset


@given(st.integers(min_value=0, max_value=2**63 - 1), st.text(), st.integers(min_value=0, max_value=2**48))
def test_a_stored_commit_reads_its_offset(offset: int, metadata: str, at_ms: int) -> None:
    text = json.dumps({"offset": offset, "metadata": metadata, "at_ms": at_ms})
    assert _offset(text) == offset


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1),
       st.dictionaries(st.sampled_from(["metadata", "at_ms", "x"]), st.integers() | st.text(), max_size=3))
def test_other_forms_are_parsed(offset: int, rest: dict[str, object]) -> None:
    for body in ({**rest, "offset": offset}, {"offset": offset, **rest}):
        assert _offset(json.dumps(body)) == offset
        assert _offset(json.dumps(body, separators=(",", ":"))) == offset
