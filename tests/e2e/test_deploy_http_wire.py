"""The reference deployment with the other engine wire: front ends on ``--engine-url http://<engine
balancer>`` (the vLLM HTTP wire, one HTTP stream per request, balanced per request: what a vLLM
``--tokens-only`` engine tier speaks, docs/deploy.md). The same guarantees as over the engine link
(tests/e2e/test_deploy_scaleout.py): a front end or an engine replica SIGKILLed mid-stream, and the
client_sdk stream ends with the uninterrupted greedy answer."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.deploy_support import Topology, reference
from tests.e2e.test_deploy_scaleout import CASES, PATHS, engine_with_work, expected, read_and_break, summary

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def topo(asset: Callable[[str], Path]) -> Iterator[Topology]:
    with Topology(asset("tiny-qwen3"), wire="http") as t:
        yield t
        assert "Traceback" not in t.outputs(), t.outputs()[-8000:]


def test_the_front_ends_use_the_http_engine_wire(topo: Topology) -> None:
    for srv in topo.frontends:
        assert httpx.get(srv.url + "/health", timeout=10).json()["engine"] == "RemoteEngine"


@pytest.mark.parametrize("case", ["chat-tool-reasoning", "completion"])
def test_a_front_end_killed_mid_stream_over_the_http_engine_wire(topo: Topology, case: str) -> None:
    kind, body = CASES[case]
    want = expected(kind, reference(topo.url, PATHS[kind], body))
    killed: list[int] = []

    def kill() -> None:
        i = topo.frontend_with_session()
        topo.frontends[i].stop(signal.SIGKILL)
        killed.append(i)

    try:
        items, resumes = asyncio.run(read_and_break(topo.url, kind, body, kill))
    finally:
        for i in killed:
            topo.restart_frontend(i)
    assert killed and resumes == 1
    assert summary(kind, items) == want


@pytest.mark.parametrize("case", ["chat-tool-reasoning", "messages"])
def test_an_engine_replica_killed_mid_stream_over_the_http_engine_wire(topo: Topology, case: str) -> None:
    kind, body = CASES[case]
    want = expected(kind, reference(topo.url, PATHS[kind], body))
    killed: list[int] = []

    def kill() -> None:
        i = engine_with_work(topo)
        topo.engines[i].stop(signal.SIGKILL)
        killed.append(i)

    try:
        items, resumes = asyncio.run(read_and_break(topo.url, kind, body, kill))
    finally:
        for i in killed:
            topo.restart_engine(i)
    assert killed and resumes == 1
    assert summary(kind, items) == want
