"""What the render-rule tests share (tests/session/render/test_render_rules.py, test_render_rules_lengths.py):
the qwen3 tokenizer (the ``qwen`` fixture, taken by name), a Renderer on it, requests, and a chat
template that marks the assistant's tokens with ``{% generation %}``."""

from __future__ import annotations

from typing import Any

import pytest

from session.protocol import ChatCompletionRequest, CompletionRequest
from session.render import Renderer

GEN_TEMPLATE = (
    "{%- for message in messages %}{{ '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.role == 'assistant' %}{% generation %}{{ message.content + '<|im_end|>' }}{% endgeneration %}"
    "{%- else %}{{ message.content + '<|im_end|>' }}{%- endif %}{{ '\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)
USER = [{"role": "user", "content": "Hello there"}]
TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


@pytest.fixture(scope="module")
def qwen(tokenizer: Any) -> Any:
    return tokenizer("qwen3")


def renderer(tok: Any, **kw: Any) -> Renderer:
    kw.setdefault("model_name", "qwen3")
    kw.setdefault("max_model_len", 4096)
    return Renderer(tok, **kw)


def chat(**body: Any) -> ChatCompletionRequest:
    body.setdefault("messages", USER)
    return ChatCompletionRequest.model_validate(body)


def completion(**body: Any) -> CompletionRequest:
    return CompletionRequest.model_validate(body)


def prompt_len(tok: Any, messages: list[dict[str, Any]] = USER) -> int:
    return len(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))
