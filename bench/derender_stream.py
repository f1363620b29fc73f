"""The derender benchmarks' reference stream: what a reasoning model with tools produces on the Qwen3
tokenizer (``hermes`` tool parser, ``qwen3`` reasoning parser): thinking, then content, then one
tool call with a long ``notes`` argument, and the chat request and prompt it answers. Shared by
bench/derender_bench.py, bench/derender_http.py and bench/vllm_compare.py."""

from __future__ import annotations

from typing import Any

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string"}, "notes": {"type": "string"}}}}}]
CHAT_REQUEST = {"model": "bench", "messages": [{"role": "user", "content": "Plan my week in Paris and 東京."}],
                "tools": TOOLS, "stream": True, "stream_options": {"include_usage": True}}
THINK = ("Let me think about the weather in Paris and 東京 this week 🤔. The user wants a plan, so I should "
         "check each day, compare temperatures, and keep the answer short. ")
CONTENT = "Here is a short plan for your week, day by day, with the forecast for each city. 🌤️ "
NOTES = "Monday: museums if it rains; Tuesday: river walk; Wednesday: day trip; 雨なら美術館. "


def tokenizer() -> Any:
    """The Qwen3 tokenizer of the offline assets (built on first use)."""
    from transformers import AutoTokenizer

    from server.assets import ensure

    return AutoTokenizer.from_pretrained(str(ensure("qwen3")), local_files_only=True)


def _take(tok: Any, unit: str, n: int) -> str:
    """Repeat ``unit`` until it encodes to at least ``n`` tokens, then cut to ``n`` tokens."""
    text = unit
    while len(tok._tokenizer.encode(text, add_special_tokens=False).ids) < n:
        text += unit
    ids = tok._tokenizer.encode(text, add_special_tokens=False).ids[:n]
    return str(tok._tokenizer.decode(ids))


def build_stream(tok: Any, think: int, content: int, args: int, *, close: bool) -> list[int]:
    """thinking → content → one hermes tool call whose ``notes`` argument is ``args`` tokens long."""
    notes = _take(tok, NOTES, args).replace("\\", "").replace('"', "'")
    head = ("<think>\n" + _take(tok, THINK, think) + "\n</think>\n\n" + _take(tok, CONTENT, content)
            + '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "notes": "')
    text = head + notes + ('"}}\n</tool_call>' if close else "")
    ids = list(tok._tokenizer.encode(text, add_special_tokens=False).ids)
    return [*ids, tok.eos_token_id] if close else ids


def prompt(tok: Any) -> list[int]:
    """The prompt's token ids the stream answers (a short user turn in Qwen3's chat format)."""
    return list(tok._tokenizer.encode("<|im_start|>user\nPlan my week.<|im_end|>\n<|im_start|>assistant\n",
                                      add_special_tokens=False).ids)


def in_chunks(ids: list[int], size: int) -> list[list[int]]:
    """``ids`` cut into pieces of ``size`` tokens (the last one shorter), as an engine's steps give them."""
    return [ids[k:k + size] for k in range(0, len(ids), size)]
