"""OpenAI Responses output from OpenAI-shaped chat derender output (sans-I/O, transport-free, so
that SSE and the WebSocket mode send identical events).

- :func:`output_from_chat` turns a non-streaming ``chat.completion`` into output items
  (``reasoning`` with ``reasoning_text``, ``message`` with ``output_text``, ``function_call``);
- :class:`ResponseEvents` turns the ``chat.completion.chunk`` dicts of one choice into the
  Responses event sequence, each event with its ``sequence_number``, ending with
  ``response.completed`` / ``response.incomplete`` / ``response.failed`` carrying the whole
  response (the object the JSON answer is).

Items open in the order their first delta arrives and close when another kind begins, so the
sequence is valid for any chunking. The sequence: docs/responses.md, "Streaming events".
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

Seal = Callable[[str], str]  # reasoning text → encrypted_content

_STATUS = {"length": "incomplete"}


def new_response_id() -> str:
    return f"resp_{secrets.token_hex(24)}"


def _item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def call_id_of(chat_id: str | None) -> str:
    """The chat derenderer's pinned tool-call id in OpenAI's ``call_`` style (the same in a stream
    and in the JSON answer, since both come from the same id)."""
    if chat_id and chat_id.startswith("chatcmpl-tool-"):
        return "call_" + chat_id[len("chatcmpl-tool-"):]
    return chat_id or _item_id("call")


def usage_of(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int = 0,
             cached_tokens: int = 0) -> dict[str, Any]:
    return {"input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
            "output_tokens": completion_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": prompt_tokens + completion_tokens}


def response_object(shape: dict[str, Any], *, response_id: str, created_at: int, status: str,
                    output: list[dict[str, Any]], usage: dict[str, Any] | None,
                    error: dict[str, Any] | None = None, finish_reason: str | None = None) -> dict[str, Any]:
    """The ``response`` object: ``shape`` holds the request's echoed fields (:func:`shape_of`)."""
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" and finish_reason == "length" else None
    done = status in ("completed", "incomplete", "failed", "cancelled")
    return {"id": response_id, "object": "response", "created_at": created_at, "status": status,
            "background": False, "completed_at": int(time.time()) if status == "completed" else None,
            "error": error, "incomplete_details": incomplete, **shape, "output": output,
            "usage": usage if done else None}


def shape_of(req: Any, *, model: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The request fields a ``response`` object echoes (``req``: a ``ResponsesRequest``)."""
    text = req.text.model_dump(mode="json", by_alias=True, exclude_none=True) if req.text is not None else {}
    text.setdefault("format", {"type": "text"})
    text.setdefault("verbosity", "medium")
    reasoning = req.reasoning.model_dump(mode="json", exclude_none=True) if req.reasoning is not None else {}
    choice = req.tool_choice
    if choice is None:
        choice = "auto"
    elif not isinstance(choice, str):
        choice = choice.model_dump(mode="json", exclude_none=True)
    return {"background": bool(getattr(req, "background", False)), "instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
            "max_tool_calls": req.max_tool_calls, "metadata": req.metadata or {}, "model": model,
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": req.previous_response_id, "prompt_cache_key": req.prompt_cache_key,
            "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
            "safety_identifier": req.safety_identifier, "service_tier": req.service_tier or "auto",
            "store": req.store is not False, "temperature": req.temperature, "text": text,
            "tool_choice": choice, "tools": tools, "top_logprobs": req.top_logprobs or 0, "top_p": req.top_p,
            "truncation": req.truncation or "disabled", "user": req.user}


def _logprobs(entries: Any) -> list[dict[str, Any]]:
    """Chat logprob entries → Responses ``Logprob`` entries (the same fields)."""
    out = []
    for e in entries or []:
        out.append({"token": e.get("token", ""), "logprob": e.get("logprob", 0.0), "bytes": e.get("bytes") or [],
                    "top_logprobs": [{"token": t.get("token", ""), "logprob": t.get("logprob", 0.0),
                                      "bytes": t.get("bytes") or []} for t in e.get("top_logprobs") or []]})
    return out


def reasoning_item(text: str, *, item_id: str | None = None, seal: Seal | None = None,
                   status: str = "completed") -> dict[str, Any]:
    item: dict[str, Any] = {"id": item_id or _item_id("rs"), "type": "reasoning", "summary": [],
                            "content": [{"type": "reasoning_text", "text": text}], "status": status}
    if seal is not None:
        item["encrypted_content"] = seal(text)
    return item


def message_item(text: str, *, item_id: str | None = None, status: str = "completed",
                 logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"id": item_id or _item_id("msg"), "type": "message", "role": "assistant", "status": status,
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}]}


def call_item(call_id: str, prompt_name: str, arguments: str, names: dict[str, tuple[str | None, str]], *,
              item_id: str | None = None, status: str = "completed") -> dict[str, Any]:
    namespace, name = names.get(prompt_name, (None, prompt_name))
    item: dict[str, Any] = {"id": item_id or _item_id("fc"), "type": "function_call", "status": status,
                            "call_id": call_id, "name": name, "arguments": arguments}
    if namespace is not None:
        item["namespace"] = namespace
    return item


def output_from_chat(chat: dict[str, Any], names: dict[str, tuple[str | None, str]], *,
                     seal: Seal | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """The output items of a non-streaming ``chat.completion`` (first choice), and its finish reason."""
    choice = chat["choices"][0]
    msg = choice.get("message") or {}
    finish = choice.get("finish_reason")
    # the message is cut short only when the output hit the limit with the message last
    status = "incomplete" if finish == "length" and not msg.get("tool_calls") else "completed"
    items: list[dict[str, Any]] = []
    if msg.get("reasoning"):
        items.append(reasoning_item(msg["reasoning"], seal=seal))
    if msg.get("content"):
        lp = _logprobs((choice.get("logprobs") or {}).get("content")) if choice.get("logprobs") else None
        items.append(message_item(msg["content"], status=status, logprobs=lp))
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        items.append(call_item(call_id_of(call.get("id")), fn.get("name") or "", fn.get("arguments") or "", names))
    return items, finish


class ResponseEvents:
    """The Responses event sequence of one response, from its chat chunks. Call :meth:`start`,
    then :meth:`push` per chunk, then :meth:`finish` (or :meth:`fail`); every event carries the
    next ``sequence_number``. :attr:`output` holds the finished items."""

    def __init__(self, shape: dict[str, Any], *, response_id: str | None = None, created_at: int | None = None,
                 names: dict[str, tuple[str | None, str]] | None = None, seal: Seal | None = None) -> None:
        self.shape = shape
        self.id = response_id or new_response_id()
        self.created_at = int(time.time()) if created_at is None else created_at
        self.names = names or {}
        self.seal = seal
        self.output: list[dict[str, Any]] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self._seq = 0
        self._kind: str | None = None  # the open item's kind: reasoning / message / function_call
        self._item: dict[str, Any] = {}
        self._text: list[str] = []
        self._logprobs: list[dict[str, Any]] = []
        self._call_index: int | None = None
        self._done = False
        self.final: dict[str, Any] | None = None  # the last event's response object

    # --- the sequence -----------------------------------------------------------------------
    def response(self, status: str, *, error: dict[str, Any] | None = None) -> dict[str, Any]:
        output = self.output if status != "in_progress" else []
        return response_object(self.shape, response_id=self.id, created_at=self.created_at, status=status,
                               output=list(output), usage=self.usage, error=error, finish_reason=self.finish_reason)

    def start(self) -> list[dict[str, Any]]:
        head = self.response("in_progress")
        return [self._ev("response.created", response=head), self._ev("response.in_progress", response=head)]

    def push(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """Events for one ``chat.completion.chunk`` dict (a usage chunk sets :attr:`usage`)."""
        events: list[dict[str, Any]] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning"):
                events += self._text_delta("reasoning", delta["reasoning"], None)
            if delta.get("content"):
                lp = _logprobs((choice.get("logprobs") or {}).get("content")) if choice.get("logprobs") else []
                events += self._text_delta("message", delta["content"], lp)
            for call in delta.get("tool_calls") or []:
                events += self._tool_delta(call)
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
        return events

    def finish(self, usage: dict[str, Any]) -> list[dict[str, Any]]:
        """The closing events: the open item's, then ``response.completed`` (or
        ``response.incomplete`` when the output hit ``max_output_tokens``)."""
        if self._done:
            return []
        self._done = True
        self.usage = usage
        events = self._close(final=True)
        status = "incomplete" if self.finish_reason == "length" else "completed"
        self.final = self.response(status)
        events.append(self._ev(f"response.{status}", response=self.final))
        return events

    def fail(self, message: str, *, code: str = "server_error") -> list[dict[str, Any]]:
        """``response.failed`` after an error mid-stream (the open item closed as incomplete)."""
        if self._done:
            return []
        self._done = True
        events = self._close(final=True, status="incomplete")
        self.final = self.response("failed", error={"code": code, "message": message})
        events.append(self._ev("response.failed", response=self.final))
        return events

    def cancel(self) -> list[dict[str, Any]]:
        """The end of a cancelled response (``POST /v1/responses/{id}/cancel``): its open item
        closed as incomplete, then ``response.incomplete`` with status ``cancelled``."""
        if self._done:
            return []
        self._done = True
        events = self._close(final=True, status="incomplete")
        self.final = self.response("cancelled")
        events.append(self._ev("response.incomplete", response=self.final))
        return events

    # --- items ------------------------------------------------------------------------------
    def _ev(self, kind: str, **fields: Any) -> dict[str, Any]:
        ev = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return ev

    @property
    def _index(self) -> int:
        return len(self.output)

    def _text_delta(self, kind: str, text: str, logprobs: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._kind != kind:
            events += self._close()
            self._kind, self._text, self._logprobs = kind, [], []
            if kind == "reasoning":
                self._item = {"id": _item_id("rs"), "type": "reasoning", "summary": [], "status": "in_progress"}
                part: dict[str, Any] = {"type": "reasoning_text", "text": ""}
            else:
                self._item = {"id": _item_id("msg"), "type": "message", "role": "assistant", "status": "in_progress",
                              "content": []}
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append(self._ev("response.output_item.added", output_index=self._index, item=dict(self._item)))
            events.append(self._ev("response.content_part.added", item_id=self._item["id"], output_index=self._index,
                                   content_index=0, part=part))
        self._text.append(text)
        where = {"item_id": self._item["id"], "output_index": self._index, "content_index": 0}
        if kind == "reasoning":
            events.append(self._ev("response.reasoning_text.delta", **where, delta=text))
        else:
            self._logprobs += logprobs or []
            events.append(self._ev("response.output_text.delta", **where, delta=text, logprobs=logprobs or []))
        return events

    def _tool_delta(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        index = call.get("index", 0)
        fn = call.get("function") or {}
        if self._kind != "function_call" or self._call_index != index:
            events += self._close()
            self._kind, self._call_index, self._text = "function_call", index, []
            self._item = call_item(call_id_of(call.get("id")), fn.get("name") or "", "", self.names,
                                   status="in_progress")
            events.append(self._ev("response.output_item.added", output_index=self._index, item=dict(self._item)))
        if fn.get("arguments"):
            self._text.append(fn["arguments"])
            events.append(self._ev("response.function_call_arguments.delta", item_id=self._item["id"],
                                   output_index=self._index, delta=fn["arguments"]))
        return events

    def _close(self, *, final: bool = False, status: str | None = None) -> list[dict[str, Any]]:
        kind = self._kind
        if kind is None:
            return []
        self._kind = None
        text = "".join(self._text)
        index, item_id = self._index, self._item["id"]
        where = {"item_id": item_id, "output_index": index}
        events: list[dict[str, Any]] = []
        if kind == "reasoning":
            part = {"type": "reasoning_text", "text": text}
            events.append(self._ev("response.reasoning_text.done", **where, content_index=0, text=text))
            events.append(self._ev("response.content_part.done", **where, content_index=0, part=part))
            item = reasoning_item(text, item_id=item_id, seal=self.seal)
        elif kind == "message":
            # the message is cut short only when the output hit the limit while it was open
            status = status or ("incomplete" if final and self.finish_reason == "length" else "completed")
            item = message_item(text, item_id=item_id, status=status, logprobs=self._logprobs)
            events.append(self._ev("response.output_text.done", **where, content_index=0, text=text,
                                   logprobs=self._logprobs))
            events.append(self._ev("response.content_part.done", **where, content_index=0,
                                   part=item["content"][0]))
        else:
            item = {**self._item, "arguments": text, "status": "completed"}
            events.append(self._ev("response.function_call_arguments.done", **where, arguments=text,
                                   name=item["name"]))
        events.append(self._ev("response.output_item.done", output_index=index, item=item))
        self.output.append(item)
        return events
