"""The harmony conversation of a chat request as vLLM 0.32 builds it: the system and developer
messages (identity, date, reasoning effort, instructions, tools) and the walk over the request's
messages (their channels, recipients and contents; analysis before the last final dropped).

The full rules: docs/render.md, "gpt-oss (harmony)".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from session.errors import RenderError
from session.protocol.openai import ChatCompletionRequest, ChatMessage, Tool
from session.render.harmony_tools import tools_section

__all__ = ["EFFORTS", "KNOWLEDGE_CUTOFF", "MODEL_IDENTITY", "Message", "harmony_messages"]

MODEL_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
KNOWLEDGE_CUTOFF = "2024-06"
EFFORTS = ("high", "medium", "low")  # vLLM's REASONING_EFFORT, in its order (the error lists them so)


@dataclass(slots=True)
class Message:
    """One harmony message: the author (role, or a tool's name), header fields and text contents."""

    role: str
    contents: list[str]
    name: str | None = None  # a tool author's name (``functions.NAME``)
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None
    tools: bool = field(default=False)  # a developer message declaring function tools

def _flatten(content: Any) -> str | None:
    """vLLM's ``flatten_input_text_content``: a string as is; parts' texts joined (no separator);
    ``None`` when there is no text."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        else:
            text = _part_text(part)
            if text is not None:
                texts.append(text)
    return "".join(texts) if texts else None


def _part_text(part: Any) -> str | None:
    text = getattr(part, "text", None)
    if text is None and part.model_extra:
        text = part.model_extra.get("text")
    return text if isinstance(text, str) else None


def _reasoning(msg: ChatMessage) -> str | None:
    return msg.reasoning if msg.reasoning is not None else msg.reasoning_content


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    if not value:
        return ""
    return json.dumps(value, ensure_ascii=False)


def _effort(value: str | None) -> str | None:
    if value is None:
        return None
    if value == "none":
        raise RenderError(f"Harmony does not support reasoning_effort={value!r}", param="reasoning_effort")
    if value not in EFFORTS:
        raise RenderError(f"reasoning_effort={value!r} is not supported by Harmony. Supported values are: "
                          f"{', '.join(EFFORTS)}.", param="reasoning_effort")
    return value


class _Builder:
    def __init__(self, *, start_date: str, system_instructions: bool) -> None:
        self.start_date = start_date
        self.system_instructions = system_instructions

    def system(self, *, effort: str | None = None, instructions: str | None = None) -> Message:
        identity = MODEL_IDENTITY
        if instructions is not None and self.system_instructions:
            identity = f"{identity}\n{instructions}" if identity else instructions
        # the sections; the channels line's last part depends on the whole conversation (render)
        top = "\n".join([identity, f"Knowledge cutoff: {KNOWLEDGE_CUTOFF}", f"Current date: {self.start_date}"])
        return Message("system", [top, f"Reasoning: {effort or 'medium'}"])

    def developer(self, *, instructions: str | None, tools: list[Tool] | None) -> Message:
        sections: list[str] = []
        if instructions is not None and not self.system_instructions:
            sections += ["# Instructions", instructions]
        declared = False
        if tools:
            sections.append(tools_section(tools))
            declared = True
        return Message("developer", ["\n\n".join(sections)], tools=declared)

    def system_or_developer(self, role: str, instructions: str) -> Message:
        if role == "system" and self.system_instructions:
            return self.system(instructions=instructions)
        return self.developer(instructions=instructions, tools=None)


def harmony_messages(req: ChatCompletionRequest, *, start_date: str, system_instructions: bool) -> list[Message]:
    """The harmony conversation of a chat request (vLLM's preamble and message rules)."""
    b = _Builder(start_date=start_date, system_instructions=system_instructions)
    messages = list(req.messages)
    instructions: str | None = None
    if messages and messages[0].role in ("system", "developer"):
        instructions = _flatten(messages[0].content)
        messages = messages[1:]
    effort = _effort(req.reasoning_effort)
    tools = req.tools
    out = [b.system(effort=effort, instructions=instructions if system_instructions else None)]
    developer_instructions = None if system_instructions else instructions
    if developer_instructions or tools:
        out.append(b.developer(instructions=developer_instructions, tools=tools))
    names: dict[str | None, str] = {}
    for msg in messages:
        for call in msg.tool_calls or []:
            names[call.id] = call.function.name
    for index, msg in enumerate(messages):
        out += _chat_message(b, msg, names, index + (len(req.messages) - len(messages)))
    return _drop_analysis(out)


def _chat_message(b: _Builder, msg: ChatMessage, names: Mapping[str | None, str], index: int) -> list[Message]:
    role = msg.role
    out: list[Message] = []
    if role == "assistant" and msg.tool_calls:
        content = _flatten(msg.content)
        if content:
            out.append(Message("assistant", [content], channel="commentary"))
        reasoning = _reasoning(msg)
        if reasoning:
            out.append(Message("assistant", [reasoning], channel="analysis"))
        for call in msg.tool_calls:
            out.append(Message("assistant", [_arguments(call.function.arguments)], channel="commentary",
                            recipient=f"functions.{call.function.name}", content_type="json"))
        return out
    if role == "tool":
        name = names.get(msg.tool_call_id if msg.tool_call_id is not None else "", "")
        return [Message("tool", [_flatten(msg.content) or ""], name=f"functions.{name}", channel="commentary",
                     recipient="assistant")]
    if role == "assistant":
        reasoning = _reasoning(msg)
        if reasoning:
            out.append(Message("assistant", [reasoning], channel="analysis"))
    contents = _contents(msg.content)
    if role == "assistant":
        if contents and contents[0]:
            out.append(Message("assistant", contents, channel="final"))
    elif role in ("system", "developer"):
        instructions = _flatten(msg.content)
        if instructions is not None:
            out.append(b.system_or_developer(role, instructions))
    elif role == "user":
        out.append(Message("user", contents))
    else:
        raise RenderError(f"messages[{index}]: harmony has no role {role!r} (its roles: system, developer, user, "
                          "assistant, tool).", param=f"messages.{index}.role")
    return out


def _contents(content: Any) -> list[str]:
    """A user / final message's text contents, one per part (each encoded on its own); a part
    without text (an image) is an empty text, as vLLM makes it."""
    if content is None:
        return [""]
    if isinstance(content, str):
        return [content]
    return [part if isinstance(part, str) else (_part_text(part) or "") for part in content]


def _drop_analysis(msgs: list[Message]) -> list[Message]:
    """vLLM's ``auto_drop_analysis_messages``: analysis messages before the last assistant
    ``final`` message go (the library's own dropping is off)."""
    last = -1
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].role == "assistant" and msgs[i].channel == "final":
            last = i
            break
    return [m for i, m in enumerate(msgs) if not (i < last and m.channel == "analysis")]

