"""The derender benchmark's per-parser section: each parser family's own 4,000-token stream
(bench/parser_streams.py: reasoning, content, then one call's long argument, unfinished), pushed one
token at a time with the state in memory: CPU per token against ``hermes``'s (at most 1.5x) and the
latency at the argument's end over its start (flat: at most 1.3x)."""

from __future__ import annotations

import gc
import json
import time
from typing import Any

from bench.derender_timing import WINDOW, median_us, verdict
from bench.parser_streams import FAMILIES, stream
from engine.protocol import GenerateChoice, GenerateResponse
from session.derender import ChatDerenderer, chat_derenderer, chat_response
from session.protocol.openai import ChatCompletionRequest

PARSER_TOKENS = 4000
TARGETS = {"parser_per_token_over_hermes": 1.5, "parser_args_end_over_start": 1.3}


def parser_family(name: str, repeats: int) -> dict[str, Any]:
    """One family's stream (bench/parser_streams.py), pushed one token at a time: the one-shot split
    checked first, then the whole stream's CPU per token and the latency at the argument's start and
    end (WINDOW chunks each, the lowest repetition's median)."""
    from transformers import AutoTokenizer

    from server.assets import ensure

    family = FAMILIES[name]
    tok = AutoTokenizer.from_pretrained(str(ensure(family.asset)), local_files_only=True)
    ids, body = stream(name, tok, PARSER_TOKENS)
    request = ChatCompletionRequest.model_validate(body)
    prompt = list(tok.encode("Plan my week.", add_special_tokens=False))

    def derenderer() -> ChatDerenderer:
        return chat_derenderer(request, prompt, request_id="chatcmpl-bench", created=0, model="bench",
                               tokenizer=tok, tool_parser=family.tool, reasoning_parser=family.reasoning,
                               enable_auto_tool_choice=True)

    one = chat_response(derenderer(), GenerateResponse(request_id="b", choices=[
        GenerateChoice(index=0, token_ids=ids, finish_reason="length")]))
    message = one["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    if not (message.get("reasoning") and message.get("content") and len(calls) == 1):
        raise SystemExit(f"derender_bench: the {name} stream does not split into reasoning, content and one call: "
                         f"{json.dumps(message, ensure_ascii=False)[:400]}")
    arg_start = PARSER_TOKENS * 3 // 20  # past the reasoning (10 %) and the content (5 %)
    per_chunk: list[list[float]] = [[] for _ in ids]
    cpu: list[float] = []
    for _ in range(repeats):
        d = derenderer()
        push = d.push
        gc.disable()
        c0 = time.process_time()
        for k, token in enumerate(ids):
            t = time.perf_counter()
            push(0, [token])
            per_chunk[k].append(time.perf_counter() - t)
        cpu.append(time.process_time() - c0)
        gc.enable()

    def window(first: int) -> float:
        rows = per_chunk[first:first + WINDOW]
        return min(median_us([samples[r] for samples in rows]) for r in range(repeats))

    return {"tool_parser": family.tool, "reasoning_parser": family.reasoning, "asset": family.asset,
            "tokens": len(ids), "per_token_us": round(min(cpu) / len(ids) * 1e6, 2),
            "args_start_us": window(arg_start + 100), "args_end_us": window(len(ids) - WINDOW),
            "argument_chars": len(calls[0]["function"]["arguments"])}


def parser_families(repeats: int) -> dict[str, Any]:
    return {name: parser_family(name, repeats) for name in FAMILIES}


def parser_ratios(families: dict[str, Any]) -> dict[str, Any]:
    hermes = families["hermes"]["per_token_us"]
    out: dict[str, Any] = {}
    for name, row in families.items():
        out[f"parsers.{name}.per_token_over_hermes"] = verdict(row["per_token_us"] / hermes,
                                                                TARGETS["parser_per_token_over_hermes"])
        out[f"parsers.{name}.args_end_over_start"] = verdict(row["args_end_us"] / row["args_start_us"],
                                                              TARGETS["parser_args_end_over_start"])
    return out
