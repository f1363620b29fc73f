"""Token counting: ``POST /tokenize`` and ``POST /detokenize`` (vLLM 0.32's shapes, served in every
mode, as vLLM registers them on every server) and Anthropic's ``POST /v1/messages/count_tokens``
(served with ``/v1/messages``, as vLLM does).

All three go through the process's renderer, so the counts are those of the prompts render builds:
``/tokenize`` with ``messages`` renders the chat exactly as ``/v1/chat/completions/render`` does,
without the length rules (vLLM's tokenize has no context limit; the body limit bounds the work), and
``count_tokens`` is the length of the prompt ``/v1/messages/render`` gives. docs/render.md,
"Token counting".
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from server.errors import ApiError
from server.gating import RouteGroup
from server.http import json_response, read_json, validate
from server.render_work import render_work
from server.routing import Route
from server.services import ctx_of, services_of
from session.protocol import ChatCompletionRequest
from session.protocol.anthropic import CountTokensRequest
from session.protocol.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    TokenizeResponse,
)
from session.render import Renderer

NO_INPUT = "Send `prompt` (a text) or `messages` (a chat conversation) to tokenize."


class CountTokensResponse(BaseModel):
    input_tokens: int


async def tokenize(request: Request) -> Response:
    body = await read_json(request)
    renderer = services_of(request).renderer
    size = len(await request.body())
    req: TokenizeChatRequest | TokenizeCompletionRequest
    if "messages" in body:  # vLLM's union picks the chat request whenever `messages` is there
        req = validate(TokenizeChatRequest, body)
        chat = validate(ChatCompletionRequest, TokenizeChatRequest.chat_body(body))
        ids = await render_work(renderer.tokenize_chat, chat, size)
    elif "prompt" in body:
        req = validate(TokenizeCompletionRequest, body)
        renderer.check_model(req.model)
        ids = await render_work(_text_ids(renderer, req.add_special_tokens), req.prompt, size)
    else:
        raise ApiError(400, NO_INPUT, param="prompt")
    strs = renderer.tokenizer.convert_ids_to_tokens(ids) if req.return_token_strs else None
    return json_response(TokenizeResponse(count=len(ids), max_model_len=ctx_of(request).max_model_len, tokens=ids,
                                          token_strs=strs))


def _text_ids(renderer: Renderer, add_special_tokens: bool) -> Any:
    def ids(text: str) -> list[int]:
        return renderer.tokenize_text(text, add_special_tokens=add_special_tokens)
    return ids


async def detokenize(request: Request) -> Response:
    req = validate(DetokenizeRequest, await read_json(request))
    renderer = services_of(request).renderer
    renderer.check_model(req.model)
    vocab = renderer.encoder.vocab_size
    bad = next((i for i, t in enumerate(req.tokens) if t >= vocab), None)
    if bad is not None:
        raise ApiError(400, f"tokens[{bad}]: token id {req.tokens[bad]} is out of vocabulary (the tokenizer has "
                            f"{vocab} tokens).", param=f"tokens.{bad}")
    text = await render_work(renderer.tokenizer.decode, req.tokens, len(await request.body()))
    return json_response(DetokenizeResponse(prompt=text))


async def count_tokens(request: Request) -> Response:
    req = validate(CountTokensRequest, await read_json(request))
    renderer = services_of(request).renderer
    rendered = await render_work(renderer.render_messages, req, len(await request.body()))
    return json_response(CountTokensResponse(input_tokens=len(rendered.token_ids)))


def routes() -> list[Route]:
    g = RouteGroup.TOKENIZE
    return [
        Route("/tokenize", tokenize, g, summary="Token ids of a prompt or a chat (vLLM's shape)",
              request_model=TokenizeChatRequest | TokenizeCompletionRequest,
              response_model=TokenizeResponse, tags=("tokenize",)),
        Route("/detokenize", detokenize, g, summary="The text of token ids (vLLM's shape)",
              request_model=DetokenizeRequest, response_model=DetokenizeResponse, tags=("tokenize",)),
        Route("/v1/messages/count_tokens", count_tokens, RouteGroup.PIPELINE,
              summary="Anthropic messages.count_tokens: the prompt tokens render gives",
              request_model=CountTokensRequest, response_model=CountTokensResponse, tags=("anthropic",)),
    ]
