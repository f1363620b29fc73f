"""How often one resume checkpoint may start a stream (server/resume_budget.py, issue 39 item 5):
an expiry every replica enforces (the issue time is under the checkpoint's signature) and a budget
per checkpoint on each replica, in bounded memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from server.cli_flags import build_parser
from server.cli_settings import settings_from_args
from server.context import ServerContext
from server.gating import decide
from server.pipeline import Pipeline
from server.resume_budget import CLOCK_SKEW_S, RESUME_WINDOW_S, RESUMES_PER_CHECKPOINT, ResumeBudget
from server.settings import Mode, Settings
from session.errors import StateError


def test_a_checkpoint_resumes_four_times_then_is_refused_as_replayed() -> None:
    budget = ResumeBudget()
    assert RESUMES_PER_CHECKPOINT == 4
    for _ in range(4):
        budget.take("sig-a", 1000, now=1001.0)
    with pytest.raises(StateError) as info:
        budget.take("sig-a", 1000, now=1002.0)
    assert info.value.reason == "replayed" and info.value.param == "resume"
    assert "already resumed 4 times" in info.value.message
    budget.take("sig-b", 1000, now=1002.0)  # another checkpoint has its own budget


def test_a_checkpoint_expires_five_minutes_after_it_was_issued() -> None:
    budget = ResumeBudget()
    assert RESUME_WINDOW_S == 300
    budget.take("sig", 1000, now=1000.0 + RESUME_WINDOW_S)
    with pytest.raises(StateError) as info:
        budget.take("sig2", 1000, now=1000.5 + RESUME_WINDOW_S)
    assert info.value.reason == "expired" and "within 300 s" in info.value.message
    # an issue time in the future: within the clocks' skew it counts from then; past it, refused
    budget.take("sig3", 1000 + CLOCK_SKEW_S, now=1000.0)
    with pytest.raises(StateError) as info:
        budget.take("sig3", 10**12, now=1000.0)
    assert info.value.reason == "expired" and "clocks disagree" in info.value.message
    for missing in (None, 1000.0, "1000", True):  # a checkpoint with no issue time, or not an integer
        with pytest.raises(StateError) as info:
            budget.take("sig4", missing, now=1000.0)
        assert info.value.reason == "expired"


def test_the_memory_is_bounded_and_expired_entries_go() -> None:
    budget = ResumeBudget(max_remembered=10)
    for i in range(25):
        budget.take(f"s{i}", 1000, now=1000.0)
    assert len(budget) == 10
    budget.take("late", 2000, now=2000.0)  # every earlier entry expired at 1300
    assert len(budget) == 1


def test_serve_and_launch_render_set_the_window_and_the_count_by_flag(tmp_path: Path) -> None:
    parser = build_parser()
    for command in (["serve", str(tmp_path)], ["launch", "render", str(tmp_path)]):
        default = settings_from_args(parser.parse_args(command), {})
        assert (default.resume_window, default.resumes_per_checkpoint) == (RESUME_WINDOW_S, RESUMES_PER_CHECKPOINT)
        given = settings_from_args(parser.parse_args([*command, "--resume-window", "30",
                                                      "--resumes-per-checkpoint", "1"]), {})
        assert (given.resume_window, given.resumes_per_checkpoint) == (30.0, 1)


@pytest.mark.parametrize(("flag", "value"), [("--resume-window", "0"), ("--resume-window", "-1"),
                                             ("--resumes-per-checkpoint", "0"), ("--resume-window", "nan")])
def test_a_window_or_count_that_allows_no_resume_is_a_usage_error(
        flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["launch", "render", "m", flag, value])
    assert info.value.code == 2
    assert flag in capsys.readouterr().err


def test_the_pipeline_counts_resumes_with_the_servers_window_and_count(tmp_path: Path) -> None:
    settings = Settings(mode=Mode.RENDER, model_dir=tmp_path, served_model_name="m", environ={},
                        resume_window=30.0, resumes_per_checkpoint=1)
    ctx = ServerContext(settings=settings, gating=decide(Mode.RENDER, {}), tokenizer=None, max_model_len=16)
    budget = Pipeline(ctx, cast(Any, None), cast(Any, None)).resumes
    budget.take("sig", 1000, now=1001.0)
    with pytest.raises(StateError) as info:
        budget.take("sig", 1000, now=1002.0)
    assert info.value.reason == "replayed" and "at most 1" in info.value.message
    with pytest.raises(StateError) as info:
        budget.take("sig2", 1000, now=1031.0)
    assert info.value.reason == "expired" and "within 30 s" in info.value.message
