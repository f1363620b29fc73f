"""Render benchmark: requests/s and p50/p99 latency of ``POST /v1/chat/completions/render`` on one
``tokenwire launch render`` server process, at concurrency 1 and 8, for a short chat request and a
~2k-token chat request with tools; beside it, a direct ``apply_chat_template(tokenize=True)``
baseline measured in the same run. Prints one JSON document.

    .venv/bin/python bench/render_bench.py [--model DIR] [--seconds 4] [--out FILE]

The client is a minimal HTTP/1.1 keep-alive client on asyncio (one connection per concurrent
stream, requests pre-encoded) so that client overhead stays small next to the server's; it runs
on the same machine, so the figures are a lower bound of the server's own capacity. vLLM 0.32's
CPU render server measured about 190 req/s at concurrency 1 (p50 4.8 ms) and 440 req/s at 8 for a
short chat on this machine class (docs/vllm-baseline.md); the ratios are printed against those.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VLLM_SHORT_CHAT_RPS = {1: 190.0, 8: 440.0}
PATH = "/v1/chat/completions/render"


# --- request bodies --------------------------------------------------------------------------

def short_chat() -> dict[str, Any]:
    return {"model": None, "messages": [{"role": "system", "content": "You are a helpful assistant."},
                                        {"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 64}


def _tool(i: int) -> dict[str, Any]:
    props = {f"field_{j}": {"type": "string", "description": f"Parameter {j} of operation {i}: an identifier, "
                                                              "a free-form note, or a filter expression."}
             for j in range(6)}
    return {"type": "function", "function": {
        "name": f"operation_{i}", "description": f"Performs operation number {i} on the user's workspace and "
                                                 "returns a JSON document describing the outcome.",
        "parameters": {"type": "object", "properties": props, "required": ["field_0"]}}}


def long_chat_with_tools() -> dict[str, Any]:
    turns: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent that uses tools carefully."}]
    for k in range(4):
        turns.append({"role": "user", "content": f"Step {k}: " + "Please look at the records and summarize the "
                      "differences between the last two revisions, including dates and authors. " * 4})
        turns.append({"role": "assistant", "content": "", "tool_calls": [{
            "id": f"call{k:05d}", "type": "function",
            "function": {"name": f"operation_{k}", "arguments": json.dumps({"field_0": f"rev-{k}", "field_1": "diff"})}}]})
        turns.append({"role": "tool", "tool_call_id": f"call{k:05d}",
                      "content": json.dumps({"status": "ok", "changes": [f"line {n} changed" for n in range(8)]})})
    turns.append({"role": "user", "content": "Now write the final summary."})
    return {"model": None, "messages": turns, "tools": [_tool(i) for i in range(5)], "tool_choice": "none",
            "max_tokens": 256}


# --- server process ---------------------------------------------------------------------------

def start_server(model: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The server writes to a file, not a pipe nobody drains (a full pipe would stall it)."""
    code = "import sys\nfrom server.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", code, "launch", "render", str(model), "--port", "0",
                                 "--log-level", "warning"], cwd=str(ROOT), env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        m = re.search(r"listening on http://([\d.]+):(\d+)", log.read_text(errors="replace"))
        if m:
            return proc, f"{m.group(1)}:{m.group(2)}"
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("server did not start")


# --- client -----------------------------------------------------------------------------------

class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        m = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
        body = await self.reader.readexactly(int(m.group(1))) if m else b""
        return status, body


def encode_request(host: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST {PATH} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def variants(body: dict[str, Any], n: int = 512) -> list[dict[str, Any]]:
    """``n`` copies that differ in their last message, as successive turns of a conversation do
    (so a server cannot answer from a whole-request cache; the shared prefix stays shared)."""
    out = []
    for k in range(n):
        msgs = [*body["messages"][:-1], {**body["messages"][-1],
                                          "content": f"{body['messages'][-1]['content']} (variant {k})"}]
        out.append({**body, "messages": msgs})
    return out


async def run_load(addr: str, body: dict[str, Any], concurrency: int, seconds: float) -> dict[str, Any]:
    host, port = addr.split(":")
    raws = [encode_request(addr, b) for b in variants(body)]
    conns = [Conn(*await asyncio.open_connection(host, int(port))) for _ in range(concurrency)]
    # warm-up (first request builds the renderer; the template compiles)
    for c in conns:
        for raw in raws[:3]:
            status, first = await c.request(raw)
            assert status == 200, first[:300]
    prompt_tokens = len(json.loads(first)["token_ids"])
    latencies: list[float] = []
    stop_at = time.perf_counter() + seconds
    counter = iter(range(10**9))

    async def worker(c: Conn) -> None:
        while time.perf_counter() < stop_at:
            raw = raws[next(counter) % len(raws)]
            t0 = time.perf_counter()
            status, resp = await c.request(raw)
            latencies.append(time.perf_counter() - t0)
            if status != 200:
                raise RuntimeError(resp[:300])

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.writer.close()
    latencies.sort()
    return {"concurrency": concurrency, "requests": len(latencies), "seconds": round(elapsed, 3),
            "rps": round(len(latencies) / elapsed, 1),
            "p50_ms": round(latencies[len(latencies) // 2] * 1e3, 3),
            "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3, 3),
            "prompt_tokens": prompt_tokens}


def direct_baseline(model: Path, body: dict[str, Any], seconds: float) -> dict[str, Any]:
    """``apply_chat_template(tokenize=True)`` in this process: the floor any server adds to."""
    from transformers import AutoTokenizer

    from session.protocol import ChatCompletionRequest
    from session.render.conversation import conversation_of, tool_dicts_of

    tok = AutoTokenizer.from_pretrained(str(model), local_files_only=True)
    req = ChatCompletionRequest.model_validate(body)
    messages = conversation_of(req.messages, "string")
    tools: Any = tool_dicts_of(req.tools) if req.tools else None
    for _ in range(5):
        ids = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                      return_dict=False)
    n, times = 0, []
    stop_at = time.perf_counter() + seconds
    while time.perf_counter() < stop_at:
        t0 = time.perf_counter()
        tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False)
        times.append(time.perf_counter() - t0)
        n += 1
    times.sort()
    return {"calls_per_s": round(n / sum(times), 1), "p50_ms": round(times[len(times) // 2] * 1e3, 3),
            "prompt_tokens": len(ids)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: the qwen3 tokenizer asset)")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per measurement (default 4)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    if args.model is None:
        from server.assets import ensure

        model = ensure("qwen3")
    else:
        model = Path(args.model)
    workloads = {"short_chat": short_chat(), "chat_2k_tools": long_chat_with_tools()}
    import tempfile

    log = Path(tempfile.mkdtemp(prefix="render-bench-")) / "server.log"
    proc, addr = start_server(model, log)
    try:
        server: dict[str, Any] = {}
        for name, body in workloads.items():
            server[name] = [asyncio.run(run_load(addr, body, c, args.seconds)) for c in (1, 8)]
    finally:
        proc.terminate()
        proc.wait(15)
    baseline = {name: direct_baseline(model, body, min(args.seconds, 3.0)) for name, body in workloads.items()}
    vs_vllm = {f"c{r['concurrency']}": {"tokenwire_rps": r["rps"], "vllm_rps": VLLM_SHORT_CHAT_RPS[r["concurrency"]],
                                        "ratio": round(r["rps"] / VLLM_SHORT_CHAT_RPS[r["concurrency"]], 2)}
               for r in server["short_chat"]}
    report = {"model": str(model), "cpu_count": os.cpu_count(), "server": server,
              "direct_apply_chat_template": baseline, "short_chat_vs_vllm_0_32": vs_vllm,
              "note": "client and server share this machine; vLLM figures are docs/vllm-baseline.md's measurements"}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
