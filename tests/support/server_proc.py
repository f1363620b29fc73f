"""Start a real ``tokenwire`` server process on a free port and wait until it is healthy.

Used by the real-socket ring of tests (like vLLM's ``RemoteOpenAIServer``)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import httpx

_LISTEN = re.compile(r"tokenwire: listening on (http://\S+)")


class ServerProcess:
    """``with ServerProcess(["serve", model_dir, "--tokens-only"]) as srv: srv.url``"""

    def __init__(self, args: Sequence[str | os.PathLike[str]], *, env: dict[str, str | None] | None = None,
                 startup_timeout: float = 120.0, python: str = sys.executable,
                 preamble: str | None = None) -> None:
        self.args = [str(a) for a in args]
        if "--port" not in self.args:
            self.args += ["--port", "0"]
        self.env = merged_env(env)
        self.env.setdefault("OMP_NUM_THREADS", "1")
        self.startup_timeout = startup_timeout
        self.python = python
        self.preamble = preamble  # python code run before the CLI (e.g. to block imports)
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None
        self.lines: deque[str] = deque(maxlen=2000)
        self._url_ready = threading.Event()

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> ServerProcess:
        code = (self.preamble or "") + "\nimport sys\nfrom server.cli import main\nsys.exit(main(sys.argv[1:]))\n"
        self.proc = subprocess.Popen(
            [self.python, "-c", code, *self.args], env=self.env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1, cwd=str(Path(__file__).resolve().parents[2]),
        )
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            if self._url_ready.wait(0.05):
                break
        else:
            self.stop()
            raise RuntimeError(f"server did not print its URL in time:\n{self.output()}")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                r = httpx.get(self.url + "/health", timeout=2.0)
                if r.status_code in (200, 503):
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server did not become healthy in time:\n{self.output()}")

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if not self.url:
                m = _LISTEN.search(line)
                if m:
                    self.url = m.group(1)
                    self._url_ready.set()

    def output(self) -> str:
        return "\n".join(self.lines)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def ws_url(self) -> str:
        return "ws" + self.url[len("http"):]


def merged_env(env: dict[str, str | None] | None) -> dict[str, str]:
    """``os.environ`` updated with ``env``; a ``None`` value removes that name."""
    out = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def run_cli(args: Sequence[str | os.PathLike[str]], *, env: dict[str, str | None] | None = None, timeout: float = 60.0,
            preamble: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI to completion (for startup errors) and capture its output."""
    code = (preamble or "") + "\nimport sys\nfrom server.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], env=merged_env(env),
                          capture_output=True, text=True, timeout=timeout,
                          cwd=str(Path(__file__).resolve().parents[2]))
