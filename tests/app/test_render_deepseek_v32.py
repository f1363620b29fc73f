"""DeepSeek-V3.2's render: tokenwire's own encoder (session/render/deepseek_v32.py) gives the prompt
ids vLLM 0.32 gave for every recorded conversation, and is picked exactly where vLLM picks its
encoder (config.json's ``DeepseekV32ForCausalLM``).

The expected ids are vLLM's own ``/v1/chat/completions/render`` answers, recorded by
``scripts/record_vllm_parsers.py deepseek_v32`` from the ``render`` list of
``tests/data/vllm/parsers/cases/deepseek_v32.json`` into ``tests/data/vllm/parsers/deepseek_v32.json``
(vLLM's ``launch render`` on the ``deepseek-v3.2`` asset with that file's config.json, whose
architecture selects vLLM's ``deepseek_v32`` tokenizer mode and renderer). A refused conversation
(vLLM's 400) must be refused here too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.context import build_context
from server.gating import decide
from server.settings import Mode, Settings
from session.errors import RenderError
from session.protocol import ChatCompletionRequest
from session.render import Renderer
from session.render.deepseek_v32 import BOS, EOS, TOOLS_BLOCK, encode, uses_encoder

DATA = json.loads((Path(__file__).parents[1] / "data" / "vllm" / "parsers" / "deepseek_v32.json").read_text("utf-8"))
RENDERS: dict[str, Any] = DATA["render"]
ARCH = ("DeepseekV32ForCausalLM",)


@pytest.fixture(scope="module")
def renderer(tokenizer: Callable[[str], Any]) -> Renderer:
    return Renderer(tokenizer("deepseek-v3.2"), model_name="m", max_model_len=8192, tool_call_parser="deepseek_v32",
                    enable_auto_tool_choice=True, architectures=ARCH)


def test_at_least_ten_recorded_conversations_with_tools_thinking_and_tool_results() -> None:
    assert len(RENDERS) >= 10
    requests = [r["request"] for r in RENDERS.values()]
    assert any(r.get("tools") for r in requests)
    assert any((r.get("chat_template_kwargs") or {}).get("thinking") for r in requests)
    assert any(m["role"] == "tool" for r in requests for m in r["messages"])
    assert all(r["config"]["architectures"] == list(ARCH) for r in RENDERS.values())


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_the_encoder_gives_vllms_prompt_ids(name: str, renderer: Renderer) -> None:
    item = RENDERS[name]
    req = ChatCompletionRequest.model_validate({**item["request"], "model": "m"})
    if item["status"] != 200:
        with pytest.raises(RenderError):
            renderer.render_chat(req)
        return
    assert renderer.render_chat(req).token_ids == item["token_ids"]


def _app(asset: Callable[[str], Path], tmp_path: Path, architectures: list[str]) -> TestClient:
    model = tmp_path / "model"
    model.mkdir(parents=True)
    for f in asset("deepseek-v3.2").iterdir():
        if f.is_file():
            (model / f.name).write_bytes(f.read_bytes())
    (model / "config.json").write_text(json.dumps({"architectures": architectures, "vocab_size": 129280,
                                                   "max_position_embeddings": 8192}))
    settings = Settings(mode=Mode.RENDER, model_dir=model, served_model_name="m", environ={},
                        state_secret=b"render-v32-0123456789-abcdefghijklmnopqrstuvwxyz",
                        tool_call_parser="deepseek_v32", enable_auto_tool_choice=True)
    return TestClient(create_app(build_context(settings, decide(Mode.RENDER, {}))))


def test_the_server_picks_the_encoder_from_config_json_only_for_deepseek_v32(
        asset: Callable[[str], Path], tmp_path: Path, tokenizer: Callable[[str], Any]) -> None:
    item = RENDERS["r_tool_results_thinking"]
    body = {**item["request"], "model": "m"}
    with _app(asset, tmp_path / "v32", list(ARCH)) as client:
        r = client.post("/v1/chat/completions/render", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["token_ids"] == item["token_ids"]
    with _app(asset, tmp_path / "v3", ["DeepseekV3ForCausalLM"]) as client:  # the asset's jinja template
        r = client.post("/v1/chat/completions/render", json=body)
        assert r.status_code != 200 or r.json()["token_ids"] != item["token_ids"]
    assert uses_encoder(ARCH) and not uses_encoder(()) and not uses_encoder(("DeepseekV3ForCausalLM",))


def test_the_encoder_ignores_the_template_and_refuses_an_untrusted_one(renderer: Renderer) -> None:
    req = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                "chat_template": "{{ 'x' }}"})
    with pytest.raises(RenderError, match="trust-request-chat-template"):
        renderer.render_chat(req)


# -- the encoding rules, as text ------------------------------------------------------------------

U = {"role": "user", "content": "Q1"}
CALL = {"type": "function", "function": {"name": "f", "arguments": {"a": "x", "n": 2, "l": [1, "b"]}}}


def test_thinking_on_and_off_end_the_prompt_differently() -> None:
    assert encode([U], None, thinking=False) == f"{BOS}<｜User｜>Q1<｜Assistant｜></think>"
    assert encode([U], None, thinking=True) == f"{BOS}<｜User｜>Q1<｜Assistant｜><think>"


def test_past_reasoning_is_dropped_after_a_user_turn_and_kept_after_tool_results() -> None:
    history = [U, {"role": "assistant", "content": "A1", "reasoning": "R1"}, {"role": "user", "content": "Q2"}]
    text = encode(history, None, thinking=True)
    assert "R1" not in text and text.endswith("Q2<｜Assistant｜><think>")
    assert f"</think>A1{EOS}" in text
    calls = [U, {"role": "assistant", "content": "", "reasoning": "R1", "tool_calls": [CALL]},
             {"role": "tool", "content": "out"}]
    text = encode(calls, None, thinking=True)
    assert "<think>R1</think>" in text
    assert ('<｜DSML｜parameter name="a" string="true">x</｜DSML｜parameter>\n'
            '<｜DSML｜parameter name="n" string="false">2</｜DSML｜parameter>\n'
            '<｜DSML｜parameter name="l" string="false">[1, "b"]</｜DSML｜parameter>') in text
    assert text.endswith(f"{EOS}\n\n<function_results>\n<result>out</result>\n</function_results>\n\n<think>")
    assert encode(calls, None, thinking=False).endswith("</function_results>\n\n</think>")


def test_tools_open_the_prompt_in_a_system_block() -> None:
    tools = [{"type": "function", "function": {"name": "f", "description": None, "parameters": {"type": "object"}}}]
    text = encode([{"role": "system", "content": "S"}, U], tools, thinking=False)
    assert text.startswith(BOS + "\n\n" + TOOLS_BLOCK + '{"name": "f", "description": null, "parameters": {"type": '
                           '"object"}}\n</functions>\nS<｜User｜>Q1')
