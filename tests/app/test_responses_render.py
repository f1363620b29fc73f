"""``POST /v1/responses/render`` against vLLM 0.32's own answers: every recorded Responses request
(tests/data/vllm/responses/cases.json: string and item inputs, Codex's developer messages with
``input_text`` parts, function, namespace and built-in tools, tool round trips, reasoning items
merged into the assistant turn, tool choices, reasoning effort, output limits, a JSON schema format)
renders to vLLM's prompt ids and output limit, on the render server as ``launch render`` builds it;
``previous_response_id`` is vLLM's refusal. Recorded by scripts/record_vllm_responses.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings
from tests.conftest import asset_path, tokenizer_of

DATA = Path(__file__).parents[1] / "data" / "vllm" / "responses"
RECORDED: dict[str, Any] = json.loads((DATA / "qwen3.json").read_text())


@pytest.fixture(scope="module")
def render() -> Iterator[TestClient]:
    flags = RECORDED["flags"]
    settings = Settings(mode=Mode.RENDER, model_dir=asset_path("qwen3"), served_model_name="m", environ={},
                        tool_call_parser=flags["tool_call_parser"],
                        enable_auto_tool_choice=flags["enable_auto_tool_choice"])
    ctx = ServerContext(settings=settings, gating=decide(Mode.RENDER, {}), tokenizer=tokenizer_of("qwen3"),
                        max_model_len=RECORDED["max_model_len"])
    with TestClient(create_app(ctx)) as client:
        yield client


def test_at_least_ten_requests_were_recorded() -> None:
    assert len(RECORDED["render"]) >= 10
    assert all(case["vllm"]["status"] == 200 for case in RECORDED["render"].values())


@pytest.mark.parametrize("name", list(RECORDED["render"]))
def test_responses_render_as_vllm_renders_them(render: TestClient, name: str) -> None:
    case = RECORDED["render"][name]
    r = render.post("/v1/responses/render", json={**case["request"], "model": "m"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["token_ids"] == case["vllm"]["body"]["token_ids"]
    assert body["sampling_params"]["max_tokens"] == case["vllm"]["body"]["max_tokens"]
    assert body["request_id"].startswith("resp_")


def test_previous_response_id_is_refused_with_vllms_error(render: TestClient) -> None:
    case = RECORDED["previous_response_id"]
    r = render.post("/v1/responses/render", json={**case["request"], "model": "m"})
    assert r.status_code == case["vllm"]["status"] == 400
    assert r.json()["error"]["message"] == case["vllm"]["body"]["error"]["message"]
    assert r.json()["error"]["param"] == "previous_response_id"


def test_the_stateful_routes_are_not_served_by_a_render_server(render: TestClient) -> None:
    assert render.post("/v1/responses", json={"input": "hi"}).status_code == 404
    assert render.get("/v1/responses/resp_1").status_code == 404
