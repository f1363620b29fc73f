"""Anthropic Messages as Claude Code sends them, in-process: a ``system`` message inside ``messages``
(under the beta ``mid-conversation-tool-changes-2026-07-01``), ``thinking: adaptive`` with ``display``,
``output_config.effort``, ``context_management``, ``metadata.user_id``, tool changes, the
``anthropic-beta`` header — through the official ``anthropic`` SDK against ``serve`` on the tiny
qwen3 model, and rendered token for token as vLLM 0.32 renders them (recorded on the qwen3 asset,
whose template renders inline system messages in place, and on qwen3.5, whose template refuses
them, so they are merged: tests/data/vllm/tokenize/, scripts/record_vllm_tokenize.py).
``messages.count_tokens`` equals the prompt tokens render gives."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from starlette.testclient import TestClient

from engine.local import LocalEngine
from server.app import create_app
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings
from session.errors import RenderError
from session.protocol import MessagesRequest
from session.render import Renderer
from session.render.anthropic import keeps_inline_system, to_openai_chat
from tests.conftest import asset_path, tokenizer_of

DATA = Path(__file__).parents[1] / "data" / "vllm" / "tokenize"
RECORDED = {asset: json.loads((DATA / f"{asset}.json").read_text()) for asset in ("qwen3", "qwen3.5")}
CASES = json.loads((DATA / "cases.json").read_text())
BETA = "mid-conversation-tool-changes-2026-07-01"
MODEL = "tiny-qwen3"


def recorded(name: str, asset: str = "qwen3") -> dict[str, Any]:
    body: dict[str, Any] = json.loads(json.dumps(RECORDED[asset]["messages_render"][name]["request"]))
    return body


def renderer(asset: str) -> Renderer:
    flags = RECORDED["qwen3"]["flags"]
    return Renderer(tokenizer_of(asset), model_name="m", max_model_len=8192, tool_call_parser=flags["tool_call_parser"],
                    enable_auto_tool_choice=flags["enable_auto_tool_choice"])


# --- vLLM parity: the prompt of each Claude Code request ------------------------------------------


def render_client(asset: str) -> TestClient:
    data = RECORDED[asset]
    settings = Settings(mode=Mode.RENDER, model_dir=asset_path(asset), served_model_name="m", environ={},
                        tool_call_parser=data["flags"]["tool_call_parser"],
                        enable_auto_tool_choice=data["flags"]["enable_auto_tool_choice"])
    ctx = ServerContext(settings=settings, gating=decide(Mode.RENDER, {}), tokenizer=tokenizer_of(asset),
                        max_model_len=data["max_model_len"])
    return TestClient(create_app(ctx))


@pytest.fixture(scope="module")
def render_clients() -> Iterator[dict[str, TestClient]]:
    clients = {asset: render_client(asset) for asset in RECORDED}
    for c in clients.values():
        c.__enter__()
    yield clients
    for c in clients.values():
        c.__exit__(None, None, None)


PARITY = [(asset, name) for asset, data in RECORDED.items() for name in data["messages_render"]]


@pytest.mark.parametrize(("asset", "name"), PARITY)
def test_claude_code_requests_render_as_vllm_renders_them(render_clients: dict[str, TestClient], asset: str,
                                                          name: str) -> None:
    vllm = RECORDED[asset]["messages_render"][name]["vllm"]
    assert vllm["status"] == 200
    r = render_clients[asset].post("/v1/messages/render", json=recorded(name, asset),
                                   headers={"anthropic-beta": BETA, "anthropic-version": "2023-06-01"})
    assert r.status_code == 200, r.text
    assert r.json()["token_ids"] == vllm["body"]["token_ids"]
    assert r.json()["sampling_params"]["max_tokens"] == vllm["body"]["max_tokens"]


def test_count_tokens_is_not_served_by_render_without_an_engine(render_clients: dict[str, TestClient]) -> None:
    """``count_tokens`` is served with ``/v1/messages``, so not by a render server without an engine
    (vLLM serves it with its Anthropic routes, on engine servers only)."""
    assert render_clients["qwen3"].post("/v1/messages/count_tokens", json={"messages": []}).status_code == 404


# --- the rule: in place where the template keeps them, merged otherwise ----------------------------


@pytest.mark.parametrize(("asset", "keeps"), [
    ("qwen3", True), ("qwen2.5", True), ("llama3.1", True), ("deepseek-v3.1", True),
    ("qwen3.5", False),      # raise_exception("System message must be at the beginning.")
    ("mistral-nemo", False),  # only user and assistant roles after the first message
    ("gpt-oss", False),       # its template renders but drops a later system message
])
def test_the_template_decides_where_inline_system_messages_go(asset: str, keeps: bool) -> None:
    r = renderer(asset)
    template = r._template_for(r.messages_chat(MessagesRequest.model_validate(recorded("cc_inline_system"))))
    assert keeps_inline_system(template) is keeps


def test_in_place_the_reminder_stands_between_the_user_turns() -> None:
    req = MessagesRequest.model_validate(recorded("cc_inline_system"))
    roles = [m.role for m in renderer("qwen3").messages_chat(req).messages]
    assert roles == ["system", "user", "system", "user"]
    text = tokenizer_of("qwen3").decode(renderer("qwen3").render_messages(req).token_ids)
    assert text.index("What files are here?") < text.index("Today's date") < text.index("List them briefly.")


def test_merged_the_reminder_joins_the_system_prompt() -> None:
    req = MessagesRequest.model_validate(recorded("cc_inline_system"))
    chat = renderer("qwen3.5").messages_chat(req)
    assert [m.role for m in chat.messages] == ["system", "user", "user"]
    system = chat.messages[0].content
    assert isinstance(system, str)
    assert system.startswith("You are Claude Code") and system.endswith("</system-reminder>")
    assert "x-anthropic-billing-header" not in system  # stripped, as vLLM (a per-request hash)


# --- the other fields Claude Code sends ------------------------------------------------------------


def chat_of(**body: Any) -> Any:
    body.setdefault("max_tokens", 64)
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return to_openai_chat(MessagesRequest.model_validate(body))


def test_adaptive_and_enabled_thinking_switch_the_template_thinking_on() -> None:
    for thinking in ({"type": "adaptive", "display": "summarized"}, {"type": "enabled", "budget_tokens": 2048}):
        assert chat_of(thinking=thinking).template_kwargs()["enable_thinking"] is True
    assert chat_of(thinking={"type": "disabled"}).template_kwargs()["enable_thinking"] is False
    kept = chat_of(thinking={"type": "adaptive"}, chat_template_kwargs={"enable_thinking": False})
    assert kept.template_kwargs()["enable_thinking"] is False


def test_effort_becomes_reasoning_effort_unless_thinking_is_disabled() -> None:
    assert chat_of(output_config={"effort": "high"}).reasoning_effort == "high"
    assert chat_of(output_config={"effort": "max"}, thinking={"type": "disabled"}).reasoning_effort is None
    bad = {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "output_config": {"effort": "extreme"}}
    with pytest.raises(ValueError, match="output_config"):
        MessagesRequest.model_validate(bad)


def test_output_format_becomes_a_json_schema_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    chat = chat_of(output_config={"format": {"type": "json_schema", "schema": schema}})
    assert chat.response_format == {"type": "json_schema", "json_schema": {"name": "json_schema", "schema": schema}}


def test_tool_changes_resolve_to_the_tools_in_effect_at_the_end() -> None:
    chat = to_openai_chat(MessagesRequest.model_validate(recorded("cc_tool_addition")))
    fns = [t.function.model_dump(exclude_none=True) for t in chat.tools or []]
    assert [f["name"] for f in fns] == ["Read", "Grep"]  # Bash removed, Grep declared by the change
    assert "defer_loading" not in fns[0] and fns[1]["strict"] is True  # Read is loaded now


def test_a_tool_change_naming_an_undeclared_tool_is_a_400_naming_the_block() -> None:
    body = recorded("cc_tool_addition")
    body["messages"][1]["content"][1]["tool"]["name"] = "Nope"
    with pytest.raises(RenderError, match=re.escape("messages[1].content[1]: tool_addition references tool 'Nope'")):
        to_openai_chat(MessagesRequest.model_validate(body))


def test_a_tool_change_outside_a_system_message_is_refused() -> None:
    body = {"max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "Read"}}]}]}
    with pytest.raises(ValueError, match='only allowed in messages with role "system"'):
        MessagesRequest.model_validate(body)


# --- the official SDK against serve ----------------------------------------------------------------


@pytest.fixture(scope="module")
def serve() -> Iterator[TestClient]:
    path = asset_path(MODEL)
    settings = Settings(mode=Mode.SERVE, model_dir=path, served_model_name=MODEL, environ={},
                        tool_call_parser="hermes", enable_auto_tool_choice=True)
    engine = LocalEngine(path, model_name=MODEL, max_model_len=4096, dtype="float32", num_threads=1)
    ctx = ServerContext(settings=settings, gating=decide(Mode.SERVE, {}), tokenizer=tokenizer_of(MODEL),
                        max_model_len=4096, engine=engine)
    with TestClient(create_app(ctx)) as c:
        yield c


@pytest.fixture(scope="module")
def claude(serve: TestClient) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=str(serve.base_url), api_key="none", http_client=serve, max_retries=0)


def claude_code_kwargs() -> dict[str, Any]:
    """A first Claude Code request, as the SDK takes it (the beta's system message inside messages)."""
    body = recorded("cc_inline_system")
    return {"model": MODEL, "max_tokens": 8, "system": body["system"], "messages": body["messages"],
            "tools": body["tools"], "metadata": body["metadata"], "thinking": body["thinking"],
            "output_config": body["output_config"], "context_management": body["context_management"],
            "extra_body": {"temperature": 0}}


def test_the_sdk_gets_a_message_for_claude_codes_first_request(claude: anthropic.Anthropic) -> None:
    message = claude.beta.messages.create(betas=[BETA], **claude_code_kwargs())
    assert message.type == "message" and message.role == "assistant"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0


def test_the_sdk_streams_claude_codes_first_request(claude: anthropic.Anthropic) -> None:
    kwargs = claude_code_kwargs()
    with claude.beta.messages.stream(betas=[BETA], **kwargs) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert events[0] == "message_start" and "message_stop" in events
    count = claude.beta.messages.count_tokens(betas=[BETA], **{k: v for k, v in kwargs.items()
                                                                if k not in ("max_tokens", "metadata", "extra_body")})
    assert final.usage.input_tokens == count.input_tokens


def test_raw_json_shaped_as_claude_code_sends_it_is_answered(serve: TestClient) -> None:
    """The 400 of the issue ("messages.1.role: Input should be 'user' or 'assistant'")."""
    body = {**recorded("cc_inline_system"), "model": MODEL, "max_tokens": 4, "stream": False}
    r = serve.post("/v1/messages?beta=true", json=body,
                   headers={"anthropic-beta": f"{BETA},interleaved-thinking-2025-05-14", "x-api-key": "none",
                            "anthropic-version": "2023-06-01"})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("name", ["cc_inline_system", "cc_tool_round_trip", "cc_tool_addition", "cc_thinking_enabled"])
def test_count_tokens_equals_the_prompt_tokens_render_gives(serve: TestClient, claude: anthropic.Anthropic,
                                                           name: str) -> None:
    body = recorded(name)
    rendered = serve.post("/v1/messages/render", json={**body, "model": MODEL})
    if rendered.status_code == 404:  # serve exposes render only with the scale-out switch
        ids = renderer("qwen3").render_messages(MessagesRequest.model_validate(body)).token_ids
    else:
        ids = rendered.json()["token_ids"]
    count = claude.messages.count_tokens(model=MODEL, messages=body["messages"], system=body["system"],
                                         tools=body["tools"], thinking=body.get("thinking") or anthropic.omit,
                                         extra_body={k: body[k] for k in ("output_config", "context_management")
                                                     if k in body})
    assert count.input_tokens == len(ids)


def test_count_tokens_errors_are_anthropic_errors_naming_the_field(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.count_tokens(model=MODEL, messages=[{"role": "wizard", "content": "hi"}])  # type: ignore[misc,list-item]
    assert info.value.body["type"] == "error"  # type: ignore[index]
    assert "messages.0.role" in str(info.value)
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.count_tokens(model="claude-nope", messages=[{"role": "user", "content": "hi"}])
