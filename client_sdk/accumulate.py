"""Streamed chunks → the non-streaming answer, the way the server builds it (sans-I/O).

A WebSocket session only streams; ``create(stream=False)`` over a session collects the stream and
returns what ``POST /v1/chat/completions`` (``/v1/completions``, ``/v1/messages``) without
``stream`` answers for the same output: content (``""`` rather than null when there are no tool
calls), reasoning, tool calls joined by index, logprobs concatenated, the last finish and stop
reasons, and the usage chunk's counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from client_sdk.types import (
    ChatCompletionResponse,
    ChatCompletionStreamResponse,
    CompletionResponse,
    CompletionStreamResponse,
    Message,
    MessageStreamEvent,
)


class _Choice:
    __slots__ = ("calls", "content", "finish", "logprobs", "reasoning", "stop", "text", "token_ids")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.logprobs: list[Any] | None = None
        self.token_ids: list[int] | None = None
        self.finish: str | None = None
        self.stop: int | str | None = None


def chat_response(chunks: Iterable[ChatCompletionStreamResponse]) -> ChatCompletionResponse:
    head: ChatCompletionStreamResponse | None = None
    choices: dict[int, _Choice] = {}
    usage: Any = None
    for chunk in chunks:
        head = head or chunk
        usage = chunk.usage or usage
        for sc in chunk.choices:
            c = choices.setdefault(sc.index, _Choice())
            d = sc.delta
            c.content.append(d.content or "")
            c.reasoning.append(d.reasoning or "")
            for tc in d.tool_calls or ():
                call = c.calls.setdefault(tc.index, {"id": None, "type": "function",
                                                     "function": {"name": "", "arguments": ""}})
                call["id"] = call["id"] or tc.id
                fn = tc.function
                if fn is not None:
                    call["function"]["name"] = call["function"]["name"] or fn.name or ""
                    call["function"]["arguments"] += fn.arguments or ""
            if sc.logprobs is not None and sc.logprobs.content is not None:
                c.logprobs = (c.logprobs or []) + list(sc.logprobs.content)
            if sc.token_ids is not None:
                c.token_ids = (c.token_ids or []) + list(sc.token_ids)
            if sc.finish_reason is not None:
                c.finish, c.stop = sc.finish_reason, sc.stop_reason
    if head is None:
        raise ValueError("no chunks to accumulate")
    out_choices = []
    for index in sorted(choices):
        c = choices[index]
        content = "".join(c.content)
        message: dict[str, Any] = {"role": "assistant", "content": content if content or not c.calls else None,
                                   "refusal": None, "annotations": None, "audio": None, "function_call": None}
        if c.calls:
            message["tool_calls"] = [c.calls[i] for i in sorted(c.calls)]
        message["reasoning"] = "".join(c.reasoning) or None
        out_choices.append({"index": index, "message": message,
                            "logprobs": {"content": c.logprobs} if c.logprobs is not None else None,
                            "finish_reason": c.finish, "stop_reason": c.stop, "token_ids": c.token_ids,
                            "routed_experts": None})
    return ChatCompletionResponse.model_validate({
        "id": head.id, "object": "chat.completion", "created": head.created, "model": head.model,
        "choices": out_choices, "service_tier": None, "system_fingerprint": head.system_fingerprint,
        "usage": usage if usage is not None else {"prompt_tokens": 0, "total_tokens": 0, "completion_tokens": 0},
        "prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None, "kv_transfer_params": None,
        "ec_transfer_params": None, "metrics": None,
    })


def completion_response(chunks: Iterable[CompletionStreamResponse]) -> CompletionResponse:
    head: CompletionStreamResponse | None = None
    choices: dict[int, _Choice] = {}
    logprobs: dict[int, dict[str, list[Any]]] = {}
    usage: Any = None
    for chunk in chunks:
        head = head or chunk
        usage = chunk.usage or usage
        for sc in chunk.choices:
            c = choices.setdefault(sc.index, _Choice())
            c.text.append(sc.text)
            if sc.logprobs is not None:
                lp = logprobs.setdefault(sc.index, {"text_offset": [], "token_logprobs": [], "tokens": [],
                                                    "top_logprobs": []})
                for key in lp:
                    lp[key].extend(getattr(sc.logprobs, key))
            if sc.token_ids is not None:
                c.token_ids = (c.token_ids or []) + list(sc.token_ids)
            if sc.finish_reason is not None:
                c.finish, c.stop = sc.finish_reason, sc.stop_reason
    if head is None:
        raise ValueError("no chunks to accumulate")
    out_choices = [{"index": i, "text": "".join(choices[i].text), "logprobs": logprobs.get(i),
                    "finish_reason": choices[i].finish, "stop_reason": choices[i].stop,
                    "token_ids": choices[i].token_ids, "prompt_logprobs": None, "prompt_token_ids": None,
                    "routed_experts": None} for i in sorted(choices)]
    return CompletionResponse.model_validate({
        "id": head.id, "object": "text_completion", "created": head.created, "model": head.model,
        "choices": out_choices, "service_tier": None, "system_fingerprint": head.system_fingerprint,
        "usage": usage if usage is not None else {"prompt_tokens": 0, "total_tokens": 0, "completion_tokens": 0},
        "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None,
    })


def message_response(events: Iterable[MessageStreamEvent]) -> Message:
    """Anthropic stream events → the ``message`` (as Anthropic's own SDK accumulates them)."""
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial_json: dict[int, str] = {}
    for ev in events:
        data = ev.model_dump()
        kind = data.get("type")
        if kind == "message_start":
            message = dict(data["message"])
            message["usage"] = dict(message.get("usage") or {})
        elif kind == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"])
        elif kind == "content_block_delta":
            block, delta = blocks[data["index"]], data["delta"]
            dtype = delta.get("type")
            if dtype == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif dtype == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            elif dtype == "signature_delta":
                block["signature"] = delta.get("signature", "")
            elif dtype == "input_json_delta":
                partial_json[data["index"]] = partial_json.get(data["index"], "") + delta.get("partial_json", "")
        elif kind == "content_block_stop":
            index = data["index"]
            if index in partial_json:
                blocks[index]["input"] = _tool_input(partial_json.pop(index))
        elif kind == "message_delta" and message is not None:
            message.update({k: v for k, v in (data.get("delta") or {}).items() if k in ("stop_reason", "stop_sequence")})
            message["usage"].update(data.get("usage") or {})
    if message is None:
        raise ValueError("no message_start event to accumulate")
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return Message.model_validate(message)


def _tool_input(text: str) -> Any:
    """The tool input as the server's non-streaming answer gives it (``session.derender.anthropic_out``)."""
    if not text:
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {"_raw_arguments": text}
    return value if isinstance(value, dict) else {"value": value}
