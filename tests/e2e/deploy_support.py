"""The reference deployment of deploy/ (docs/deploy.md) on loopback, for the end-to-end tests:

    clients ──▶ HAProxy (deploy/haproxy/frontends.cfg) ──▶ fe1, fe2: tokenwire launch render --engine-url <engine LB>
                                                                 │ (one shared --state-secret)
                                                                 ▼
                             HAProxy (deploy/haproxy/engines.cfg) ──▶ engine1, engine2: tokenwire serve --tokens-only

Every process is real: HAProxy from the Debian package (scripts/install-haproxy.sh), the tokenwire
CLI, the tiny-qwen3 model in fp32 (so every replica, and every resumed stream, computes the same
greedy tokens), and the engine key as deploy/ passes it (the engines' ``TOKENWIRE_API_KEY``, the
front ends' ``TOKENWIRE_ENGINE_API_KEY``). :class:`Topology` starts the whole thing, waits until
both balancers see every server UP, and reads each balancer's view of its servers from HAProxy's
CSV stats page. Replicas of one tier start (and restart) side by side: each is a separate process
that spends its start-up importing and loading on its own, so two take about as long as one.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx

from tests.support.server_proc import ServerProcess
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
FRONTENDS_CFG = ROOT / "deploy" / "haproxy" / "frontends.cfg"
ENGINES_CFG = ROOT / "deploy" / "haproxy" / "engines.cfg"
# shared by both front ends; at least 32 bytes (a secret will need that, issue 23 item 3)
SECRET = "tokenwire-deploy-tests-shared-state-secret-2026"
# the engine key, as deploy/ sets it: the engines' TOKENWIRE_API_KEY, the front ends' TOKENWIRE_ENGINE_API_KEY
ENGINE_KEY = "tokenwire-deploy-tests-engine-key-0123456789"
NO_TORCH = "import sys\nsys.modules['torch'] = None\n"  # a front end never loads torch
FRONTEND_FLAGS = ("--tool-call-parser", "hermes", "--reasoning-parser", "qwen3", "--enable-auto-tool-choice")
T = TypeVar("T")


def side_by_side(*calls: Callable[[], T]) -> list[T]:
    """Run ``calls`` at once (one thread each: they wait on processes) and return their results in
    order; every call runs to its end before the first failure is raised."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
    return [f.result() for f in futures]


def start_ready(srv: ServerProcess) -> ServerProcess:
    """Start ``srv`` and wait until its /health is 200: ServerProcess.start returns on a 503 too
    (a front end not yet linked to its engine tier says "degraded"), and a balancer that still shows
    the replica's predecessor UP would take it out of the rotation a moment later."""
    srv.start()
    wait_until(lambda: healthy(srv), f"{srv.url} to answer /health with 200", timeout=60,
               detail=lambda: srv.output()[-2000:])
    return srv


def healthy(srv: ServerProcess) -> bool:
    try:
        return httpx.get(srv.url + "/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def haproxy_binary() -> str:
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK) else None)
    if found is None:
        raise RuntimeError("HAProxy is not installed: run scripts/install-haproxy.sh (scripts/test.sh does)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HAProxy:
    """``haproxy -f <cfg> -db`` with the addresses in its environment; ``stats()`` reads its CSV."""

    def __init__(self, config: Path, env: dict[str, str], stats_var: str) -> None:
        self.config = config
        self.env = {**os.environ, **env}
        self.stats_url = f"http://{env[stats_var]}/stats;csv"
        self.proc: subprocess.Popen[str] | None = None
        self.lines: deque[str] = deque(maxlen=500)

    def start(self) -> HAProxy:
        self.proc = subprocess.Popen([haproxy_binary(), "-f", str(self.config), "-db"], env=self.env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1)
        threading.Thread(target=self._pump, daemon=True).start()
        wait_until(self._stats_or_exit, f"HAProxy ({self.config.name}) to serve its stats page", timeout=20,
                   detail=self.output)
        assert self.proc.poll() is None, self.output()
        return self

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def _stats_or_exit(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            return True  # start() then fails with its output
        try:
            return httpx.get(self.stats_url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def output(self) -> str:
        return "\n".join(self.lines)

    def stats(self) -> dict[str, dict[str, str]]:
        """server name → its CSV row (``status``: UP / DOWN / …, ``scur``: current sessions, ``stot``: total)."""
        text = httpx.get(self.stats_url, timeout=5).text.lstrip("# ")
        return {row["svname"]: row for row in csv.DictReader(io.StringIO(text))
                if row["svname"] not in ("FRONTEND", "BACKEND")}

    def status(self) -> dict[str, str]:
        return {name: row["status"].split()[0] for name, row in self.stats().items()}

    def wait_status(self, want: dict[str, str], timeout: float = 30) -> None:
        wait_until(lambda: all(self.status().get(k) == v for k, v in want.items()),
                   f"HAProxy ({self.config.name}) to see {want}", timeout=timeout, interval=0.1, detail=self.status)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _restart_tier(replicas: list[ServerProcess], make: Callable[..., ServerProcess], lb: HAProxy, name: str,
                  which: Sequence[int], extra: Sequence[str]) -> None:
    """Replicas ``which`` of a tier again on their ports with ``extra`` flags, side by side (each one
    still running is stopped first, with SIGTERM), each back once its balancer has it UP as
    ``<name><i + 1>``."""

    def restart(i: int) -> None:
        old = replicas[i]
        old.stop()
        port = hostport(old.url).rsplit(":", 1)[1]
        replicas[i] = make(*extra, "--port", port)  # listed first: stop() ends it
        start_ready(replicas[i])
        lb.wait_status({f"{name}{i + 1}": "UP"})

    if which:
        side_by_side(*(lambda i=i: restart(i) for i in which))


class Topology:
    """Two engines behind one HAProxy, two front ends on its URL behind another HAProxy.

    ``wire``: ``"ws"`` (the reference deployment: tokenwire's multiplexed engine link) or ``"http"``
    (the vLLM HTTP wire). ``url`` is the one URL clients use."""

    def __init__(self, model: Path, *, wire: Literal["ws", "http"] = "ws", frontend_args: Sequence[str] = (),
                 engine_args: Sequence[str] = ()) -> None:
        self.model = model
        self.wire = wire
        self.frontend_args = list(frontend_args)
        self.engine_args = list(engine_args)
        self.engines: list[ServerProcess] = []
        self.frontends: list[ServerProcess] = []
        self.engine_lb: HAProxy | None = None
        self.lb: HAProxy | None = None
        self.url = ""

    def __enter__(self) -> Topology:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        # listed before they start, so that stop() ends each one that did start when another did not
        self.engines = [self._engine() for _ in range(2)]
        side_by_side(*(lambda srv=srv: start_ready(srv) for srv in self.engines))
        engine_port, engine_stats = free_port(), free_port()
        self.engine_lb = HAProxy(ENGINES_CFG, {
            "TW_ENGINE_LB_BIND": f"127.0.0.1:{engine_port}", "TW_ENGINE_STATS_BIND": f"127.0.0.1:{engine_stats}",
            "TW_ENGINE1": hostport(self.engines[0].url), "TW_ENGINE2": hostport(self.engines[1].url)},
            "TW_ENGINE_STATS_BIND").start()
        self.engine_lb.wait_status({"engine1": "UP", "engine2": "UP"})
        self.engine_url = f"{self.wire}://127.0.0.1:{engine_port}"
        self.frontends = [self._frontend() for _ in range(2)]
        side_by_side(*(lambda srv=srv: start_ready(srv) for srv in self.frontends))
        port, stats = free_port(), free_port()
        self.lb = HAProxy(FRONTENDS_CFG, {
            "TW_LB_BIND": f"127.0.0.1:{port}", "TW_STATS_BIND": f"127.0.0.1:{stats}",
            "TW_FE1": hostport(self.frontends[0].url), "TW_FE2": hostport(self.frontends[1].url)},
            "TW_STATS_BIND").start()
        self.lb.wait_status({"fe1": "UP", "fe2": "UP"})
        self.url = f"http://127.0.0.1:{port}"

    def _engine(self, *extra: str) -> ServerProcess:
        return ServerProcess(["serve", str(self.model), "--tokens-only", "--dtype", "float32", *self.engine_args,
                              *extra], env={"TOKENWIRE_API_KEY": ENGINE_KEY, "TOKENWIRE_ENGINE_API_KEY": None})

    def _frontend(self, *extra: str) -> ServerProcess:
        return ServerProcess(["launch", "render", str(self.model), "--engine-url", self.engine_url,
                              "--state-secret", SECRET, *FRONTEND_FLAGS, *self.frontend_args, *extra],
                             env={"TOKENWIRE_ENGINE_API_KEY": ENGINE_KEY, "TOKENWIRE_API_KEY": None},
                             preamble=NO_TORCH)

    def frontend_with_session(self) -> int:
        """The index of the one front end the balancer has a client connection open to."""
        lb = self.lb
        assert lb is not None
        busy = wait_until(lambda: [name for name, n in sessions_per_server(lb).items() if n > 0],
                          "the balancer to hold a session on a front end", timeout=10)
        assert len(busy) == 1, busy
        return int(busy[0][-1]) - 1

    def restart_frontend(self, i: int, *extra: str) -> None:
        """Start front end ``i`` again (after a kill or a drain) on its port, with ``extra`` flags."""
        self.restart_frontends([i], *extra)

    def restart_frontends(self, which: Sequence[int], *extra: str) -> None:
        """Front ends ``which`` again on their ports with ``extra`` flags, side by side (each one
        still running is stopped first, with SIGTERM)."""
        assert self.lb is not None
        _restart_tier(self.frontends, self._frontend, self.lb, "fe", which, extra)

    def restart_engine(self, i: int, *extra: str) -> None:
        """Start engine ``i`` again (after a kill or a drain) on its port, with ``extra`` flags."""
        self.restart_engines([i], *extra)

    def restart_engines(self, which: Sequence[int], *extra: str) -> None:
        """Engines ``which`` again on their ports with ``extra`` flags, side by side (each one still
        running is stopped first, with SIGTERM). With every engine down at once the front ends said
        "degraded" and left the balancer's rotation: this returns once they are back in it."""
        assert self.engine_lb is not None
        _restart_tier(self.engines, self._engine, self.engine_lb, "engine", which, extra)
        if self.lb is not None:
            frontends = list(self.frontends)
            wait_until(lambda: all(healthy(srv) for srv in frontends), "the front ends to answer /health with 200 again",
                       timeout=60)
            self.lb.wait_status({f"fe{i + 1}": "UP" for i in range(len(self.frontends))})

    def stopped_engines(self) -> list[int]:
        """The engines whose process has ended (killed or drained)."""
        return [i for i, srv in enumerate(self.engines) if srv.proc is None or srv.proc.poll() is not None]

    def stopped_frontends(self) -> list[int]:
        """The front ends whose process has ended (killed or drained)."""
        return [i for i, srv in enumerate(self.frontends) if srv.proc is None or srv.proc.poll() is not None]

    def stop(self) -> None:
        """Each tier in turn from the clients' side, the replicas of a tier side by side."""
        for tier in ([self.lb], self.frontends, [self.engine_lb], self.engines):
            parts = [part for part in tier if part is not None]
            if parts:
                side_by_side(*(part.stop for part in parts))

    @property
    def ws_url(self) -> str:
        return "ws" + self.url[len("http"):]

    def outputs(self) -> str:
        parts = [("front LB", self.lb), ("engine LB", self.engine_lb)]
        text = "".join(f"\n--- {n}\n{p.output()}" for n, p in parts if p is not None)
        for i, srv in enumerate(self.frontends):
            text += f"\n--- fe{i + 1}\n{srv.output()[-4000:]}"
        for i, srv in enumerate(self.engines):
            text += f"\n--- engine{i + 1}\n{srv.output()[-4000:]}"
        return text


def hostport(url: str) -> str:
    return url.split("//", 1)[1].rstrip("/")


def sessions_per_server(lb: HAProxy) -> dict[str, int]:
    return {name: int(row["scur"] or 0) for name, row in lb.stats().items()}


def reference(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The uninterrupted, non-streaming answer through the balancer."""
    r = httpx.post(url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def regex_literal(text: str) -> str:
    """A regex matching exactly ``text`` (for structured_outputs: the model is made to write a script)."""
    out = []
    for ch in text:
        if ch == "\n":
            out.append("\\n")
        elif ch in ".^$*+?()[]{}|\\/\"":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)
