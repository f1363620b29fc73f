"""The parity suite's conversations: each as the OpenAI client sends it and as the chat template
receives it through vLLM's documented conversion (``None`` content → ``""``, JSON-string tool
arguments → objects, text parts joined with newlines, ``reasoning`` → ``reasoning_content``).

Tool-call ids are 9 alphanumerics (Mistral's templates insist) and turns alternate where a
template insists; a conversation a template refuses must be refused by render as well.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                    "limit": {"type": "integer", "minimum": 1}},
                   "required": ["query"]}}}
CALC = {"type": "function", "function": {
    "name": "calculate", "description": "Évalue une expression — unicode in a description ✓.",
    "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}}}

LONG_TEXT = " ".join(f"Sentence number {i} talks about tokenization, templates and streaming." for i in range(300))


@dataclass
class Case:
    id: str
    messages: list[dict[str, Any]]  # as the client sends them
    template_messages: list[dict[str, Any]] | None = None  # as the template sees them (default: same)
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def expected_messages(self) -> list[dict[str, Any]]:
        return self.template_messages if self.template_messages is not None else self.messages

    def request(self) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": self.messages, "max_tokens": 8,
                                "add_generation_prompt": self.add_generation_prompt,
                                "continue_final_message": self.continue_final_message}
        if self.tools is not None:
            body["tools"] = self.tools
            body["tool_choice"] = "none"  # render tools without needing a tool parser
        if self.kwargs:
            body["chat_template_kwargs"] = self.kwargs
        return body


def _call(id_: str, name: str, args: dict[str, Any], *, as_string: bool = False) -> dict[str, Any]:
    return {"id": id_, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args) if as_string else args}}


def _u(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _a(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _s(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def _tool(id_: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": id_, "content": content}


CALL_W = _call("call00001", "get_weather", {"city": "Paris", "unit": "celsius"})
CALL_S = _call("call00002", "search", {"query": "tokenwire", "limit": 3})

CASES: list[Case] = [
    Case("single-user", [_u("Hello!")]),
    Case("system-user", [_s("You are terse."), _u("What is 2+2?")]),
    Case("multi-turn", [_u("Hi"), _a("Hello, how can I help?"), _u("Tell me a joke.")]),
    Case("long-multi-turn", [_s("Be kind."), _u("One"), _a("Two"), _u("Three"), _a("Four"), _u("Five")]),
    Case("unicode", [_u("日本語のテキスト, émojis 🎉🚀, עברית, combining é, zero-width\u200bspace")]),
    Case("empty-user", [_u("")]),
    Case("empty-system", [_s(""), _u("hi")]),
    Case("whitespace", [_u("  leading and trailing  \n\n\tindented\n  ")]),
    Case("control-chars", [_u("tabs\tand\r\nwindows newlines\x0bvertical")]),
    Case("special-token-text", [_u("literal <|im_end|> and </s> and [INST] text")]),
    Case("long-prompt", [_s("Summarize."), _u(LONG_TEXT)]),
    Case("json-content", [_u(json.dumps({"a": [1, 2, {"b": None}], "c": "ü"}))]),
    Case("code-block", [_u("```python\ndef f(x):\n    return x * 2\n```\nExplain.")]),
    Case("one-char", [_u("a")]),
    Case("no-generation-prompt", [_u("Hi"), _a("Hello!")], add_generation_prompt=False),
    Case("continue-final", [_u("Write a haiku."), _a("Autumn leaves")], add_generation_prompt=False,
         continue_final_message=True),
    Case("text-parts", [{"role": "user", "content": [{"type": "text", "text": "part one"},
                                                     {"type": "text", "text": "part two"}]}],
         template_messages=[_u("part one\npart two")]),
    Case("user-name", [{"role": "user", "content": "hi", "name": "alice"}]),
    Case("tools-one", [_u("Weather in Paris?")], tools=[WEATHER]),
    Case("tools-three-system", [_s("Use tools."), _u("Find tokenwire and 2*21")], tools=[WEATHER, SEARCH, CALC]),
    Case("tool-call-and-result",
         [_u("Weather in Paris?"), {"role": "assistant", "content": "", "tool_calls": [CALL_W]},
          _tool("call00001", '{"temp": 21, "sky": "clear"}')], tools=[WEATHER]),
    Case("tool-call-string-args",
         [_u("Weather in Paris?"),
          {"role": "assistant", "content": None,
           "tool_calls": [_call("call00001", "get_weather", {"city": "Paris"}, as_string=True)]},
          _tool("call00001", "21C")],
         template_messages=[_u("Weather in Paris?"),
                            {"role": "assistant", "content": "",
                             "tool_calls": [_call("call00001", "get_weather", {"city": "Paris"})]},
                            _tool("call00001", "21C")],
         tools=[WEATHER]),
    Case("parallel-tool-calls",
         [_u("Weather and search"), {"role": "assistant", "content": "", "tool_calls": [CALL_W, CALL_S]},
          _tool("call00001", "21C"), _tool("call00002", "[1 result]")], tools=[WEATHER, SEARCH]),
    Case("tool-call-empty-args",
         [_u("Search something"),
          {"role": "assistant", "content": "", "tool_calls": [
              {"id": "call00003", "type": "function", "function": {"name": "search", "arguments": ""}}]},
          _tool("call00003", "nothing")],
         template_messages=[_u("Search something"),
                            {"role": "assistant", "content": "", "tool_calls": [
                                {"id": "call00003", "type": "function",
                                 "function": {"name": "search", "arguments": {}}}]},
                            _tool("call00003", "nothing")],
         tools=[SEARCH]),
    Case("tool-call-with-text",
         [_u("Weather?"), {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL_W]},
          _tool("call00001", "21C")], tools=[WEATHER]),
    Case("tool-result-then-user",
         [_u("Weather?"), {"role": "assistant", "content": "", "tool_calls": [CALL_W]},
          _tool("call00001", "21C"), _a("It is 21C."), _u("And tomorrow?")], tools=[WEATHER]),
    Case("tool-result-multiline", [_u("Go"), {"role": "assistant", "content": "", "tool_calls": [CALL_S]},
                                   _tool("call00002", '{\n  "results": [\n    "a",\n    "b"\n  ]\n}')],
         tools=[SEARCH]),
    Case("reasoning-history",
         [_u("2+2?"), {"role": "assistant", "content": "4", "reasoning": "Adding two and two."}, _u("3+3?")],
         template_messages=[_u("2+2?"), {"role": "assistant", "content": "4",
                                         "reasoning_content": "Adding two and two."}, _u("3+3?")]),
    Case("reasoning-last-turn",
         [_u("2+2?"), {"role": "assistant", "content": "4", "reasoning_content": "Easy."}],
         template_messages=[_u("2+2?"), {"role": "assistant", "content": "4", "reasoning_content": "Easy."}],
         add_generation_prompt=False),
    Case("think-tags-in-content", [_u("Q"), _a("<think>\nhmm\n</think>\n\nAnswer"), _u("Again")]),
    Case("enable-thinking-false", [_u("Quick answer please")], kwargs={"enable_thinking": False}),
    Case("enable-thinking-true", [_u("Think hard")], kwargs={"enable_thinking": True}),
    Case("thinking-kwarg", [_u("Think")], kwargs={"thinking": True}),
    Case("two-systems", [_s("First."), _u("hi"), _a("hello"), _s("Second."), _u("bye")]),
    Case("consecutive-users", [_u("one"), _u("two")]),
    Case("system-only", [_s("Only a system prompt.")]),
]
