"""The streaming derender over HTTP, one call per chunk with the signed state echoed back: against a
``launch render`` process this benchmark starts (:func:`http_stream`), or any render server on the
same wire, tokenwire's or vLLM's (:func:`stream_over_http`, which bench/vllm_compare.py uses too)."""

from __future__ import annotations

import statistics
import time
from typing import Any

import orjson

from bench.derender_stream import CHAT_REQUEST, in_chunks

STATE_SECRET = "bench-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


def http_stream(ids: list[int], prompt: list[int], size: int = 1) -> dict[str, Any]:
    """One streaming derender over HTTP against a real ``launch render`` process. The client is
    ``http.client`` on one keep-alive connection (a thin client: the figure is the server's)."""
    from server.assets import ensure
    from tests.support.server_proc import ServerProcess

    args = ["launch", "render", str(ensure("qwen3")), "--served-model-name", "bench", "--tool-call-parser", "hermes",
            "--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--state-secret", STATE_SECRET,
            "--log-level", "warning"]
    with ServerProcess(args, preamble="import sys\nsys.modules['torch'] = None\n") as srv:
        return stream_over_http(srv.url, ids, prompt, size)


def stream_over_http(url: str, ids: list[int], prompt: list[int], size: int = 1) -> dict[str, Any]:
    """The streaming derender of ``ids`` at the render server ``url`` (tokenwire's, or vLLM's: same
    wire; served model name ``bench``, hermes + qwen3 parsers), ``size`` tokens per call, the state
    echoed back each call."""
    import http.client

    host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    headers = {"content-type": "application/json"}
    pieces = in_chunks(ids, size)
    calls: list[float] = []
    state = None
    t0 = time.perf_counter()
    for k, piece in enumerate(pieces):
        body = orjson.dumps({"stream": True, "model": "bench", "stream_state": state, "prompt_token_ids": prompt,
                             "chat_request": CHAT_REQUEST, "generate_chunk": {
                                 "request_id": "chatcmpl-http", "choices": [{
                                     "index": 0, "token_ids": piece,
                                     "finish_reason": "stop" if k == len(pieces) - 1 else None}]}})
        t = time.perf_counter()
        conn.request("POST", "/v1/chat/completions/derender", body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        calls.append(time.perf_counter() - t)
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data[:500]!r}")
        state = orjson.loads(data)["stream_state"]
    total = time.perf_counter() - t0
    conn.close()
    n = len(pieces)
    return {"tokens": len(ids), "calls": n, "client": "http.client, one keep-alive connection",
            "total_s": round(total, 3),
            "call_ms_first_100": round(statistics.median(calls[:100]) * 1e3, 3),
            "call_ms_last_100": round(statistics.median(calls[-100:]) * 1e3, 3),
            "call_ms_median": round(statistics.median(calls) * 1e3, 3),
            "call_ms_mean": round(total / n * 1e3, 3)}
