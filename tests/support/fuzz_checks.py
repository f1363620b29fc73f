"""Schemathesis checks of tokenwire's HTTP contract, loaded by the schemathesis CLI as a hooks
module (``SCHEMATHESIS_HOOKS=tests.support.fuzz_checks``; see ``tests/e2e/test_http_fuzz.py``).

- ``error_envelope``: every 4xx is the API's JSON error envelope with a message: OpenAI's
  ``{"error": {"message", "type", "param", "code"}}`` (``code`` equal to the status, or one of
  OpenAI's named codes, :data:`NAMED_CODES`), or Anthropic's
  ``{"type": "error", "error": {"type", "message"}}`` on ``/v1/messages``.
- ``accepts_valid_data``: schemathesis' ``positive_data_acceptance`` (a body the document calls
  valid is accepted), except 400s for the rules the document leaves out on purpose
  (``server/openapi.py``): they depend on the model (vocabulary, context length, chat template) or
  tie several fields together, and name the field in ``param``.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from schemathesis.checks import positive_data_acceptance
from schemathesis.core.failures import Failure

# The fields whose semantic rules may refuse a schema-valid body (with a 400 naming them).
SEMANTIC_PARAMS = frozenset((
    "token_ids", "tokens", "prompt", "messages", "max_tokens", "max_completion_tokens", "min_tokens", "sampling_params",
    "logit_bias", "allowed_token_ids", "stop_token_ids", "bad_words", "top_logprobs", "logprobs",
    "prompt_logprobs", "n", "best_of", "tool_choice", "tools", "truncate_prompt_tokens", "response_format",
    "structured_outputs", "generate_chunk", "generate_response", "generate_responses", "prompt_token_ids",
    "prompt_tokens", "chat_request", "completion_request", "stream_state", "thinking", "system",
    "chat_template_kwargs", "stop", "stop_sequences", "echo", "seed", "temperature", "top_p", "top_k", "min_p",
    "repetition_penalty", "assistant_tokens_mask", "output_mode", "extra_args", "vllm_xargs",
    "kv_transfer_params", "cache_salt", "model", "body", "continue_final_message", "add_generation_prompt",
    "stream_options", "features",
    # the Responses API's: its input items' rules (a call's output after the call, images, sealed
    # reasoning), the store's state (previous_response_id), the context length, the schema's features
    "input", "previous_response_id", "response_id", "max_output_tokens", "text",
    # GET /v1/responses/{id}?stream=true of a stored response not created with background: true
    # (OpenAI's 400, param "stream")
    "stream"))
# OpenAI's string error codes, where its API names one (server/responses.py)
NAMED_CODES = frozenset(("previous_response_not_found",))


def _anthropic(case: Any) -> bool:
    return str(case.path).startswith("/v1/messages")


def _json(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


@schemathesis.check
def error_envelope(ctx: Any, response: Any, case: Any) -> bool | None:
    if not 400 <= response.status_code < 500:
        return None
    body = _json(response)
    if _anthropic(case):
        err = body.get("error") if isinstance(body, dict) and body.get("type") == "error" else None
        ok = isinstance(err, dict) and isinstance(err.get("type"), str) and bool(err.get("message"))
    else:
        err = body.get("error") if isinstance(body, dict) else None
        ok = (isinstance(err, dict) and isinstance(err.get("type"), str) and isinstance(err.get("message"), str)
              and err["message"] != "" and (err.get("code") == response.status_code
                                            or err.get("code") in NAMED_CODES))
    if not ok:
        raise Failure(operation=case.operation.label, title="A 4xx without the API's error envelope",
                      message=f"HTTP {response.status_code}: {response.text[:300]!r}")
    return True


@schemathesis.check
def accepts_valid_data(ctx: Any, response: Any, case: Any) -> bool | None:
    try:
        return positive_data_acceptance(ctx, response, case)  # type: ignore[no-any-return]
    except Failure:
        if response.status_code == 400 and _semantic(response, case):
            return None
        raise


def _semantic(response: Any, case: Any) -> bool:
    if _anthropic(case):  # Anthropic errors carry no param; its rules are the chat rules
        return True
    body = _json(response)
    err = body.get("error") if isinstance(body, dict) else None
    param = err.get("param") if isinstance(err, dict) else None
    if not isinstance(param, str):
        return False
    return param.split(".", 1)[0].split("[", 1)[0] in SEMANTIC_PARAMS
