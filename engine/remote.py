"""``RemoteEngine``: the :class:`~engine.interface.Engine` interface over HTTP to any vLLM-compatible
tokens-only engine (SSE per step, ``/abort_requests`` on an early close, failures as
:mod:`engine.errors` values). No torch. The requests it makes and the errors it maps:
docs/engine.md, "The HTTP engine".
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import anyio
import httpx
import orjson

from engine.access import EngineIds, auth_headers, key_refused
from engine.errors import (
    EngineError,
    EngineOverloaded,
    EngineProtocolError,
    EngineShutDown,
    EngineTimeout,
    EngineUnavailable,
    InvalidGenerateRequest,
)
from engine.inbound import Expect, Malformed, protocol_error, safe_param
from engine.interface import Engine, EngineHealth, EngineOutput, EngineStream, IteratorStream
from engine.protocol import GenerateRequest, UsageInfo

log = logging.getLogger("tokenwire.remote")

GENERATE_PATH = "/inference/v1/generate"
ABORT_PATHS = ("/abort_requests", "/inference/v1/abort_requests")
MAX_ERROR_MESSAGE = 500

_E = TypeVar("_E", bound=EngineError)


class RemoteEngine(Engine):
    def __init__(self, base_url: str, *, model_name: str, max_model_len: int, connect_timeout: float = 5.0,
                 read_timeout: float = 300.0, abort_timeout: float = 5.0, max_connections: int = 1024,
                 transport: httpx.AsyncBaseTransport | None = None, api_key: str | None = None,
                 vocab_size: int | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.vocab_size = vocab_size  # the bound on the token ids the engine may send (engine/inbound.py)
        self.api_key = api_key  # --engine-api-key: a bearer token on every request to the engine
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.abort_timeout = abort_timeout
        self._limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=64)
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._abort_path: str | None = None
        self._ids = EngineIds()  # the engine request ids (a client's own id never reaches the engine)
        self._in_flight: dict[str, set[str]] = {}  # this front end's request id -> its engine ids in flight
        self._closing = False

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        self._http()
        health = await self.health()
        if not health.ok:
            log.warning("remote engine %s is not healthy yet: %s", self.base_url, health.detail)

    async def close(self) -> None:
        self._closing = True  # streams still running end with EngineShutDown
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            timeout = httpx.Timeout(connect=self.connect_timeout, read=self.read_timeout,
                                    write=self.connect_timeout, pool=self.read_timeout)
            self._client = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, limits=self._limits,
                                             transport=self._transport, trust_env=False,
                                             headers=auth_headers(self.api_key))
        return self._client

    # --- the Engine interface --------------------------------------------------------------
    def generate(self, request: GenerateRequest) -> EngineStream:
        return IteratorStream(self._generate(request))

    async def _generate(self, request: GenerateRequest) -> AsyncIterator[EngineOutput]:
        rid = request.request_id or secrets.token_hex(8)  # this front end's id: the outputs carry it
        wire = self._ids.new()  # the engine's id for it (engine/access.py)
        body = request.to_engine_wire()
        body.update(request_id=wire, stream=True,
                    stream_options={**(body.get("stream_options") or {}), "include_usage": True})
        body["sampling_params"]["output_kind"] = 1  # DELTA: each event carries that step's new tokens
        n = request.sampling_params.n
        expect = Expect(request, max_model_len=self.max_model_len, vocab_size=self.vocab_size)
        started = finished = False
        self._in_flight.setdefault(rid, set()).add(wire)
        try:
            async with self._call("POST", GENERATE_PATH, body) as response:
                await self._check_status(response)
                started = True
                ctype = response.headers.get("content-type", "")
                if "text/event-stream" not in ctype:
                    yield self._from_json(await self._read(response, limit=expect.message_bytes()), rid, expect)
                    finished = True
                    return
                async for out in self._from_sse(response, rid, n, expect):
                    finished = finished or out.finished
                    yield out
                if not finished:
                    raise EngineUnavailable("The remote engine ended the stream before the request finished.")
        finally:
            left = self._in_flight.get(rid, set())
            left.discard(wire)
            if not left:
                self._in_flight.pop(rid, None)
            if started and not finished:
                await self._abort_quietly([wire])

    async def abort(self, request_ids: Sequence[str]) -> None:
        wires = [w for rid in request_ids for w in self._in_flight.get(rid, ())]
        if wires:
            await self._abort_quietly(wires)

    async def health(self) -> EngineHealth:
        stats = {"url": self.base_url, "in_flight": self.live_sequences()}
        try:
            r = await self._http().get("/health", timeout=min(self.connect_timeout, 5.0))
        except httpx.HTTPError as exc:
            return EngineHealth(ok=False, detail=f"remote engine unreachable ({_describe(exc)})", stats=stats)
        if r.status_code != 200:
            return EngineHealth(ok=False, detail=f"remote engine health is HTTP {r.status_code}", stats=stats)
        return EngineHealth(ok=True, stats=stats)

    def live_sequences(self) -> int:
        """Requests this client has in flight at the remote."""
        return sum(len(wires) for wires in self._in_flight.values())

    # --- HTTP ------------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: dict[str, Any]) -> _Call:
        return _Call(self, method, path, body)

    async def _check_status(self, response: httpx.Response) -> None:
        status = response.status_code
        if status == 200:
            return
        body = await self._read(response, limit=65536)
        if status in (401, 403):
            raise self._logged(key_refused(status, key_sent=bool(self.api_key)))
        # The engine's message is for the operator (it may name internal hosts): logged, never passed on.
        log.warning("remote engine %s answered HTTP %s: %r", self.base_url, status, _error_message(body))
        if status in (400, 422):
            raise InvalidGenerateRequest(f"The remote engine refused the request as invalid (HTTP {status}).",
                                         param=safe_param(_error_param(body)))
        if status == 404:
            raise EngineUnavailable("The remote engine does not serve this request (HTTP 404).")
        if status in (429, 503):
            raise EngineOverloaded("The remote engine is overloaded; retry later.")
        raise EngineUnavailable(f"The remote engine failed (HTTP {status}).")

    async def _read(self, response: httpx.Response, limit: int) -> bytes:
        """The body, up to ``limit`` bytes (an error body is cut there; a generate answer past its
        request's bound, engine/inbound.py, is refused before the rest is read)."""
        data = bytearray()
        try:
            async for part in response.aiter_bytes():
                data += part
                if len(data) > limit:
                    if response.status_code == 200:
                        raise self._garbage("an answer larger than the request may receive")
                    break
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        return bytes(data)

    def _transport_error(self, exc: httpx.HTTPError) -> EngineError:
        if self._closing:
            return EngineShutDown("The server is shutting down; retry the request (on another replica).")
        if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
            return self._logged(EngineTimeout(f"The remote engine did not accept a connection within "
                                              f"{self.connect_timeout:g} s."))
        if isinstance(exc, httpx.TimeoutException):
            return self._logged(EngineTimeout(f"The remote engine did not answer within {self.read_timeout:g} s."))
        if isinstance(exc, httpx.ConnectError):
            return self._logged(EngineUnavailable("Cannot reach the remote engine (connection failed)."))
        return self._logged(EngineUnavailable(f"The connection to the remote engine failed ({_describe(exc)})."))

    def _garbage(self, what: str) -> EngineProtocolError:
        return self._logged(protocol_error(what))

    def _logged(self, err: _E) -> _E:
        """Clients are told what failed, not where: the engine's address is internal and goes to the log."""
        log.warning("remote engine %s: %s", self.base_url, err.message)
        return err

    async def _abort_quietly(self, request_ids: list[str]) -> None:
        with anyio.move_on_after(self.abort_timeout, shield=True):
            paths = [self._abort_path] if self._abort_path else list(ABORT_PATHS)
            for path in paths:
                try:
                    r = await self._http().post(path, json={"request_ids": request_ids},
                                                timeout=self.abort_timeout)
                except httpx.HTTPError as exc:
                    log.warning("abort at %s failed: %s", self.base_url, _describe(exc))
                    return
                if r.status_code in (401, 403):
                    self._logged(key_refused(r.status_code, key_sent=bool(self.api_key)))
                if r.status_code != 404:
                    self._abort_path = path
                    return

    # --- decoding answers ------------------------------------------------------------------
    async def _from_sse(self, response: httpx.Response, rid: str, n: int,
                        expect: Expect) -> AsyncIterator[EngineOutput]:
        done_choices: set[int] = set()
        held: EngineOutput | None = None  # the output that finished every choice, until the usage
        completion = 0
        prompt_tokens: int | None = None
        try:
            async for data in self._sse_data(response, expect.message_bytes()):
                if data == b"[DONE]":
                    break
                obj = self._parse_event(data)
                if "error" in obj and "choices" not in obj:  # an error event from the remote
                    raise self._remote_stream_error(obj)
                try:
                    choices = expect.choices(obj["choices"])
                    usage = expect.usage(obj.get("usage"))
                except Malformed as exc:
                    raise self._garbage(str(exc)) from None
                if usage is not None and not choices:
                    prompt_tokens = usage.prompt_tokens
                    if held is not None:
                        held.usage = usage
                    continue
                out = EngineOutput(rid, choices)
                completion += sum(len(c.token_ids) for c in out.choices)
                done_choices |= {c.index for c in out.choices if c.finish_reason is not None}
                if len(done_choices) >= n:
                    held = out
                    held.usage = usage
                    continue
                yield out
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        if held is None:
            return
        held.finished = True
        if held.usage is None:
            held.usage = UsageInfo.of(prompt_tokens or 0, completion)
        yield held

    async def _sse_data(self, response: httpx.Response, limit: int) -> AsyncIterator[bytes]:
        """The ``data`` of each server-sent event (multi-line data joined with newlines). An event
        past ``limit`` bytes (its request's bound, engine/inbound.py) is refused before the rest of
        it is read, and a stream that brings no event for ``read_timeout`` (only comments, say) is
        a timeout as a silent one is: keepalives are not progress."""
        clock = anyio.current_time
        heard = clock()
        buf = bytearray()
        lines: list[bytes] = []
        size = 0
        async for part in response.aiter_bytes():
            buf += part
            start = 0
            while (end := buf.find(b"\n", start)) >= 0:
                line = bytes(buf[start:end])
                start = end + 1
                if line.endswith(b"\r"):
                    line = line[:-1]
                if not line:
                    if lines:
                        yield b"\n".join(lines)
                        lines, size, heard = [], 0, clock()
                    continue
                if line.startswith(b":"):
                    continue
                name, _, value = line.partition(b":")
                if name == b"data":
                    lines.append(value[1:] if value.startswith(b" ") else value)
                    size += len(value)
            del buf[:start]
            if size + len(buf) > limit:
                raise self._garbage("an SSE event larger than the request may receive")
            if clock() - heard > self.read_timeout:
                raise self._logged(EngineTimeout(f"The remote engine did not answer within {self.read_timeout:g} s."))
        if buf.strip() and buf.startswith(b"data:"):
            lines.append(bytes(buf[5:]).lstrip(b" ").rstrip(b"\r"))
        if lines:
            yield b"\n".join(lines)

    def _parse_event(self, data: bytes) -> dict[str, Any]:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise self._garbage("an SSE event that is not JSON") from None
        if not isinstance(obj, dict) or ("choices" not in obj and "error" not in obj):
            raise self._garbage("an SSE event that is not a generate stream chunk")
        result: dict[str, Any] = _modern_logprobs(obj)
        return result

    def _remote_stream_error(self, obj: dict[str, Any]) -> EngineError:
        log.warning("remote engine %s failed mid-stream: %r", self.base_url, _error_message(orjson.dumps(obj)))
        return EngineUnavailable("The remote engine failed mid-stream.")

    def _from_json(self, body: bytes, rid: str, expect: Expect) -> EngineOutput:
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
            raise self._garbage("a body that is neither an SSE stream nor a generate response")
        try:
            choices = expect.choices(_modern_logprobs(obj)["choices"])
            usage = expect.usage(obj.get("usage"))
        except Malformed as exc:
            raise self._garbage(str(exc)) from None
        return EngineOutput(rid, choices, finished=True,
                            usage=usage or UsageInfo.of(0, sum(len(c.token_ids) for c in choices)))


class _Call:
    """``async with engine._call(...) as response`` — a streamed request whose transport errors
    are already translated into engine errors."""

    def __init__(self, engine: RemoteEngine, method: str, path: str, body: dict[str, Any]) -> None:
        self.engine = engine
        self.request = engine._http().build_request(method, path, content=orjson.dumps(body),
                                                    headers={"content-type": "application/json",
                                                             "accept": "text/event-stream"})
        self.response: httpx.Response | None = None

    async def __aenter__(self) -> httpx.Response:
        try:
            self.response = await self.engine._http().send(self.request, stream=True)
        except httpx.HTTPError as exc:
            raise self.engine._transport_error(exc) from None
        return self.response

    async def __aexit__(self, *exc: object) -> None:
        if self.response is not None:
            with anyio.CancelScope(shield=True):
                await self.response.aclose()


def _modern_logprobs(obj: Any) -> Any:
    """Accept older vLLM logprob entries (``"token": "token_id:N"``) as 0.32's integer ``token_id``."""
    if not isinstance(obj, dict):
        return obj
    for choice in obj.get("choices") or ():
        content = ((choice or {}).get("logprobs") or {}).get("content") if isinstance(choice, dict) else None
        for entry in content or ():
            for item in [entry, *(entry.get("top_logprobs") or [])] if isinstance(entry, dict) else ():
                if isinstance(item, dict) and "token_id" not in item and isinstance(item.get("token"), str):
                    prefix, _, num = item["token"].partition(":")
                    if prefix == "token_id" and num.isdigit():
                        item["token_id"] = int(num)
    return obj


def _error_message(body: bytes) -> str:
    """The ``error.message`` of an OpenAI-style error body, shortened; "" when there is none."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    message: Any = None
    if isinstance(obj, dict):
        err = obj.get("error")
        message = err.get("message") if isinstance(err, dict) else obj.get("message") or obj.get("detail")
    if not isinstance(message, str):
        return ""
    return message[:MAX_ERROR_MESSAGE]


def _error_param(body: bytes) -> str | None:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    err = obj.get("error") if isinstance(obj, dict) else None
    param = err.get("param") if isinstance(err, dict) else None
    return param if isinstance(param, str) else None


def _describe(exc: httpx.HTTPError) -> str:
    return type(exc).__name__
