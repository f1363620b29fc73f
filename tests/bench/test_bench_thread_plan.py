"""bench.thread_plan's arguments and its summary of alternating rounds."""

from __future__ import annotations

import argparse

import pytest

from bench.thread_plan import parse_engine, summary


def test_an_engine_is_threads_and_a_plan() -> None:
    assert parse_engine("15:adaptive") == (15, "adaptive", "own", "native", "native")
    assert parse_engine("2:FIXED") == (2, "fixed", "own", "native", "native")
    assert parse_engine("1:") == (1, "adaptive", "own", "native", "native")  # the default plan
    assert parse_engine("2:adaptive:forward") == (2, "adaptive", "forward", "native", "native")
    assert parse_engine("1:fixed:grouped") == (1, "fixed", "own", "grouped", "native")
    assert parse_engine("2:adaptive:grouped:forward") == (2, "adaptive", "forward", "grouped", "native")
    assert parse_engine("1:fixed:onednn") == (1, "fixed", "own", "native", "onednn")
    assert parse_engine("2:adaptive:onednn:grouped") == (2, "adaptive", "own", "grouped", "onednn")
    for bad, says in (("two:adaptive", "use THREADS:PLAN"), ("0:fixed", "use THREADS:PLAN"),
                      ("2:sometimes", "is not one of adaptive, fixed"),
                      ("2:adaptive:often", "LOGITS is one of own, forward, ATTENTION one of native, grouped")):
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            parse_engine(bad)


def test_the_summary_takes_medians_per_engine_and_concurrency() -> None:
    got = summary({"2:adaptive": {1: [(60.0, 30.0), (70.0, 20.0), (65.0, 40.0)], 8: [(300.0, 100.0)]}})
    assert got == {"2:adaptive": {
        "1": {"tok_s": 65.0, "ttft_ms": 30.0, "rounds": [[60.0, 30.0], [70.0, 20.0], [65.0, 40.0]]},
        "8": {"tok_s": 300.0, "ttft_ms": 100.0, "rounds": [[300.0, 100.0]]}}}
