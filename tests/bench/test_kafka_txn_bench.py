"""`mqindex bench kafka --transactions --txn-sizes / --txn-producers`: what a reader asks for, or a clear refusal."""

from __future__ import annotations

import argparse

import pytest

from bench.kafka import _producers, _sizes


def test_txn_sizes_are_comma_separated_record_counts_or_none() -> None:
    assert _sizes("100,1000, 10000") == [100, 1000, 10000]
    assert _sizes("none") == []
    assert _sizes(" None ") == []


@pytest.mark.parametrize(("text", "why"), [("100,x", "not comma-separated numbers"), ("0", "at least 1 record"),
                                           ("100,-5", "at least 1 record"), ("", "not comma-separated numbers")])
def test_bad_txn_sizes_are_refused_by_name(text: str, why: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=why):
        _sizes(text)


def test_txn_producers_are_zero_or_more() -> None:
    assert _producers("0") == 0
    assert _producers("8") == 8
    with pytest.raises(argparse.ArgumentTypeError, match="0 \\(none\\) or more"):
        _producers("-1")
    with pytest.raises(argparse.ArgumentTypeError, match="not a number"):
        _producers("four")
