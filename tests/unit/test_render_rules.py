"""vLLM's render rules, one behaviour per test, on a real tokenizer (qwen3)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from engine.protocol import RequestOutputKind
from session.errors import ModelNotFound, RenderError
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


# --- ids, model ----------------------------------------------------------------------------


def test_chat_request_ids_are_chatcmpl_and_sixteen_hex_digits(qwen: Any) -> None:
    out = renderer(qwen).render_chat(chat())
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{16}", out.request_id or "")


def test_a_single_completion_prompt_gets_a_cmpl_id(qwen: Any) -> None:
    (out,) = renderer(qwen).render_completion(completion(prompt="Once upon a time"))
    assert re.fullmatch(r"cmpl-[0-9a-f]{16}", out.request_id or "")


def test_several_completion_prompts_share_one_id_with_an_index(qwen: Any) -> None:
    outs = renderer(qwen).render_completion(completion(prompt=["a", "b", "c"]))
    ids = [o.request_id or "" for o in outs]
    base = ids[0].rsplit("-", 1)[0]
    assert ids == [f"{base}-0", f"{base}-1", f"{base}-2"]
    assert re.fullmatch(r"cmpl-[0-9a-f]{16}", base)


def test_each_render_gets_a_fresh_request_id(qwen: Any) -> None:
    r = renderer(qwen)
    assert r.render_chat(chat()).request_id != r.render_chat(chat()).request_id


def test_an_unknown_model_is_model_not_found_with_vllms_message_and_the_served_name(qwen: Any) -> None:
    with pytest.raises(ModelNotFound) as info:
        renderer(qwen).render_chat(chat(model="nope"))
    assert info.value.status == 404
    assert info.value.message == "The model `nope` does not exist. This server serves `qwen3`."
    assert info.value.param == "model"


def test_the_served_model_name_and_an_absent_model_both_render(qwen: Any) -> None:
    r = renderer(qwen)
    assert r.render_chat(chat(model="qwen3")).model == "qwen3"
    assert r.render_chat(chat()).model is None


# --- beam search, templates, tool choice ---------------------------------------------------


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_beam_search_is_refused(qwen: Any, kind: str) -> None:
    r = renderer(qwen)
    with pytest.raises(RenderError, match=r"^Beam search is not supported by the render endpoint$"):
        if kind == "chat":
            r.render_chat(chat(use_beam_search=True))
        else:
            r.render_completion(completion(prompt="x", use_beam_search=True))


def test_a_chat_template_in_the_request_is_refused_as_untrusted(qwen: Any) -> None:
    with pytest.raises(RenderError, match="--trust-request-chat-template is not set"):
        renderer(qwen).render_chat(chat(chat_template=GEN_TEMPLATE))


def test_a_trusted_request_chat_template_is_used(qwen: Any) -> None:
    r = renderer(qwen, trust_request_chat_template=True)
    out = r.render_chat(chat(chat_template="{{ messages[0].content }}"))
    assert out.token_ids == qwen.encode("Hello there", add_special_tokens=False)


def test_auto_tool_choice_without_a_parser_is_refused_with_vllms_message(qwen: Any) -> None:
    with pytest.raises(RenderError) as info:
        renderer(qwen).render_chat(chat(tools=TOOLS, tool_choice="auto"))
    assert info.value.message == ('"auto" tool choice requires --enable-auto-tool-choice and '
                                  "--tool-call-parser to be set")


def test_tools_without_tool_choice_mean_auto_and_need_a_parser(qwen: Any) -> None:
    with pytest.raises(RenderError, match='"auto" tool choice requires'):
        renderer(qwen).render_chat(chat(tools=TOOLS))


def test_auto_tool_choice_with_a_parser_but_without_auto_is_refused(qwen: Any) -> None:
    with pytest.raises(RenderError, match='"auto" tool choice requires'):
        renderer(qwen, tool_call_parser="hermes").render_chat(chat(tools=TOOLS, tool_choice="auto"))


def test_required_and_named_tool_choice_need_a_parser(qwen: Any) -> None:
    r = renderer(qwen)
    with pytest.raises(RenderError, match=r'^tool_choice="required" requires --tool-call-parser to be set$'):
        r.render_chat(chat(tools=TOOLS, tool_choice="required"))
    named = {"type": "function", "function": {"name": "get_weather"}}
    with pytest.raises(RenderError, match=r'^tool_choice=function "get_weather" requires --tool-call-parser'):
        r.render_chat(chat(tools=TOOLS, tool_choice=named))


def test_tool_choice_none_renders_the_tools_without_a_parser(qwen: Any) -> None:
    out = renderer(qwen).render_chat(chat(tools=TOOLS, tool_choice="none"))
    assert "get_weather" in qwen.decode(out.token_ids)
    assert "skip_special_tokens" not in out.to_wire()["sampling_params"]


def test_a_tool_parser_keeps_special_tokens_for_active_tools(qwen: Any) -> None:
    r = renderer(qwen, tool_call_parser="hermes", enable_auto_tool_choice=True)
    wire = r.render_chat(chat(tools=TOOLS, tool_choice="auto")).to_wire()["sampling_params"]
    assert wire["skip_special_tokens"] is False
    assert "structured_outputs" not in wire


def test_required_tool_choice_with_a_parser_constrains_output_to_a_list_of_calls(qwen: Any) -> None:
    r = renderer(qwen, tool_call_parser="hermes")
    sp = r.render_chat(chat(tools=TOOLS, tool_choice="required")).sampling_params
    schema = (sp.structured_outputs or {})["json"]
    assert schema["type"] == "array" and schema["minItems"] == 1
    assert schema["items"]["anyOf"][0]["properties"]["name"] == {"type": "string", "enum": ["get_weather"]}


def test_named_tool_choice_with_a_parser_constrains_output_to_its_parameters(qwen: Any) -> None:
    r = renderer(qwen, tool_call_parser="hermes")
    named = {"type": "function", "function": {"name": "get_weather"}}
    sp = r.render_chat(chat(tools=TOOLS, tool_choice=named)).sampling_params
    assert sp.structured_outputs is not None
    assert sp.structured_outputs["json"] == TOOLS[0]["function"]["parameters"]


def test_non_text_content_is_refused_naming_the_part(qwen: Any) -> None:
    msg = [{"role": "user", "content": [{"type": "text", "text": "see"},
                                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
    with pytest.raises(RenderError) as info:  # a text model: images are refused before any decoding
        renderer(qwen).render_chat(chat(messages=msg))
    assert info.value.param == "messages.0.content.1.image_url"
    assert "does not accept images" in info.value.message
    audio = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA"}}]}]
    with pytest.raises(RenderError) as info:
        renderer(qwen).render_chat(chat(messages=audio))
    assert info.value.param == "messages.0.content.0.type"
    assert "input_audio" in info.value.message


def test_a_template_exception_is_a_render_error_with_the_templates_message(qwen: Any) -> None:
    r = renderer(qwen, chat_template="{{ raise_exception('roles must alternate') }}")
    with pytest.raises(RenderError, match="roles must alternate"):
        r.render_chat(chat())


def test_a_tokenizer_without_a_chat_template_is_refused(tokenizer: Any) -> None:
    from transformers import AutoTokenizer

    from tests.conftest import asset_path

    tok = AutoTokenizer.from_pretrained(str(asset_path("qwen3")), local_files_only=True)
    tok.chat_template = None
    with pytest.raises(RenderError, match="you must provide a chat template"):
        renderer(tok).render_chat(chat())


def test_unknown_chat_template_kwargs_are_ignored(qwen: Any) -> None:
    r = renderer(qwen)
    assert r.render_chat(chat(chat_template_kwargs={"not_a_template_var": 1})).token_ids == \
        r.render_chat(chat()).token_ids


def test_reasoning_effort_none_turns_thinking_off(qwen: Any) -> None:
    r = renderer(qwen)
    off = r.render_chat(chat(reasoning_effort="none")).token_ids
    assert off == r.render_chat(chat(chat_template_kwargs={"enable_thinking": False})).token_ids
    assert off != r.render_chat(chat()).token_ids


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


# --- completions ---------------------------------------------------------------------------


def test_completion_text_is_tokenized_with_special_tokens_by_default(tokenizer: Any) -> None:
    llama = tokenizer("llama3.1")
    (out,) = renderer(llama, model_name="llama3.1").render_completion(completion(prompt="Hello world"))
    assert out.token_ids == llama("Hello world")["input_ids"]
    assert out.token_ids[0] == llama.bos_token_id


def test_completion_token_prompts_pass_through(qwen: Any) -> None:
    outs = renderer(qwen).render_completion(completion(prompt=[[1, 2, 3], [4]]))
    assert [o.token_ids for o in outs] == [[1, 2, 3], [4]]


def test_completion_token_ids_outside_the_vocabulary_are_refused(qwen: Any) -> None:
    with pytest.raises(RenderError, match=r"Token id 999999999 is out of vocabulary"):
        renderer(qwen).render_completion(completion(prompt=[1, 999999999]))


def test_completion_max_tokens_defaults_to_sixteen(qwen: Any) -> None:
    (out,) = renderer(qwen).render_completion(completion(prompt="hi"))
    assert out.sampling_params.max_tokens == 16


def test_suffix_is_refused(qwen: Any) -> None:
    with pytest.raises(RenderError, match=r"^suffix is not currently supported$"):
        renderer(qwen).render_completion(completion(prompt="x", suffix="y"))


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


# --- sampling params and stream fields -----------------------------------------------------


def test_sampling_params_are_serialized_as_vllm_writes_them(qwen: Any) -> None:
    """The request of vLLM's chat_render_stream_tools sample; its sampling params, verbatim."""
    r = renderer(qwen, tool_call_parser="hermes", enable_auto_tool_choice=True)
    req = chat(tools=TOOLS, tool_choice="auto", max_tokens=16, temperature=0, stream=True, stop=["\n\n"],
               logprobs=True, top_logprobs=2)
    assert r.render_chat(req).to_wire()["sampling_params"] == {
        "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0, "temperature": 0.0,
        "stop": ["\n\n"], "stop_token_ids": [], "logprobs": 2, "skip_special_tokens": False, "output_kind": 1,
        "skip_clone": True, "output_text_buffer_length": 1, "bad_words": [], "skip_reading_prefix_cache": False}


def test_request_sampling_fields_map_to_sampling_params(qwen: Any) -> None:
    sp = renderer(qwen).render_chat(chat(
        max_tokens=5, seed=7, n=2, top_k=5, top_p=0.9, min_p=0.1, presence_penalty=0.5, frequency_penalty=0.25,
        repetition_penalty=1.1, min_tokens=2, ignore_eos=True, logit_bias={"42": 150, "7": -3},
        stop="END", stop_token_ids=[5], include_stop_str_in_output=True, skip_special_tokens=False)).sampling_params
    assert (sp.max_tokens, sp.seed, sp.n, sp.top_k, sp.top_p, sp.min_p) == (5, 7, 2, 5, 0.9, 0.1)
    assert (sp.presence_penalty, sp.frequency_penalty, sp.repetition_penalty) == (0.5, 0.25, 1.1)
    assert (sp.min_tokens, sp.ignore_eos, sp.stop, sp.stop_token_ids) == (2, True, ["END"], [5])
    assert sp.logit_bias == {42: 100.0, 7: -3.0}  # clamped to [-100, 100], keys as token ids
    assert sp.include_stop_str_in_output and not sp.skip_special_tokens
    assert sp.output_kind is RequestOutputKind.FINAL_ONLY


def test_logprobs_without_top_logprobs_asks_for_zero_alternatives(qwen: Any) -> None:
    assert renderer(qwen).render_chat(chat(logprobs=True)).to_wire()["sampling_params"]["logprobs"] == 0
    assert "logprobs" not in renderer(qwen).render_chat(chat()).to_wire()["sampling_params"]


def test_stream_options_are_kept_only_for_streams(qwen: Any) -> None:
    r = renderer(qwen)
    streamed = r.render_chat(chat(stream=True, stream_options={"include_usage": True})).to_wire()
    assert streamed["stream"] is True
    assert streamed["stream_options"] == {"include_usage": True, "continuous_usage_stats": False}
    assert streamed["sampling_params"]["output_kind"] == 1
    plain = r.render_chat(chat()).to_wire()
    assert plain["stream"] is False and plain["stream_options"] is None


def test_cache_salt_and_priority_are_carried(qwen: Any) -> None:
    wire = renderer(qwen).render_chat(chat(cache_salt="s3cret", priority=-2)).to_wire()
    assert (wire["cache_salt"], wire["priority"]) == ("s3cret", -2)


def test_the_wire_shape_has_vllms_keys(qwen: Any) -> None:
    wire = renderer(qwen).render_chat(chat()).to_wire()
    assert set(wire) == {
        "request_id", "token_ids", "token_offsets", "features", "content_parts", "sampling_params", "model",
        "reasoning_ended", "reasoning_parser_kwargs", "return_token_ids", "output_mode", "stream",
        "stream_options", "cache_salt", "priority", "kv_transfer_params", "ec_transfer_params"}


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


def test_assistant_masks_rendered_from_many_threads_are_all_right(qwen: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    r = renderer(qwen, chat_template=GEN_TEMPLATE)
    req = chat(messages=CONVO, return_assistant_tokens_mask=True)
    want = r.render_chat(req).assistant_tokens_mask
    with ThreadPoolExecutor(6) as pool:
        masks = list(pool.map(lambda _: r.render_chat(req).assistant_tokens_mask, range(30)))
    assert all(m == want for m in masks)


@pytest.mark.parametrize("role", ["usr", "critic", "User", ""])
def test_a_role_neither_openais_nor_the_templates_is_a_400_naming_the_valid_roles(qwen: Any, role: str) -> None:
    # vLLM hands any role to the template: `usr` rendered as a turn of a speaker the model never saw
    messages = [{"role": "user", "content": "Hi"}, {"role": role, "content": "x"}]
    with pytest.raises(RenderError) as info:
        renderer(qwen).render_chat(chat(messages=messages))
    assert info.value.status == 400 and info.value.param == "messages.1.role"
    assert info.value.message == (f"Unknown role {role!r} in messages[1]: the valid roles are system, developer, "
                                  "user, assistant, tool and function (or a role the model's chat template names).")


@pytest.mark.parametrize("role", ["system", "developer", "user", "assistant", "tool", "function"])
def test_openais_roles_are_accepted(qwen: Any, role: str) -> None:
    renderer(qwen).render_chat(chat(messages=[{"role": role, "content": "x"}, {"role": "user", "content": "Hi"}]))


def test_a_custom_role_the_chat_template_names_is_accepted(qwen: Any) -> None:
    # Llama 3.1's templates handle an `ipython` role; a role quoted in the template's source is its own
    template = ("{% for m in messages %}{% if m.role == 'ipython' %}[tool output] {% endif %}"
                "{{ m.role }}: {{ m.content }}\n{% endfor %}")
    r = renderer(qwen, chat_template=template)
    req = r.render_chat(chat(messages=[{"role": "user", "content": "Hi"}, {"role": "ipython", "content": "42"}]))
    assert qwen.decode(req.token_ids) == "user: Hi\n[tool output] ipython: 42\n"
    with pytest.raises(RenderError, match="Unknown role 'python'"):
        r.render_chat(chat(messages=[{"role": "python", "content": "42"}]))
