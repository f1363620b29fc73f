"""OpenAI chat messages and tools → the plain data a chat template sees, by vLLM's rules (content
strings or parts, images collected, tool-call arguments parsed, tools with ``None`` kept). The
rules: docs/render.md, "Rules", item 5, and "Images", "The prompt".
"""

from __future__ import annotations

from typing import Any

import orjson

from engine.json_depth import too_deep, too_deep_message
from session.errors import RenderError
from session.protocol.openai import ChatMessage, ContentPart, Tool, ToolCall
from session.render.images import ImageRef
from session.render.template import ContentFormat

_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text", "refusal", "thinking"})
_PART_FIELDS = frozenset({"type", "text"})
# An image_url part converted from an Anthropic image block carries [where, param] of the block.
# The message roles of OpenAI's chat API (``function``: its deprecated tool role), as vLLM types them.
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
SOURCE_KEY = "tokenwire_source"


def conversation_of(messages: list[ChatMessage], content_format: ContentFormat, *,
                    images: list[ImageRef] | None = None, placeholder: str = "") -> list[dict[str, Any]]:
    """The template's ``messages``: fresh dicts (the template layer may edit them). Image parts
    are appended to ``images`` (refused when it is ``None``)."""
    out: list[dict[str, Any]] = []
    for index, msg in enumerate(messages):
        role = msg.role
        item: dict[str, Any] = {"role": role,
                                "content": _content(msg.content, content_format, index, images, placeholder)}
        if role == "assistant":
            if msg.tool_calls:
                item["tool_calls"] = [_tool_call(tc, f"messages[{index}].tool_calls[{k}].function.arguments")
                                      for k, tc in enumerate(msg.tool_calls)]
            reasoning = msg.reasoning if msg.reasoning is not None else msg.reasoning_content
            if reasoning is not None:
                item["reasoning"] = reasoning
                item["reasoning_content"] = reasoning
        elif role == "tool":
            if msg.tool_call_id is not None:
                item["tool_call_id"] = msg.tool_call_id
            if isinstance(item["content"], list):  # tool results are text for most templates
                item["content"] = "\n".join(p.get("text", "") for p in item["content"])
        if msg.name is not None:
            item["name"] = msg.name
        out.append(item)
    return out


def check_roles(messages: list[ChatMessage], template_source: str) -> None:
    """Refuse a role that is neither one of OpenAI's (:data:`ROLES`) nor named by the chat template
    (Llama 3.1's ``ipython``, Granite's ``available_tools``: a role the template handles is quoted in
    its source). vLLM passes any role to the template, where a typo (``usr``) renders as a turn of a
    speaker the model never saw; here it is a 400 naming the valid roles."""
    for index, msg in enumerate(messages):
        role = msg.role
        if role in ROLES or (role and (f'"{role}"' in template_source or f"'{role}'" in template_source)):
            continue
        raise RenderError(f"Unknown role {role[:100]!r} in messages[{index}]: the valid roles are "
                          f"{', '.join(ROLES[:-1])} and {ROLES[-1]} (or a role the model's chat template names).",
                          param=f"messages.{index}.role")


def developer_as_system(conversation: list[dict[str, Any]], template_source: str) -> list[dict[str, Any]]:
    """vLLM's rule for templates without a ``developer`` role (the OpenAI SDK and Codex send one):
    when a message is ``developer`` and the template's source never names that role, every developer
    message becomes ``system``, and when a system message then stands past the first position (or
    there are several) they are merged, their texts joined by a blank line, into one system message
    at the front. A template that names the role gets the conversation unchanged."""
    if not any(m["role"] == "developer" for m in conversation):
        return conversation
    if '"developer"' in template_source or "'developer'" in template_source:
        return conversation
    converted = [{**m, "role": "system"} if m["role"] == "developer" else m for m in conversation]
    texts: list[str] = []
    rest: list[dict[str, Any]] = []
    merge = False
    for i, msg in enumerate(converted):
        if msg["role"] != "system":
            rest.append(msg)
            continue
        merge = merge or i > 0 or bool(texts)
        content = msg.get("content", "")
        if isinstance(content, list):
            content = "\n".join(p["text"] if isinstance(p, dict) else p for p in content
                                 if isinstance(p, str) or (isinstance(p, dict) and "text" in p))
        if content:
            texts.append(content)
    if not merge:
        return converted
    return [{"role": "system", "content": "\n\n".join(texts)}, *rest]


def _content(content: str | list[str | ContentPart] | None, fmt: ContentFormat, index: int,
             images: list[ImageRef] | None, placeholder: str) -> str | list[dict[str, Any]]:
    if content is None:
        return [] if fmt == "openai" else ""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if fmt == "openai" else content
    texts: list[str] = []
    placeholders: list[str] = []
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        if isinstance(part, str):
            text: str | None = part
            extra: dict[str, Any] = {}
        elif part.type == "image_url" and images is not None:
            images.append(_image_ref(part, index, j))
            placeholders.append(placeholder)
            parts.append({"type": "image"})
            continue
        else:
            if part.type not in _TEXT_PART_TYPES:
                raise RenderError(
                    f"messages[{index}].content[{j}] has type {part.type!r}; render supports text and image_url "
                    "content parts.", param=f"messages.{index}.content.{j}.type")
            text = part.text
            extra = dict(part.model_extra or {})
        if text is None:
            continue  # vLLM skips text parts without text
        texts.append(text)
        parts.append({"type": "text", "text": text, **extra})
    return parts if fmt == "openai" else "\n".join(placeholders + texts)


def _image_ref(part: ContentPart, index: int, j: int) -> ImageRef:
    """The URL of an ``image_url`` part (``{"url": …}``, or a bare string) and where it sits; an
    Anthropic image block converted to this part carries its own location."""
    extra = part.model_extra or {}
    value = extra.get("image_url")
    url = value.get("url") if isinstance(value, dict) else value
    where, param = f"messages[{index}].content[{j}].image_url", f"messages.{index}.content.{j}.image_url"
    source = extra.get(SOURCE_KEY)
    if isinstance(source, list) and len(source) == 2 and all(isinstance(s, str) for s in source):
        where, param = source
    if not isinstance(url, str):
        raise RenderError(f"{where} must be an object with a string 'url' (a data:image/...;base64 URL or "
                          "base64).", param=param)
    return ImageRef(url, where, param)


def _tool_call(tc: ToolCall, where: str) -> dict[str, Any]:
    fn = tc.function
    arguments: Any = fn.arguments
    if not arguments:
        parsed: Any = {}
    elif isinstance(arguments, dict):
        parsed = arguments
    else:
        try:
            parsed = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            parsed = {}
        if too_deep(parsed, raw=arguments) is not None:  # templates serialize it again (tojson)
            raise RenderError(too_deep_message(f"{where} (a JSON string)"), param=where)
        if not isinstance(parsed, dict):
            parsed = {}
    function: dict[str, Any] = {"name": fn.name, "arguments": parsed, **(fn.model_extra or {})}
    call: dict[str, Any] = {}
    if tc.id is not None:
        call["id"] = tc.id
    call["type"] = tc.type
    call["function"] = function
    call.update(tc.model_extra or {})
    return call


def tool_dicts_of(tools: list[Tool]) -> list[dict[str, Any]]:
    """Tools as vLLM hands them to the template (``model_dump()`` shape, ``None`` kept)."""
    return [
        {"type": t.type, "function": t.function.model_dump()}
        for t in tools
    ]
