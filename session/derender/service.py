"""The derender service: vLLM's ``/v1/*/derender`` requests in, response dicts out (sans-I/O).

One per server process (the HTTP routes and the WebSocket ``derender`` frames share it). It holds
the tokenizer's :class:`~session.detokenizer.TokenTable`, the configured parsers and the
:class:`~session.state.StateCodec`; the caller passes the clock (``now``) in.

Streaming (``"stream": true``) is stateless on the server: each call verifies the client's
``stream_state`` (bound to the request id, the choice index and a digest of the request context:
the ``chat_request`` / ``completion_request`` as sent, ``prompt_token_ids``, the parsers and the
model), restores one choice, pushes one engine chunk, and returns the chunk with the next state.
:meth:`DerenderService.step` is that step for a request body as sent: the HTTP derender routes
(``"stream": true``) and the WebSocket ``derender`` frames both call it.
"""

from __future__ import annotations

import contextlib
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engine.protocol import GenerateChoice, GenerateResponse, GenerateStreamResponse
from session.derender.bounds import (
    MAX_RESPONSES,
    check_choices,
    check_count,
    check_prompt_ids,
    check_top_logprobs,
)
from session.derender.chat import ChatDerenderer, chat_response
from session.derender.choice import StreamSpec
from session.derender.completion import CompletionDerenderer, completion_response
from session.derender.spec import PARSER_REQUIRES_CHAT_REQUEST, ParserConfig, chat_spec, completion_spec
from session.detokenizer import TokenTable, token_table
from session.errors import DerenderError, InvalidRequest, ModelNotFound
from session.protocol.openai import ChatCompletionRequest, CompletionRequest
from session.protocol.openai_responses import (
    DerenderChatRequest,
    DerenderChatStreamRequest,
    DerenderCompletionRequest,
    DerenderCompletionStreamRequest,
)
from session.state import StateBinding, StateCodec, context_digest

__all__ = ["INLINE_BODY_BYTES", "DerenderService"]

# A derender request body up to this many bytes costs less than a hop to a worker thread (a
# streaming step of a few tokens: tens of microseconds); the server's transports (the HTTP routes,
# the WebSocket derender frames) run larger ones on a worker thread.
INLINE_BODY_BYTES = 16 * 1024

PROMPT_IDS_REQUIRED = (
    "prompt_token_ids is required for streaming derender when a tool or reasoning parser is "
    "configured (the parsers need the end of the prompt)."
)
_PROMPT_SUFFIX = re.compile(r"-(\d+)$")
_SPEC_CACHE_SIZE = 256


class DerenderService:
    def __init__(self, tokenizer: Any, *, model_name: str, max_model_len: int, parsers: ParserConfig,
                 codec: StateCodec, table: TokenTable | None = None, vocab_size: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.table = table or token_table(tokenizer)
        # The bound on token ids: the model's vocab_size (its config.json), which real models pad
        # past the tokenizer (tiny-qwen3: 151,680 vs 151,669 ids); an id past the tokenizer is a
        # valid id that decodes to nothing, as on every other path. Without a config: the tokenizer's.
        self.vocab_size = vocab_size or self.table.vocab_size
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.parsers = parsers
        self.codec = codec
        # streaming calls of one stream repeat the same request context: its spec is built once
        self._specs: OrderedDict[str, StreamSpec] = OrderedDict()

    def _spec(self, digest: str, build: Callable[[], StreamSpec]) -> StreamSpec:
        # Large requests run on worker threads: every step here is one atomic dict operation, and
        # a race (another thread evicting the entry) only costs a rebuild.
        specs = self._specs
        spec = specs.get(digest)
        if spec is None:
            spec = specs[digest] = build()
            while len(specs) > _SPEC_CACHE_SIZE:
                try:
                    specs.popitem(last=False)
                except KeyError:
                    break
        else:
            with contextlib.suppress(KeyError):
                specs.move_to_end(digest)
        return spec

    # --- shared checks ---------------------------------------------------------------------------
    def _check_model(self, model: str | None) -> None:
        if model is not None and model != self.model_name:
            raise ModelNotFound(model, self.model_name)

    def _check_prompt(self, ids: Sequence[int] | None, param: str = "prompt_token_ids") -> None:
        check_prompt_ids(ids, max_model_len=self.max_model_len, vocab_size=self.vocab_size, param=param)

    def _check_prompt_tokens(self, counts: int | Sequence[int] | None) -> None:
        """A prompt longer than the context is no prompt of this model (and a count past 64 bits
        made the usage's total unencodable: a 500)."""
        for count in [counts] if isinstance(counts, int) else counts or ():
            if count > self.max_model_len:
                raise DerenderError(f"prompt_tokens is {count}, more than max_model_len ({self.max_model_len}).",
                                    param="prompt_tokens")

    def _check_response(self, r: GenerateResponse | GenerateStreamResponse, param: str, *, stream: bool) -> None:
        check_choices(r.choices, max_model_len=self.max_model_len, vocab_size=self.vocab_size,
                      param=param, require_tokens=not stream)
        prompt_lp = (r.model_extra or {}).get("prompt_logprobs")
        if isinstance(prompt_lp, list) and len(prompt_lp) > self.max_model_len:
            raise DerenderError(f"{param}.prompt_logprobs has {len(prompt_lp)} entries, more than max_model_len "
                                f"({self.max_model_len}).", param=param)

    def _chat_options(self, req: ChatCompletionRequest | None) -> dict[str, Any]:
        if req is None:
            return {}
        check_top_logprobs(req.top_logprobs, param="chat_request.top_logprobs")
        so = req.stream_options
        return {"want_logprobs": bool(req.logprobs), "top_logprobs": req.top_logprobs if req.logprobs else None,
                "continuous_usage": bool(so and so.continuous_usage_stats),
                "return_token_ids": bool(req.return_token_ids)}

    def _completion_options(self, req: CompletionRequest | None) -> dict[str, Any]:
        if req is None:
            return {}
        check_top_logprobs(req.logprobs, param="completion_request.logprobs")
        return {"want_logprobs": req.logprobs is not None, "top_logprobs": req.logprobs,
                "return_token_ids": bool(req.return_token_ids)}

    # --- the streaming step ----------------------------------------------------------------------
    def step(self, kind: str, body: Mapping[str, Any], *, now: int) -> dict[str, Any]:
        """One streaming derender step: ``kind`` ``"chat"`` or ``"completion"`` and ``body`` the
        streaming derender request as sent (``"stream": true`` implied) → ``{"chunk",
        "stream_state"}``. A body that does not validate raises pydantic's ``ValidationError``,
        which the server answers as a 400 naming the field."""
        if body.get("stream") is not True:
            body = {**body, "stream": True}
        if kind == "chat":
            return self.chat_stream(DerenderChatStreamRequest.model_validate(body), body.get("chat_request"),
                                    now=now)
        if kind == "completion":
            return self.completion_stream(DerenderCompletionStreamRequest.model_validate(body),
                                          body.get("completion_request"), now=now)
        raise InvalidRequest("derender frames take kind 'chat' or 'completion' (as the HTTP derender "
                             "endpoints); derender an Anthropic stream as 'chat'.", param="kind")

    # --- chat ------------------------------------------------------------------------------------
    def chat(self, req: DerenderChatRequest) -> dict[str, Any]:
        """``ChatCompletionResponse`` for one whole engine response."""
        self._check_model(req.model)
        self._check_response(req.generate_response, "generate_response", stream=False)
        self._check_prompt(req.prompt_token_ids)
        self._check_prompt_tokens(req.prompt_tokens)
        options = self._chat_options(req.chat_request)
        spec = chat_spec(self.table, self.parsers, req.chat_request, req.prompt_token_ids or ())
        gr = req.generate_response
        d = ChatDerenderer(spec, request_id=gr.request_id, created=gr.created, model=self.model_name, n=0,
                           prompt_tokens=req.prompt_tokens or 0, **options)
        return chat_response(d, gr)

    def chat_stream(self, req: DerenderChatStreamRequest, raw_chat_request: Any, *, now: int) -> dict[str, Any]:
        """``{"chunk", "stream_state"}`` for one engine chunk of one choice (the request validated:
        :meth:`step` takes the body as sent)."""
        chunk = self._check_stream(req)
        if self.parsers.any:
            if req.chat_request is None:
                raise DerenderError(PARSER_REQUIRES_CHAT_REQUEST, param="chat_request")
            if not req.prompt_token_ids:
                raise DerenderError(PROMPT_IDS_REQUIRED, param="prompt_token_ids")
        options = self._chat_options(req.chat_request)
        if not chunk.choices:
            return self._usage_only(chunk, req.stream_state, now, chat=True)
        gc = chunk.choices[0]
        digest = context_digest("chat", raw_chat_request, req.prompt_token_ids or [], self.parsers.names,
                                self.model_name)
        binding = StateBinding(chunk.request_id, gc.index, digest)
        spec = self._spec(digest, lambda: chat_spec(self.table, self.parsers, req.chat_request,
                                                     req.prompt_token_ids or ()))
        seq, created, snap = self._open(req.stream_state, binding, now)
        d = ChatDerenderer(spec, request_id=chunk.request_id, created=created, model=self.model_name, n=0,
                           prompt_tokens=req.prompt_tokens or 0, **options)
        return self._advance(d, gc, binding, seq, created, snap)

    # --- completions -----------------------------------------------------------------------------
    def completion(self, req: DerenderCompletionRequest) -> dict[str, Any]:
        self._check_model(req.model)
        responses = req.generate_responses
        if not responses:
            raise DerenderError("generate_responses must not be empty", param="generate_responses")
        check_count("generate_responses", len(responses), MAX_RESPONSES, param="generate_responses")
        if req.prompt_tokens is not None and len(req.prompt_tokens) != len(responses):
            raise DerenderError(f"prompt_tokens length ({len(req.prompt_tokens)}) must equal generate_responses "
                                f"length ({len(responses)})", param="prompt_tokens")
        if req.prompt_token_ids is not None and len(req.prompt_token_ids) != len(responses):
            raise DerenderError(f"prompt_token_ids length ({len(req.prompt_token_ids)}) must equal "
                                f"generate_responses length ({len(responses)})", param="prompt_token_ids")
        for k, r in enumerate(responses):
            self._check_response(r, f"generate_responses[{k}]", stream=False)
        for ids in req.prompt_token_ids or ():
            self._check_prompt(ids)
        self._check_prompt_tokens(req.prompt_tokens)
        creq = req.completion_request
        options = self._completion_options(creq)
        n = max((len(r.choices) for r in responses), default=1)
        if creq is not None:
            n = max(n, creq.n)
        derenderers = []
        for k, r in enumerate(responses):
            prompt_ids = req.prompt_token_ids[k] if req.prompt_token_ids else ()
            spec = completion_spec(self.table, creq, prompt_ids)
            derenderers.append(CompletionDerenderer(
                spec, request_id=r.request_id, created=r.created, model=self.model_name, n=0,
                prompt_tokens=req.prompt_tokens[k] if req.prompt_tokens else 0, index_base=k * n,
                echo_text=self._echo_text(creq, k, prompt_ids), **options))
        first = responses[0]
        rid = first.request_id if len(responses) == 1 else _PROMPT_SUFFIX.sub("", first.request_id)
        return completion_response(derenderers, responses, request_id=rid, created=first.created,
                                   model=self.model_name)

    def completion_stream(self, req: DerenderCompletionStreamRequest, raw_completion_request: Any, *,
                          now: int) -> dict[str, Any]:
        """As :meth:`chat_stream`, for a completion stream."""
        chunk = self._check_stream(req)
        creq = req.completion_request
        options = self._completion_options(creq)
        if not chunk.choices:
            return self._usage_only(chunk, req.stream_state, now, chat=False)
        gc = chunk.choices[0]
        prompt_ids = req.prompt_token_ids or ()
        digest = context_digest("completion", raw_completion_request, list(prompt_ids), self.model_name)
        binding = StateBinding(chunk.request_id, gc.index, digest)
        spec = self._spec(digest, lambda: completion_spec(self.table, creq, prompt_ids))
        seq, created, snap = self._open(req.stream_state, binding, now)
        m = _PROMPT_SUFFIX.search(chunk.request_id)
        prompt_index = int(m.group(1)) if m and creq is not None and len(creq.prompts()) > 1 else 0
        d = CompletionDerenderer(spec, request_id=chunk.request_id, created=created, model=self.model_name, n=0,
                                 prompt_tokens=req.prompt_tokens or 0,
                                 echo_text=self._echo_text(creq, prompt_index, prompt_ids), **options)
        return self._advance(d, gc, binding, seq, created, snap)

    # --- helpers ---------------------------------------------------------------------------------
    def _check_stream(self, req: DerenderChatStreamRequest | DerenderCompletionStreamRequest) -> GenerateStreamResponse:
        """The checks every streaming step makes first; returns its engine chunk."""
        self._check_model(req.model)
        chunk = req.generate_chunk
        if len(chunk.choices) > 1:
            raise DerenderError(f"generate_chunk carries {len(chunk.choices)} choices; send one choice per call "
                                "and keep one stream_state per choice index.", param="generate_chunk")
        self._check_response(chunk, "generate_chunk", stream=True)
        self._check_prompt(req.prompt_token_ids)
        self._check_prompt_tokens(req.prompt_tokens)
        return chunk

    def _advance(self, d: ChatDerenderer | CompletionDerenderer, gc: GenerateChoice, binding: StateBinding,
                 seq: int, created: int, snap: dict[str, Any] | None) -> dict[str, Any]:
        """Restore the choice (unless the stream starts here), push the chunk's tokens, sign the next state."""
        if snap is not None:
            d.restore(gc.index, snap)
        step = d.push(gc.index, gc.token_ids or (), gc.logprobs.content if gc.logprobs else None,
                      gc.finish_reason, gc.stop_reason, always=True)
        state = self.codec.encode(binding, seq + 1, {"t": created, "st": d.snapshot(gc.index)})
        return {"chunk": step.chunk, "stream_state": state}

    def _open(self, token: str | None, binding: StateBinding, now: int) -> tuple[int, int, dict[str, Any] | None]:
        """(sequence number, created, choice snapshot) of a verified state; a fresh stream for None."""
        if token is None:
            return 0, now, None
        decoded = self.codec.decode(token, binding)
        created, snap = decoded.body.get("t"), decoded.body.get("st")
        if not isinstance(created, int) or not isinstance(snap, dict):
            raise DerenderError("stream_state payload is malformed.", param="stream_state")
        return decoded.seq, created, snap

    def _usage_only(self, chunk: GenerateStreamResponse, token: str | None, now: int, *, chat: bool) -> dict[str, Any]:
        """A usage-only engine chunk (``choices: []``) → a usage-only chunk; the state passes
        through unchanged (as vLLM does)."""
        if chunk.usage is None:
            raise DerenderError("generate_chunk has no choices and no usage; send one choice per call, or the "
                                "usage-only chunk the engine sends last.", param="generate_chunk")
        usage = {"prompt_tokens": chunk.usage.prompt_tokens, "total_tokens": chunk.usage.total_tokens,
                 "completion_tokens": chunk.usage.completion_tokens,
                 "prompt_tokens_details": chunk.usage.prompt_tokens_details,
                 "completion_tokens_details": chunk.usage.completion_tokens_details}
        if chat:
            out = {"id": chunk.request_id, "object": "chat.completion.chunk", "created": now,
                   "model": self.model_name, "choices": [], "usage": usage, "system_fingerprint": None,
                   "prompt_token_ids": None, "prompt_text": None, "metrics": None}
        else:
            out = {"id": chunk.request_id, "object": "text_completion", "created": now, "model": self.model_name,
                   "choices": [], "usage": usage, "system_fingerprint": None, "metrics": None}
        return {"chunk": out, "stream_state": token}

    def _echo_text(self, req: CompletionRequest | None, prompt_index: int, prompt_ids: Sequence[int]) -> str | None:
        if req is None or not req.echo:
            return None
        prompts = req.prompts()
        if prompt_index < len(prompts):
            p = prompts[prompt_index]
            if isinstance(p, str):
                return p
            self._check_prompt(p, "completion_request.prompt")
            return self.table.decode(p, req.skip_special_tokens)
        return self.table.decode(list(prompt_ids), req.skip_special_tokens) if prompt_ids else ""
