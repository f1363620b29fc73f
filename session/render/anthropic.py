"""Anthropic Messages request → OpenAI chat request, as vLLM's Anthropic endpoint converts it.

One function, :func:`to_openai_chat`, shared by render and the full pipeline. The conversion rules
(system, blocks, tool use and results, images, sampling fields, tool choice, ``thinking``):
docs/render.md, the paragraph after "Rules".
"""

from __future__ import annotations

import json
from typing import Any

from session.errors import RenderError
from session.protocol.anthropic import ContentBlock, MessagesRequest
from session.protocol.openai import ChatCompletionRequest
from session.render.conversation import SOURCE_KEY

_BILLING_HEADER = "x-anthropic-billing-header"


def to_openai_chat(req: MessagesRequest) -> ChatCompletionRequest:
    messages: list[dict[str, Any]] = []
    system = _system_text(req)
    if system:
        messages.append({"role": "system", "content": system})
    for index, msg in enumerate(req.messages):
        item: dict[str, Any] = {"role": msg.role}
        if isinstance(msg.content, str):
            item["content"] = msg.content
        else:
            _convert_blocks(msg.content, msg.role, item, messages, index)
        if not (msg.role == "user" and "content" not in item):
            messages.append(item)

    kwargs = dict(req.chat_template_kwargs or {})
    if req.thinking is not None and req.thinking.type in ("enabled", "disabled") and "enable_thinking" not in kwargs:
        kwargs["enable_thinking"] = req.thinking.type == "enabled"
    body: dict[str, Any] = {
        "model": req.model,
        "messages": messages,
        "max_tokens": req.max_tokens,
        "max_completion_tokens": req.max_tokens,
        "stop": req.stop_sequences,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "top_k": req.top_k,
        "chat_template_kwargs": kwargs or None,
        "tool_choice": None,
    }
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    chat = ChatCompletionRequest.model_validate(body)
    # tools and tool_choice are set after validation, as vLLM does: its request checks for tool
    # usage are written for OpenAI clients, and render applies the parser rules itself.
    update: dict[str, Any] = {}
    if req.tool_choice is not None:
        kind = req.tool_choice.type
        if kind == "tool":
            if not req.tool_choice.name:
                raise RenderError("tool_choice of type 'tool' needs a 'name'.", param="tool_choice.name")
            update["tool_choice"] = {"type": "function", "function": {"name": req.tool_choice.name}}
        else:
            update["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[kind]
    if req.tools is not None:
        update["tools"] = [
            {"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.input_schema}}
            for t in req.tools
        ]
        update.setdefault("tool_choice", "auto")
    if update:
        chat = ChatCompletionRequest.model_validate(
            {**chat.model_dump(exclude_unset=True), **update, "messages": messages})
    return chat


def _system_text(req: MessagesRequest) -> str:
    if req.system is None:
        return ""
    if isinstance(req.system, str):
        return req.system
    return "".join(b.text for b in req.system
                   if b.type == "text" and b.text and not b.text.startswith(_BILLING_HEADER))


def _convert_blocks(blocks: list[ContentBlock], role: str, item: dict[str, Any],
                    messages: list[dict[str, Any]], index: int) -> None:
    parts: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for j, block in enumerate(blocks):
        kind = block.type
        if kind == "text":
            if block.text:
                parts.append({"type": "text", "text": block.text})
        elif kind == "thinking":
            if block.thinking is not None:
                reasoning.append(block.thinking)
        elif kind == "image":
            parts.append(_image_part(block, index, j))
        elif kind == "redacted_thinking":
            pass  # opaque; accepted so clients can echo assistant turns back
        elif kind == "tool_use":
            tool_calls.append({
                "id": block.id or f"call_{index}_{j}",
                "type": "function",
                "function": {"name": block.name or "", "arguments": json.dumps(block.input or {})},
            })
        elif kind == "tool_result":
            if role == "user":
                messages.append({"role": "tool", "tool_call_id": block.tool_use_id or "",
                                 "content": _tool_result_text(block, index, j)})
            else:
                parts.append({"type": "text", "text": f"Tool result: {_tool_result_text(block, index, j)}"})
        else:
            raise RenderError(f"messages[{index}].content[{j}] has type {kind!r}; render supports text, image, "
                              "thinking, tool_use and tool_result blocks.",
                              param=f"messages.{index}.content.{j}.type")
    if reasoning:
        item["reasoning"] = "".join(reasoning)
    if tool_calls:
        item["tool_calls"] = tool_calls
    if parts:
        item["content"] = parts[0]["text"] if len(parts) == 1 and parts[0]["type"] == "text" else parts


def _image_part(block: ContentBlock, index: int, j: int) -> dict[str, Any]:
    """An ``image`` block as an OpenAI ``image_url`` part: a base64 source becomes a data URL; a url
    source keeps its URL (render refuses fetching it). The part remembers the block's location, so
    errors about the image name the Anthropic block."""
    where, param = f"messages[{index}].content[{j}].source", f"messages.{index}.content.{j}.source"
    source = (block.model_extra or {}).get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64" and isinstance(source, dict):
        media, data = source.get("media_type"), source.get("data")
        if not isinstance(media, str) or not isinstance(data, str):
            raise RenderError(f"{where} of type 'base64' needs a string 'media_type' (image/png, image/jpeg, "
                              "image/webp) and a string 'data'.", param=param)
        url = f"data:{media};base64,{data}"
    elif kind == "url" and isinstance(source, dict) and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise RenderError(f"{where} must be an object of type 'base64' (with media_type and data) or 'url'.",
                          param=param)
    return {"type": "image_url", "image_url": {"url": url}, SOURCE_KEY: [where, param]}


def _tool_result_text(block: ContentBlock, index: int, j: int) -> str:
    content = block.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for inner in content:
        if inner.type == "text":
            texts.append(inner.text or "")
        else:
            raise RenderError(f"messages[{index}].content[{j}] holds a {inner.type!r} block; render supports "
                              "text tool results only.", param=f"messages.{index}.content.{j}.content")
    return "\n".join(texts)
