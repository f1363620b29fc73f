"""One long model output per parser family, for ``bench/derender_bench.py``'s per-parser section: a
reasoning section, some content and one ``write_file`` call whose ``content`` argument is long, in the
family's own format, on the family's tokenizer asset. ``stream(family, tok, tokens)`` gives the output's
token ids (about ``tokens`` of them, ending inside the argument, the hardest place for the state),
with the request it answers.

Every family's text is checked by the benchmark itself: derendered one-shot it must split into the
reasoning, the content and the call (so a wrong format here fails loudly instead of timing plain text).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

THINK = ("Let me think about the weather in Paris and 東京 this week 🤔. The user wants a plan, so I should "
         "check each day, compare temperatures, and keep the answer short. ")
CONTENT = "Here is a short plan for your week, day by day, with the forecast for each city. 🌤️ "
NOTES = "Monday: museums if it rains; Tuesday: river walk; Wednesday: day trip; 雨なら美術館. "
TOOLS = [{"type": "function", "function": {"name": "write_file", "description": "Write a file",
                                           "parameters": {"type": "object", "properties": {
                                               "path": {"type": "string"}, "content": {"type": "string"}},
                                               "required": ["path", "content"]}}}]


@dataclass(frozen=True)
class Family:
    tool: str
    reasoning: str | None
    asset: str
    # (reasoning, content, argument head) → the text up to the start of the long argument's value
    head: Callable[[str, str], str]
    kwargs: dict[str, Any] = field(default_factory=dict)  # chat_template_kwargs


def _json_call(think: str, content: str) -> str:
    return f'{think}{content}<tool_call>\n{{"name": "write_file", "arguments": {{"path": "plan.md", "content": "'


FAMILIES: dict[str, Family] = {f.tool: f for f in (
    Family("hermes", "qwen3", "qwen3", lambda r, c: _json_call(f"<think>\n{r}\n</think>\n\n", c)),
    Family("qwen3_coder", "qwen3", "qwen3.5", lambda r, c: (
        f"<think>\n{r}\n</think>\n\n{c}\n<tool_call>\n<function=write_file>\n<parameter=path>\nplan.md\n"
        "</parameter>\n<parameter=content>\n")),
    Family("seed_oss", "seed_oss", "seed-oss", lambda r, c: (
        f"<seed:think>{r}</seed:think>{c}<seed:tool_call>\n<function=write_file>\n<parameter=path>plan.md"
        "</parameter>\n<parameter=content>")),
    Family("glm45", "glm45", "glm-4.6", lambda r, c: (
        f"<think>{r}</think>\n{c}\n<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>plan.md"
        "</arg_value>\n<arg_key>content</arg_key>\n<arg_value>")),
    Family("glm47", "glm45", "glm-4.7", lambda r, c: (
        f"<think>{r}</think>{c}<tool_call>write_file<arg_key>path</arg_key><arg_value>plan.md</arg_value>"
        "<arg_key>content</arg_key><arg_value>")),
    Family("kimi_k2", "kimi_k2", "kimi-k2-thinking", lambda r, c: (
        f"<think>{r}</think>{c}<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:0"
        '<|tool_call_argument_begin|>{"path": "plan.md", "content": "')),
    Family("deepseek_v32", "deepseek_v3", "deepseek-v3.2", lambda r, c: (
        f"{r}</think>{c}\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"write_file\">\n"
        "<｜DSML｜parameter name=\"path\" string=\"true\">plan.md</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"content\" string=\"true\">"), {"thinking": True}),
    Family("minimax_m2", "minimax_m2", "minimax-m2", lambda r, c: (
        f"{r}</think>\n\n{c}\n<minimax:tool_call>\n<invoke name=\"write_file\">\n<parameter name=\"path\">plan.md"
        "</parameter>\n<parameter name=\"content\">")),
    Family("gemma4", "gemma4", "gemma-4", lambda r, c: (
        f"<|channel>thought\n{r}<channel|>{c}<|tool_call>call:write_file{{path:<|\"|>plan.md<|\"|>,"
        "content:<|\"|>"), {"enable_thinking": True}),
    Family("openai", "openai_gptoss", "tiny-gpt-oss", lambda r, c: (
        f"<|channel|>analysis<|message|>{r}<|end|><|start|>assistant<|channel|>commentary<|message|>{c}<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>"
        '{"path": "plan.md", "content": "')),
)}


def _take(tok: Any, unit: str, n: int) -> str:
    """Repeat ``unit`` until it encodes to at least ``n`` tokens, then cut to ``n`` tokens."""
    text = unit
    while len(tok.encode(text, add_special_tokens=False)) < n:
        text += unit
    return str(tok.decode(tok.encode(text, add_special_tokens=False)[:n]))


def stream(name: str, tok: Any, tokens: int) -> tuple[list[int], dict[str, Any]]:
    """About ``tokens`` output ids of family ``name`` (10 % reasoning, 5 % content, the rest one call's
    long argument, unfinished) and the chat request they answer."""
    family = FAMILIES[name]
    think, content = _take(tok, THINK, tokens // 10), _take(tok, CONTENT, tokens // 20)
    head = family.head(think, content)
    notes = _take(tok, NOTES, tokens).replace("\\", "").replace('"', "'").replace("<", "(")
    ids = list(tok.encode(head + notes, add_special_tokens=False))[:tokens]
    request: dict[str, Any] = {"model": "bench", "messages": [{"role": "user", "content": "Plan my week."}],
                               "tools": TOOLS, "stream": True}
    if family.kwargs:
        request["chat_template_kwargs"] = family.kwargs
    return ids, request
