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
6. vLLM's API server beside it, only where a vLLM installation is given (``--vllm-python``; alone:
   ``--only 6``): the CPU per streamed token of ``vllm serve``'s API server process (SSE; its engine
   core is a child process) and of tokenwire's front end (``launch render``) over the session link
   and over the ``http://`` link (vLLM's wire) to a ``serve --tokens-only`` engine and to a ``vllm
   serve --tokens-only`` one, over SSE and ``/v1/session``; SmolLM2-135M generating, 16 and 64
   streams, alternating rounds. Targets: the ``http://`` link at most 0.7x vLLM's over SSE, 0.5x over
   the WebSocket.

Beside them, ``bench.fanout_bench``: the server's own Python per token in one process, without
sockets (back to back, and paced as a real engine steps), the part of figure 1 that is not the
kernel's. Prints one JSON document (also written to ``--out``).

    .venv/bin/python -m bench.experiments.streams_targets [--quick] [--vllm-python PATH] [--only 6] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from typing import Any

import httpx
import orjson

from bench import fanout_bench, streams_bench
from bench.derender_http import stream_over_http
from bench.derender_stream import CHAT_REQUEST, build_stream, tokenizer
from bench.derender_stream import prompt as prompt_ids
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
    tok = tokenizer()
    prompt = prompt_ids(tok)
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

async def api_streams(url: str, pid: int, streams: int, tokens: int, transport: str = "sse") -> dict[str, Any]:
    """``streams`` chats streamed from an OpenAI-compatible server, over SSE (``transport="sse"``: one
    connection each, opened first) or over ``/v1/session`` (``"ws"``: one WebSocket session each, opened
    first, a ``chat`` frame on each), ``tokens`` tokens each with eos ignored; the CPU of process ``pid``
    alone around them (the API server: vLLM's engine core is its child process, tokenwire's engine
    another server), less its idle rate, per streamed token."""
    counted = [0] * streams
    body = {"model": "bench", "max_tokens": tokens, "ignore_eos": True, "temperature": 0,
            "stream_options": {"include_usage": True}}

    def chat(i: int) -> dict[str, Any]:
        return {**body, "messages": [{"role": "user", "content": f"Tell me about the number {i}."}]}

    async def one_sse(i: int, conn: SseStream) -> None:
        conn.send("/v1/chat/completions", orjson.dumps({**chat(i), "stream": True}))
        async for data in conn.events():
            if data == b"[DONE]":
                break
            usage = orjson.loads(data).get("usage")
            if usage:
                counted[i] = usage["completion_tokens"]
        conn.close()

    async def one_ws(i: int, ws: WsStream) -> None:
        await ws.send(orjson.dumps({"type": "chat", "id": "c", "body": chat(i)}))
        while True:
            message = await ws.recv()
            if message is None:
                raise RuntimeError("the server closed the session mid-stream")
            frame = orjson.loads(message)
            if frame["type"] == "chat.delta":
                for chunk in frame["chunks"]:
                    if chunk.get("usage"):
                        counted[i] = chunk["usage"]["completion_tokens"]
            elif frame["type"] == "error":
                raise RuntimeError(f"error frame: {frame}")
            elif frame["type"] == "chat.done":
                break
        await ws.close()

    if transport == "ws":
        sockets = [await WsStream.connect("ws" + url[len("http"):] + "/v1/session", "tokenwire.v1")
                   for _ in range(streams)]
        for ws in sockets:
            await ws.recv()  # the session frame
        runs = [one_ws(i, ws) for i, ws in enumerate(sockets)]
    else:
        conns = [await SseStream.connect(url) for _ in range(streams)]
        runs = [one_sse(i, conn) for i, conn in enumerate(conns)]
    idle = await streams_bench.idle_cpu_rate(pid)
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    await asyncio.gather(*runs)
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
    total = sum(counted)
    if total == 0:
        raise RuntimeError(f"no streamed tokens were counted from {url}")
    return {"streams": streams, "complete_streams": sum(1 for n in counted if n == tokens), "tokens": total,
            "wall_s": round(wall, 2), "tok_per_s": round(total / wall, 1), "idle_cpu_ms_per_s": round(idle * 1e3, 3),
            "api_cpu_us_per_token": round(max(cpu - idle * wall, 0.0) / total * 1e6, 1)}


# the sides of target 6: name -> (what, transport); the front ends' engines are named by the prefix
API_SIDES = {
    "tokenwire": ("launch render --engine-url ws:// (front end) + serve --tokens-only (engine), SSE", "sse"),
    "tokenwire_http": ("launch render --engine-url http:// + serve --tokens-only, SSE", "sse"),
    "tokenwire_http_ws": ("launch render --engine-url http:// + serve --tokens-only, /v1/session", "ws"),
    "vllm": ("vllm serve (its API server process), SSE", "sse"),
    "tokenwire_http_vllm": ("launch render --engine-url http:// + vllm serve --tokens-only, SSE", "sse"),
    "tokenwire_http_vllm_ws": ("launch render --engine-url http:// + vllm serve --tokens-only, /v1/session", "ws"),
}


def api_servers(levels: list[int], tokens: int, vllm_python: str | None, rounds: int = 1) -> dict[str, Any]:
    """Target 6: the API server's CPU per streamed token with a real engine behind it (SmolLM2-135M).
    tokenwire: ``launch render`` in front of a ``serve --tokens-only`` engine over the session link, and
    over the ``http://`` link (engine/remote.py) to the same engine and, where ``vllm_python`` is given,
    to a ``vllm serve --tokens-only`` engine, over SSE and over ``/v1/session`` (the front end measured).
    vLLM: ``vllm serve`` (its API server process measured; its engine core is a child process), over
    SSE. Every side is up for the whole run; per round and stream count each side streams once, the
    order of the sides reversed every other round. Per side and stream count: each round's figures and
    the median round's."""
    from bench.vllm_compare import engine_dtype, server, vllm_cmd, vllm_env, vllm_version

    model = ensure("smollm2-135m-instruct")
    dtype = engine_dtype()
    out: dict[str, Any] = {"model": model.name, "dtype": dtype, "tokens_per_stream": tokens, "rounds": rounds,
                           "levels": levels}
    engine_args = ["serve", str(model), "--tokens-only", "--served-model-name", "bench", "--dtype", dtype,
                   "--max-num-seqs", str(max(levels)), "--ws-max-in-flight", str(max(levels)), "--log-level", "warning"]
    vllm_common = [str(model), "--served-model-name", "bench", "--dtype", dtype, "--max-model-len", "2048",
                   "--max-num-seqs", str(max(levels))]
    with contextlib.ExitStack() as stack:
        engine = stack.enter_context(ServerProcess(engine_args, startup_timeout=300))
        fronts = {"tokenwire": stack.enter_context(render_server(model, "ws" + engine.url[len("http"):])),
                  "tokenwire_http": stack.enter_context(render_server(model, engine.url))}
        at: dict[str, tuple[str, int]] = {}
        for name, front in fronts.items():
            assert front.proc is not None
            at[name] = (front.url, front.proc.pid)
        at["tokenwire_http_ws"] = at["tokenwire_http"]
        if vllm_python is not None:
            out["vllm_version"] = vllm_version(vllm_python)
            print("streams: 6: starting vLLM's API server and its tokens-only engine", file=sys.stderr, flush=True)
            pids: list[int] = []
            url = stack.enter_context(server(vllm_cmd(vllm_python, "serve", *vllm_common), env=vllm_env(), pids=pids))
            at["vllm"] = (url, pids[0])
            vllm_engine = stack.enter_context(server(vllm_cmd(vllm_python, "serve", *vllm_common, "--tokens-only"),
                                                     env=vllm_env()))
            front = stack.enter_context(render_server(model, vllm_engine))
            assert front.proc is not None
            at["tokenwire_http_vllm"] = at["tokenwire_http_vllm_ws"] = (front.url, front.proc.pid)
        sides = [s for s in API_SIDES if s in at]
        for side in sides:  # warm-up: first render, first engine call, first connections
            asyncio.run(api_streams(*at[side], 2, 4, API_SIDES[side][1]))
        per: dict[str, dict[str, list[dict[str, Any]]]] = {s: {str(c): [] for c in levels} for s in sides}
        for r in range(rounds):
            for c in levels:
                for side in (sides if r % 2 == 0 else sides[::-1]):
                    print(f"streams: 6: round {r + 1}/{rounds}, {c} streams, {side}", file=sys.stderr, flush=True)
                    per[side][str(c)].append(asyncio.run(api_streams(*at[side], c, tokens, API_SIDES[side][1])))
    for side in sides:
        out[side] = {"what": API_SIDES[side][0]}
        for level, runs in per[side].items():
            values = [m["api_cpu_us_per_token"] for m in runs]
            median = sorted(runs, key=lambda m: m["api_cpu_us_per_token"])[(len(runs) - 1) // 2]
            out[side][level] = {**median, "rounds_us_per_token": values}
    if vllm_python is None:
        out["vllm"] = None
    return out


# --- the run ---------------------------------------------------------------------------------------------------

def run(quick: bool, vllm_python: str | None = None, only: str | None = None) -> dict[str, Any]:
    """Every target, or (``only="6"``) target 6 alone."""
    model = ensure("smollm2-135m-instruct")
    raise_fd_limit(8192)
    out: dict[str, Any] = {"benchmark": "streams_targets", "quick": quick, "load_average_before": load_average()}
    levels, rounds = ([16, 64], 1) if quick else ([16, 64, 256], 3)
    tokens = 32 if quick else 128
    if only is None:
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
    if vllm_python is not None or only == "6":
        print("streams: 6 (vLLM's API server beside the front end)", file=sys.stderr, flush=True)
        out["api_servers"] = api_servers([16, 64], tokens, vllm_python, rounds)
    out["load_average_after"] = load_average()
    out["targets"] = targets(out)
    return out


# target 6's ratios to vLLM's API server (SSE) and their targets: the http:// link, SSE <= 0.7x, WebSocket <= 0.5x
TARGET6 = {"tokenwire": None, "tokenwire_http": 0.7, "tokenwire_http_ws": 0.5, "tokenwire_http_vllm": 0.7,
           "tokenwire_http_vllm_ws": 0.5}


def target6(api: dict[str, Any] | None) -> dict[str, Any]:
    """Per stream count and tokenwire side: its front end's µs of CPU per streamed token (median round),
    vLLM's API server's, and their ratio: the median of the rounds' ratios (each side against vLLM in
    the same round; below 1: tokenwire spends less) with the rounds' range, and its verdict."""
    if api is None or api.get("vllm") is None:
        return {"value": None, "note": "not run: no vLLM installation was given (--vllm-python)"}
    vl = api["vllm"]
    out: dict[str, Any] = {}
    for c in (c for c in vl if c.isdigit()):
        row: dict[str, Any] = {"vllm_api_server": vl[c]["api_cpu_us_per_token"],
                               "vllm_rounds": vl[c]["rounds_us_per_token"]}
        for side, target in TARGET6.items():
            if side not in api or c not in api[side]:
                continue
            ratios = [round(a / max(b, 1e-9), 3) for a, b in
                      zip(api[side][c]["rounds_us_per_token"], vl[c]["rounds_us_per_token"], strict=True)]
            ratio = round(statistics.median(ratios), 3)
            row[side] = {"us_per_token": api[side][c]["api_cpu_us_per_token"],
                         "rounds": api[side][c]["rounds_us_per_token"], "ratios": ratios,
                         "ratio": ratio if target is None else _verdict(ratio, target)}
        out[f"cpu_us_per_token_{c}"] = row
    return out


def targets(out: dict[str, Any]) -> dict[str, Any]:
    t: dict[str, Any] = {}
    if "streams" not in out:  # target 6 alone
        return {"6_vllm_api_server": target6(out.get("api_servers"))}
    by_c = {r["concurrency"]: r for r in out["streams"]["results"]}
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
    p.add_argument("--only", choices=["6"], default=None,
                   help="run one target alone: 6, vLLM's API server beside the front end (needs --vllm-python)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    result = run(a.quick, a.vllm_python, a.only)
    emit(result, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
