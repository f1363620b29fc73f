"""vLLM's render rules on lengths, one behaviour per test, on a real tokenizer (qwen3): max_tokens
filled and clamped to the room left, prompts too long, truncate_prompt_tokens, text that cannot fit;
the assistant mask and token offsets, cut by truncation like the tokens."""

from __future__ import annotations

from typing import Any

import pytest

from session.errors import RenderError

from . import render_rules_harness
from .render_rules_harness import GEN_TEMPLATE, USER, chat, completion, prompt_len, renderer

qwen = render_rules_harness.qwen  # the shared fixture, by name


# --- lengths -------------------------------------------------------------------------------


def test_absent_max_tokens_is_filled_with_the_room_left(qwen: Any) -> None:
    out = renderer(qwen, max_model_len=100).render_chat(chat())
    assert out.sampling_params.max_tokens == 100 - prompt_len(qwen)
    assert out.to_wire()["sampling_params"]["max_tokens"] == 100 - prompt_len(qwen)


def test_requested_max_tokens_is_kept_and_max_completion_tokens_wins(qwen: Any) -> None:
    r = renderer(qwen)
    assert r.render_chat(chat(max_tokens=7)).sampling_params.max_tokens == 7
    assert r.render_chat(chat(max_tokens=7, max_completion_tokens=9)).sampling_params.max_tokens == 9


def test_max_tokens_equal_to_vllms_default_is_left_off_the_wire(qwen: Any) -> None:
    wire = renderer(qwen).render_chat(chat(max_tokens=16)).to_wire()["sampling_params"]
    assert "max_tokens" not in wire


def test_max_tokens_past_the_room_left_is_clamped_to_it(qwen: Any) -> None:
    # vLLM 0.32: max_tokens is an upper bound on the output, not a reservation of context
    n = prompt_len(qwen)
    r = renderer(qwen, max_model_len=n + 3)
    assert r.render_chat(chat(max_tokens=5)).sampling_params.max_tokens == 3
    assert r.render_chat(chat(max_completion_tokens=n + 3)).sampling_params.max_tokens == 3
    assert r.render_chat(chat(max_tokens=2)).sampling_params.max_tokens == 2
    (out,) = r.render_completion(completion(prompt="Hello there", max_tokens=n + 3))
    assert out.sampling_params.max_tokens == n + 3 - len(out.token_ids)


def test_the_issue_request_renders_with_the_output_clamped(qwen: Any) -> None:
    # issue 20 item 3: {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4090} on 4,096
    messages = [{"role": "user", "content": "Hi"}]
    out = renderer(qwen).render_chat(chat(messages=messages, max_tokens=4090))
    assert out.sampling_params.max_tokens == 4096 - prompt_len(qwen, messages) < 4090


def test_a_prompt_longer_than_the_context_is_refused_with_the_lengths(qwen: Any) -> None:
    n = prompt_len(qwen)
    with pytest.raises(RenderError) as info:
        renderer(qwen, max_model_len=n - 2).render_chat(chat(max_tokens=5))
    assert info.value.message == (
        f"You passed {n} input tokens and requested 5 output tokens. However, the model's context length is "
        f"only {n - 2} tokens, resulting in a maximum input length of {n - 2} tokens. Please reduce the length "
        "of the input prompt.")
    assert info.value.param == "messages"


def test_a_prompt_that_fills_the_context_leaves_no_room_and_is_refused(qwen: Any) -> None:
    n = prompt_len(qwen)
    for max_tokens in (None, 1, n):
        with pytest.raises(RenderError) as info:
            renderer(qwen, max_model_len=n).render_chat(chat(max_tokens=max_tokens))
        assert f"maximum context length is {n} tokens and your prompt has {n} tokens" in info.value.message
        assert "no room for output tokens" in info.value.message


def test_max_tokens_above_the_context_length_is_refused(qwen: Any) -> None:
    with pytest.raises(RenderError, match=r"`max_tokens` \(5000\) is greater than the model's maximum context "
                                          r"length \(4096 tokens\)"):
        renderer(qwen).render_chat(chat(max_tokens=5000))


def test_truncate_prompt_tokens_keeps_the_last_tokens(qwen: Any) -> None:
    r = renderer(qwen)
    full = r.render_chat(chat()).token_ids
    out = r.render_chat(chat(truncate_prompt_tokens=4))
    assert out.token_ids == full[-4:]
    assert out.sampling_params.max_tokens == 4096 - 4


def test_truncate_prompt_tokens_minus_one_means_the_whole_input_room(qwen: Any) -> None:
    r = renderer(qwen, max_model_len=prompt_len(qwen) + 2)
    out = r.render_chat(chat(max_tokens=5, truncate_prompt_tokens=-1))
    assert len(out.token_ids) == prompt_len(qwen) + 2 - 5


def test_truncate_prompt_tokens_larger_than_the_context_is_refused(qwen: Any) -> None:
    with pytest.raises(RenderError, match=r"truncate_prompt_tokens=4097 cannot be greater than the model's maximum "
                                          r"context length \(4096 tokens\)"):
        renderer(qwen).render_chat(chat(max_tokens=10, truncate_prompt_tokens=4097))


def test_a_truncation_that_leaves_less_than_max_tokens_clamps_the_output(qwen: Any) -> None:
    n = prompt_len(qwen)
    r = renderer(qwen, max_model_len=n)
    out = r.render_chat(chat(max_tokens=10, truncate_prompt_tokens=n - 4))
    assert len(out.token_ids) == n - 4 and out.sampling_params.max_tokens == 4


def test_an_empty_completion_prompt_renders_no_token_ids(qwen: Any) -> None:
    with pytest.raises(RenderError, match=r"^No token_ids rendered$"):
        renderer(qwen).render_completion(completion(prompt=""))
    with pytest.raises(RenderError, match=r"^No token_ids rendered$"):
        renderer(qwen).render_completion(completion(prompt=[[]]))


def test_truncating_to_zero_tokens_renders_no_token_ids(qwen: Any) -> None:
    with pytest.raises(RenderError, match=r"^No token_ids rendered$"):
        renderer(qwen).render_chat(chat(truncate_prompt_tokens=0))


def test_text_that_cannot_fit_is_refused_before_tokenizing(qwen: Any) -> None:
    r = renderer(qwen, max_model_len=64)
    limit = 64 * r.max_chars_per_token  # the whole context: max_tokens does not shrink it
    with pytest.raises(RenderError) as info:
        r.render_completion(completion(prompt="x" * (limit + 1), max_tokens=4))
    assert info.value.message == (
        f"You passed {limit + 1} input characters and requested 4 output tokens. However, the model's context "
        f"length is only 64 tokens, resulting in a maximum input length of 64 tokens (at most {limit} characters). "
        "Please reduce the length of the input prompt.")
    with pytest.raises(RenderError, match="input characters"):
        r.render_chat(chat(messages=[{"role": "user", "content": "y" * (limit + 1)}], max_tokens=4))


def test_long_text_with_truncation_is_tokenized_and_cut(qwen: Any) -> None:
    r = renderer(qwen, max_model_len=64)
    (out,) = r.render_completion(completion(prompt="word " * 20_000, max_tokens=4, truncate_prompt_tokens=10))
    assert len(out.token_ids) == 10


# --- mask and offsets ----------------------------------------------------------------------

CONVO = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How are you?"},
         {"role": "user", "content": "Fine"}]


def test_the_assistant_mask_matches_transformers(qwen: Any) -> None:
    r = renderer(qwen, chat_template=GEN_TEMPLATE)
    out = r.render_chat(chat(messages=CONVO, return_assistant_tokens_mask=True))
    ref = qwen.apply_chat_template(CONVO, chat_template=GEN_TEMPLATE, add_generation_prompt=True, tokenize=True,
                                   return_dict=True, return_assistant_tokens_mask=True)
    assert out.token_ids == ref["input_ids"]
    assert out.assistant_tokens_mask == ref["assistant_masks"]
    assert 0 < sum(out.assistant_tokens_mask or []) < len(out.token_ids)
    marked = [t for t, m in zip(out.token_ids, out.assistant_tokens_mask or [], strict=True) if m]
    assert qwen.decode(marked) == "Hello! How are you?<|im_end|>"


def test_the_assistant_mask_is_absent_when_the_template_marks_no_generation(qwen: Any) -> None:
    out = renderer(qwen).render_chat(chat(messages=CONVO, return_assistant_tokens_mask=True))
    assert out.assistant_tokens_mask is None
    assert "assistant_tokens_mask" not in out.to_wire()


def test_truncation_cuts_the_assistant_mask_like_the_tokens(qwen: Any) -> None:
    r = renderer(qwen, chat_template=GEN_TEMPLATE)
    full = r.render_chat(chat(messages=CONVO, return_assistant_tokens_mask=True))
    cut = r.render_chat(chat(messages=CONVO, return_assistant_tokens_mask=True, truncate_prompt_tokens=10))
    assert cut.token_ids == full.token_ids[-10:]
    assert cut.assistant_tokens_mask == (full.assistant_tokens_mask or [])[-10:]


def test_token_offsets_map_chat_tokens_to_the_templated_text(qwen: Any) -> None:
    out = renderer(qwen).render_chat(chat(return_token_offsets=True))
    text = qwen.apply_chat_template(USER, add_generation_prompt=True, tokenize=False)
    offsets = out.token_offsets or []
    assert len(offsets) == len(out.token_ids)
    assert "".join(text[s:e] for s, e in offsets) == text


def test_token_offsets_are_null_unless_asked_for(qwen: Any) -> None:
    assert renderer(qwen).render_chat(chat()).to_wire()["token_offsets"] is None


def test_completion_token_offsets_map_to_the_prompt_and_are_cut_by_truncation(qwen: Any) -> None:
    prompt = "The quick brown fox jumps"
    (out,) = renderer(qwen).render_completion(completion(prompt=prompt, return_token_offsets=True))
    assert "".join(prompt[s:e] for s, e in out.token_offsets or []) == prompt
    (cut,) = renderer(qwen).render_completion(completion(prompt=prompt, return_token_offsets=True,
                                                         truncate_prompt_tokens=2))
    assert cut.token_offsets == (out.token_offsets or [])[-2:]


def test_assistant_masks_rendered_from_many_threads_are_all_right(qwen: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    r = renderer(qwen, chat_template=GEN_TEMPLATE)
    req = chat(messages=CONVO, return_assistant_tokens_mask=True)
    want = r.render_chat(req).assistant_tokens_mask
    with ThreadPoolExecutor(6) as pool:
        masks = list(pool.map(lambda _: r.render_chat(req).assistant_tokens_mask, range(30)))
    assert all(m == want for m in masks)
