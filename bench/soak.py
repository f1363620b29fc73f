"""Load and soak: many WebSocket sessions × many requests against one real server (loopback only,
bounded in count and time), checking that nothing is lost and nothing leaks.

One ``tokenwire serve MODEL --enable-scale-out`` process (tiny-qwen3 by default). ``--sessions``
sessions each run requests one after another until ``--duration`` seconds pass or each has made
``--requests`` (whichever first): resumable ``chat`` streams (most), ``generate`` frames and
``completion`` streams, with a few ``cancel``\\ s. Checked for every request:

- **no lost or duplicated tokens**: a chat stream's text equals the non-streaming derender
  (``POST /v1/chat/completions/derender``) of the token ids its frames carried, and those ids count
  exactly the usage's ``completion_tokens``; a ``generate`` stream's ids count its usage; every
  session's ``seq`` grows by exactly one;
- **errors**: any ``error`` frame or close is counted (a soak expects none). A check call that does
  not answer 200 is a ``verify_failures`` entry, not a lost stream, and ``mismatches`` shows its
  status and body.

Sampled from ``/metrics`` every few seconds: server RSS (the slope after ``--warmup`` seconds, by
least squares), open file descriptors and event-loop tasks (compared before the sessions and after
they closed), engine queue depth. Client side: time to the first frame and between frames (p50,
p99). Results print as JSON (and go to ``--out``). The machine may be shared: latencies are
indicative, the counts are the point.

    .venv/bin/python -m bench.soak [--sessions 200] [--duration 300] [--requests 1000] [--out FILE]

``tests/e2e/test_soak.py`` runs a short form of the same code in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import ClientConnection, connect

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.server_proc import ServerProcess  # noqa: E402

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.", "Explain a hash table.",
           "List three uses of copper.", "Why is the sky blue?", "Say good morning in Spanish."]


@dataclass
class Tally:
    requests: int = 0
    chats_verified: int = 0
    generates_verified: int = 0
    completions: int = 0
    cancelled: int = 0
    tokens: int = 0
    lost_or_duplicated: int = 0  # streams whose tokens or text did not add up
    verify_failures: int = 0  # streams whose check call (the one-shot derender) did not answer 200
    seq_breaks: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    closes: dict[str, int] = field(default_factory=dict)
    first_frame: list[float] = field(default_factory=list)
    between_frames: list[float] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)


class Session:
    def __init__(self, ws: ClientConnection, tally: Tally) -> None:
        self.ws = ws
        self.tally = tally
        self.seq = 1  # session.created

    async def frames(self, rid: str, finals: tuple[str, ...]) -> list[dict[str, Any]]:
        """This request's frames up to its final frame (one request at a time per session)."""
        out: list[dict[str, Any]] = []
        sent = last = time.perf_counter()
        while True:
            frame = orjson.loads(await asyncio.wait_for(self.ws.recv(), 120))
            now = time.perf_counter()
            if frame["seq"] != self.seq + 1:
                self.tally.seq_breaks += 1
            self.seq = frame["seq"]
            if frame.get("id") != rid:
                continue
            (self.tally.first_frame if not out else self.tally.between_frames).append(now - (sent if not out else last))
            last = now
            out.append(frame)
            if frame["type"] == "error":
                code = frame["error"]["code"]
                self.tally.errors[code] = self.tally.errors.get(code, 0) + 1
            if frame["type"] in finals or frame["type"] == "error":
                return out

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send(orjson.dumps(frame).decode())


async def verify_chat(http: httpx.AsyncClient, body: dict[str, Any], frames: list[dict[str, Any]],
                      tally: Tally) -> None:
    deltas = [f for f in frames if f["type"] == "chat.delta"]
    ids = [t for f in deltas for t in f["output_token_ids"]]
    text = "".join(ch["choices"][0]["delta"].get("content") or "" for f in deltas for ch in f["chunks"]
                   if ch.get("choices"))
    finish = next((ch["choices"][0]["finish_reason"] for f in deltas for ch in f["chunks"]
                   if ch.get("choices") and ch["choices"][0].get("finish_reason")), None)
    usage = next((ch["usage"] for f in deltas for ch in f["chunks"] if ch.get("usage")), None)
    response = {"request_id": "soak", "choices": [{"index": 0, "token_ids": ids, "finish_reason": finish}]}
    request = {k: v for k, v in body.items() if k != "stream_options"}  # the non-streaming request
    r = await http.post("/v1/chat/completions/derender", json={"generate_response": response,
                                                               "chat_request": request, "prompt_token_ids": [0]})
    if r.status_code != 200:  # not a lost token: the check itself failed, and why must be seen
        tally.verify_failures += 1
        tally.mismatches.append(f"chat: the one-shot derender of {len(ids)} ids answered {r.status_code}: "
                                f"{r.text[:500]}")
        return
    one_shot = r.json()["choices"][0]["message"]["content"] or ""
    if one_shot != text or usage is None or usage["completion_tokens"] != len(ids):
        tally.lost_or_duplicated += 1
        tally.mismatches.append(f"chat: streamed {text[:60]!r} vs one-shot {str(one_shot)[:60]!r}, "
                                f"{len(ids)} ids, usage {usage}")
    else:
        tally.chats_verified += 1
    tally.tokens += len(ids)


async def one_request(session: Session, http: httpx.AsyncClient, rng: random.Random, k: int, tally: Tally,
                      new_tokens: int) -> None:
    rid = f"r{k}"
    tally.requests += 1
    roll = rng.random()
    content = rng.choice(PROMPTS)
    if roll < 0.65:  # a resumable chat stream, verified against the one-shot derender
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": rng.randint(1, new_tokens),
                "temperature": rng.choice([0, 0.8]), "seed": rng.randint(0, 10**6),
                "stream_options": {"include_usage": True}}
        await session.send({"type": "chat", "id": rid, "body": body, "resumable": True})
        frames = await session.frames(rid, ("chat.done",))
        if frames[-1]["type"] == "chat.done":
            await verify_chat(http, body, frames, tally)
    elif roll < 0.85:  # token-in / token-out
        ids = [rng.randint(10, 5000) for _ in range(rng.randint(1, 12))]
        body = {"token_ids": ids, "sampling_params": {"max_tokens": rng.randint(1, new_tokens), "temperature": 0}}
        await session.send({"type": "generate", "id": rid, "body": body})
        frames = await session.frames(rid, ("generate.done",))
        if frames[-1]["type"] == "generate.done":
            got = sum(len(c["token_ids"]) for f in frames if f["type"] == "generate.delta" for c in f["chunk"]["choices"])
            if got != frames[-1]["usage"]["completion_tokens"]:
                tally.lost_or_duplicated += 1
                tally.mismatches.append(f"generate: {got} ids vs usage {frames[-1]['usage']}")
            else:
                tally.generates_verified += 1
            tally.tokens += got
    elif roll < 0.95:
        body = {"prompt": content, "max_tokens": rng.randint(1, new_tokens), "temperature": 0}
        await session.send({"type": "completion", "id": rid, "body": body})
        frames = await session.frames(rid, ("completion.done",))
        tally.completions += frames[-1]["type"] == "completion.done"
    else:  # a long stream, cancelled after its first delta
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": 4 * new_tokens, "ignore_eos": True}
        await session.send({"type": "chat", "id": rid, "body": body})
        first = await session.frames(rid, ("chat.delta", "chat.done"))
        if first[-1]["type"] == "chat.delta":
            await session.send({"type": "cancel", "id": rid})
            frames = await session.frames(rid, ("chat.done",))
            tally.cancelled += frames[-1].get("status") == "cancelled"


async def run_session(ws_url: str, http: httpx.AsyncClient, index: int, deadline: float, requests: int,
                      tally: Tally, new_tokens: int) -> None:
    rng = random.Random(index)
    await asyncio.sleep(rng.random())  # spread the connects
    try:
        async with connect(ws_url + "/v1/session", subprotocols=["tokenwire.v1"], max_size=None,  # type: ignore[list-item]
                           compression=None, open_timeout=60) as ws:
            created = orjson.loads(await ws.recv())
            assert created["type"] == "session.created"
            session = Session(ws, tally)
            for k in range(requests):
                if time.monotonic() >= deadline:
                    break
                await one_request(session, http, rng, k, tally, new_tokens)
    except Exception as exc:  # a session that breaks is a result, not a crash of the bench
        name = type(exc).__name__
        tally.closes[name] = tally.closes.get(name, 0) + 1


def scrape(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=30).text
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples if not s.labels}


def slope_mb_per_min(samples: list[tuple[float, float]]) -> float:
    if len(samples) < 3:
        return float("nan")
    xs, ys = [t for t, _ in samples], [rss for _, rss in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den * 60 / 2**20 if den else float("nan")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def soak(url: str, *, sessions: int, duration: float, requests: int, warmup: float, new_tokens: int,
               sample_every: float = 2.0, log: Callable[[str], None] = print) -> dict[str, Any]:
    ws_url = "ws" + url[len("http"):]
    tally = Tally()
    before = await asyncio.to_thread(scrape, url)
    started = time.monotonic()
    deadline = started + duration
    rss: list[tuple[float, float]] = []
    queue: list[float] = []

    async def sampler() -> None:
        while True:
            m = await asyncio.to_thread(scrape, url)
            t = time.monotonic() - started
            if t >= warmup:
                rss.append((t, m.get("process_resident_memory_bytes", 0.0)))
            queue.append(m.get("tokenwire_engine_queue_depth", 0.0))
            log(f"  t={t:5.0f}s rss={m.get('process_resident_memory_bytes', 0) / 2**20:7.1f} MB "
                f"sessions={m.get('tokenwire_active_sessions', 0):4.0f} tasks={m.get('tokenwire_event_loop_tasks', 0):5.0f} "
                f"fds={m.get('process_open_fds', 0):4.0f} requests={tally.requests} tokens={tally.tokens}")
            await asyncio.sleep(sample_every)

    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        watch = asyncio.create_task(sampler())
        await asyncio.gather(*(run_session(ws_url, http, i, deadline, requests, tally, new_tokens)
                               for i in range(sessions)))
        watch.cancel()
    elapsed = time.monotonic() - started
    await asyncio.sleep(2.0)  # let the server notice every close
    after = await asyncio.to_thread(scrape, url)
    return {
        "sessions": sessions, "duration_s": round(elapsed, 1), "requests": tally.requests,
        "chats_verified": tally.chats_verified, "generates_verified": tally.generates_verified,
        "completions": tally.completions, "cancelled": tally.cancelled, "tokens_streamed": tally.tokens,
        "lost_or_duplicated_streams": tally.lost_or_duplicated, "verify_failures": tally.verify_failures,
        "seq_breaks": tally.seq_breaks,
        "error_frames": tally.errors, "sessions_broken": tally.closes, "mismatches": tally.mismatches[:5],
        "first_frame_ms": {"p50": round(pct(tally.first_frame, 0.5) * 1e3, 2),
                           "p99": round(pct(tally.first_frame, 0.99) * 1e3, 2)},
        "between_frames_ms": {"p50": round(pct(tally.between_frames, 0.5) * 1e3, 2),
                              "p99": round(pct(tally.between_frames, 0.99) * 1e3, 2)},
        "rss_mb": {"before": round(before["process_resident_memory_bytes"] / 2**20, 1),
                   "after": round(after["process_resident_memory_bytes"] / 2**20, 1),
                   "max": round(max((r for _, r in rss), default=0) / 2**20, 1),
                   "slope_after_warmup_mb_per_min": round(slope_mb_per_min(rss), 2)},
        "open_fds": {"before": before["process_open_fds"], "after": after["process_open_fds"]},
        "event_loop_tasks": {"before": before["tokenwire_event_loop_tasks"],
                             "after": after["tokenwire_event_loop_tasks"]},
        "active_sessions_after": after["tokenwire_active_sessions"],
        "inflight_generations_after": after["tokenwire_inflight_generations"],
        "engine_queue_depth_max": max(queue, default=0.0),
    }


def server_args(model: Path) -> list[str]:
    return ["serve", str(model), "--enable-scale-out", "--dtype", "float32", "--max-model-len", "1024",
            "--max-num-seqs", "32", "--max-waiting", "512", "--ws-idle-timeout", "3600"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: the tiny-qwen3 asset)")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--duration", type=float, default=300.0, help="seconds (the run stops sooner when every "
                        "session made --requests)")
    parser.add_argument("--requests", type=int, default=1000, help="requests per session at most")
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds before the RSS slope is measured")
    parser.add_argument("--new-tokens", type=int, default=24, help="max tokens per request (drawn up to it)")
    parser.add_argument("--out", default=None, help="write the JSON result here too")
    args = parser.parse_args()
    if args.model is None:
        from server.assets import ensure

        model = ensure("tiny-qwen3")
    else:
        model = Path(args.model)
    with ServerProcess(server_args(model), startup_timeout=300) as srv:
        result = asyncio.run(soak(srv.url, sessions=args.sessions, duration=args.duration, requests=args.requests,
                                  warmup=args.warmup, new_tokens=args.new_tokens))
        result["server_tracebacks"] = srv.output().count("Traceback")
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
