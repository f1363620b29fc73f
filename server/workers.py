"""``--workers N``: N server processes on one port (``launch render``, ``serve --tokens-only``,
``serve --engine-url``), supervised by the process the operator started.

The supervisor binds one ``SO_REUSEPORT`` socket per worker (server/listener.py) and hands each
worker its own; each worker is a fresh interpreter running the same command line, all signing with
one state secret (generated when none is given). ``/metrics`` on any worker reads every worker's
exposition over a private Unix socket and labels each sample ``worker="K"``. A worker that dies is
restarted; SIGTERM / SIGINT is passed on and each worker drains as a single server does.

How it behaves: docs/serve.md, "Several processes on one port"; sizing: docs/deploy.md, "Workers:
several processes per front end".
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from server.listener import bind
from server.settings import Mode, Settings

log = logging.getLogger("tokenwire")

SEAT_ENV = "TOKENWIRE_WORKER_SEAT"  # set by the supervisor for each worker: what :class:`Seat` holds
SECRET_ENV = "TOKENWIRE_STATE_SECRET"
NUM_THREADS_ENV = "TOKENWIRE_NUM_THREADS"
YOUNG_S = 30.0  # a worker that dies sooner after it started is restarted after a growing delay
MAX_BACKOFF_S = 30.0
CHILD_CODE = "import sys\nfrom server.cli import main\nsys.exit(main(sys.argv[1:]))\n"


# -- the worker side ------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Seat:
    """What a worker process got from its supervisor."""

    index: int  # 0 .. count - 1
    count: int
    sock_fd: int
    ready_fd: int
    lifeline_fd: int
    folder: Path  # the private folder of the workers' metrics sockets

    @property
    def metrics_path(self) -> Path:
        return self.folder / f"{self.index}.sock"

    def socket(self) -> socket.socket:
        return socket.socket(fileno=self.sock_fd)

    def watch_supervisor(self) -> None:
        """Drain (SIGTERM to this process) once the supervisor's end of the lifeline closes."""
        def watch() -> None:
            with contextlib.suppress(OSError):
                while os.read(self.lifeline_fd, 64):
                    pass
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=watch, name="tokenwire-lifeline", daemon=True).start()

    def ready(self) -> None:
        """Tell the supervisor this worker serves (server/worker_metrics.py ``started``)."""
        os.write(self.ready_fd, f"{self.index}\n".encode())

    def fail(self, message: str) -> None:
        """Hand a start-up error (a configuration error's one line) to the supervisor, which prints
        it once for all the workers (each meets the same error)."""
        line = "E" + json.dumps([self.index, message[:2000]]) + "\n"  # one write under PIPE_BUF: not interleaved
        with contextlib.suppress(OSError):
            os.write(self.ready_fd, line.encode())


def seat_of(environ: dict[str, str]) -> Seat | None:
    """This process's seat when a supervisor started it (taken out of ``environ`` and the process's
    environment: nothing it starts inherits it)."""
    raw = environ.pop(SEAT_ENV, None)
    os.environ.pop(SEAT_ENV, None)
    if raw is None:
        return None
    d = json.loads(raw)
    return Seat(index=d["index"], count=d["count"], sock_fd=d["sock"], ready_fd=d["ready"],
                lifeline_fd=d["lifeline"], folder=Path(d["folder"]))


# -- the supervisor -------------------------------------------------------------------------------------------
def check_workers(command: str, *, workers: int, tokens_only: bool, engine_url: str | None) -> None:
    """``ValueError`` where ``--workers N > 1`` cannot be served as asked."""
    if workers <= 1:
        return
    if command == "serve" and not tokens_only and not engine_url:
        raise ValueError(
            "--workers > 1 needs an engine outside the workers: `serve` runs the model in its own process, and "
            "N workers would load it N times and compete for the same cores. Run the engine once, "
            "`tokenwire serve MODEL --tokens-only --port 8001`, and the workers in front of it, "
            "`tokenwire launch render MODEL --engine-url ws://127.0.0.1:8001 --workers N`")
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ValueError("--workers > 1 needs SO_REUSEPORT, which this platform does not have")


@dataclass(slots=True)
class _Worker:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    lifeline: int | None = None  # the supervisor's end of the lifeline pipe
    started_at: float = 0.0
    ready: bool = False
    failures: int = 0  # deaths in a row, each soon after its start
    error: str | None = None  # the start-up error it reported (Seat.fail)
    restart_at: float | None = None


class Supervisor:
    def __init__(self, argv: Sequence[str], settings: Settings, reservation: socket.socket, count: int) -> None:
        self.argv = list(argv)
        self.settings = settings
        self.reservation = reservation  # bound with SO_REUSEPORT, never listening: holds the port
        self.host, self.port = reservation.getsockname()[:2]
        self.count = count
        self.workers = [_Worker(k) for k in range(count)]
        self.folder = Path(tempfile.mkdtemp(prefix="tokenwire-workers-"))  # 0700
        self.ready_r, self.ready_w = os.pipe()
        self._ready_buffer = b""
        os.set_blocking(self.ready_r, False)
        self.signals: list[int] = []
        self.generated_secret = False
        self.env = self._environment()

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        if self.settings.state_secret is None:
            env[SECRET_ENV] = secrets.token_urlsafe(32)
            self.generated_secret = True
        if self.settings.mode is Mode.TOKENS_ONLY and NUM_THREADS_ENV not in env and "OMP_NUM_THREADS" not in env:
            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            env[NUM_THREADS_ENV] = str(max(1, cpus // self.count - 1))  # one core per worker's event loop
        return env

    # -- workers -----------------------------------------------------------------------------------------
    def _start(self, w: _Worker) -> None:
        s = self.settings
        sock = bind(self.host, self.port, send_buffer=s.socket_send_buffer, reuse_port=True)
        life_r, life_w = os.pipe()
        seat = {"index": w.index, "count": self.count, "sock": sock.fileno(), "ready": self.ready_w,
                "lifeline": life_r, "folder": str(self.folder)}
        try:
            w.proc = subprocess.Popen([sys.executable, "-c", CHILD_CODE, *self.argv],
                                      env={**self.env, SEAT_ENV: json.dumps(seat)},
                                      pass_fds=(sock.fileno(), self.ready_w, life_r), process_group=0)
        finally:
            sock.close()
            os.close(life_r)
        w.lifeline, w.started_at, w.ready, w.restart_at = life_w, time.monotonic(), False, None

    def _reap(self, w: _Worker) -> int | None:
        """The worker's exit status once it exited (its lifeline closed), else None."""
        if w.proc is None:
            return None
        rc = w.proc.poll()
        if rc is not None and w.lifeline is not None:
            os.close(w.lifeline)
            w.lifeline = None
        return rc

    def _read_ready(self) -> None:
        """The workers' lines: ``K`` (worker K serves) or ``E[K, "message"]`` (it failed to start)."""
        with contextlib.suppress(BlockingIOError):
            self._ready_buffer += os.read(self.ready_r, 65536)
        *lines, self._ready_buffer = self._ready_buffer.split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace")
            if line.startswith("E"):
                index, message = json.loads(line[1:])
                self.workers[index].error = message
                continue
            w = self.workers[int(line)]
            if w.proc is not None and w.proc.poll() is None:
                w.ready, w.error = True, None
                log.info("worker %d ready (pid %d)", w.index, w.proc.pid)

    def _wait(self, timeout: float) -> None:
        with contextlib.suppress(InterruptedError):
            select.select([self.ready_r], [], [], timeout)
        self._read_ready()

    def _signal_all(self, sig: int) -> None:
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    w.proc.send_signal(sig)

    def _on_signal(self, sig: int, frame: object) -> None:
        self.signals.append(sig)

    @staticmethod
    def _describe(rc: int) -> str:
        return f"was killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with status {rc}"

    # -- the run -----------------------------------------------------------------------------------------
    def run(self) -> int:
        handled = (signal.SIGTERM, signal.SIGINT)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in handled}
        try:
            return self._run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for w in self.workers:  # nothing outlives the supervisor
                if w.proc is not None and w.proc.poll() is None:
                    w.proc.kill()
                    w.proc.wait()
                self._reap(w)
            os.close(self.ready_r)
            os.close(self.ready_w)
            shutil.rmtree(self.folder, ignore_errors=True)

    def _run(self) -> int:
        for w in self.workers:
            self._start(w)
        if (rc := self._start_up()) is not None:
            return rc
        url_host = f"[{self.host}]" if ":" in self.host else self.host
        url = f"http://{url_host}:{self.port}"
        pids = ", ".join(str(w.proc.pid) for w in self.workers if w.proc is not None)
        secret = ("; they sign streams with a state secret generated for them: give --state-secret to share "
                  "streams with other replicas" if self.generated_secret else "")
        log.info("tokenwire %s on %s: %d workers (pids %s)%s", self.settings.mode.value, url, self.count, pids, secret)
        print(f"tokenwire: listening on {url} ({self.count} workers{secret})", flush=True)
        return self._serve()

    def _start_up(self) -> int | None:
        """Until every worker is ready (None), or one failed to start (its status: the others are stopped)."""
        while not all(w.ready for w in self.workers):
            if self.signals:
                self._signal_all(signal.SIGTERM)
                return self._drain()
            self._wait(0.1)
            for w in self.workers:
                rc = self._reap(w)
                if rc is not None and not w.ready:
                    self._read_ready()  # its error, written before it exited
                    if w.error is not None:  # a configuration error: its one line, once
                        print(f"tokenwire: error: {w.error}", file=sys.stderr, flush=True)
                    else:
                        log.error("worker %d %s before it was ready; stopping the others", w.index,
                                  self._describe(rc))
                    self._signal_all(signal.SIGTERM)
                    self._drain(quiet=True)
                    return rc if rc > 0 else 1
        return None

    def _serve(self) -> int:
        handled = 0
        while True:
            if len(self.signals) > handled:
                for sig in self.signals[handled:]:
                    if handled == 0:
                        log.info("%s: draining %d workers", signal.Signals(sig).name, self.count)
                    self._signal_all(sig)
                    handled += 1
                return self._drain(handled)
            self._wait(0.2)
            now = time.monotonic()
            for w in self.workers:
                if w.restart_at is not None:
                    if now >= w.restart_at and not self.signals:
                        self._restart(w)
                    continue
                rc = self._reap(w)
                if rc is None:
                    continue
                w.failures = w.failures + 1 if now - w.started_at < YOUNG_S else 0
                delay = 0.0 if w.failures <= 1 else min(MAX_BACKOFF_S, 0.5 * 2 ** w.failures)
                alive = sum(1 for o in self.workers if o.proc is not None and o.proc.poll() is None)
                log.warning("worker %d (pid %d) %s%s; %d of %d workers serve; restarting it%s", w.index,
                            w.proc.pid if w.proc else -1, self._describe(rc),
                            f" ({w.error})" if w.error else "", alive, self.count, f" in {delay:g} s" if delay else "")
                w.ready, w.restart_at = False, now + delay

    def _restart(self, w: _Worker) -> None:
        try:
            self._start(w)
        except (ValueError, OSError) as exc:
            log.error("worker %d cannot restart: %s; retrying in %g s", w.index, exc, MAX_BACKOFF_S)
            w.restart_at = time.monotonic() + MAX_BACKOFF_S

    def _drain(self, handled: int = 1, *, quiet: bool = False) -> int:
        """Until every worker exited, passing on any further signal; 0 when all exited 0 (``quiet``:
        without a line for those that did not, as when a start-up failure stops the others)."""
        statuses: dict[int, int] = {}
        while len(statuses) < sum(1 for w in self.workers if w.proc is not None):
            if len(self.signals) > handled:
                for sig in self.signals[handled:]:
                    log.warning("second signal: the workers quit now")
                    self._signal_all(sig)
                handled = len(self.signals)
            self._wait(0.1)
            for w in self.workers:
                if w.index not in statuses and (rc := self._reap(w)) is not None:
                    statuses[w.index] = rc
        bad = {k: rc for k, rc in statuses.items() if rc != 0}
        if bad and not quiet:
            log.warning("workers ended: %s", ", ".join(f"{k}: {self._describe(rc)}" for k, rc in sorted(bad.items())))
        return 0 if not bad else 1


def supervise(argv: Sequence[str], settings: Settings, reservation: socket.socket, count: int) -> int:
    """Run ``count`` workers of this command line on ``reservation``'s port until stopped."""
    return Supervisor(argv, settings, reservation, count).run()
