"""Chat derender: engine token ids → ``chat.completion.chunk`` deltas and ``chat.completion``.

:class:`ChatDerenderer` is the incremental object every path uses (in memory in the pipelines,
restored per chunk by the HTTP streaming derender, pushed in one go by :func:`chat_response`), so
streaming and non-streaming agree by construction. The chunk shape, tool-call ids and finish
reasons: docs/derender.md, "In-process use (pipelines)" and "Differences from vLLM 0.32".
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, cast

from engine.protocol import GenerateResponse, TokenLogprob
from session.derender.choice import ArgsPiece, ChoiceStream, Piece, StreamSpec
from session.derender.logprobs import chat_logprobs
from session.parsers.base import ToolCallDelta

__all__ = ["ChatDerenderer", "ChatStep", "chat_response", "tool_call_id", "usage_dict"]


def tool_call_id(request_id: str, choice: int, call: int) -> str:
    return "chatcmpl-tool-" + hashlib.sha256(f"{request_id}:{choice}:{call}".encode()).hexdigest()[:16]


def _call_id(request_id: str, choice: int, call: ToolCallDelta) -> str:
    """A call's id: the one its parser gave (``call_id_style`` "kimi": Kimi-K2's
    ``functions.NAME:IDX``, as vLLM reports it), else :func:`tool_call_id`."""
    return call.id or tool_call_id(request_id, choice, call.index)


def usage_dict(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens, "prompt_tokens_details": None,
            "completion_tokens_details": None}


# A streamed choice, to copy: the fields left None here are set only when a step has them.
_CHOICE: dict[str, Any] = {"index": 0, "delta": None, "logprobs": None, "finish_reason": None, "stop_reason": None,
                           "token_ids": None}


class ChatStep:
    """The result of one push for one choice: the chunk to send (``None`` when there is nothing
    new), the piece it was built from, whether to stop the engine for this choice (a stop string
    matched) and whether the choice is finished."""

    __slots__ = ("chunk", "finished", "piece", "stop_engine")

    def __init__(self, chunk: dict[str, Any] | None, piece: Piece, stop_engine: bool = False,
                 finished: bool = False) -> None:
        self.chunk = chunk
        self.piece = piece
        self.stop_engine = stop_engine
        self.finished = finished


def _delta_tool_calls(request_id: str, choice: int, calls: Sequence[ToolCallDelta]) -> list[dict[str, Any]]:
    """Tool-call deltas in OpenAI's shape, merging consecutive fragments of the same call."""
    out: list[dict[str, Any]] = []
    for c in calls:
        if out and out[-1]["index"] == c.index and (c.name is None):
            fn = out[-1]["function"]
            fn["arguments"] = (fn["arguments"] or "") + c.arguments
            continue
        if c.name is not None:
            out.append({"id": _call_id(request_id, choice, c), "type": "function", "index": c.index,
                        "function": {"name": c.name, "arguments": c.arguments}})
        else:
            out.append({"id": None, "type": None, "index": c.index,
                        "function": {"name": None, "arguments": c.arguments}})
    return out


class ChatDerenderer:
    """Incremental chat derender of one request (``n`` choices)."""

    __slots__ = ("_created", "_head", "_model", "_request_id", "continuous_usage", "prompt_tokens",
                 "return_token_ids", "spec", "streams", "top_logprobs", "want_logprobs")

    def __init__(self, spec: StreamSpec, *, request_id: str, created: int, model: str, n: int = 1,
                 prompt_tokens: int = 0, want_logprobs: bool = True, top_logprobs: int | None = None,
                 continuous_usage: bool = False, return_token_ids: bool = False,
                 streams: dict[int, ChoiceStream] | None = None) -> None:
        self.spec = spec
        self._request_id = request_id
        self._created = created
        self._model = model
        self._head: dict[str, Any] | None = None  # see _chunk_head
        self.prompt_tokens = prompt_tokens
        self.want_logprobs = want_logprobs
        self.top_logprobs = top_logprobs
        self.continuous_usage = continuous_usage
        self.return_token_ids = return_token_ids
        self.streams: dict[int, ChoiceStream] = (
            streams if streams is not None else {i: ChoiceStream.new(spec, i) for i in range(n)})

    # --- what every chunk repeats -------------------------------------------------------------------
    @property
    def request_id(self) -> str:
        return self._request_id

    @request_id.setter
    def request_id(self, value: str) -> None:  # (a resumed stream takes its id from the checkpoint)
        self._request_id, self._head = value, None

    @property
    def created(self) -> int:
        return self._created

    @created.setter
    def created(self, value: int) -> None:
        self._created, self._head = value, None

    @property
    def model(self) -> str:
        return self._model

    def _chunk_head(self) -> dict[str, Any]:
        """A chunk without choices or usage, to copy (a copy costs half of building the dict)."""
        head = self._head
        if head is None:
            head = self._head = {
                "id": self._request_id, "object": "chat.completion.chunk", "created": self._created,
                "model": self._model, "choices": [], "usage": None, "system_fingerprint": None,
                "prompt_token_ids": None, "prompt_text": None, "metrics": None}
        return head

    # --- state -----------------------------------------------------------------------------------
    def stream(self, index: int) -> ChoiceStream:
        s = self.streams.get(index)
        if s is None:
            s = self.streams[index] = ChoiceStream.new(self.spec, index)
        return s

    def snapshot(self, index: int) -> dict[str, Any]:
        return self.stream(index).snapshot()

    def restore(self, index: int, snap: dict[str, Any]) -> None:
        self.streams[index] = ChoiceStream.restore(self.spec, index, snap)

    @property
    def completion_tokens(self) -> int:
        return sum(s.count for s in self.streams.values())

    @property
    def finished(self) -> bool:
        return all(s.finished for s in self.streams.values())

    # --- the step --------------------------------------------------------------------------------
    def push(self, index: int, token_ids: Sequence[int], logprobs: Sequence[TokenLogprob] | None = None,
             finish_reason: str | None = None, stop_reason: int | str | None = None, *,
             always: bool = False) -> ChatStep:
        """Derender the next ids of choice ``index``. Returns the chunk to send (``None`` when
        nothing is new, unless ``always``)."""
        stream = self.streams.get(index) or self.stream(index)
        piece = stream.push(token_ids, finish_reason, stop_reason)
        lp = None
        if logprobs and self.want_logprobs:
            lp = chat_logprobs(self.spec.table, logprobs[: piece.counted], self.top_logprobs)
        first = not stream.started
        args = type(piece) is ArgsPiece  # the common step inside a call: more of its arguments
        if not (args or first or always or lp or piece.content or piece.reasoning or piece.tool_calls
                or piece.finish_reason):
            return ChatStep(None, piece)
        stream.started = True
        delta: dict[str, Any] = {"role": "assistant" if first else None, "content": piece.content or None,
                                 "reasoning": piece.reasoning or None}
        if args:
            more = cast(ArgsPiece, piece)
            delta["tool_calls"] = [{"id": None, "type": None, "index": more.call,
                                    "function": {"name": None, "arguments": more.arguments}}]
        elif piece.tool_calls:
            delta["tool_calls"] = _delta_tool_calls(self._request_id, index, piece.tool_calls)
        choice = _CHOICE.copy()
        choice["index"], choice["delta"] = index, delta
        if lp is not None:
            choice["logprobs"] = lp
        if piece.finish_reason is not None:
            choice["finish_reason"], choice["stop_reason"] = piece.finish_reason, piece.stop_reason
        if self.return_token_ids:
            choice["token_ids"] = list(token_ids[: piece.counted])
        chunk = self._chunk_head().copy()
        chunk["choices"] = [choice]
        if self.continuous_usage:
            chunk["usage"] = usage_dict(self.prompt_tokens, stream.count)
        return ChatStep(chunk, piece, piece.stop_engine, stream.finished)

    def usage_chunk(self, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        """The final usage-only chunk (``choices: []``); by default counted over all choices."""
        if usage is None:
            usage = usage_dict(self.prompt_tokens, self.completion_tokens)
        chunk = self._chunk_head().copy()
        chunk["choices"], chunk["usage"] = [], usage
        return chunk


# --- non-streaming ---------------------------------------------------------------------------------


def _message(pieces: Sequence[Piece], request_id: str, choice: int, *, reasoning_split: bool = False) -> dict[str, Any]:
    """The non-streaming message. An empty ``content`` is ``null`` when calls were made or a
    reasoning parser split the output (a reasoning-only answer), as vLLM returns it; without a
    reasoning parser and calls an empty output is ``""`` (vLLM's text)."""
    content = "".join(p.content for p in pieces)
    reasoning = "".join(p.reasoning for p in pieces)
    calls: dict[int, dict[str, Any]] = {}
    for p in pieces:
        for c in p.tool_calls:
            call = calls.get(c.index)
            if call is None:
                call = calls[c.index] = {"id": _call_id(request_id, choice, c), "type": "function",
                                         "function": {"name": c.name or "", "arguments": ""}}
            elif c.name and not call["function"]["name"]:
                call["function"]["name"] = c.name
            call["function"]["arguments"] += c.arguments
    message: dict[str, Any] = {"role": "assistant",
                               "content": content if content or not (calls or reasoning_split) else None,
                               "refusal": None, "annotations": None, "audio": None, "function_call": None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    message["reasoning"] = reasoning or None
    return message


def chat_response(derenderer: ChatDerenderer, response: GenerateResponse) -> dict[str, Any]:
    """A ``chat.completion`` dict for a whole engine response, through the incremental path."""
    choices = []
    for gc in response.choices:
        stream = derenderer.stream(gc.index)
        ids = gc.token_ids or []
        entries = gc.logprobs.content if gc.logprobs is not None else None
        piece = stream.push(ids, gc.finish_reason, gc.stop_reason, final=True)
        lp = None
        if entries is not None and derenderer.want_logprobs:
            lp = chat_logprobs(derenderer.spec.table, entries[: piece.counted], derenderer.top_logprobs)
        choices.append({
            "index": gc.index,
            "message": _message([piece], derenderer.request_id, gc.index,
                                reasoning_split=derenderer.spec.reasoning_parser is not None),
            "logprobs": lp,
            "finish_reason": piece.finish_reason, "stop_reason": piece.stop_reason,
            "token_ids": list(ids[: piece.counted]) if derenderer.return_token_ids else None,
            "routed_experts": None,
        })
    return {
        "id": derenderer.request_id, "object": "chat.completion", "created": derenderer.created,
        "model": derenderer.model, "choices": choices, "service_tier": None, "system_fingerprint": None,
        "usage": usage_dict(derenderer.prompt_tokens, derenderer.completion_tokens),
        "prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None, "kv_transfer_params": None,
        "ec_transfer_params": None, "metrics": None,
    }


def assemble_message(chunks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Concatenate streamed chunks of one choice into (content, reasoning, tool_calls, finish),
    the shape tests and clients compare with the non-streaming message."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish = stop = None
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content.append(delta.get("content") or "")
            reasoning.append(delta.get("reasoning") or "")
            for tc in delta.get("tool_calls") or ():
                call = calls.setdefault(tc["index"], {"id": None, "name": None, "arguments": ""})
                call["id"] = call["id"] or tc.get("id")
                fn = tc.get("function") or {}
                call["name"] = call["name"] or fn.get("name")
                call["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason") is not None:
                finish, stop = choice["finish_reason"], choice.get("stop_reason")
    return {"content": "".join(content), "reasoning": "".join(reasoning),
            "tool_calls": [calls[i] for i in sorted(calls)], "finish_reason": finish, "stop_reason": stop}
