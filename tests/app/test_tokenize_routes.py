"""``POST /tokenize`` and ``/detokenize`` in-process: vLLM 0.32's answers, recorded on the qwen3
asset by scripts/record_vllm_tokenize.py (tests/data/vllm/tokenize/qwen3.json), given back field for
field; the routes in every mode, as vLLM; bad input a 4xx naming the field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app, enabled_routes
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings
from tests.conftest import asset_path, tokenizer_of

VLLM = json.loads((Path(__file__).parents[1] / "data" / "vllm" / "tokenize" / "qwen3.json").read_text())
# vLLM decodes an id past the vocabulary as nothing (200); tokenwire refuses it, as its render does
# for completion prompts (docs/render.md, "Token counting").
DIFFERS = {("detokenize", "err_out_of_vocab")}


def make_client(mode: Mode = Mode.RENDER, asset: str = VLLM["asset"]) -> TestClient:
    flags = VLLM["flags"]
    settings = Settings(mode=mode, model_dir=asset_path(asset), served_model_name="m", environ={},
                        tool_call_parser=flags["tool_call_parser"],
                        enable_auto_tool_choice=flags["enable_auto_tool_choice"])
    ctx = ServerContext(settings=settings, gating=decide(mode, {}), tokenizer=tokenizer_of(asset),
                        max_model_len=VLLM["max_model_len"])
    return TestClient(create_app(ctx))


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with make_client() as c:
        yield c


CASES = [(kind, name) for kind in ("tokenize", "detokenize") for name in VLLM[kind]
         if (kind, name) not in DIFFERS]


@pytest.mark.parametrize(("kind", "name"), CASES)
def test_answers_equal_vllms(client: TestClient, kind: str, name: str) -> None:
    case = VLLM[kind][name]
    vllm: dict[str, Any] = case["vllm"]
    r = client.post(f"/{kind}", json=case["request"])
    assert r.status_code == vllm["status"], r.text
    if r.status_code == 200:
        assert r.json() == vllm["body"]  # tokens, count, max_model_len, token_strs (null unless asked)
    else:
        error = r.json()["error"]
        assert error["code"] == vllm["status"] and error["message"]
        if vllm["body"]["error"]["type"] != "Bad Request":  # vLLM's own sentences, not pydantic's dump:
            # vLLM's first sentence, give or take tokenwire's field prefix (what follows it differs:
            # vLLM's "Valid aliases: …", tokenwire's "This server serves …")
            first = vllm["body"]["error"]["message"].split(". ")[0].rstrip(".")
            assert error["type"] == vllm["body"]["error"]["type"]
            assert first in error["message"]


def test_the_parity_covers_both_forms() -> None:
    ok = [n for n, c in VLLM["tokenize"].items() if c["vllm"]["status"] == 200]
    assert len(ok) >= 10
    requests = [VLLM["tokenize"][n]["request"] for n in ok]
    assert any("prompt" in r for r in requests) and any("messages" in r for r in requests)
    assert any(r.get("tools") for r in requests) and any(r.get("return_token_strs") for r in requests)
    assert any("add_special_tokens" in r for r in requests)


def test_detokenize_refuses_an_id_past_the_vocabulary(client: TestClient) -> None:
    r = client.post("/detokenize", json={"tokens": [9707, 10_000_000]})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "tokens.1"
    assert "10000000 is out of vocabulary" in r.json()["error"]["message"]


def test_tokenize_round_trips_through_detokenize(client: TestClient) -> None:
    text = "héllo 世界 🌍 <|im_start|>"
    ids = client.post("/tokenize", json={"prompt": text}).json()["tokens"]
    assert client.post("/detokenize", json={"tokens": ids}).json() == {"prompt": text}


def test_chat_tokens_equal_the_render_prompt(client: TestClient) -> None:
    body = VLLM["tokenize"]["chat_tools"]["request"]
    rendered = client.post("/v1/chat/completions/render", json=body).json()["token_ids"]
    assert client.post("/tokenize", json=body).json()["tokens"] == rendered


def test_tokenize_has_no_context_limit_as_vllm(client: TestClient) -> None:
    long = "word " * (VLLM["max_model_len"] + 10)
    r = client.post("/tokenize", json={"prompt": long})
    assert r.status_code == 200 and r.json()["count"] > VLLM["max_model_len"]


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": "hi", "add_special_tokens": [1]}, "add_special_tokens"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0"),
    ({"messages": "hi"}, "messages"),
    ({"tokens": "1 2"}, None),
])
def test_bad_bodies_are_400s_naming_the_field(client: TestClient, body: dict[str, Any], param: str | None) -> None:
    route = "/detokenize" if "tokens" in body else "/tokenize"
    r = client.post(route, json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"].startswith(param or "tokens")


def test_a_body_that_is_not_json_is_refused(client: TestClient) -> None:
    r = client.post("/tokenize", content=b"prompt=hi", headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415


@pytest.mark.parametrize("mode", [Mode.SERVE, Mode.RENDER, Mode.TOKENS_ONLY])
def test_served_in_every_mode_as_vllm(mode: Mode) -> None:
    """vLLM registers /tokenize and /detokenize on every server (api_server and render alike),
    outside the scale-out switch; tokenwire's every mode holds the tokenizer."""
    gating = decide(mode, {})
    ctx = ServerContext(settings=Settings(mode=mode, model_dir=asset_path("qwen3"), served_model_name="m", environ={}),
                        gating=gating, tokenizer=tokenizer_of("qwen3"), max_model_len=8192)
    paths = {r.path for r in enabled_routes(ctx)}
    assert {"/tokenize", "/detokenize"} <= paths
    assert ("/v1/messages/count_tokens" in paths) is (mode is Mode.SERVE)  # with /v1/messages, as vLLM
