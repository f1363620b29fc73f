"""Issue 18's targets for the streaming path, each measured in this one run, with its verdict.

1. Server CPU per streamed token over WebSocket <= 40 µs at 64 and 256 streams (the SSE figure
   beside it), and 2. WebSocket <= 0.7x SSE in CPU, WebSocket delivery p50 and p99 <= SSE's at 16,
   64 and 256 streams: ``bench.streams_bench`` on the paced engine (128 tokens per stream, 10 tokens/s,
   alternating rounds, the round whose WebSocket p50 is the median).
3. 1,024 WebSocket streams at 5 tokens/s: every token delivered in order, p99 delivery <= 100 ms,
   with the benchmark client's own CPU per token.
4. ``derender`` frames cost no more server CPU per call than the HTTP streaming derender (1 and 8
   tokens per call, the 2,960-token hermes + qwen3 reference stream, one ``launch render`` server),
   and ``client_sdk``'s own CPU per received token <= 60 µs (``streams_bench --sdk``).
5. ``serve`` with its local engine (tiny-qwen3, one engine thread): the process's CPU less the time
   inside model steps (``/engine/stats`` ``step_cpu_seconds``), per generated token, <= 40 µs at 64
   WebSocket streams.
6. vLLM's API server beside it, only where a vLLM installation is given (``--vllm-python``; reported
   as not run otherwise): the CPU per streamed token of ``vllm serve``'s API server process (its engine
   core is a child process) and of tokenwire's front end (``launch render`` over the session link to a
   ``serve --tokens-only`` engine, and the same over the ``http://`` link, vLLM's wire, issue 40's
   target: at most 0.7x vLLM's API server over SSE), both with SmolLM2-135M generating, at 16 and 64
   SSE streams.

Beside them, ``bench.fanout_bench``: the server's own Python per token in one process, without
sockets (back to back, and paced as a real engine steps), the part of figure 1 that is not the
kernel's. Prints one JSON document (also written to ``--out``).

    .venv/bin/python -m bench.streams_targets [--quick] [--vllm-python PATH] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

import httpx
import orjson

from bench import fanout_bench, streams_bench
from bench.derender_bench import CHAT_REQUEST, _prompt, _tokenizer, build_stream, stream_over_http
from bench.loopback import SseStream, WsStream, cpu_seconds, emit, raise_fd_limit, render_server
from bench.machine import load_average
from server.assets import ensure
from tests.support.server_proc import ServerProcess

SECRET = "bench-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


def _verdict(value: float | None, target: float, *, at_most: bool = True) -> dict[str, Any]:
    if value is None:
        return {"value": None, "target": target, "met": None}
    met = value <= target if at_most else value >= target
    return {"value": value, "target": target, "met": met, "ratio_to_target": round(value / target, 2)}


# --- 4a: derender frames against the HTTP streaming derender ---------------------------------------------

async def _ws_derender(url: str, ids: list[int], prompt: list[int], size: int) -> None:
    from websockets.asyncio.client import connect

    async with connect("ws" + url[len("http"):] + "/v1/session", max_size=None, compression=None) as ws:
        await ws.recv()  # session.created
        state = None
        chunks = [ids[i:i + size] for i in range(0, len(ids), size)]
        for k, piece in enumerate(chunks):
            body = {"model": "bench", "stream_state": state, "prompt_token_ids": prompt, "chat_request": CHAT_REQUEST,
                    "generate_chunk": {"request_id": "chatcmpl-ws", "choices": [{
                        "index": 0, "token_ids": piece, "finish_reason": "stop" if k == len(chunks) - 1 else None}]}}
            await ws.send(orjson.dumps({"type": "derender", "id": f"d{k}", "kind": "chat", "body": body}).decode())
            frame = orjson.loads(await ws.recv())
            if frame["type"] != "derender.delta":
                raise RuntimeError(f"derender frame answered {frame}")
            state = frame["result"]["stream_state"]


def derender_frames(quick: bool) -> dict[str, Any]:
    tok = _tokenizer()
    prompt = _prompt(tok)
    ids = build_stream(tok, think=2015, content=508, args=408, close=True)
    if quick:
        ids = ids[:600]
    args = ["launch", "render", str(ensure("qwen3")), "--served-model-name", "bench", "--tool-call-parser", "hermes",
            "--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--state-secret", SECRET,
            "--log-level", "warning"]
    out: dict[str, Any] = {"tokens": len(ids)}
    with ServerProcess(args, preamble="import sys\nsys.modules['torch'] = None\n") as srv:
        assert srv.proc is not None
        pid = srv.proc.pid
        stream_over_http(srv.url, ids[:50], prompt, 1)  # warm-up of both paths
        asyncio.run(_ws_derender(srv.url, ids[:50], prompt, 1))
        for size in (1, 8):
            calls = -(-len(ids) // size)
            for transport in ("http", "ws") if size == 1 else ("ws", "http"):  # alternate the order
                c0 = cpu_seconds(pid)
                if transport == "http":
                    stream_over_http(srv.url, ids, prompt, size)
                else:
                    asyncio.run(_ws_derender(srv.url, ids, prompt, size))
                out[f"{transport}_{size}_per_call_server_cpu_us"] = round((cpu_seconds(pid) - c0) / calls * 1e6, 1)
            out[f"ws_over_http_{size}"] = round(out[f"ws_{size}_per_call_server_cpu_us"]
                                                / out[f"http_{size}_per_call_server_cpu_us"], 3)
    return out


# --- 5: the in-process serve path --------------------------------------------------------------------------

async def _serve_streams(url: str, pid: int, streams: int, tokens: int) -> dict[str, Any]:
    """``streams`` WebSocket sessions, opened first; then one chat each, with the server's CPU and its
    engine's stats read around the chats alone (as ``streams_bench`` does: a handshake is not a
    streamed token's cost). The client is ``streams_bench``'s lean one (:class:`WsStream`)."""
    sockets = [await WsStream.connect("ws" + url[len("http"):] + "/v1/session", "tokenwire.v1")
               for _ in range(streams)]
    for ws in sockets:
        await ws.recv()

    async def one(i: int, ws: WsStream) -> None:
        body = {"messages": [{"role": "user", "content": f"Tell me about the number {i}."}], "max_tokens": tokens,
                "ignore_eos": True, "temperature": 0}
        await ws.send(orjson.dumps({"type": "chat", "id": "c", "body": body}))
        while True:
            message = await ws.recv()
            if message is None:
                raise RuntimeError("the server closed the session mid-stream")
            frame = orjson.loads(message)
            if frame["type"] in ("chat.done", "error"):
                if frame["type"] == "error":
                    raise RuntimeError(f"error frame: {frame}")
                break

    async with httpx.AsyncClient(base_url=url) as http:
        before = (await http.get("/engine/stats")).json()["stats"]
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        await asyncio.gather(*(one(i, ws) for i, ws in enumerate(sockets)))
        wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
        after = (await http.get("/engine/stats")).json()["stats"]
    for ws in sockets:
        await ws.close()
    return {"before": before, "after": after, "wall_s": wall, "cpu_s": cpu}


def in_process(streams: int, tokens: int) -> dict[str, Any]:
    args = ["serve", str(ensure("tiny-qwen3")), "--served-model-name", "bench", "--max-num-seqs", str(streams),
            "--enable-scale-out",  # for /engine/stats (the chat path is the same)
            "--log-level", "warning", "--state-secret", SECRET]
    with ServerProcess(args, env={"TOKENWIRE_NUM_THREADS": "1"}, startup_timeout=300) as srv:
        assert srv.proc is not None
        asyncio.run(_serve_streams(srv.url, srv.proc.pid, 2, 4))  # warm-up
        got = asyncio.run(_serve_streams(srv.url, srv.proc.pid, streams, tokens))
    before, after, cpu = got["before"], got["after"], got["cpu_s"]
    generated = after["generated_tokens"] - before["generated_tokens"]
    model = after["step_cpu_seconds"] - before["step_cpu_seconds"]
    return {"streams": streams, "tokens_per_stream": tokens, "model": "tiny-qwen3", "engine_threads": after["threads"],
            "generated_tokens": generated, "wall_s": round(got["wall_s"], 2), "process_cpu_s": round(cpu, 3),
            "model_step_cpu_s": round(model, 3),
            "process_cpu_us_per_token": round(cpu / generated * 1e6, 1),
            "non_model_cpu_us_per_token": round((cpu - model) / generated * 1e6, 1)}


# --- 6: vLLM's API server beside tokenwire's front end ----------------------------------------------------------

async def _api_streams(url: str, pid: int, streams: int, tokens: int) -> dict[str, Any]:
    """``streams`` chats streamed over SSE from an OpenAI-compatible server (one connection each,
    opened first), ``tokens`` tokens each with eos ignored; the CPU of process ``pid`` alone around
    them (the API server: vLLM's engine core is its child process, tokenwire's engine another
    server), less its idle rate, per streamed token."""
    conns = [await SseStream.connect(url) for _ in range(streams)]
    counted = [0] * streams

    async def one(i: int, conn: SseStream) -> None:
        conn.send("/v1/chat/completions", orjson.dumps({
            "model": "bench", "messages": [{"role": "user", "content": f"Tell me about the number {i}."}],
            "max_tokens": tokens, "ignore_eos": True, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}))
        async for data in conn.events():
            if data == b"[DONE]":
                break
            usage = orjson.loads(data).get("usage")
            if usage:
                counted[i] = usage["completion_tokens"]
        conn.close()

    idle = await streams_bench.idle_cpu_rate(pid)
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    await asyncio.gather(*(one(i, conn) for i, conn in enumerate(conns)))
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
    total = sum(counted)
    if total == 0:
        raise RuntimeError(f"no streamed tokens were counted from {url}")
    return {"streams": streams, "complete_streams": sum(1 for n in counted if n == tokens), "tokens": total,
            "wall_s": round(wall, 2), "tok_per_s": round(total / wall, 1), "idle_cpu_ms_per_s": round(idle * 1e3, 3),
            "api_cpu_us_per_token": round(max(cpu - idle * wall, 0.0) / total * 1e6, 1)}


def api_servers(levels: list[int], tokens: int, vllm_python: str | None) -> dict[str, Any]:
    """Target 6: the API server's CPU per streamed token with a real engine behind it (SmolLM2-135M).
    tokenwire: ``launch render`` in front of a ``serve --tokens-only`` engine over the session link,
    then over the ``http://`` link (engine/remote.py) to the same engine (the front end measured). vLLM: ``vllm serve`` (its API server process measured; its engine core
    is a child process), only where ``vllm_python`` is given."""
    from bench.vllm_compare import engine_dtype, server, vllm_cmd, vllm_env, vllm_version

    model = ensure("smollm2-135m-instruct")
    dtype = engine_dtype()
    out: dict[str, Any] = {"model": model.name, "dtype": dtype, "tokens_per_stream": tokens}

    def measured(url: str, pid: int) -> dict[str, Any]:
        asyncio.run(_api_streams(url, pid, 2, 4))  # warm-up: first render, first engine call
        return {str(c): asyncio.run(_api_streams(url, pid, c, tokens)) for c in levels}

    engine_args = ["serve", str(model), "--tokens-only", "--served-model-name", "bench", "--dtype", dtype,
                   "--max-num-seqs", str(max(levels)), "--ws-max-in-flight", str(max(levels)), "--log-level", "warning"]
    with ServerProcess(engine_args, startup_timeout=300) as engine, \
            render_server(model, "ws" + engine.url[len("http"):]) as front:
        assert front.proc is not None
        out["tokenwire"] = {"what": "launch render --engine-url ws:// (front end) + serve --tokens-only (engine)",
                            **measured(front.url, front.proc.pid)}
        with render_server(model, engine.url) as front:
            assert front.proc is not None
            out["tokenwire_http"] = {"what": "launch render --engine-url http:// (front end) + serve --tokens-only "
                                             "(engine)", **measured(front.url, front.proc.pid)}
    if vllm_python is None:
        out["vllm"] = None
        return out
    pids: list[int] = []
    with server(vllm_cmd(vllm_python, "serve", str(model), "--served-model-name", "bench", "--dtype", dtype,
                         "--max-model-len", "2048", "--max-num-seqs", str(max(levels))), env=vllm_env(),
                pids=pids) as url:
        out["vllm"] = {"what": "vllm serve (its API server process)", "version": vllm_version(vllm_python),
                       **measured(url, pids[0])}
    return out


# --- the run ---------------------------------------------------------------------------------------------------

def run(quick: bool, vllm_python: str | None = None) -> dict[str, Any]:
    model = ensure("smollm2-135m-instruct")
    raise_fd_limit(8192)
    out: dict[str, Any] = {"benchmark": "streams_targets", "quick": quick, "load_average_before": load_average()}
    levels, rounds = ([16, 64], 1) if quick else ([16, 64, 256], 3)
    tokens = 32 if quick else 128
    print("streams: 1, 2", file=sys.stderr, flush=True)
    out["streams"] = streams_bench.run(model, levels, tokens, 100.0, 1.0, rounds)
    print("streams: 3 (1,024 streams)", file=sys.stderr, flush=True)
    many = 128 if quick else 1024
    out["many"] = streams_bench.run(model, [many], 16 if quick else 64, 200.0, 2.0, 1, modes=("ws",))
    print("streams: 4 (client_sdk)", file=sys.stderr, flush=True)
    out["sdk"] = streams_bench.run(model, [64], tokens, 100.0, 1.0, 1, sdk=True, modes=("ws",))
    print("streams: 4 (derender frames)", file=sys.stderr, flush=True)
    out["derender_frames"] = derender_frames(quick)
    print("streams: 5 (in-process serve)", file=sys.stderr, flush=True)
    out["in_process"] = in_process(64, 16 if quick else 128)
    print("streams: the server's own Python (fanout)", file=sys.stderr, flush=True)
    out["fanout"] = {"back_to_back": fanout_bench.run(model, 256, 64 if quick else 128, 2 if quick else 3)["best"],
                     "paced_100ms": fanout_bench.run(model, 256, 32 if quick else 64, 1 if quick else 2,
                                                     step_ms=100.0)["best"]}
    if vllm_python is not None:
        print("streams: 6 (vLLM's API server beside the front end)", file=sys.stderr, flush=True)
        out["api_servers"] = api_servers([16, 64], 32 if quick else 128, vllm_python)
    out["load_average_after"] = load_average()
    out["targets"] = targets(out)
    return out


def target6(api: dict[str, Any] | None) -> dict[str, Any]:
    """Per stream count: tokenwire's front end and vLLM's API server, µs of CPU per streamed token,
    and their ratio (below 1: tokenwire spends less)."""
    if api is None or api.get("vllm") is None:
        return {"value": None, "note": "not run: no vLLM installation was given (--vllm-python)"}
    tw, vl, http = api["tokenwire"], api["vllm"], api.get("tokenwire_http")
    out: dict[str, Any] = {
        f"cpu_us_per_token_{c}": {"tokenwire_front_end": tw[c]["api_cpu_us_per_token"],
                                  "vllm_api_server": vl[c]["api_cpu_us_per_token"],
                                  "ratio": round(tw[c]["api_cpu_us_per_token"]
                                                 / max(vl[c]["api_cpu_us_per_token"], 1e-9), 3)}
        for c in tw if c.isdigit()}
    for c in (c for c in (http or {}) if c.isdigit() and c in vl):  # issue 40: the http:// link, SSE <= 0.7x vLLM's
        assert http is not None
        ratio = round(http[c]["api_cpu_us_per_token"] / max(vl[c]["api_cpu_us_per_token"], 1e-9), 3)
        out[f"cpu_us_per_token_{c}"].update(tokenwire_http_front_end=http[c]["api_cpu_us_per_token"],
                                            http_ratio=_verdict(ratio, 0.7))
    return out


def targets(out: dict[str, Any]) -> dict[str, Any]:
    by_c = {r["concurrency"]: r for r in out["streams"]["results"]}
    t: dict[str, Any] = {}
    for c, r in by_c.items():
        ws, sse = r["ws"], r["sse"]
        ratio = round(ws["server_cpu_us_per_token"] / sse["server_cpu_us_per_token"], 3)
        t[f"1_ws_cpu_us_per_token_{c}"] = _verdict(ws["server_cpu_us_per_token"], 40.0) if c in (64, 256) else \
            {"value": ws["server_cpu_us_per_token"]}
        t[f"1_sse_cpu_us_per_token_{c}"] = {"value": sse["server_cpu_us_per_token"]}
        t[f"2_ws_over_sse_cpu_{c}"] = _verdict(ratio, 0.7)
        for q in ("p50", "p99"):
            t[f"2_ws_delivery_{q}_ms_{c}"] = {"ws": ws["delivery_ms"][q], "sse": sse["delivery_ms"][q],
                                               "met": ws["delivery_ms"][q] <= sse["delivery_ms"][q]}
    many = out["many"]["results"][0]
    ws = many["ws"]
    t["3_many_streams"] = {"streams": many["concurrency"], "complete": ws["complete_streams"],
                           "aligned": ws["aligned_streams"], "p99_delivery_ms": _verdict(ws["delivery_ms"]["p99"], 100.0),
                           "server_cpu_us_per_token": ws["server_cpu_us_per_token"],
                           "client_cpu_us_per_token": ws.get("client_cpu_us_per_token")}
    d = out["derender_frames"]
    t["4_derender_frames_over_http_1"] = _verdict(d["ws_over_http_1"], 1.0)
    t["4_derender_frames_over_http_8"] = _verdict(d["ws_over_http_8"], 1.0)
    sdk = out["sdk"]["results"][0].get("sdk", {})
    t["4_client_sdk_cpu_us_per_token"] = _verdict(sdk.get("client_cpu_us_per_token"), 60.0)
    t["5_in_process_non_model_us_per_token"] = _verdict(out["in_process"]["non_model_cpu_us_per_token"], 40.0)
    t["6_vllm_api_server"] = target6(out.get("api_servers"))
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer streams, tokens and rounds (a smoke run)")
    p.add_argument("--vllm-python", default=None,
                   help="a Python with vLLM installed: target 6, vLLM's API server beside tokenwire's front end")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    result = run(a.quick, a.vllm_python)
    emit(result, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
