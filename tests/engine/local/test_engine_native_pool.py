"""The native kernels' own threads (engine/local/native/pool.c), driven through ctypes with a
Python task that records each share it is given."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from engine.local import native

TASK = native.TASK


def _build(tmp_path: Path, *extra: str) -> ctypes.CDLL:
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler")
    target = tmp_path / "pool.so"
    native.build(target, compiler, (*native.FLAGS, *extra))
    return native.bind(target)  # typed as native.PROTOTYPES (held to the headers by test_engine_native_binding)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return _build(tmp_path_factory.mktemp("pool"), *native.VARIANTS[0][1])


def _run(lib: ctypes.CDLL, threads: int, n: int, chunk: int) -> list[tuple[int, int, int]]:
    shares: list[tuple[int, int, int]] = []
    lock = threading.Lock()

    def record(_ctx: int, begin: int, end: int, slot: int) -> None:
        with lock:
            shares.append((begin, end, slot))

    lib.tw_pool_run(threads, n, chunk, TASK(record), None)
    return shares


def _covered_once(shares: list[tuple[int, int, int]], n: int) -> bool:
    units = sorted(u for begin, end, _ in shares for u in range(begin, end))
    return units == list(range(n))


@pytest.mark.parametrize("spin_us", [0, 100])
@pytest.mark.parametrize(("threads", "n", "chunk"), [(1, 50, 1), (2, 1, 1), (2, 50, 1), (2, 50, 7), (3, 500, 4),
                                                     (4, 97, 0), (2, 5, 10)])
def test_every_unit_runs_exactly_once_on_a_slot_below_the_thread_count(pool: ctypes.CDLL, spin_us: int, threads: int,
                                                                       n: int, chunk: int) -> None:
    pool.tw_pool_spin(spin_us * 1000)
    for _ in range(20):  # jobs back to back: pool threads still spinning, or asleep, or late
        shares = _run(pool, threads, n, chunk)
        assert _covered_once(shares, n)
        assert all(0 <= slot < threads for _, _, slot in shares)
        assert all(end - begin <= max(chunk, 1) or len(shares) == 1 for begin, end, _ in shares)


def test_the_pool_threads_take_part_and_fewer_threads_leave_the_rest_out(pool: ctypes.CDLL) -> None:
    pool.tw_pool_spin(100_000)
    slots: set[int] = set()
    for _ in range(200):  # each share sleeps a little: the caller cannot take them all before a pool thread wakes
        shares = _run_slow(pool, 3, 12)
        assert _covered_once(shares, 12)
        slots |= {slot for _, _, slot in shares}
    assert slots == {0, 1, 2}
    assert pool.tw_pool_threads() >= 2  # started as first needed (earlier tests here asked for up to 3)
    for _ in range(50):
        assert {slot for _, _, slot in _run_slow(pool, 2, 12)} <= {0, 1}


def _run_slow(lib: ctypes.CDLL, threads: int, n: int) -> list[tuple[int, int, int]]:
    shares: list[tuple[int, int, int]] = []
    lock = threading.Lock()

    def record(_ctx: int, begin: int, end: int, slot: int) -> None:
        threading.Event().wait(0.0002)
        with lock:
            shares.append((begin, end, slot))

    lib.tw_pool_run(threads, n, 1, TASK(record), None)
    return shares


def test_two_callers_at_once_each_get_every_unit_of_their_own_job(pool: ctypes.CDLL) -> None:
    # one job at a time: the caller that finds the pool busy runs its job alone
    results: dict[int, list[list[tuple[int, int, int]]]] = {0: [], 1: []}

    def caller(k: int) -> None:
        for _ in range(30):
            results[k].append(_run_slow(pool, 2, 8 + k))

    workers = [threading.Thread(target=caller, args=(k,)) for k in (0, 1)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert not any(w.is_alive() for w in workers)
    for k in (0, 1):
        assert len(results[k]) == 30
        assert all(_covered_once(shares, 8 + k) for shares in results[k])


def test_a_forked_child_runs_its_jobs_without_the_parents_threads(pool: ctypes.CDLL, tmp_path: Path) -> None:
    script = tmp_path / "fork.py"
    script.write_text(f"""
import ctypes, os, sys
TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
lib = ctypes.CDLL({pool._name!r})
lib.tw_pool_run.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, TASK, ctypes.c_void_p]
lib.tw_pool_threads.restype = ctypes.c_int64
def job():
    seen = []
    lib.tw_pool_run(2, 64, 1, TASK(lambda c, b, e, s: seen.extend(range(b, e))), None)
    return sorted(seen) == list(range(64))
assert job() and lib.tw_pool_threads() == 1
pid = os.fork()
if pid == 0:
    os._exit(0 if job() and job() and lib.tw_pool_threads() == 1 else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_one_thread_build_runs_each_job_whole_on_its_caller(tmp_path: Path) -> None:
    lib = _build(tmp_path, *native.VARIANTS[1][1])
    assert lib.tw_pool_parallel() == 0
    assert _run(lib, 4, 100, 3) == [(0, 100, 0)]
    assert lib.tw_pool_threads() == 0


def test_the_spin_setting_reads_microseconds_and_ignores_nonsense(caplog: pytest.LogCaptureFixture) -> None:
    assert native.spin_us({}) == native.DEFAULT_SPIN_US
    assert native.spin_us({native.SPIN_ENV: "0"}) == 0
    assert native.spin_us({native.SPIN_ENV: " 250.5 "}) == 250.5
    for bad in ("fast", "-1", "2e6", "nan"):
        assert native.spin_us({native.SPIN_ENV: bad}) == native.DEFAULT_SPIN_US
    assert caplog.text.count(native.SPIN_ENV) == 4


def test_the_spin_is_off_by_default_when_every_cpu_is_a_torch_thread() -> None:
    """With a CPU left over the pool threads spin (DEFAULT_SPIN_US); with none they sleep at once,
    unless TOKENWIRE_NATIVE_SPIN_US says otherwise (a nonsense value falls back to that default)."""
    assert native.spin_us({}, threads=1, cpus=2) == native.DEFAULT_SPIN_US
    assert native.spin_us({}, threads=15, cpus=16) == native.DEFAULT_SPIN_US
    assert native.spin_us({}, threads=2, cpus=2) == 0
    assert native.spin_us({}, threads=3, cpus=2) == 0
    assert native.spin_us({native.SPIN_ENV: "100"}, threads=2, cpus=2) == 100
    assert native.spin_us({native.SPIN_ENV: "fast"}, threads=2, cpus=2) == 0
    assert native.spin_us({native.SPIN_ENV: "fast"}, threads=1, cpus=2) == native.DEFAULT_SPIN_US
