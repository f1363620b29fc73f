"""The same workloads against tokenwire and against a vLLM installation, in one run.

vLLM is never required: this runs only when given a Python interpreter that can ``import vllm``
(``--vllm-python``). Each workload runs against tokenwire, then against vLLM, one server at a time,
on the same model directory and the same client code, loopback only:

- render: ``POST /v1/chat/completions/render`` req/s at concurrency 1 and 8 (bench/render_bench.py's
  client and bodies) — tokenwire ``launch render`` against ``vllm launch render``;
- derender: one streaming chat derender over HTTP, one token per call, hermes + qwen3 parsers
  (bench/derender_stream.py's stream, bench/derender_http.py's client) — the same two render servers;
- generate: aggregate tokens/s of ``c`` concurrent streamed ``/inference/v1/generate`` requests
  (greedy, eos ignored) — ``tokenwire serve --tokens-only`` against ``vllm serve --tokens-only``.

Prints one JSON document (``pairs``: each figure with tokenwire's and vLLM's value).

    .venv/bin/python -m bench.vllm_compare --vllm-python /path/to/vllm-venv/bin/python [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.loopback import ROOT, SseStream

RENDER_FLAGS = ["--served-model-name", "bench", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3",
                "--enable-auto-tool-choice"]


def vllm_version(python: str) -> str:
    proc = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"--vllm-python {python}: cannot import vllm:\n{proc.stderr[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server(cmd: list[str], *, env: dict[str, str] | None = None, startup_s: float = 900,
           pids: list[int] | None = None) -> Iterator[str]:
    """Start ``cmd`` (with ``--host 127.0.0.1 --port P`` appended), wait for ``/health``, yield its URL
    (and append the process id to ``pids`` when given)."""
    port = _free_port()
    log = tempfile.NamedTemporaryFile(prefix="bench-server-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen([*cmd, "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, start_new_session=True)
    if pids is not None:
        pids.append(proc.pid)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[:4]} exited with {proc.returncode}:\n{Path(log.name).read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{cmd[:4]} did not become healthy in {startup_s:.0f} s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
        os.unlink(log.name)


def tokenwire_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "server.cli", *args]


def vllm_cmd(python: str, *args: str) -> list[str]:
    return [python, "-m", "vllm.entrypoints.cli.main", *args]


def vllm_env(**extra: str) -> dict[str, str]:
    """The environment every vLLM server here gets: 2 GiB of KV cache unless set, and ``extra``."""
    return {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"), **extra}


def engine_dtype() -> str:
    """The dtype both engines run: bf16 where the CPU has it, else fp32."""
    from bench.machine import describe_machine

    return "bfloat16" if describe_machine()["cpu_bf16"] else "float32"


# --- workloads --------------------------------------------------------------------------------------------

def render_workload(url: str, seconds: float) -> dict[str, Any]:
    from bench.render_bench import long_chat_with_tools, run_load, short_chat

    addr = url.split("://", 1)[1]
    return {name: {str(c): asyncio.run(run_load(addr, body, c, seconds)) for c in (1, 8)}
            for name, body in (("short_chat", short_chat()), ("chat_2k_tools", long_chat_with_tools()))}


def derender_workload(url: str, model: Path, sizes: tuple[int, int, int]) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from bench.derender_http import stream_over_http
    from bench.derender_stream import build_stream, prompt

    tok = AutoTokenizer.from_pretrained(str(model), local_files_only=True)
    ids = build_stream(tok, *sizes, close=True)
    return stream_over_http(url, ids, prompt(tok))


async def generate_stream(url: str, prompt: list[int], new_tokens: int) -> tuple[int, float | None]:
    """One streamed ``/inference/v1/generate`` request (greedy, eos ignored): the tokens it gave and
    the seconds to its first token (None when it gave none)."""
    conn = await SseStream.connect(url)
    t0 = time.perf_counter()
    first: float | None = None
    n = 0
    conn.send("/inference/v1/generate", orjson.dumps({
        "token_ids": prompt, "stream": True, "sampling_params": {
            "max_tokens": new_tokens, "temperature": 0, "ignore_eos": True, "output_kind": 1}}))
    async for data in conn.events():
        if data == b"[DONE]":
            break
        k = sum(len(c.get("token_ids") or []) for c in orjson.loads(data).get("choices", []))
        if k and first is None:
            first = time.perf_counter() - t0
        n += k
    conn.close()
    return n, first


def generate_workload(url: str, prompts: list[list[int]], levels: list[int], new_tokens: int) -> dict[str, Any]:
    async def one(p: list[int]) -> int:
        return (await generate_stream(url, p, new_tokens))[0]

    async def level(c: int) -> dict[str, Any]:
        await asyncio.gather(*(one(p) for p in prompts[:c]))  # warm-up of this batch shape
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(one(p) for p in prompts[:c]))
        wall = time.perf_counter() - t0
        return {"concurrency": c, "tokens": sum(counts), "wall_s": round(wall, 3), "tok_s": round(sum(counts) / wall, 1)}

    return {str(c): asyncio.run(level(c)) for c in levels}


# --- the comparison ----------------------------------------------------------------------------------------

def pairs_of(tw: dict[str, Any], vl: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name, runs in tw["render"].items():
        for c, run in runs.items():
            out.append({"id": f"vllm.render.{name}.c{c}.rps", "label": f"render {name}, concurrency {c}",
                        "unit": "req/s", "better": "higher", "tokenwire": run["rps"],
                        "vllm": vl["render"][name][c]["rps"], "vllm_what": "launch render"})
    d_tw, d_vl = tw["derender"], vl["derender"]
    out.append({"id": "vllm.derender.http_stream_s", "label": f"streaming derender, 1 token per call, "
                f"{d_tw['tokens']} tokens, hermes + qwen3", "unit": "s", "better": "lower",
                "tokenwire": d_tw["total_s"], "vllm": d_vl["total_s"], "vllm_what": "launch render"})
    out.append({"id": "vllm.derender.call_ms_last_100", "label": "streaming derender call at the end of the stream",
                "unit": "ms", "better": "lower", "tokenwire": d_tw["call_ms_last_100"],
                "vllm": d_vl["call_ms_last_100"], "vllm_what": "launch render"})
    for c, run in tw["generate"].items():
        out.append({"id": f"vllm.generate.c{c}.tok_s", "label": f"tokens-only generate, {c} concurrent streams",
                    "unit": "tok/s", "better": "higher", "tokenwire": run["tok_s"],
                    "vllm": vl["generate"][c]["tok_s"], "vllm_what": "serve --tokens-only"})
    return out


def run(python: str, render_model: Path, engine_model: Path, *, quick: bool) -> dict[str, Any]:
    version = vllm_version(python)
    from bench.engine_bench import chat_prompts

    dtype = engine_dtype()
    seconds = 2.0 if quick else 5.0
    sizes = (300, 100, 100) if quick else (2015, 508, 408)
    levels = [1, 8] if quick else [1, 8, 16]
    new_tokens = 32 if quick else 64
    prompts = chat_prompts(engine_model, max(levels))
    engine_flags = ["--tokens-only", "--dtype", dtype, "--max-model-len", "2048"]
    result: dict[str, Any] = {"benchmark": "vllm_compare", "vllm_version": version, "vllm_python": python,
                              "render_model": render_model.name, "engine_model": engine_model.name, "dtype": dtype,
                              "derender_stream": dict(zip(("reasoning", "content", "tool_args"), sizes, strict=True))}
    sides: dict[str, dict[str, Any]] = {}
    for side, make, env in (("tokenwire", tokenwire_cmd, None),
                            ("vllm", lambda *a: vllm_cmd(python, *a), vllm_env())):
        print(f"vllm_compare: {side} render server", file=sys.stderr, flush=True)
        with server(make("launch", "render", str(render_model), *RENDER_FLAGS), env=env) as url:
            render = render_workload(url, seconds)
            derender = derender_workload(url, render_model, sizes)
        print(f"vllm_compare: {side} tokens-only engine", file=sys.stderr, flush=True)
        with server(make("serve", str(engine_model), *engine_flags), env=env) as url:
            generate = generate_workload(url, prompts, levels, new_tokens)
        sides[side] = {"render": render, "derender": derender, "generate": generate}
    result["raw"] = sides
    result["pairs"] = pairs_of(sides["tokenwire"], sides["vllm"])
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vllm-python", required=True, help="a Python interpreter that can import vllm")
    p.add_argument("--render-model", default=None, help="model directory for render/derender (default: tiny-qwen3, "
                   "a Qwen3 tokenizer with a config vLLM accepts)")
    p.add_argument("--engine-model", default=None, help="model directory for generate (default: SmolLM2-135M)")
    p.add_argument("--quick", action="store_true", help="shorter runs, a shorter derender stream")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    from server.assets import ensure

    render_model = Path(a.render_model) if a.render_model else ensure("tiny-qwen3")
    engine_model = Path(a.engine_model) if a.engine_model else ensure("smollm2-135m-instruct")
    result = run(a.vllm_python, render_model, engine_model, quick=a.quick)
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
