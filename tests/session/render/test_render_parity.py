"""Render's token ids equal ``apply_chat_template(..., tokenize=True)`` for every real chat
tokenizer and every conversation of the suite (and render refuses what the template refuses)."""

from __future__ import annotations

from typing import Any

import jinja2
import pytest

from session.errors import RenderError
from session.protocol import ChatCompletionRequest
from session.render import Renderer
from tests.conftest import TOKENIZERS
from tests.session.render.render_conversations import CASES, Case

MAX_MODEL_LEN = 16384


def _expected(tok: Any, case: Case) -> list[int] | type[Exception]:
    try:
        ids = tok.apply_chat_template(case.expected_messages, tools=case.tools, tokenize=True, return_dict=False,
                                      add_generation_prompt=case.add_generation_prompt,
                                      continue_final_message=case.continue_final_message, **case.kwargs)
    except (jinja2.TemplateError, ValueError):
        return RenderError
    return list(ids)


@pytest.fixture(scope="module")
def renderers(tokenizer: Any) -> dict[str, Renderer]:
    return {}


def _renderer(renderers: dict[str, Renderer], tokenizer: Any, name: str) -> Renderer:
    if name not in renderers:
        renderers[name] = Renderer(tokenizer(name), model_name=name, max_model_len=MAX_MODEL_LEN)
    return renderers[name]


def test_the_suite_has_at_least_thirty_conversations() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_render_tokens_equal_apply_chat_template(name: str, case: Case, tokenizer: Any,
                                                 renderers: dict[str, Renderer]) -> None:
    tok = tokenizer(name)
    renderer = _renderer(renderers, tokenizer, name)
    req = ChatCompletionRequest.model_validate(case.request())
    expected = _expected(tok, case)
    if expected is RenderError:
        with pytest.raises(RenderError):
            renderer.render_chat(req)
        return
    assert renderer.render_chat(req).token_ids == expected


@pytest.mark.parametrize("name", TOKENIZERS)
def test_most_of_the_suite_renders_for_every_tokenizer(name: str, tokenizer: Any) -> None:
    """Templates refuse a few conversations (Mistral's alternation, Llama's single tool call);
    at least 30 per tokenizer must render and so be compared token for token."""
    tok = tokenizer(name)
    rendered = sum(1 for case in CASES if _expected(tok, case) is not RenderError)
    assert rendered >= 30, rendered
