"""DeepSeek-V3.2's prompt encoder: vLLM 0.32 renders this model with its own Python encoder
(``vllm/tokenizers/deepseek_v32_encoding.py``, selected by the ``deepseek_v32`` tokenizer mode that
the ``DeepseekV32ForCausalLM`` architecture implies), not with a chat template. This module writes
that encoding again: thinking on or off (``thinking`` / ``enable_thinking``), tools in a system
block, DSML tool calls and ``<function_results>``, and past reasoning dropped after a user turn.
The rules, and how the renderer picks this over the template: docs/render.md, "DeepSeek-V3.2".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from session.errors import RenderError
from session.protocol.openai import ChatMessage, Tool
from session.render.template import ContentFormat, Rendered

# The architecture for which vLLM 0.32 defaults to tokenizer_mode "deepseek_v32" (its renderer).
ARCHITECTURES = frozenset({"DeepseekV32ForCausalLM"})

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
THINK, END_THINK = "<think>", "</think>"
DSML = "｜DSML｜"
USER, ASSISTANT = "<｜User｜>", "<｜Assistant｜>"

TOOLS_BLOCK = f"""## Tools
You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<{DSML}function_calls>" block like the following as part of your reply to the user:
<{DSML}function_calls>
<{DSML}invoke name="$FUNCTION_NAME">
<{DSML}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{DSML}parameter>
...
</{DSML}invoke>
<{DSML}invoke name="$FUNCTION_NAME2">
...
</{DSML}invoke>
</{DSML}function_calls>
String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).
If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:
<{DSML}function_calls>
...
</{DSML}function_calls>
<function_results>
...
</function_results>
{THINK}...thinking about results{END_THINK}
Here are the functions available in JSONSchema format:
<functions>
"""
TOOLS_END = "\n</functions>\n"


class EncodingError(ValueError):
    """A conversation the encoder refuses (vLLM answers 400 with its ValueError)."""


def uses_encoder(architectures: Sequence[str]) -> bool:
    """Whether vLLM renders a model of these ``config.json`` architectures with this encoder."""
    return bool(architectures) and architectures[0] in ARCHITECTURES


def function_dicts(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """The tools as vLLM's ``tool.model_dump()`` gives them to the encoder: ``type`` and the
    function's ``name`` / ``description`` / ``parameters`` (``None`` kept), ``strict`` and
    ``defer_loading`` only when set (the tool's ``defer_loading`` passed down); other keys dropped."""
    out = []
    for tool in tools:
        fn = tool.function
        extra = fn.model_extra or {}
        function: dict[str, Any] = {"name": fn.name, "description": fn.description, "parameters": fn.parameters}
        if extra.get("strict") is not None:
            function["strict"] = extra["strict"]
        defer = extra.get("defer_loading")
        if defer is None:
            defer = (tool.model_extra or {}).get("defer_loading")
        if defer is not None:
            function["defer_loading"] = defer
        out.append({"type": tool.type, "function": function})
    return out


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _tools_text(tools: Sequence[Any]) -> str:
    try:
        functions = [t["function"] for t in tools]
    except (KeyError, TypeError, IndexError):
        raise EncodingError("a tool must be an object with a 'function'") from None
    return TOOLS_BLOCK + "\n".join(_json(f) for f in functions) + TOOLS_END


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            raise EncodingError("tool call arguments are not JSON") from None
    if not isinstance(arguments, dict):
        raise EncodingError("tool call arguments must be an object")
    return "\n".join(
        f'<{DSML}parameter name="{key}" string="{"true" if isinstance(value, str) else "false"}">'
        f"{value if isinstance(value, str) else _json(value)}</{DSML}parameter>"
        for key, value in arguments.items())


def _calls_text(tool_calls: Sequence[Any]) -> str:
    calls = []
    for call in tool_calls:
        fn = call["function"]
        calls.append(f'<{DSML}invoke name="{fn["name"]}">\n{_arguments_text(fn["arguments"])}\n</{DSML}invoke>')
    return f"\n\n<{DSML}function_calls>\n" + "\n".join(calls) + f"\n</{DSML}function_calls>"


def _last_user(messages: Sequence[Mapping[str, Any]]) -> int:
    for idx in range(len(messages) - 1, -1, -1):
        if messages[idx].get("role") in ("user", "developer"):
            return idx
    return -1


def _without_past_reasoning(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM's ``drop_thinking_messages``: before the last user turn assistant messages lose their
    reasoning, and messages of any role but user, system, tool and assistant are dropped."""
    last = _last_user(messages)
    out = []
    for idx, msg in enumerate(messages):
        role = msg.get("role")
        if role in ("user", "system", "tool") or idx >= last:
            out.append(msg)
        elif role == "assistant":
            out.append({k: v for k, v in msg.items() if k != "reasoning"})
    return out


def _message(index: int, messages: list[dict[str, Any]], thinking: bool, last_user: int) -> str:
    if not 0 <= index < len(messages):
        raise EncodingError(f"Index {index} out of range for messages list of length {len(messages)}")
    msg = messages[index]
    role = msg.get("role")
    content = msg.get("content")
    tools = msg.get("tools")
    open_think = THINK if index == last_user and thinking else END_THINK
    if role == "system":
        text = content or ""
        return text + ("\n\n" + _tools_text(tools) if tools else "")
    if role == "developer":
        if not content:
            raise EncodingError("a developer message needs content")
        text = ("\n\n" + _tools_text(tools) if tools else "") + f"\n\n# The user's message is: {content}"
        return USER + text + ASSISTANT + open_think
    if role == "user":
        return f"{USER}{content}{ASSISTANT}{open_think}"
    if role == "tool":
        prev = index - 1
        owner = messages[prev]
        while prev >= 0 and owner.get("role") == "tool":
            prev -= 1
            owner = messages[prev]
        if not (index == 0 or (prev >= 0 and owner.get("role") == "assistant")):
            raise EncodingError(f"messages[{index}] is a tool result that follows no assistant message")
        order = index - prev
        calls = owner.get("tool_calls")
        if not (calls and len(calls) >= order):
            raise EncodingError("No tool calls but found tool output")
        text = "\n\n<function_results>" if order == 1 else ""
        text += f"\n<result>{content}</result>"
        if order == len(calls):
            text += "\n</function_results>\n\n" + (THINK if index >= last_user and thinking else END_THINK)
        return text
    if role == "assistant":
        calls = msg.get("tool_calls")
        calls_text = _calls_text(calls) if calls else ""
        reasoning = ""
        if thinking and index > last_user:
            if not (msg.get("reasoning") or calls):
                raise EncodingError("in thinking mode an assistant message after the last user message needs "
                                    "reasoning or tool calls")
            reasoning = (msg.get("reasoning") or "") + END_THINK
        return reasoning + (content or "") + calls_text + EOS
    raise EncodingError(f"Invalid role: {role}")


def encode(conversation: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None, *, thinking: bool) -> str:
    """The prompt text, as vLLM's DeepSeek-V3.2 tokenizer's ``apply_chat_template`` builds it."""
    messages = [dict(m) for m in conversation]
    if tools:
        messages.insert(0, {"role": "system", "tools": list(tools)})
    if not messages:
        raise EncodingError("messages must contain at least one message.")
    full = messages
    if thinking and messages[-1].get("role") == "user":
        full = _without_past_reasoning(messages)
    last_user = _last_user(full)
    try:
        return BOS + "".join(_message(i, full, thinking, last_user) for i in range(len(messages)))
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise EncodingError(f"the conversation cannot be encoded ({type(exc).__name__})") from None


class DeepSeekV32Encoder:
    """The renderer's stand-in for a chat template when the model is DeepSeek-V3.2."""

    content_format: ContentFormat = "string"
    marks_generation = False

    def render(self, conversation: list[dict[str, Any]], messages: Sequence[ChatMessage],
               tools: list[dict[str, Any]] | None, kwargs: Mapping[str, Any]) -> Rendered:
        """``conversation`` as the renderer built it (string content); ``messages`` the request's,
        for a developer message's own ``tools``; ``kwargs`` the merged chat_template_kwargs."""
        thinking = bool(kwargs.get("thinking", False)) or bool(kwargs.get("enable_thinking", False))
        for item, msg in zip(conversation, messages, strict=False):
            if item.get("role") == "developer":
                item["tools"] = (msg.model_extra or {}).get("tools")
        try:
            return Rendered(encode(conversation, tools, thinking=thinking))
        except EncodingError as exc:
            raise RenderError(str(exc), param="messages") from None
