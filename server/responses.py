"""The OpenAI Responses API over the chat pipeline: one service for ``/v1/responses`` (JSON and
SSE), its stored responses and its ``input_tokens`` / ``render`` endpoints, and whatever other
transport sends the same requests (the WebSocket mode reads :meth:`ResponsesService.open_stream`'s
events as SSE does).

A request is validated (``session.protocol.responses``), its earlier turns are read from the store
(``previous_response_id``), and it is converted to the chat request it stands for
(``session.responses.convert.to_chat``), which runs through ``Pipeline`` exactly as a
``/v1/chat/completions`` request; the chat output becomes Responses output
(``session.responses.events``). Reasoning given back as ``encrypted_content`` is sealed with
the state secret (any front end holding it opens it). docs/responses.md.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.requests import HTTPConnection

from engine.protocol import GenerateRequest
from server import metrics
from server.errors import ApiError, to_api_error
from server.http import validate
from server.pipeline import Pipeline
from server.render_work import json_size, render_work
from server.responses_background import BackgroundRuns, not_resumable
from server.responses_store import MemoryStore, ResponseStore, StoreUnavailable
from session.errors import InvalidRequest, SessionError, StateError
from session.protocol.openai import ChatCompletionRequest
from session.protocol.responses import ResponsesRequest
from session.responses.convert import ChatConversion, input_items, parse_items, to_chat
from session.responses.events import (
    ResponseEvents,
    call_id_of,
    new_response_id,
    output_from_chat,
    response_object,
    shape_of,
    usage_of,
)
from session.state import StateBinding, StateCodec, context_digest

log = logging.getLogger("tokenwire.responses")

RENDER_PREVIOUS = "previous_response_id is not supported by the stateless render endpoint."  # vLLM 0.32's
CANCEL_DONE = "Cannot cancel a synchronous response."  # vLLM 0.32's, for a response that is not running
BACKGROUND_ONLY_HTTP = ("background responses are not supported on this transport: they run over HTTP "
                        "(POST /v1/responses with background: true, resumed with GET /v1/responses/{id}"
                        "?stream=true). Send the request without `background`.")
SHUT_DOWN = "The server shut down before this background response ended."
_REASONING_STREAM = "responses.reasoning"  # what a sealed reasoning text is bound to


def responses_of(conn: HTTPConnection) -> ResponsesService:
    """The process's Responses service (built with the other services at start-up,
    ``server/services.py``), for every transport that takes Responses requests."""
    service: ResponsesService = conn.app.state.services.responses
    return service


def not_found(response_id: str) -> ApiError:
    return ApiError(404, f"Response with id '{response_id[:200]}' not found.", param="response_id",
                    error_type="invalid_request_error")


def previous_not_found(response_id: str) -> ApiError:
    """OpenAI's answer to an unknown (or expired, or deleted) ``previous_response_id``."""
    return ApiError(400, f"Previous response with id '{response_id[:200]}' not found.", param="previous_response_id",
                    error_type="invalid_request_error", code="previous_response_not_found")


class _Prepared:
    __slots__ = ("chat", "created", "history", "id", "req", "shape")

    def __init__(self, req: ResponsesRequest, chat: ChatConversion, history: list[dict[str, Any]],
                 shape: dict[str, Any]) -> None:
        self.req = req
        self.chat = chat
        self.history = history
        self.shape = shape
        self.id = new_response_id()
        self.created = int(time.time())


class ResponsesService:
    def __init__(self, pipeline: Pipeline, codec: StateCodec, store: ResponseStore | None = None, *,
                 background: BackgroundRuns | None = None) -> None:
        self.pipeline = pipeline
        self.codec = codec
        self.store: ResponseStore = store if store is not None else MemoryStore()
        self.background = background if background is not None else BackgroundRuns()
        self._binding = StateBinding(_REASONING_STREAM, 0, context_digest(_REASONING_STREAM,
                                                                          pipeline.ctx.model_name))
        self._running: dict[str, anyio.CancelScope | ResponseStream] = {}  # stored responses in flight here
        self._deleted: set[str] = set()  # deleted while in flight: not stored again when they end

    def over_store(self, store: ResponseStore) -> ResponsesService:
        """This service reading and writing through ``store`` (a WebSocket connection's): the same
        pipeline, codec and events, and the same running responses, so ``cancel`` and ``DELETE``
        reach a stored response running through either."""
        other = ResponsesService(self.pipeline, self.codec, store=store, background=self.background)
        other._running = self._running
        other._deleted = self._deleted
        return other

    def record(self, prep: _Prepared, response: dict[str, Any]) -> dict[str, Any]:
        """The stored record of ``prep``'s response: the response, its input items (with ids) and
        the items of the turns before it."""
        return {"response": response, "input": _with_ids(input_items(prep.req)), "history": prep.history}

    # --- requests -----------------------------------------------------------------------------
    async def prepare(self, body: dict[str, Any], *, stream: bool | None = None, stateless: bool = False,
                      background: bool = False) -> _Prepared:
        """Validate, read the earlier turns and convert to the chat request (nothing rendered yet);
        ``background: true`` is refused unless ``background`` says the caller runs it."""
        req = validate(ResponsesRequest, body)
        if req.background and not background and not stateless:
            raise ApiError(400, BACKGROUND_ONLY_HTTP, param="background", error_type="invalid_request_error")
        if stream is not None:
            req.stream = stream
        history: list[dict[str, Any]] = []
        if req.previous_response_id is not None:
            if stateless:
                raise ApiError(400, RENDER_PREVIOUS, param="previous_response_id",
                               error_type="invalid_request_error")
            record = await self.store.get(req.previous_response_id)
            if record is None:
                raise previous_not_found(req.previous_response_id)
            history = [*record["history"], *record["input"], *record["response"]["output"]]
        try:
            chat = to_chat(req, history=parse_items(history), unseal=self._unseal)
        except SessionError as exc:
            raise _renamed(exc) from None
        if chat.left_out:
            metrics.responses_tools_left_out(len(chat.left_out))
            _warn_left_out(chat.left_out)
        tools = [t.model_dump(mode="json", exclude_none=True) for t in req.tools or []]
        return _Prepared(req, chat, history, shape_of(req, model=self.pipeline.ctx.model_name, tools=tools))

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """The non-streaming answer (the ``response`` object)."""
        prep = await self.prepare(body, stream=False)
        stored = prep.req.store is not False
        scope = anyio.CancelScope()
        if stored:
            self._running[prep.id] = scope
            await self._save(prep, response_object(prep.shape, response_id=prep.id, created_at=prep.created,
                                                   status="in_progress", output=[], usage=None))
        try:
            with scope:
                chat = await _renaming(self.pipeline.complete("chat", prep.chat.body))
            if scope.cancelled_caught:
                response = response_object(prep.shape, response_id=prep.id, created_at=prep.created,
                                           status="cancelled", output=[], usage=None)
            else:
                output, finish = output_from_chat(chat, prep.chat.names, seal=self._sealer(prep.req))
                usage = chat.get("usage") or {}
                response = response_object(
                    prep.shape, response_id=prep.id, created_at=prep.created,
                    status="incomplete" if finish == "length" else "completed", output=output,
                    usage=self._usage(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0), output),
                    finish_reason=finish)
        except BaseException:
            if stored:
                self._running.pop(prep.id, None)
                with anyio.CancelScope(shield=True):
                    await self.store.delete(prep.id)
            raise
        if stored:
            self._running.pop(prep.id, None)
            await self._save(prep, response)
        return response

    async def open_stream(self, body: dict[str, Any], *, background: bool = False) -> ResponseStream:
        """Validate, render and admit (errors raise here, before any event); the stream's
        :meth:`ResponseStream.events` are the Responses events."""
        prep = await self.prepare(body, stream=True, background=background)
        stream = await _renaming(self.pipeline.open_stream("chat", prep.chat.body))
        return ResponseStream(self, prep, stream)

    async def start_background(self, body: dict[str, Any], client: str) -> ResponseStream:
        """A ``background: true`` request: validated, rendered and admitted here (errors raise
        before anything runs), stored ``in_progress``, then generated in a server task
        (``server.responses_background``) whatever becomes of this request; read its events with
        :meth:`resume`."""
        self.background.check(client)
        stream = await self.open_stream(body, background=True)
        try:
            await stream.register()
            self.background.start(stream.id, client, stream.events)
        except BaseException:
            self._running.pop(stream.id, None)
            with anyio.CancelScope(shield=True):
                await stream.stream.aclose()
                await self.store.delete(stream.id)
            raise
        return stream

    async def resume(self, response_id: str, after: int | None) -> AsyncIterator[bytes]:
        """``GET /v1/responses/{id}?stream=true``: the SSE events of a background response after
        sequence number ``after`` (all of them for ``None``), replayed then live, to its terminal
        event. A response whose log this front end does not hold is a 4xx that says why."""
        event_log = self.background.log_of(response_id)
        if event_log is None:
            record = await self.store.get(response_id)
            if record is None:
                raise not_found(response_id)
            raise not_resumable(response_id, record["response"], self.background.keep_s)
        if after is not None:
            event_log.check_after(after)
        return event_log.after(-1 if after is None else after)

    async def input_tokens(self, body: dict[str, Any]) -> int:
        """``POST /v1/responses/input_tokens``: the prompt length the request renders to (a
        ``background`` field counts as any other: nothing runs)."""
        prep = await self.prepare(body, stream=False, background=True)
        chat = validate(ChatCompletionRequest, prep.chat.body)
        ids = await _renaming(render_work(self.pipeline.renderer.tokenize_chat, chat, json_size(body)))
        return len(ids)

    async def render(self, body: dict[str, Any]) -> GenerateRequest:
        """``POST /v1/responses/render``: the engine request, as vLLM 0.32's render server gives it."""
        prep = await self.prepare(body, stateless=True)
        req = await self.render_prepared(prep, json_size(body))
        req.request_id = prep.id
        # vLLM's Responses sampling params carry an empty ``extra_args`` (its chat ones none)
        req.sampling_params.extra_args = req.sampling_params.extra_args or {}
        return req

    async def render_prepared(self, prep: _Prepared, size: int) -> GenerateRequest:
        """The engine request of a prepared request (rendered as for generation, the context-length
        check included; ``size``: its body's bytes, which decide where the render runs)."""
        chat = validate(ChatCompletionRequest, prep.chat.body)
        req: GenerateRequest = await _renaming(render_work(self.pipeline.renderer.render_chat, chat, size))
        return req

    # --- stored responses ---------------------------------------------------------------------
    async def get(self, response_id: str) -> dict[str, Any]:
        record = await self.store.get(response_id)
        if record is None:
            raise not_found(response_id)
        response: dict[str, Any] = record["response"]
        return response

    async def delete(self, response_id: str) -> dict[str, Any]:
        running = self._running.pop(response_id, None)
        if running is not None:
            self._deleted.add(response_id)
            running.cancel()
        self.background.forget(response_id)
        if not await self.store.delete(response_id):
            raise not_found(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    async def cancel(self, response_id: str) -> dict[str, Any]:
        """Cancel a stored response still running on this front end (its engine work is aborted);
        a finished one is vLLM's 400."""
        record = await self.store.get(response_id)
        if record is None:
            raise not_found(response_id)
        running = self._running.pop(response_id, None)
        if running is None or record["response"]["status"] not in ("queued", "in_progress"):
            raise ApiError(400, CANCEL_DONE, param="response_id", error_type="invalid_request_error")
        running.cancel()
        response = {**record["response"], "status": "cancelled"}
        await self.store.put(response_id, {**record, "response": response})
        return response

    async def input_items(self, response_id: str, *, after: str | None, limit: int, order: str) -> dict[str, Any]:
        record = await self.store.get(response_id)
        if record is None:
            raise not_found(response_id)
        items: list[dict[str, Any]] = list(record["input"])
        if order == "desc":
            items.reverse()
        if after is not None:
            ids = [item.get("id") for item in items]
            if after not in ids:
                raise ApiError(400, f"No input item with id '{after[:200]}' in response '{response_id[:200]}'.",
                               param="after")
            items = items[ids.index(after) + 1:]
        page = items[:limit]
        return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit}

    def limits(self) -> dict[str, Any]:
        limits = getattr(self.store, "limits", None)
        return limits() if callable(limits) else {}

    # --- internals ----------------------------------------------------------------------------
    async def _save(self, prep: _Prepared, response: dict[str, Any]) -> None:
        """Store (or update) a response; a shared store that does not answer is logged, and the
        response is answered all the same (a later lookup of it is "not found")."""
        if prep.req.store is False:
            return
        if prep.id in self._deleted:
            if prep.id not in self._running:  # it ended: forget it
                self._deleted.discard(prep.id)
            return
        try:
            await self.store.put(prep.id, self.record(prep, response))
        except StoreUnavailable as exc:
            log.warning("response %s not stored: %s", prep.id, exc.message)

    def _usage(self, prompt: int, completion: int, output: list[dict[str, Any]]) -> dict[str, Any]:
        """Usage; the reasoning tokens are the reasoning text's tokens (re-encoded)."""
        text = "".join(part["text"] for item in output if item["type"] == "reasoning" for part in item["content"])
        reasoning = 0
        if text:
            tok = self.pipeline.ctx.tokenizer
            reasoning = min(completion, len(tok.encode(text, add_special_tokens=False)))
        return usage_of(prompt, completion, reasoning)

    def _sealer(self, req: ResponsesRequest) -> Any:
        if not req.wants("reasoning.encrypted_content"):
            return None

        def seal(text: str) -> str:
            try:
                return self.codec.encode(self._binding, 1, {"r": text})
            except StateError:  # past the state size limit: given back as reasoning_text only
                return ""
        return seal

    def _unseal(self, token: str, param: str) -> str:
        try:
            body = self.codec.decode(token, self._binding).body
        except StateError as exc:
            raise InvalidRequest(f"{param.replace('.', '[', 1).replace('.', '].', 1)}: this encrypted_content was "
                                 f"not sealed by this server, or was modified ({exc.reason}). Send it back exactly "
                                 "as received, to a server that shares its --state-secret.", param=param) from None
        text = body.get("r")
        if not isinstance(text, str):
            raise InvalidRequest("encrypted_content is malformed.", param=param)
        return text


class ResponseStream:
    """One streamed response: iterate :meth:`events` once (each event a dict with its
    ``sequence_number``); closing the iterator aborts the engine work."""

    def __init__(self, service: ResponsesService, prep: _Prepared, stream: Any) -> None:
        self.service = service
        self.prep = prep
        self.stream = stream
        self.id = prep.id
        self._cancelled = False
        self._registered = False
        self._wait: anyio.CancelScope | None = None  # around the wait for the next chunk, while it waits
        self.events_out = ResponseEvents(prep.shape, response_id=prep.id, created_at=prep.created,
                                         names=prep.chat.names, seal=service._sealer(prep.req))

    def cancel(self) -> None:
        self._cancelled = True
        if self._wait is not None:
            self._wait.cancel()  # (a scope already left ignores it)

    async def register(self) -> None:
        """List it with the responses running here and store it ``in_progress`` (a stored one;
        :meth:`events` does it when it starts, if not done before)."""
        if self.prep.req.store is not False and not self._registered:
            self._registered = True
            self.service._running[self.id] = self
            await self.service._save(self.prep, self.events_out.response("in_progress"))

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        svc, rs, prep = self.service, self.events_out, self.prep
        stored = prep.req.store is not False
        await self.register()
        chunks = self.stream.events()
        prompt = completion = 0
        finished = False
        try:
            for ev in rs.start():
                yield ev
            async with self.stream.running():
                while not self._cancelled:
                    # cancel() stops the wait for the engine's next output; the scope is open only
                    # around that wait, never across a yield (a cancel landing while the consumer sends
                    # an event would break the send instead of ending the stream)
                    self._wait = anyio.CancelScope()
                    with self._wait:
                        try:
                            chunk = await chunks.__anext__()
                        except StopAsyncIteration:
                            break
                    if self._wait.cancelled_caught or self._cancelled:
                        break
                    usage = chunk.get("usage")
                    if usage:
                        prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
                    for ev in rs.push(chunk):
                        yield ev
            if self._cancelled:
                for ev in rs.cancel():
                    yield ev
            else:
                for ev in rs.finish(svc._usage(prompt, completion, rs.output)):
                    yield ev
            finished = True
        except Exception as exc:  # mid-stream failure: response.failed, in the stream's own shape
            err = to_api_error(exc)
            for ev in rs.fail(err.message):
                yield ev
            finished = True
        finally:
            await chunks.aclose()
            svc._running.pop(prep.id, None)
            if stored:
                with anyio.CancelScope(shield=True):
                    if finished:
                        await svc._save(prep, rs.final or rs.response("completed"))
                    elif prep.req.background:  # only the server ends a background response early
                        await svc._save(prep, rs.response("failed", error={"code": "server_error",
                                                                           "message": SHUT_DOWN}))
                    else:  # the client left mid-stream: nothing to chain from
                        await svc.store.delete(prep.id)


def _with_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Input items as ``input_items`` lists them: each with an id (``msg_…`` and so on) and a status."""
    out = []
    for k, item in enumerate(items):
        item = dict(item)
        if "id" not in item:
            prefix = {"message": "msg", "function_call": "fc", "function_call_output": "fco",
                      "reasoning": "rs"}.get(item.get("type", "message"), "item")
            item["id"] = f"{prefix}_{new_response_id()[5:21]}{k:04d}"
        item.setdefault("type", "message")
        if item["type"] == "message":
            item.setdefault("status", "completed")
            if isinstance(item.get("content"), str):
                item["content"] = [{"type": "input_text" if item.get("role") != "assistant" else "output_text",
                                    "text": item["content"]}]
        out.append(item)
    return out


_warned: set[str] = set()


def _warn_left_out(kinds: list[str]) -> None:
    """One warning line per tool type, per process; every left-out tool is counted in /metrics."""
    new = sorted({k[:50] for k in kinds} - _warned)
    if new and len(_warned) < 256:
        _warned.update(new)
        log.warning("Responses tools of type %s are left out of the prompt: this server runs no built-in tools "
                    "(each type is named once; tokenwire_responses_tools_left_out_total counts them all)",
                    ", ".join(new))


# chat request fields → the Responses fields they came from, in the errors render gives
_PARAMS = (("max_completion_tokens", "max_output_tokens"), ("max_tokens", "max_output_tokens"),
           ("response_format", "text.format"), ("messages", "input"))


def _rename(text: str) -> str:
    for old, new in _PARAMS:
        text = re.sub(rf"\b{old}\b", new, text)
    return text


def _renamed(exc: Exception) -> Exception:
    err = to_api_error(exc)
    if err.status >= 500 and not isinstance(exc, SessionError | ApiError):
        return exc
    return ApiError(err.status, _rename(err.message), param=_rename(err.param) if err.param else None,
                    error_type=err.error_type, code=getattr(err, "code", None))


async def _renaming(work: Any) -> Any:
    """Await ``work``; a bad-request error names the Responses fields, not the chat ones."""
    try:
        return await work
    except (SessionError, ApiError) as exc:
        raise _renamed(exc) from None


__all__ = ["ResponseStream", "ResponsesService", "call_id_of", "responses_of"]
