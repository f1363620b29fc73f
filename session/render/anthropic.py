"""Anthropic Messages request → OpenAI chat request, as vLLM's Anthropic endpoint converts it.

One function, :func:`to_openai_chat`, shared by render and the full pipeline (through
``Renderer.messages_chat``, which decides ``merge_inline_system`` from the chat template:
:func:`keeps_inline_system`). The conversion rules (system, inline system messages, blocks, tool
use and results, tool changes, images, sampling fields, tool choice, ``thinking``, ``output_config``):
docs/render.md, the paragraphs after "Rules".
"""

from __future__ import annotations

import functools
import json
from typing import Any

from session.errors import RenderError
from session.protocol.anthropic import (
    TOOL_CHANGES,
    ContentBlock,
    MessageParam,
    MessagesRequest,
    ToolDefinition,
)
from session.protocol.openai import ChatCompletionRequest
from session.render.conversation import SOURCE_KEY
from session.render.template import ChatTemplate

_BILLING_HEADER = "x-anthropic-billing-header"
# The probe conversation of keeps_inline_system: vLLM's [system, user, system, user].
_PROBE_INLINE = "tokenwire-inline-system-probe"


def has_inline_system(req: MessagesRequest) -> bool:
    return any(m.role == "system" for m in req.messages)


@functools.lru_cache(maxsize=16)
def keeps_inline_system(template: ChatTemplate) -> bool:
    """Whether ``template`` renders a system message that stands after the first message where it
    stands: it renders vLLM's probe conversation [system, user, system, user] without an error, and
    the second system message's text is in the output (a template that drops it, as gpt-oss's does,
    would lose it). Otherwise inline system messages are merged into the system prompt."""
    def content(text: str) -> Any:
        return [{"type": "text", "text": text}] if template.content_format == "openai" else text

    probe = [{"role": "system", "content": content("t")}, {"role": "user", "content": content("t")},
             {"role": "system", "content": content(_PROBE_INLINE)}, {"role": "user", "content": content("t")}]
    try:
        text = template.render(probe, add_generation_prompt=False).text
    except RenderError:
        return False
    return _PROBE_INLINE in text


def to_openai_chat(req: MessagesRequest, *, merge_inline_system: bool = False) -> ChatCompletionRequest:
    """``merge_inline_system``: every ``system`` message inside ``messages`` is appended, in order,
    to the system prompt (for a template that refuses or drops them); otherwise each one becomes a
    system message where it stands."""
    messages: list[dict[str, Any]] = []
    system = _system_text(req)
    if merge_inline_system:
        system += "".join(_inline_system_text(m) for m in req.messages if m.role == "system")
    if system:
        messages.append({"role": "system", "content": system})
    for index, msg in enumerate(req.messages):
        if msg.role == "system":
            text = "" if merge_inline_system else _inline_system_text(msg)
            if text:
                messages.append({"role": "system", "content": text})
            continue
        item: dict[str, Any] = {"role": msg.role}
        if isinstance(msg.content, str):
            item["content"] = msg.content
        else:
            _convert_blocks(msg.content, msg.role, item, messages, index)
        if not (msg.role == "user" and "content" not in item):
            messages.append(item)

    kwargs = dict(req.chat_template_kwargs or {})
    thinking = req.thinking.type if req.thinking is not None else None
    if thinking is not None and "enable_thinking" not in kwargs:
        kwargs["enable_thinking"] = thinking != "disabled"  # enabled / adaptive: on
    output = req.output_config
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
    if output is not None and output.effort is not None and thinking != "disabled":
        body["reasoning_effort"] = output.effort
    if output is not None and output.format is not None and output.format.json_schema is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "json_schema", "schema": output.format.json_schema}}
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
    tools = _resolve_tools(req)
    if tools is not None:
        update["tools"] = [{"type": "function", "function": _function(t)} for t in tools]
        update.setdefault("tool_choice", "auto")
    if update:
        chat = ChatCompletionRequest.model_validate(
            {**chat.model_dump(exclude_unset=True), **update, "messages": messages})
    return chat


def _function(tool: ToolDefinition) -> dict[str, Any]:
    """vLLM's function definition: ``strict`` and ``defer_loading`` only when set."""
    fn: dict[str, Any] = {"name": tool.name, "description": tool.description, "parameters": tool.input_schema}
    if tool.strict is not None:
        fn["strict"] = tool.strict
    if tool.defer_loading is not None:
        fn["defer_loading"] = tool.defer_loading
    return fn


def _resolve_tools(req: MessagesRequest) -> list[ToolDefinition] | None:
    """vLLM's rule for ``tool_addition`` / ``tool_removal`` blocks (in system messages): a template
    sees one tool list, the tools in effect at the end of the conversation — a tool added by
    reference is no longer deferred, one added by definition is declared (or replaced), a removed
    one is left out. A reference to an undeclared tool is a 400 naming the block."""
    changes = [(i, j, block) for i, msg in enumerate(req.messages) if not isinstance(msg.content, str)
               for j, block in enumerate(msg.content) if block.type in TOOL_CHANGES]
    if not changes:
        return req.tools
    tools = {tool.name: tool for tool in req.tools or []}
    removed: set[str] = set()
    for i, j, block in changes:
        change = block.tool
        assert change is not None  # the request model requires it
        if change.type == "tool_definition":
            assert change.definition is not None
            name = change.definition.name
            tools[name] = change.definition
        else:
            name = change.name or ""
            if name not in tools:
                raise RenderError(f"messages[{i}].content[{j}]: {block.type} references tool {name!r}, which is not "
                                  "declared in tools.", param=f"messages.{i}.content.{j}.tool.name")
            if block.type == "tool_addition":
                tools[name] = tools[name].model_copy(update={"defer_loading": None})
        if block.type == "tool_removal":
            removed.add(name)
        else:
            removed.discard(name)
    return [tool for name, tool in tools.items() if name not in removed]


def _inline_system_text(msg: MessageParam) -> str:
    """A system message's text, as vLLM takes it: its text blocks joined, the billing header dropped
    (tool changes and other blocks carry no text)."""
    if isinstance(msg.content, str):
        return "" if msg.content.startswith(_BILLING_HEADER) else msg.content
    return "".join(b.text for b in msg.content
                   if b.type == "text" and b.text and not b.text.startswith(_BILLING_HEADER))


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
        elif kind == "tool_reference":
            pass  # names a deferred tool; every declared tool is in the prompt already
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
        elif inner.type == "tool_reference":
            continue  # a tool search result naming a deferred tool: every declared tool is in the prompt
        else:
            raise RenderError(f"messages[{index}].content[{j}] holds a {inner.type!r} block; render supports "
                              "text tool results only.", param=f"messages.{index}.content.{j}.content")
    return "\n".join(texts)
