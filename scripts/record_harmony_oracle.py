"""Record vLLM 0.32's own harmony split (``vllm.parser.harmony.HarmonyParser``) of many gpt-oss outputs.

    /work/vllm-venv/bin/python scripts/record_harmony_oracle.py [--count 400] [--seed 36]

Run with vLLM's interpreter (tokenwire never imports vLLM). It builds outputs from harmony
fragments (seeded random headers, channels, recipients, content types, JSON and raw arguments,
unicode, stop markers, truncation, malformed headers, stray text) plus the hand-written ones
below, encodes each with the harmony library's encoding (special tokens as tokens), and records
for each of the four parser configurations (reasoning parser on/off × tool parser on/off) vLLM's
non-streaming ``parse`` and its one-token-per-call ``parse_delta`` answer, folded.

Writes ``tests/data/vllm/harmony_oracle.json``, read by ``tests/session/parsers/test_parsers_harmony.py``
(the in-process unit oracle; the served derender parity is ``cases/gpt_oss.json``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "vllm" / "harmony_oracle.json"
TOKENIZER = Path(os.environ.get("TOKENWIRE_CACHE_DIR", Path.home() / ".cache" / "tokenwire")) / "assets" / "gpt-oss"

HAND = [
    "<|channel|>analysis<|message|>Let me think.<|end|><|start|>assistant<|channel|>final<|message|>Hello!",
    "<|channel|>analysis<|message|>Think<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather"
    ' <|constrain|>json<|message|>{"city":"Paris"}',
    "<|channel|>analysis<|message|>Think<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary"
    ' json<|message|>{"city": "Paris"}',
    "<|channel|>commentary<|message|>I will check.<|end|><|start|>assistant<|channel|>commentary to=functions.f"
    "<|message|>{}",
    '<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary to=browser.search<|message|>{"q":1}',
    "<|channel|>analysis<|message|>Think more and more",
    '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": [1, 2',
    "<|channel|>analysis<|message|>A<|end|><|start|>assistant<|channel|>analysis<|message|>B<|end|>"
    "<|start|>assistant<|channel|>final<|message|>C<|end|><|start|>assistant<|channel|>final<|message|>D",
    "Hello plain text",
    "<|start|>assistant<|channel|>final<|message|>Hi",
    "<|channel|>analysis",
    "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final",
    "<|channel|>commentary to=functions.f<|message|>not json",
    "<|channel|>commentary to=functions.f <|constrain|>xml<|message|><a/>",
    "<|channel|>commentary to=python<|message|>print(1)",
    "<|channel|>commentary<|constrain|>json<|message|>{}",
    "<|channel|>final<|message|>é 日本 🤖<|end|><|start|>assistant<|channel|>commentary to=functions.u<|message|>"
    '{"s": "é 日本 🤖 \\u00e9 \\ud83e\\udd16", "n": 1.50, "e": 1e3}',
]

CHANNELS = ["analysis", "final", "commentary", "commentary", "analysis", "garbage", ""]
RECIPIENTS = [None, None, None, "functions.get_weather", "functions.search_docs", "browser.search", "python",
              "container.exec", "functions.", "get_time", "assistant", "functions.a.b"]
CTYPES = [None, None, "<|constrain|>json", "json", "<|constrain|>xml", "code"]
TEXTS = ["Let me think.", "The answer is 42.", "é ñ 日本語 🤖", "line\nbreak\ttab", " spaced ", "<b>html</b>",
         "a < b > c", "", "x" * 40, "Use <|channel|> text", "quote \" and \\ backslash"]
ARGS = ['{"city":"Paris"}', '{"city": "Paris", "unit": "c"}', '{"a":[1,2,{"b":null}],"t":true}', "{}",
        '{"s":"é 🤖 \\u00e9 \\n"}', '{"n":1.50,"e":1E3,"neg":-0}', "[1, 2]", '"str"', "42", "not json",
        '{"a": 1} trailing', '{"a": [1, 2', '{"unclosed": "str', " {\"ws\" : 1 } ", ""]
ROLES = ["assistant", "assistant", "assistant", "user", "tool", "functions.x", "bogus"]
STOP_END = ["<|end|>", "<|call|>", "<|return|>"]


def header(rng: random.Random, first: bool) -> str:
    parts: list[str] = []
    role = "" if first else rng.choice(ROLES)
    channel = rng.choice(CHANNELS)
    recipient = rng.choice(RECIPIENTS)
    ctype = rng.choice(CTYPES)
    order = rng.random()
    if role:
        parts.append(role)
    chan = f"<|channel|>{channel}" if channel or rng.random() < 0.2 else ""
    to = f" to={recipient}" if recipient else ""
    ct = (" " if rng.random() < 0.8 else "") + ctype if ctype else ""
    if order < 0.6:
        h = "".join(parts) + chan + to + ct
    elif order < 0.85:
        h = "".join(parts) + to + chan + ct
    else:
        h = "".join(parts) + chan + to + " extra" + ct
    return h


def message(rng: random.Random, first: bool) -> str:
    h = header(rng, first)
    body = rng.choice(ARGS) if " to=" in h else rng.choice(TEXTS)
    return h + "<|message|>" + body


def generate(rng: random.Random) -> str:
    out = []
    n = rng.choice([1, 1, 2, 2, 3, 4])
    for k in range(n):
        if k:
            out.append(rng.choice(STOP_END[:2]) if rng.random() < 0.9 else "")
            if rng.random() < 0.9:
                out.append("<|start|>")
            elif rng.random() < 0.5:
                out.append("stray text")
        out.append(message(rng, k == 0))
    text = "".join(out)
    r = rng.random()
    if r < 0.2:  # cut anywhere (finish_reason length)
        text = text[: rng.randint(0, len(text))]
    elif r < 0.3:
        text += "<|end|>"
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=400)
    ap.add_argument("--seed", type=int, default=36)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.parser.harmony_utils import get_encoding
    from vllm.parser.harmony import HarmonyParser
    from vllm.reasoning.gptoss_reasoning_parser import GptOssReasoningParser
    from vllm.tool_parsers.gptoss_tool_parser import GptOssToolParser

    tok = AutoTokenizer.from_pretrained(str(TOKENIZER))
    enc = get_encoding()
    req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}])

    def run(ids: list[int], reasoning: bool, tools: bool) -> dict[str, Any]:
        HarmonyParser.reasoning_parser_cls = GptOssReasoningParser if reasoning else None
        HarmonyParser.tool_parser_cls = GptOssToolParser if tools else None
        p = HarmonyParser(tok, None)
        r, c, t = p.parse("", req, model_output_token_ids=ids)
        p = HarmonyParser(tok, None)
        sr, sc, calls = "", "", []
        for k, i in enumerate(ids):
            d = p.parse_delta(tok.decode([i]), [i], req, finished=(k == len(ids) - 1))
            if d is None:
                continue
            sr += d.reasoning or ""
            sc += d.content or ""
            for tc in d.tool_calls or []:
                if tc.function.name is not None:
                    calls.append([tc.function.name, tc.function.arguments or ""])
                else:
                    calls[-1][1] += tc.function.arguments or ""
        return {"content": c, "reasoning": r, "calls": [[x.name, x.arguments] for x in t or []],
                "stream": {"content": sc or None, "reasoning": sr or None, "calls": calls}}

    rng = random.Random(args.seed)
    texts = list(HAND)
    seen = set(texts)
    while len(texts) < args.count + len(HAND):
        t = generate(rng)
        if t not in seen:
            seen.add(t)
            texts.append(t)
    cases = []
    for text in texts:
        ids = enc.encode(text, allowed_special="all")
        if tok.decode(ids) != text:
            continue
        cases.append({"text": text,
                      **{f"{'r' if r else ''}{'t' if t else ''}" or "none": run(ids, r, t)
                         for r in (False, True) for t in (False, True)}})
    OUT.write_text(json.dumps({
        "_source": f"scripts/record_harmony_oracle.py --count {args.count} --seed {args.seed} with vLLM 0.32's "
                   "HarmonyParser (oss-harmony 0.0.11); keys: none / r / t / rt = reasoning parser, tool parser "
                   "configured; content / reasoning / calls = parse(), stream = parse_delta one token per call",
        "cases": cases}, ensure_ascii=False, indent=0))
    print(f"{len(cases)} outputs -> {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
