"""Stored responses in the reference deployment: two front ends (``launch render``, started as the
deploy recipe starts them, ``TOKENWIRE_RESPONSES_STORE`` pointing at one real ``redis-server``)
behind deploy/haproxy/frontends.cfg, over two engines. A response made through the balancer is
chained with ``previous_response_id`` on each front end in turn, through the official ``openai``
SDK, and the chained prompt holds the first turn."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest

from tests.e2e.deploy_support import ENGINE_KEY, FRONTEND_FLAGS, NO_TORCH, SECRET, Topology, free_port
from tests.support.server_proc import ServerProcess
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("redis-server") is None,
                                                   reason="no redis-server (scripts/install-redis.sh)")]


class _StoredTopology(Topology):
    def __init__(self, model: Path, store: str) -> None:
        super().__init__(model, wire="ws")
        self.store = store

    def _frontend(self, *extra: str) -> ServerProcess:
        return ServerProcess(["launch", "render", str(self.model), "--engine-url", self.engine_url,
                              "--state-secret", SECRET, *FRONTEND_FLAGS, *extra],
                             env={"TOKENWIRE_ENGINE_API_KEY": ENGINE_KEY, "TOKENWIRE_API_KEY": None,
                                  "TOKENWIRE_RESPONSES_STORE": self.store}, preamble=NO_TORCH)


@pytest.fixture(scope="module")
def topology(asset: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", str(tmp_path_factory.mktemp("redis"))],
                             stdout=subprocess.DEVNULL)
    try:
        with _StoredTopology(asset("tiny-qwen3"), f"redis://127.0.0.1:{port}/0") as t:
            yield t
    finally:
        redis.terminate()
        redis.wait(10)


def test_a_stored_response_is_chained_on_either_front_end(topology: Topology) -> None:
    through_lb = openai.OpenAI(base_url=topology.url + "/v1", api_key="none", max_retries=0)
    raw = through_lb.responses.with_raw_response.create(model="tiny-qwen3", input="Name a colour.",
                                                        max_output_tokens=8, temperature=0)
    first = raw.parse()
    made_on = raw.headers["X-Tokenwire-Frontend"]
    assert made_on in ("fe1", "fe2")
    for fe in topology.frontends:  # the other front end first, then the one that made it
        client = openai.OpenAI(base_url=fe.url + "/v1", api_key="none", max_retries=0)
        got = wait_until(lambda c=client: c.responses.retrieve(first.id), "the response to be stored", timeout=10)
        assert got.output_text == first.output_text
        follow = client.responses.create(model="tiny-qwen3", input="Another one?", previous_response_id=first.id,
                                         max_output_tokens=4, temperature=0)
        assert follow.usage is not None and first.usage is not None
        assert follow.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    through_lb.responses.delete(first.id)
    for fe in topology.frontends:
        with pytest.raises(openai.NotFoundError):
            openai.OpenAI(base_url=fe.url + "/v1", api_key="none", max_retries=0).responses.retrieve(first.id)
