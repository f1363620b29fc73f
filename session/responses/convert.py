"""OpenAI Responses request → OpenAI chat request body: the one conversion, shared by
``/v1/responses``, its ``input_tokens`` and ``render`` endpoints (and the WebSocket mode).

The chat request it gives goes through the chat pipeline unchanged (render, tool-choice rules,
parser routing, derender), so a Responses request renders as the chat conversation it stands for.
The item rules follow vLLM 0.32's ``construct_input_messages``: ``instructions`` first as a system
message; a ``reasoning`` item, an assistant ``message`` and ``function_call`` items that follow one
another merge into one assistant message (reasoning, content, tool calls); a
``function_call_output`` is a ``tool`` message. Beyond vLLM: earlier turns
(``previous_response_id``) keep their reasoning and tool calls, a reasoning item's
``encrypted_content`` is opened with the server's state secret (``unseal``), and a
``function_call_output`` without its ``function_call`` is a 400. Tools: ``function`` tools as
they are, ``namespace`` tools flattened to ``<namespace>__<name>`` (vLLM's names; calls are given
back with their ``namespace``: :attr:`ChatConversion.names`), every other type left out of the
prompt (:attr:`ChatConversion.left_out`). docs/responses.md, "How a request is rendered".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter

from session.errors import InvalidRequest
from session.protocol.responses import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    InputItem,
    MessageItem,
    NamedFunctionChoice,
    NamespaceTool,
    ReasoningItem,
    ResponsesRequest,
)

NAMESPACE_SEPARATOR = "__"  # vLLM's flat_namespace_tool_name
_ITEMS: TypeAdapter[list[Any]] = TypeAdapter(list[InputItem])

Unseal = Callable[[str, str], str]  # (encrypted_content, param) → the reasoning text


@dataclass(slots=True)
class ChatConversion:
    body: dict[str, Any]  # the chat completion request body
    names: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # prompt name → (namespace, name)
    left_out: list[str] = field(default_factory=list)  # tool types left out of the prompt


def flat_name(namespace: str | None, name: str) -> str:
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


def input_items(req: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's ``input`` as item dicts (a string is one user message), as stored and listed
    by ``GET /v1/responses/{id}/input_items``."""
    if isinstance(req.input, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": req.input}]}]
    return [item.model_dump(mode="json", exclude_none=True, by_alias=True) for item in req.input]


def parse_items(items: Sequence[dict[str, Any]]) -> list[Any]:
    """Stored item dicts (earlier inputs and outputs) back into item models."""
    return _ITEMS.validate_python(list(items))


def to_chat(req: ResponsesRequest, *, history: Sequence[Any] = (), unseal: Unseal | None = None) -> ChatConversion:
    """The chat body for ``req``; ``history``: the items of the earlier turns (parsed), before
    ``req.input``."""
    conv = ChatConversion(body={})
    tools = _tools(req, conv)
    items = list(history)
    first_input = len(items)
    items += [MessageItem(role="user", content=req.input)] if isinstance(req.input, str) else list(req.input)
    messages: list[dict[str, Any]] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
    messages += _messages(items, first_input, unseal)

    body: dict[str, Any] = {
        "model": req.model,
        "messages": messages,
        "max_completion_tokens": req.max_output_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "top_k": req.top_k,
        "min_p": req.min_p,
        "seed": req.seed,
        "presence_penalty": req.presence_penalty,
        "frequency_penalty": req.frequency_penalty,
        "repetition_penalty": req.repetition_penalty,
        "stop": req.stop,
        "stop_token_ids": req.stop_token_ids,
        "ignore_eos": req.ignore_eos,
        "cache_salt": req.cache_salt,
        "user": req.user,
        "parallel_tool_calls": req.parallel_tool_calls,
        "include_reasoning": req.include_reasoning,
        "chat_template_kwargs": req.chat_template_kwargs,
    }
    if req.reasoning is not None and req.reasoning.effort is not None:
        body["reasoning_effort"] = req.reasoning.effort
    fmt = req.text.format if req.text is not None else None
    if fmt is not None and fmt.type == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif fmt is not None and fmt.type == "json_schema":
        spec: dict[str, Any] = {"name": fmt.name, "schema": fmt.schema_}
        if fmt.strict is not None:
            spec["strict"] = fmt.strict
        body["response_format"] = {"type": "json_schema", "json_schema": spec}
    if req.wants("message.output_text.logprobs"):
        body["logprobs"] = True
        body["top_logprobs"] = req.top_logprobs or 0
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    choice = _tool_choice(req, tools, conv)
    if tools:
        body["tools"] = [{"type": "function", "function": fn} for fn in tools]
    body["tool_choice"] = choice
    conv.body = {k: v for k, v in body.items() if v is not None}
    return conv


# --- tools ------------------------------------------------------------------------------------


def _function(tool: FunctionTool, name: str) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": name, "description": tool.description, "parameters": tool.parameters}
    if tool.strict is not None:
        fn["strict"] = tool.strict
    return fn


def _tools(req: ResponsesRequest, conv: ChatConversion) -> list[dict[str, Any]]:
    """The prompt's function list (request order; namespaces flattened); the rest left out."""
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(req.tools or []):
        if isinstance(tool, FunctionTool):
            out.append(_function(tool, tool.name))
            conv.names[tool.name] = (None, tool.name)
        elif isinstance(tool, NamespaceTool):
            for j, inner in enumerate(tool.tools):
                if isinstance(inner, dict):  # not a function tool (validated as one when its type says so)
                    if inner.get("type") == "function":
                        inner = FunctionTool.model_validate(inner)
                    else:
                        conv.left_out.append(str(inner.get("type")))
                        continue
                if not isinstance(inner, FunctionTool):
                    raise InvalidRequest("a namespace holds function tools only", param=f"tools.{i}.tools.{j}")
                name = flat_name(tool.name, inner.name)
                out.append(_function(inner, name))
                conv.names[name] = (tool.name, inner.name)
        else:
            conv.left_out.append(tool.type)
    seen: set[str] = set()
    for fn in out:
        if fn["name"] in seen:
            raise InvalidRequest(f"two tools are named {fn['name'][:100]!r}; tool names must be unique "
                                 "(a namespace's tools are named <namespace>__<name>).", param="tools")
        seen.add(fn["name"])
    return out


def _tool_choice(req: ResponsesRequest, tools: list[dict[str, Any]], conv: ChatConversion) -> Any:
    """The chat ``tool_choice``; one that names a left-out tool is a 400 saying why."""
    choice = req.tool_choice
    left_out = f" (this request's tools of type {', '.join(sorted(set(conv.left_out)))} are left out)" \
        if conv.left_out else ""
    if choice is None or choice == "auto":
        return "auto" if tools else "none"
    if choice == "none":
        return "none"
    if choice == "required":
        if not tools:
            raise InvalidRequest("Tool choice 'required' must be specified with 'tools' parameter"
                                 f"{left_out}: this server runs no built-in tools, only the function tools "
                                 "the client runs.", param="tool_choice")
        return "required"
    if isinstance(choice, NamedFunctionChoice):
        return {"type": "function", "function": {"name": _resolve_name(choice.name, conv)}}
    kind = choice.type
    if kind == "allowed_tools":
        return _allowed_tools(choice.model_extra or {}, tools, conv)
    raise InvalidRequest(f"tool_choice names a {kind[:50]!r} tool, which this server leaves out of the prompt: it "
                         "runs no built-in tools (web search, file search, code interpreter, image generation, "
                         "computer use, MCP, shell, custom tools), only the function tools the client runs. "
                         "Choose a function tool, or \"auto\".", param="tool_choice")


def _resolve_name(name: str, conv: ChatConversion) -> str:
    """vLLM's rule: an exact prompt name, else a namespaced tool's own name when one namespace has it."""
    if name in conv.names:
        return name
    candidates = [flat for flat, (ns, local) in conv.names.items() if ns is not None and local == name]
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        raise InvalidRequest(f"Tool choice '{name[:100]}' is ambiguous: it is defined in more than one namespace "
                             f"({', '.join(candidates)}). Select it by its full '<namespace>__<name>' name.",
                             param="tool_choice")
    raise InvalidRequest("Tool choice 'function' not found in 'tools' parameter.", param="tool_choice")


def _allowed_tools(extra: dict[str, Any], tools: list[dict[str, Any]], conv: ChatConversion) -> Any:
    """``{"type": "allowed_tools", "mode": "auto" | "required", "tools": [{"type": "function",
    "name": ...}]}``: the prompt keeps only the allowed function tools."""
    mode, allowed = extra.get("mode", "auto"), extra.get("tools")
    if mode not in ("auto", "required") or not isinstance(allowed, list) or not allowed:
        raise InvalidRequest('tool_choice of type allowed_tools needs "mode" ("auto" or "required") and a non-empty '
                             '"tools" list of {"type": "function", "name": ...}.', param="tool_choice")
    names: set[str] = set()
    for k, entry in enumerate(allowed):
        if not isinstance(entry, dict) or entry.get("type") != "function" or not isinstance(entry.get("name"), str):
            raise InvalidRequest("allowed_tools lists function tools only ({\"type\": \"function\", \"name\": ...}): "
                                 "this server runs no built-in tools.", param=f"tool_choice.tools.{k}")
        names.add(_resolve_name(entry["name"], conv))
    tools[:] = [fn for fn in tools if fn["name"] in names]
    return mode


# --- items ------------------------------------------------------------------------------------


def _text_of(content: Any) -> str | None:
    """An assistant message's text, as vLLM takes it: the string, or the first part's text."""
    if isinstance(content, str):
        return content
    if content:
        part = content[0]
        return getattr(part, "text", None) or getattr(part, "refusal", None) or ""
    return None


def _part(part: Any, param: str) -> dict[str, Any]:
    kind = part.type
    if kind == "input_image":
        if not part.image_url:
            raise InvalidRequest("an input_image needs an image_url (a data: URL or an http(s) URL); file ids are "
                                 "not supported by this server.", param=f"{param}.image_url")
        return {"type": "image_url", "image_url": {"url": part.image_url, "detail": part.detail or "auto"}}
    if kind == "refusal":
        return {"type": "text", "text": part.refusal}
    return {"type": kind, "text": part.text}


def _tool_output(output: Any) -> str:
    if isinstance(output, str):
        return output
    return "\n".join(getattr(p, "text", None) or "" for p in output)


def _messages(items: list[Any], first_input: int, unseal: Unseal | None) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    calls: set[str] = set()

    def where(k: int) -> str:
        return f"input.{k - first_input}" if k >= first_input else "previous_response_id"

    for k, item in enumerate(items):
        prev = messages[-1] if messages and messages[-1]["role"] == "assistant" else None
        if isinstance(item, FunctionCallItem):
            calls.add(item.call_id)
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": flat_name(item.namespace, item.name), "arguments": item.arguments}}
            if prev is not None:
                prev.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "tool_calls": [call]})
        elif isinstance(item, ReasoningItem):
            text = _reasoning_text(item, where(k), unseal)
            if prev is not None and prev.get("reasoning") is None:
                prev["reasoning"] = text
            else:
                messages.append({"role": "assistant", "reasoning": text})
        elif isinstance(item, FunctionCallOutputItem):
            if item.call_id not in calls:
                raise InvalidRequest(f"No tool call found for function call output with call_id "
                                     f"{item.call_id[:100]}: send the function_call item (or chain the response "
                                     "that made it with previous_response_id) before its output.",
                                     param=f"{where(k)}.call_id")
            messages.append({"role": "tool", "content": _tool_output(item.output), "tool_call_id": item.call_id})
        elif isinstance(item, MessageItem):
            if item.role == "assistant":
                said = _text_of(item.content)
                if prev is not None and prev.get("content") is None:
                    prev["content"] = said
                else:
                    messages.append({"role": "assistant", "content": said})
                continue
            content: Any = item.content
            if not isinstance(content, str):
                content = [_part(p, f"{where(k)}.content.{j}") for j, p in enumerate(content)]
            messages.append({"role": item.role, "content": content})
        else:  # the request model admits no other item
            raise InvalidRequest(f"unsupported input item {type(item).__name__}", param=f"{where(k)}.type")
    return messages


def _reasoning_text(item: ReasoningItem, param: str, unseal: Unseal | None) -> str:
    if item.content:
        return item.content[0].text
    if item.encrypted_content is not None:
        if unseal is None:
            raise InvalidRequest("encrypted_content cannot be read here.", param=f"{param}.encrypted_content")
        return unseal(item.encrypted_content, f"{param}.encrypted_content")
    if item.summary:
        return item.summary[0].text
    return ""
