"""Every render error case on the app ``tokenwire launch render`` builds, in process
(tests/support/cli_app.py): status and message.

The app runs the real Qwen3 tokenizer with ``--max-model-len 64`` (so length errors are cheap
to provoke), no tool parser, and ``torch`` made unimportable while this module runs (render must
never need it; tests/e2e/test_cli.py starts a ``launch render`` process where importing torch fails,
and holds the start-up error of a chat template that does not compile).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from tests.conftest import asset_path
from tests.support.cli_app import cli_client, torch_unimportable

CHAT, COMPLETION, MESSAGES = "/v1/chat/completions/render", "/v1/completions/render", "/v1/messages/render"
USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with torch_unimportable(), cli_client(["launch", "render", asset_path("qwen3"), "--max-model-len", "64"]) as c:
        yield c


def openai_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == status
    return err  # type: ignore[no-any-return]


def anthropic_error(r: httpx.Response, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == kind
    return body["error"]["message"]  # type: ignore[no-any-return]


def test_a_good_chat_request_renders(client: httpx.Client) -> None:
    r = client.post(CHAT, json={"messages": USER, "max_tokens": 4})
    assert r.status_code == 200
    assert r.json()["token_ids"] and r.json()["sampling_params"]["max_tokens"] == 4


def test_requests_over_the_inline_limit_render_the_same(client: httpx.Client) -> None:
    """Bodies over 1 KiB render on a worker thread, smaller ones inline: same answer."""
    small = client.post(CHAT, json={"messages": USER, "max_tokens": 4})
    large = client.post(CHAT, json={"messages": USER, "max_tokens": 4, "padding_field": "x" * 4096})
    assert small.status_code == large.status_code == 200
    assert small.json()["token_ids"] == large.json()["token_ids"]


# --- model -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [CHAT, COMPLETION])
def test_an_unknown_model_is_404_with_vllms_message(client: httpx.Client, path: str) -> None:
    body = {"model": "nope", "messages": USER} if path == CHAT else {"model": "nope", "prompt": "x"}
    err = openai_error(client.post(path, json=body), 404)
    assert (err["type"], err["param"], err["message"]) == (
        "NotFoundError", "model", "The model `nope` does not exist. This server serves `qwen3`.")


def test_an_unknown_model_on_messages_is_an_anthropic_404(client: httpx.Client) -> None:
    r = client.post(MESSAGES, json={"model": "claude-nope", "max_tokens": 4, "messages": USER})
    assert anthropic_error(r, 404, "not_found_error") == (
        "The model `claude-nope` does not exist. This server serves `qwen3`.")


def test_the_served_model_name_is_accepted(client: httpx.Client) -> None:
    assert client.post(CHAT, json={"model": "qwen3", "messages": USER, "max_tokens": 4}).status_code == 200


# --- body shape ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [CHAT, COMPLETION, MESSAGES])
def test_a_wrong_content_type_is_415(client: httpx.Client, path: str) -> None:
    # 415, and no body without a type either: a page may POST either without a CORS preflight (issue 19 item 6)
    r = client.post(path, content=b"hello", headers={"content-type": "text/plain"})
    assert r.status_code == 415
    assert "The request has Content-Type 'text/plain'; send the JSON body with 'Content-Type: application/json'." in r.text
    r = client.post(path, content=b"{}")
    assert r.status_code == 415 and "no Content-Type" in r.text


@pytest.mark.parametrize("path", [CHAT, COMPLETION])
def test_a_non_object_body_is_400(client: httpx.Client, path: str) -> None:
    err = openai_error(client.post(path, json=[{"messages": USER}]), 400)
    assert err["message"] == "Request body must be a JSON object."


def test_invalid_json_is_400(client: httpx.Client) -> None:
    r = client.post(CHAT, content=b'{"messages": [', headers={"content-type": "application/json"})
    assert openai_error(r, 400)["message"].startswith("Request body is not valid JSON")


def test_a_missing_field_is_400_naming_it(client: httpx.Client) -> None:
    err = openai_error(client.post(CHAT, json={"model": "qwen3"}), 400)
    assert (err["param"], err["message"]) == ("messages", "messages: Field required")


def test_a_wrong_type_is_400_naming_the_field(client: httpx.Client) -> None:
    err = openai_error(client.post(CHAT, json={"messages": USER, "temperature": "hot"}), 400)
    assert err["param"] == "temperature"
    assert err["message"].startswith("temperature: Input should be a valid number")


def test_bad_message_content_is_400_naming_the_message(client: httpx.Client) -> None:
    err = openai_error(client.post(CHAT, json={"messages": [{"role": "user", "content": 3}]}), 400)
    assert err["message"] == "messages.0.content: must be a string, a list of content parts, or null"


def test_a_bad_messages_body_is_an_anthropic_400(client: httpx.Client) -> None:
    message = anthropic_error(client.post(MESSAGES, json={"messages": USER}), 400, "invalid_request_error")
    assert message == "max_tokens: Field required"


# --- render rules ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", [CHAT, COMPLETION])
def test_beam_search_is_400(client: httpx.Client, path: str) -> None:
    body = {"messages": USER} if path == CHAT else {"prompt": "x"}
    err = openai_error(client.post(path, json={**body, "use_beam_search": True}), 400)
    assert err["message"] == "Beam search is not supported by the render endpoint"


def test_auto_tool_choice_without_a_parser_is_400(client: httpx.Client) -> None:
    err = openai_error(client.post(CHAT, json={"messages": USER, "tools": TOOLS, "tool_choice": "auto"}), 400)
    assert err["message"] == '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'


def test_required_tool_choice_without_a_parser_is_400(client: httpx.Client) -> None:
    err = openai_error(client.post(CHAT, json={"messages": USER, "tools": TOOLS, "tool_choice": "required"}), 400)
    assert err["message"] == 'tool_choice="required" requires --tool-call-parser to be set'


def test_tool_choice_without_tools_is_400(client: httpx.Client) -> None:
    err = openai_error(client.post(CHAT, json={"messages": USER, "tool_choice": "auto"}), 400)
    assert err["message"] == "tool_choice: When using `tool_choice`, `tools` must be set."


def test_an_untrusted_request_chat_template_is_400(client: httpx.Client) -> None:
    err = openai_error(client.post(CHAT, json={"messages": USER, "chat_template": "{{ 'x' }}"}), 400)
    assert err["message"] == ("Chat template is passed with request, but --trust-request-chat-template is not set. "
                              "Refused request with untrusted chat template.")


def test_a_prompt_too_long_is_400_with_the_lengths(client: httpx.Client) -> None:
    err = openai_error(client.post(CHAT, json={"messages": [{"role": "user", "content": "word " * 80}],
                                               "max_tokens": 4}), 400)
    assert err["message"].startswith("You passed ")
    assert ("input tokens and requested 4 output tokens. However, the model's context length is only 64 tokens, "
            "resulting in a maximum input length of 64 tokens.") in err["message"]


@pytest.mark.parametrize(("path", "field"), [(CHAT, "max_tokens"), (CHAT, "max_completion_tokens"),
                                             (COMPLETION, "max_tokens"), (MESSAGES, "max_tokens")])
def test_max_tokens_past_the_room_left_is_clamped_as_vllm_0_32(client: httpx.Client, path: str, field: str) -> None:
    body: dict[str, Any] = {field: 63}
    if path == COMPLETION:
        body["prompt"] = "hi there"
    else:
        body["messages"] = USER
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    (out,) = r.json() if path == COMPLETION else [r.json()]
    assert out["sampling_params"]["max_tokens"] == 64 - len(out["token_ids"]) < 63


def test_text_that_cannot_fit_is_400_before_tokenizing(client: httpx.Client) -> None:
    err = openai_error(client.post(COMPLETION, json={"prompt": "x" * 200_000, "max_tokens": 4}), 400)
    assert err["message"].startswith("You passed 200000 input characters and requested 4 output tokens. However, "
                                     "the model's context length is only 64 tokens")


def test_a_prompt_that_leaves_no_room_is_400_with_the_lengths(client: httpx.Client) -> None:
    err = openai_error(client.post(COMPLETION, json={"prompt": list(range(1, 65)), "max_tokens": None}), 400)
    assert err["message"].startswith("This model's maximum context length is 64 tokens and your prompt has 64 tokens")


def test_max_tokens_above_the_context_is_400(client: httpx.Client) -> None:
    err = openai_error(client.post(CHAT, json={"messages": USER, "max_tokens": 65}), 400)
    assert err["message"] == ("`max_tokens` (65) is greater than the model's maximum context length (64 tokens). "
                              "Please request fewer output tokens.")


def test_an_anthropic_max_tokens_above_the_context_names_max_tokens(client: httpx.Client) -> None:
    # issue 20 item 7: the converted chat request carries max_completion_tokens; the error must not say so
    message = anthropic_error(client.post(MESSAGES, json={"messages": USER, "max_tokens": 99999999}), 400,
                              "invalid_request_error")
    assert message == ("`max_tokens` (99999999) is greater than the model's maximum context length (64 tokens). "
                       "Please request fewer output tokens.")
    err = openai_error(client.post(CHAT, json={"messages": USER, "max_completion_tokens": 65}), 400)
    assert err["message"].startswith("`max_completion_tokens` (65) is greater") and err["param"] == "max_completion_tokens"


def test_a_truncation_larger_than_the_context_is_400(client: httpx.Client) -> None:
    err = openai_error(client.post(CHAT, json={"messages": USER, "max_tokens": 4, "truncate_prompt_tokens": 65}), 400)
    assert err["message"] == ("truncate_prompt_tokens=65 cannot be greater than the model's maximum context length "
                              "(64 tokens). Please request a smaller truncation size.")


def test_truncation_to_zero_tokens_is_no_token_ids_rendered(client: httpx.Client) -> None:
    err = openai_error(client.post(CHAT, json={"messages": USER, "truncate_prompt_tokens": 0}), 400)
    assert err["message"] == "No token_ids rendered"


def test_an_empty_completion_prompt_is_no_token_ids_rendered(client: httpx.Client) -> None:
    err = openai_error(client.post(COMPLETION, json={"prompt": ""}), 400)
    assert err["message"] == "No token_ids rendered"


def test_an_out_of_vocabulary_token_is_400(client: httpx.Client) -> None:
    err = openai_error(client.post(COMPLETION, json={"prompt": [1, 10_000_000]}), 400)
    assert err["message"].startswith("Token id 10000000 is out of vocabulary")


def test_an_image_for_a_text_model_is_400(client: httpx.Client) -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]}
    err = openai_error(client.post(CHAT, json=body), 400)
    assert err["param"] == "messages.0.content.0.image_url"
    assert "does not accept images" in err["message"]


def test_a_bad_logit_bias_key_is_400_naming_the_field(client: httpx.Client) -> None:
    err = openai_error(client.post(CHAT, json={"messages": USER, "logit_bias": {"x": 1}}), 400)
    assert (err["param"], err["message"]) == ("logit_bias", "logit_bias: keys must be token ids (integers as strings), got 'x'")


def test_no_error_leaks_a_traceback(client: httpx.Client) -> None:
    for body in ({"messages": "x"}, {"messages": [{"role": 1}]}, {"messages": USER, "logit_bias": {"x": 1}}):
        r = client.post(CHAT, json=body)
        assert r.status_code == 400, r.text
        assert "Traceback" not in r.text
