"""Validation of generate requests against the served model: each bad field is named."""

from __future__ import annotations

from typing import Any

import pytest

from engine.errors import InvalidGenerateRequest
from engine.local.params import ModelLimits, resolve
from engine.protocol import GenerateRequest

LIMITS = ModelLimits(vocab_size=1000, max_model_len=64, eos_token_id=2, extra_eos_ids=frozenset({7}), max_n=4)


def req(token_ids: list[int] | None = None, **params: Any) -> GenerateRequest:
    return GenerateRequest.model_validate({"token_ids": token_ids or [5, 6, 7], "sampling_params": params})


@pytest.mark.parametrize(("params", "field"), [
    ({"temperature": -0.5}, "sampling_params.temperature"),
    ({"temperature": float("nan")}, "sampling_params.temperature"),
    ({"top_p": 0.0}, "sampling_params.top_p"),
    ({"top_p": 1.5}, "sampling_params.top_p"),
    ({"top_k": -2}, "sampling_params.top_k"),
    ({"min_p": 1.2}, "sampling_params.min_p"),
    ({"presence_penalty": 3}, "sampling_params.presence_penalty"),
    ({"frequency_penalty": -2.5}, "sampling_params.frequency_penalty"),
    ({"repetition_penalty": 0}, "sampling_params.repetition_penalty"),
    ({"n": 0}, "sampling_params.n"),
    ({"n": 5}, "sampling_params.n"),
    ({"max_tokens": 0}, "sampling_params.max_tokens"),
    ({"min_tokens": 20, "max_tokens": 10}, "sampling_params.min_tokens"),
    ({"logprobs": 21}, "sampling_params.logprobs"),
    ({"prompt_logprobs": 1}, "sampling_params.prompt_logprobs"),
    ({"bad_words": ["x"]}, "sampling_params.bad_words"),
    ({"structured_outputs": {"structural_tag": "{}"}}, "sampling_params.structured_outputs.structural_tag"),
    ({"structured_outputs": {"json": {"uniqueItems": True}}}, "sampling_params.structured_outputs.json.uniqueItems"),
    ({"stop_token_ids": [1000]}, "sampling_params.stop_token_ids"),
    ({"logit_bias": {"1000": 1.0}}, "sampling_params.logit_bias"),
    ({"allowed_token_ids": []}, "sampling_params.allowed_token_ids"),
    ({"allowed_token_ids": [3, 5000]}, "sampling_params.allowed_token_ids"),
])
def test_invalid_sampling_params_are_refused_naming_the_field(params: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidGenerateRequest) as info:
        resolve(req(**params), LIMITS)
    assert info.value.param == field
    assert field.split(".")[-1] in info.value.message
    assert info.value.status == 400


def test_token_id_outside_the_vocabulary_is_refused_with_its_position() -> None:
    with pytest.raises(InvalidGenerateRequest) as info:
        resolve(req([1, 2, 1000]), LIMITS)
    assert info.value.param == "token_ids"
    assert "token_ids[2] = 1000" in info.value.message


def test_prompt_that_fills_the_context_is_refused() -> None:
    with pytest.raises(InvalidGenerateRequest) as info:
        resolve(req(list(range(10, 74))), LIMITS)
    assert info.value.param == "token_ids"
    assert "64" in info.value.message


def test_max_tokens_past_the_room_left_is_clamped_to_it() -> None:
    # vLLM 0.32: max_tokens is an upper bound; the engine stops at the context length
    for requested in (62, 100, 10_000):
        _, p = resolve(req(max_tokens=requested), LIMITS)
        assert p.max_tokens == 61
    _, p = resolve(req(max_tokens=60), LIMITS)
    assert p.max_tokens == 60


def test_min_tokens_is_checked_against_the_request_and_clamped_with_max_tokens() -> None:
    _, p = resolve(req(max_tokens=100, min_tokens=80), LIMITS)
    assert (p.max_tokens, p.min_tokens) == (61, 61)


def test_missing_max_tokens_means_the_rest_of_the_context() -> None:
    _, p = resolve(req(max_tokens=None), LIMITS)
    assert p.max_tokens == 61


def test_a_truncation_that_would_cut_a_prompt_with_images_is_refused() -> None:
    features = {"mm_hashes": {"image": ["h"]}, "mm_placeholders": {"image": [{"offset": 1, "length": 2}]}}
    r = GenerateRequest.model_validate({"token_ids": [1, 9, 9, 3], "features": features,
                                        "sampling_params": {"truncate_prompt_tokens": 3}})
    with pytest.raises(InvalidGenerateRequest) as info:
        resolve(r, LIMITS)
    assert info.value.param == "sampling_params.truncate_prompt_tokens"
    whole = GenerateRequest.model_validate({"token_ids": [1, 9, 9, 3], "features": features,
                                            "sampling_params": {"truncate_prompt_tokens": 4}})
    assert resolve(whole, LIMITS)[0] == [1, 9, 9, 3]


def test_stop_strings_are_left_to_derender() -> None:
    prompt, p = resolve(req(stop=["\n\n"]), LIMITS)
    assert prompt == [5, 6, 7]
    assert p.stop_ids == frozenset({7})


def test_eos_ids_stop_unless_ignore_eos() -> None:
    _, p = resolve(req(stop_token_ids=[9]), LIMITS)
    assert p.eos_token_id == 2
    assert p.stop_ids == {7, 9}
    assert p.all_stop_ids == {2, 7, 9}
    _, q = resolve(req(stop_token_ids=[9], ignore_eos=True), LIMITS)
    assert q.eos_token_id is None
    assert q.stop_ids == {9}


def test_truncate_prompt_tokens_keeps_the_end() -> None:
    prompt, _ = resolve(req([1, 2, 3, 4, 5], truncate_prompt_tokens=2), LIMITS)
    assert prompt == [4, 5]


def test_greedy_normalizes_sampling_knobs_and_logit_bias_is_clamped() -> None:
    _, p = resolve(req(temperature=0, top_k=-1, logit_bias={"3": 500.0}), LIMITS)
    assert p.greedy
    assert p.top_k == 0
    assert p.logit_bias == ((3, 100.0),)


def test_vllm_render_output_is_accepted_verbatim() -> None:
    body = {
        "request_id": "chatcmpl-9e1da87220c00168", "token_ids": [10, 11, 12], "token_offsets": None,
        "features": None, "content_parts": None,
        "sampling_params": {"presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
                            "temperature": 0.0, "stop": [], "stop_token_ids": [], "max_tokens": 8,
                            "output_kind": 2, "skip_clone": True, "bad_words": [],
                            "skip_reading_prefix_cache": False, "output_text_buffer_length": 0},
        "model": "tiny-model", "reasoning_ended": None, "reasoning_parser_kwargs": None,
        "return_token_ids": None, "output_mode": "tokens", "stream": False, "stream_options": None,
        "cache_salt": None, "priority": 0, "kv_transfer_params": None, "ec_transfer_params": None,
    }
    prompt, p = resolve(GenerateRequest.model_validate(body), LIMITS)
    assert prompt == [10, 11, 12]
    assert p.max_tokens == 8 and p.greedy


def test_structured_outputs_without_xgrammar_are_refused_saying_how_to_install_it() -> None:
    from dataclasses import replace

    from engine.local.params import XGRAMMAR_MISSING
    limits = replace(LIMITS, no_structured_outputs=XGRAMMAR_MISSING)
    with pytest.raises(InvalidGenerateRequest) as info:
        resolve(req(structured_outputs={"json_object": True}), limits)
    assert (info.value.status, info.value.param) == (400, "sampling_params.structured_outputs")
    assert "pip install 'tokenwire[engine]'" in info.value.message
    _, p = resolve(req(max_tokens=4), limits)  # everything else is served
    assert p.structured is None
