"""``--workers N`` with real processes (server/workers.py): a ``launch render --workers 2`` front end
(no ``--state-secret``: its workers share the one generated for them) in front of a tiny-qwen3
``serve --tokens-only --workers 2`` engine (a model per worker) over ``ws://``. Connections land on both workers, ``/metrics`` on
either worker counts every worker's requests, labelled; a worker killed mid-stream leaves the
other serving, the client resumes its stream there with the uninterrupted output, and the worker
is restarted; SIGTERM to the supervisor drains both (the stream in flight ends whole) and exits 0.

The tests share one front end and run in file order: the last one shuts it down."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

import client_sdk
from tests.e2e.deploy_support import free_port, side_by_side
from tests.support.server_proc import ServerProcess, run_cli
from tests.support.waiting import wait_until

NO_MODEL_LIBS = "import sys\nsys.modules['torch'] = None\nsys.modules['transformers'] = None\n"
READY = re.compile(r"worker (\d) ready \(pid (\d+)\)")
CHAT: dict[str, Any] = {"messages": [{"role": "user", "content": "Write a long poem about rivers."}], "max_tokens": 40,
        "temperature": 0, "ignore_eos": True}


@pytest.mark.parametrize(("flags", "message"), [
    (["serve", "--workers", "2"], "--workers > 1 needs an engine outside the workers"),
    (["serve", "--workers", "0"], "argument --workers: 0 is out of range (1 or more)"),
    # met by each worker as it loads: the supervisor prints it once
    (["launch", "render", "/nonexistent/model", "--workers", "2"], "model directory not found: /nonexistent/model"),
])
def test_workers_that_cannot_be_served_are_one_line_and_exit_2(flags: list[str], message: str) -> None:
    done = run_cli(flags, preamble=NO_MODEL_LIBS)  # before any model (or torch) loads in the supervisor
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    if flags == ["serve", "--workers", "2"]:  # says what to run instead
        assert "serve MODEL --tokens-only" in done.stderr and "--engine-url ws://" in done.stderr


@pytest.fixture(scope="module")
def servers(asset: Callable[[str], Path]) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """The engine (``serve --tokens-only --workers 2``) and the front end (``launch render
    --workers 2``), started side by side (the front end's engine link waits for the engine)."""
    model, port = str(asset("tiny-qwen3")), free_port()
    engine = ServerProcess(["serve", model, "--tokens-only", "--dtype", "float32", "--workers", "2",
                            "--port", str(port)], startup_timeout=180)
    front = ServerProcess(["launch", "render", model, "--engine-url", f"ws://127.0.0.1:{port}", "--workers", "2",
                           "--shutdown-timeout", "30"], env={"TOKENWIRE_STATE_SECRET": None}, startup_timeout=180)
    try:
        side_by_side(engine.start, front.start)
        yield engine, front
    finally:
        side_by_side(front.stop, engine.stop)


@pytest.fixture(scope="module")
def front(servers: tuple[ServerProcess, ServerProcess]) -> ServerProcess:
    return servers[1]


@pytest.fixture(scope="module")
def engine(servers: tuple[ServerProcess, ServerProcess]) -> ServerProcess:
    return servers[0]


def pids(srv: ServerProcess) -> dict[int, int]:
    """Each worker's pid, from the supervisor's latest "worker K ready (pid P)" line."""
    out: dict[int, int] = {}
    for line in list(srv.lines):
        if m := READY.search(line):
            out[int(m.group(1))] = int(m.group(2))
    return out


def samples(url: str, name: str, **labels: str) -> dict[str, float]:
    """``name``'s value by worker label, among the samples with ``labels``."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return {s.labels["worker"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())}


@pytest.mark.slow
def test_connections_land_on_every_worker_and_metrics_label_each(front: ServerProcess) -> None:
    assert "(2 workers; they sign streams with a state secret generated for them" in front.output()
    before = samples(front.url, "tokenwire_http_requests_total", route="/health", status="200")
    served: dict[str, int] = {}
    for _ in range(40):  # each on a new connection: the kernel spreads them over the workers
        worker = str(httpx.get(front.url + "/health", timeout=10).json()["worker"])
        served[worker] = served.get(worker, 0) + 1
    assert set(served) == {"0", "1"}
    after = samples(front.url, "tokenwire_http_requests_total", route="/health", status="200")
    assert {w: after[w] - before.get(w, 0) for w in after} == served  # one scrape, both workers' counts
    assert set(samples(front.url, "process_cpu_seconds_total")) == {"0", "1"}
    # and each worker streams through its own engine link
    tokens = sum(samples(front.url, "tokenwire_generation_tokens_total").values())
    for _ in range(4):
        answer = httpx.post(front.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 3}, timeout=60)
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 3
    assert sum(samples(front.url, "tokenwire_generation_tokens_total").values()) == tokens + 12


@pytest.mark.slow
def test_a_tokens_only_engine_runs_a_model_per_worker(engine: ServerProcess) -> None:
    assert "(2 workers" in engine.output()
    seen = {httpx.get(engine.url + "/health", timeout=10).json()["worker"] for _ in range(40)}
    assert seen == {0, 1}
    # every front-end worker's link reached an engine worker: the streams above came through them
    steps = samples(engine.url, "tokenwire_engine_steps_total")
    assert set(steps) == {"0", "1"} and sum(steps.values()) > 0


@pytest.mark.slow
def test_a_worker_killed_mid_stream_the_client_resumes_on_the_other(front: ServerProcess) -> None:
    want = httpx.post(front.url + "/v1/chat/completions", json=CHAT, timeout=120).json()["choices"][0]["message"]
    started = pids(front)
    assert set(started) == {0, 1}

    async def main() -> tuple[str, list[str], int, str]:
        async with client_sdk.connect(front.url) as client:
            first = client.info.server["worker"]
            stream = await client.chat.completions.create(**CHAT, stream=True, resumable=True)
            text: list[str] = []
            async for chunk in stream:
                text.extend(c.delta.content or "" for c in chunk.choices)
                if len(text) == 6:
                    os.kill(started[int(first)], signal.SIGKILL)
            assert stream.status == "completed"
            return first, text, stream.resumes, client.info.server["worker"]

    first, text, resumes, now_on = asyncio.run(main())
    assert resumes == 1 and now_on != first
    assert "".join(text) == want["content"]
    assert front.proc is not None and front.proc.poll() is None  # the supervisor and the other worker go on
    assert f"worker {first} (pid {started[int(first)]}) was killed by SIGKILL; 1 of 2 workers serve" in front.output()
    wait_until(lambda: pids(front).get(int(first)) not in (None, started[int(first)]) or None,
               "the killed worker to be restarted", timeout=120)
    wait_until(lambda: samples(front.url, "process_cpu_seconds_total").keys() == {"0", "1"} or None,
               "the restarted worker's metrics", timeout=30)


@pytest.mark.slow
def test_sigterm_to_the_supervisor_drains_every_worker(front: ServerProcess, engine: ServerProcess) -> None:
    workers = pids(front)
    events: list[Any] = []
    first = threading.Event()

    def read() -> None:
        with httpx.stream("POST", front.url + "/v1/chat/completions", json={**CHAT, "stream": True},
                          timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    events.append(orjson.loads(line[6:]))
                    first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first.wait(60)
    assert front.stop(signal.SIGTERM, timeout=60) == 0
    reader.join(30)
    finish = [c["finish_reason"] for e in events for c in e["choices"] if c.get("finish_reason")]
    assert finish == ["length"]  # the stream in flight ended whole
    assert "SIGTERM: draining 2 workers" in front.output()
    for pid in workers.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert engine.stop(signal.SIGTERM, timeout=60) == 0  # the engine's workers drain too
    assert "SIGTERM: draining 2 workers" in engine.output()
