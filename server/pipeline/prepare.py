"""A request made ready for the engine: validated, rendered to engine requests, and given its
in-memory derenderers (:class:`Prepared`), before anything is admitted. docs/serve.md, "How a
request flows" (step 1, render).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.protocol import GenerateRequest
from server.context import ServerContext
from server.http import validate
from server.render_work import json_size, render_work
from session.client_frames import Kind
from session.derender import ChatDerenderer, CompletionDerenderer, chat_derenderer, completion_derenderer
from session.errors import InvalidRequest
from session.protocol.anthropic import MessagesRequest
from session.protocol.openai import ChatCompletionRequest, CompletionRequest
from session.render import Renderer
from session.render.anthropic import to_openai_chat

ParserNames = tuple[str | None, str | None, bool]  # tool-call parser, reasoning parser, auto tool choice


@dataclass(slots=True)
class Prepared:
    """One request's engine requests and derenderers (one each for chat and messages, one per
    prompt for a completion), and what its answer is shaped from."""

    kind: Kind
    body: dict[str, Any]
    requests: list[GenerateRequest]
    derenderers: list[ChatDerenderer | CompletionDerenderer]
    chat: ChatCompletionRequest | None = None
    completion: CompletionRequest | None = None
    messages: MessagesRequest | None = None
    include_usage: bool = False
    created: int = 0
    context: str | None = None  # the checkpoints' request-context digest (``checkpoint.Checkpoints.binding``)


async def render(renderer: Renderer, kind: Kind, body: dict[str, Any]) -> list[GenerateRequest]:
    """Validate and render only (the WebSocket ``render`` frame): the engine requests."""
    if kind == "chat":
        chat = validate(ChatCompletionRequest, body)
        return [await render_work(renderer.render_chat, chat, body_size(body))]
    if kind == "completion":
        comp = validate(CompletionRequest, body)
        return await render_work(renderer.render_completion, comp, body_size(body))
    msgs = validate(MessagesRequest, body)
    return [await render_work(renderer.render_messages, msgs, body_size(body))]


async def prepare(ctx: ServerContext, renderer: Renderer, parser_names: ParserNames, kind: Kind,
                  body: dict[str, Any]) -> Prepared:
    """Validate and render ``body``, and build the derenderers that will read the engine's output."""
    created = int(time.time())
    tok, model = ctx.tokenizer, ctx.model_name
    tool_parser, reasoning_parser, auto = parser_names
    if kind == "completion":
        comp = validate(CompletionRequest, body)
        check_prompt_count(ctx, len(comp.prompts()))
        reqs = await render_work(renderer.render_completion, comp, body_size(body))
        ds: list[ChatDerenderer | CompletionDerenderer] = [
            completion_derenderer(comp, r.token_ids, request_id=base_id(reqs), created=created, model=model,
                                  tokenizer=tok, prompt_index=k)
            for k, r in enumerate(reqs)
        ]
        so = comp.stream_options
        return Prepared(kind, body, reqs, ds, completion=comp, created=created,
                        include_usage=bool(so and so.include_usage))
    msgs = None
    if kind == "messages":
        msgs = validate(MessagesRequest, body)
        chat = to_openai_chat(msgs)
        req = await render_work(renderer.render_messages, msgs, body_size(body))
    else:
        chat = validate(ChatCompletionRequest, body)
        req = await render_work(renderer.render_chat, chat, body_size(body))
    d = chat_derenderer(chat, req.token_ids, request_id=req.request_id or "", created=created, model=model,
                        tokenizer=tok, tool_parser=tool_parser, reasoning_parser=reasoning_parser,
                        enable_auto_tool_choice=auto)
    so = chat.stream_options
    return Prepared(kind, body, [req], [d], chat=chat, messages=msgs, created=created,
                    include_usage=bool(so and so.include_usage))


def check_prompt_count(ctx: ServerContext, count: int) -> None:
    """A completion's prompts are one engine request each, all queued at once: past
    ``--max-prompts-per-request`` (its share of the wait queue) or past what the engine can
    queue at all, refuse it before anything is rendered or queued."""
    limit, why = ctx.settings.max_prompts_per_request, "--max-prompts-per-request"
    # what a local engine queues before it answers overloaded (``LocalEngine.max_waiting``,
    # --max-waiting); a remote engine's is not known here
    waiting = getattr(ctx.engine, "max_waiting", None)
    if isinstance(waiting, int) and max(1, waiting) < limit:
        limit, why = max(1, waiting), "the engine queues at most that many requests: --max-waiting"
    if count > limit:
        raise InvalidRequest(f"prompt holds {count} prompts; this server takes at most {limit} in one request "
                             f"({why}). Send the others in further requests.", param="prompt")


def base_id(reqs: Sequence[GenerateRequest]) -> str:
    """The answer's id: the one engine request's, or, over several prompts, theirs without the index."""
    rid = reqs[0].request_id or ""
    return rid.rsplit("-", 1)[0] if len(reqs) > 1 else rid


def body_size(body: dict[str, Any]) -> int:
    """About the request body's size as JSON, up to just past the inline limit (what decides where it
    renders: ``server.render_work``); never serialized again, so any body the reader took is measured."""
    return json_size(body)
