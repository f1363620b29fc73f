"""The local engine's default thread count leaves one CPU to the event loop (issue 22 item 2), and
the explicit settings still win; the prefix cache budget reads its variable the same way."""

from __future__ import annotations

import os

import pytest

from engine.local import device


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TOKENWIRE_NUM_THREADS", "OMP_NUM_THREADS", "TOKENWIRE_PREFIX_CACHE_MB"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(("cpus", "threads"), [(1, 1), (2, 1), (4, 3), (16, 15)])
def test_the_default_leaves_one_cpu_to_the_event_loop(monkeypatch: pytest.MonkeyPatch, cpus: int,
                                                      threads: int) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
    assert device.resolve_threads() == threads


def test_explicit_and_environment_thread_counts_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert device.resolve_threads() == 2
    monkeypatch.setenv("TOKENWIRE_NUM_THREADS", "3")
    assert device.resolve_threads() == 3
    assert device.resolve_threads(4) == 4


def test_the_prefix_cache_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    assert device.resolve_prefix_cache_mb() == device.DEFAULT_PREFIX_CACHE_MB
    monkeypatch.setenv("TOKENWIRE_PREFIX_CACHE_MB", "0")
    assert device.resolve_prefix_cache_mb() == 0
    monkeypatch.setenv("TOKENWIRE_PREFIX_CACHE_MB", "lots")
    assert device.resolve_prefix_cache_mb() == device.DEFAULT_PREFIX_CACHE_MB
    assert device.resolve_prefix_cache_mb(8) == 8


def test_the_start_up_line_names_where_the_count_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert device.threads_choice() == (3, "default: 4 usable CPUs, 1 left to the event loop")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert device.threads_choice() == (2, "OMP_NUM_THREADS 2")
    monkeypatch.setenv("TOKENWIRE_NUM_THREADS", "4")
    assert device.threads_choice() == (4, "TOKENWIRE_NUM_THREADS 4")
    assert device.threads_choice(1) == (1, "--num-threads 1")


def test_serve_num_threads_becomes_the_engine_variable(capsys: pytest.CaptureFixture[str]) -> None:
    from server.cli_flags import build_parser
    from server.cli_settings import num_threads_to_env

    environ = {"TOKENWIRE_NUM_THREADS": "1"}
    num_threads_to_env(build_parser().parse_args(["serve", "--num-threads", "2"]), environ)
    assert environ == {"TOKENWIRE_NUM_THREADS": "2"}
    environ = {}
    num_threads_to_env(build_parser().parse_args(["serve"]), environ)
    assert environ == {}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--num-threads", "0"])
    assert "--num-threads" in capsys.readouterr().err
