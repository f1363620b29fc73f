"""``GET /metrics`` on a real ``serve --enable-scale-out`` process after traffic of every kind: requests
and errors by kind (HTTP and WebSocket), active sessions, generations in flight, tokens in and out,
time to first token, inter-token latency, render and derender latency, engine queue and batch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server_proc import ServerProcess
from tests.support.ws_fuzz import open_session

pytestmark = pytest.mark.slow

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0}


@pytest.fixture(scope="module")
def server(asset: Callable[[str], Path]) -> Iterator[ServerProcess]:
    args = ["serve", str(asset("tiny-qwen3")), "--enable-scale-out", "--dtype", "float32", "--max-model-len", "512"]
    with ServerProcess(args, startup_timeout=180) as srv:
        yield srv


def scrape(srv: ServerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = httpx.get(srv.url + "/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_count_what_the_server_did(server: ServerProcess) -> None:
    url = server.url
    assert httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    assert httpx.post(url + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=60).status_code == 200
    assert httpx.post(url + "/v1/chat/completions", json={"messages": []}, timeout=60).status_code == 400
    rendered = httpx.post(url + "/v1/chat/completions/render", json=CHAT, timeout=60).json()
    derender = {"stream": True, "prompt_token_ids": rendered["token_ids"], "chat_request": CHAT,
                "generate_chunk": {"request_id": "x", "choices": [{"index": 0, "token_ids": [9707]}]}}
    assert httpx.post(url + "/v1/chat/completions/derender", json=derender, timeout=60).status_code == 200
    ws = open_session(server.ws_url)
    ws.send(orjson.dumps({"type": "chat", "id": "c", "body": CHAT}).decode())
    while orjson.loads(ws.recv(timeout=60))["type"] != "chat.done":
        pass
    ws.send(orjson.dumps({"type": "cancel", "id": "nope"}).decode())
    assert orjson.loads(ws.recv(timeout=60))["error"]["code"] == "unknown_id"
    during = scrape(server)
    ws.close()

    assert value(during, "tokenwire_active_sessions") == 1
    assert value(during, "tokenwire_http_requests_total", route="/v1/chat/completions", status="200") == 2
    assert value(during, "tokenwire_errors_total", kind="invalid_request", transport="http") == 1
    assert value(during, "tokenwire_errors_total", kind="unknown_id", transport="ws") == 1
    assert value(during, "tokenwire_ws_requests_total", frame="chat") == 1
    assert value(during, "tokenwire_inflight_generations") == 0
    assert value(during, "tokenwire_prompt_tokens_total") > 0
    assert value(during, "tokenwire_generation_tokens_total") == 3 * 8
    assert value(during, "tokenwire_time_to_first_token_seconds_count") == 3
    assert value(during, "tokenwire_inter_token_latency_seconds_count") == 3 * 7
    # four pipelines (the refused one too: render refused it) and one render
    assert value(during, "tokenwire_render_seconds_count", kind="chat") == 5
    assert value(during, "tokenwire_derender_seconds_count", call="chat_stream") == 1
    assert value(during, "tokenwire_engine_queue_depth") == 0
    assert value(during, "tokenwire_engine_step_tokens_total") >= value(during, "tokenwire_engine_steps_total") > 0
    for name in ("closing_walks", "closing_forced_tokens", "closing_seconds"):  # exported (no structured output here)
        assert during.get((f"tokenwire_engine_{name}_total", ())) == 0
    after = scrape(server)
    assert value(after, "tokenwire_active_sessions") in (0, 1)  # the close is asynchronous
