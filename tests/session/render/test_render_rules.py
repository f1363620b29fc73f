"""vLLM's render rules, one behaviour per test, on a real tokenizer (qwen3); the lengths, truncation,
the assistant mask and token offsets: tests/session/render/test_render_rules_lengths.py."""

from __future__ import annotations

import re
from typing import Any

import pytest

from engine.protocol import RequestOutputKind
from session.errors import ModelNotFound, RenderError

from . import render_rules_harness
from .render_rules_harness import GEN_TEMPLATE, TOOLS, chat, completion, renderer

qwen = render_rules_harness.qwen  # the shared fixture, by name


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
