"""``POST /tokenize`` and ``POST /detokenize`` in vLLM 0.32's shapes
(``vllm/entrypoints/serve/tokenize/protocol.py``).

A tokenize body with ``messages`` is a chat request (vLLM's union picks the chat model whenever
``messages`` is there), else a text prompt. Unknown fields are kept and ignored; a wrong type is a
400 naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from session.protocol.openai import ChatMessage, Tool

__all__ = ["DetokenizeRequest", "DetokenizeResponse", "TokenizeChatRequest", "TokenizeCompletionRequest",
           "TokenizeResponse"]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class TokenizeCompletionRequest(_Open):
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True  # e.g. a BOS token, for tokenizers that add one
    return_token_strs: bool | None = False


class TokenizeChatRequest(_Open):
    model: str | None = None
    messages: list[ChatMessage]
    add_generation_prompt: bool = True
    return_token_strs: bool | None = False
    continue_final_message: bool = False
    add_special_tokens: bool = False  # the chat template writes them
    chat_template: str | None = None  # refused, as every request template (docs/render.md)
    chat_template_kwargs: dict[str, Any] | None = None
    media_io_kwargs: dict[str, dict[str, Any]] | None = None  # accepted, ignored
    mm_processor_kwargs: dict[str, Any] | None = None  # accepted, ignored
    tools: list[Tool] | None = None

    @staticmethod
    def chat_body(body: dict[str, Any]) -> dict[str, Any]:
        """The body of the chat request render renders for a tokenize ``body`` (validated as this
        model first): the same conversation, tools and template switches, as they came (validating
        it as a :class:`ChatCompletionRequest` refuses ``continue_final_message`` with
        ``add_generation_prompt``, as vLLM)."""
        return {k: body[k] for k in _CHAT_FIELDS if k in body}


_CHAT_FIELDS = ("model", "messages", "add_generation_prompt", "continue_final_message", "add_special_tokens",
                "chat_template", "chat_template_kwargs", "tools")


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(_Open):
    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0, le=2**63 - 1)]]


class DetokenizeResponse(BaseModel):
    prompt: str
