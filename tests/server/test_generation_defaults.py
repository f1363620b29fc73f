"""Sampling defaults from the model's generation_config.json (session/protocol/generation_defaults.py,
server/generation_config.py): the merge rules, and parity with vLLM 0.32's own resolved defaults
(tests/data/vllm/generation_config.json, recorded by scripts/record_vllm_generation_config.py from
vLLM's ``get_diff_sampling_param``, ``override_max_tokens``, ``get_max_tokens`` and
``to_sampling_params``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from server.generation_config import load_generation_defaults, parse_override, read_generation_config
from session.protocol.generation_defaults import NO_DEFAULTS, GenerationDefaults, resolve
from session.protocol.openai import ChatCompletionRequest, CompletionRequest

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "data" / "vllm" / "generation_config.json").read_text())
QWEN3 = {"temperature": 0.6, "top_k": 20, "top_p": 0.95, "do_sample": True, "eos_token_id": [151645, 151643]}
USER = [{"role": "user", "content": "Hi"}]


def _write(folder: Path, files: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_text(json.dumps(content))
    return folder


def _defaults_for(case: dict[str, Any], tmp_path: Path) -> GenerationDefaults:
    folder = _write(tmp_path / "gen", case["files"])
    override = case.get("override") or {}
    if case["generation_config"] == "dir":
        model = _write(tmp_path / "model", {"config.json": {"model_type": "llama", "temperature": 0.1}})
        return load_generation_defaults(model, str(folder), override)
    return load_generation_defaults(folder, case["generation_config"], override)


def _sampling(kind: str, body: dict[str, Any], defaults: GenerationDefaults, room: int) -> dict[str, Any]:
    if kind == "chat":
        chat = ChatCompletionRequest.model_validate({"messages": USER, **body})
        sp = chat.to_sampling_params(defaults.max_tokens(chat.requested_max_tokens, room), defaults=defaults)
    else:
        completion = CompletionRequest.model_validate({"prompt": "Hi", **body})
        sp = completion.to_sampling_params(defaults.max_tokens(completion.max_tokens, room), defaults=defaults)
    return {name: getattr(sp, name) for name in RECORDED["cases"][0]["answers"][0]}


@pytest.mark.parametrize("case", RECORDED["cases"], ids=[c["name"] for c in RECORDED["cases"]])
def test_the_defaults_and_what_each_request_gets_equal_vllms(case: dict[str, Any], tmp_path: Path) -> None:
    defaults = _defaults_for(case, tmp_path)
    # the same keys in vLLM's order (the start-up line lists them so), the same values
    assert list(defaults.sampling.items()) == list(case["default_sampling_params"].items())
    assert defaults.max_tokens_cap == case["override_max_tokens"]
    room = RECORDED["max_model_len"] - RECORDED["prompt_len"]
    for probe, answer in zip(RECORDED["probes"], case["answers"], strict=True):
        assert _sampling(probe["kind"], probe["body"], defaults, room) == answer, probe


def test_the_recording_covers_each_rule() -> None:
    """The recorded cases are not all alike: some set defaults, caps, a fallback and a removal."""
    by_name = {c["name"]: c for c in RECORDED["cases"]}
    assert by_name["qwen3_auto"]["default_sampling_params"] == {"temperature": 0.6, "top_k": 20, "top_p": 0.95}
    assert by_name["qwen3_vllm"]["default_sampling_params"] == {}
    assert "top_k" not in by_name["qwen3_override"]["default_sampling_params"]  # null removed it
    assert by_name["dir_cap"]["override_max_tokens"] == 64
    assert by_name["auto_max_new_tokens"]["override_max_tokens"] is None  # a default, not a cap
    assert by_name["config_json_fallback"]["default_sampling_params"] == {"min_p": 0.1, "max_tokens": 40}


# --- the merge rules ------------------------------------------------------------------------------


def test_a_request_value_wins_even_when_it_is_vllms_own_default() -> None:
    defaults = resolve(QWEN3)
    chat = ChatCompletionRequest.model_validate({"messages": USER, "temperature": 1.0, "top_k": 0})
    sp = chat.to_sampling_params(8, defaults=defaults)
    assert (sp.temperature, sp.top_k, sp.top_p) == (1.0, 0, 0.95)


def test_an_absent_field_takes_the_models_default_else_vllms() -> None:
    sp = ChatCompletionRequest.model_validate({"messages": USER}).to_sampling_params(8, defaults=resolve(QWEN3))
    assert (sp.temperature, sp.top_k, sp.top_p, sp.min_p, sp.repetition_penalty) == (0.6, 20, 0.95, 0.0, 1.0)
    plain = ChatCompletionRequest.model_validate({"messages": USER}).to_sampling_params(8, defaults=NO_DEFAULTS)
    assert (plain.temperature, plain.top_k, plain.top_p) == (1.0, 0, 1.0)


def test_the_override_replaces_and_null_removes_a_model_value() -> None:
    defaults = resolve(QWEN3, override={"temperature": 0.2, "top_k": None, "repetition_penalty": 1.1})
    assert dict(defaults.sampling) == {"repetition_penalty": 1.1, "temperature": 0.2, "top_p": 0.95}


def test_vllm_ignores_the_model_file_but_not_the_override() -> None:
    assert resolve(QWEN3, source="vllm").sampling == {}
    assert dict(resolve(QWEN3, source="vllm", override={"min_p": 0.1}).sampling) == {"min_p": 0.1}


def test_max_new_tokens_is_a_default_limit_from_the_model_and_a_cap_from_the_override_or_a_folder() -> None:
    model = resolve({"max_new_tokens": 100})
    assert (model.max_tokens(None, 4000), model.max_tokens(500, 4000), model.max_tokens(None, 50)) == (100, 500, 50)
    capped = resolve({"max_new_tokens": 100}, override={"max_new_tokens": 30})
    assert (capped.max_tokens(None, 4000), capped.max_tokens(500, 4000), capped.max_tokens(10, 4000)) == (30, 30, 10)
    folder = resolve({"max_new_tokens": 100}, source="/some/folder")
    assert (folder.max_tokens(None, 4000), folder.max_tokens(500, 4000)) == (100, 100)


def test_a_completion_keeps_vllms_16_tokens_even_for_an_explicit_null() -> None:
    defaults = resolve({"max_new_tokens": 100})
    for body in ({"prompt": "Hi"}, {"prompt": "Hi", "max_tokens": None}):
        req = CompletionRequest.model_validate(body)
        assert defaults.max_tokens(req.max_tokens, 4000) == 16


@pytest.mark.parametrize(("config", "message"), [
    ({"temperature": "0.6"}, "gen.json: temperature must be a number, got '0.6'"),
    ({"top_k": 20.5}, "gen.json: top_k must be a whole number, got 20.5"),
    ({"top_k": True}, "gen.json: top_k must be a whole number, got True"),
    ({"top_p": 0}, "gen.json: top_p is 0, out of range (more than 0 and at most 1)"),
    ({"temperature": -1}, "gen.json: temperature is -1, out of range (0 or more)"),
    ({"max_new_tokens": 0}, "gen.json: max_new_tokens is 0, out of range (1 or more)"),
    ({"presence_penalty": 3}, "gen.json: presence_penalty is 3, out of range (from -2 to 2)"),
])
def test_a_bad_value_is_refused_naming_the_key_and_the_file(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        resolve(config, where="gen.json")
    assert str(info.value) == message


def test_a_bad_override_value_names_the_flag() -> None:
    with pytest.raises(ValueError, match=r"^--override-generation-config: min_p is 2, out of range"):
        resolve(QWEN3, override={"min_p": 2})


def test_parse_override_wants_a_json_object() -> None:
    assert parse_override('{"temperature": 0.5, "top_k": null}') == {"temperature": 0.5, "top_k": None}
    with pytest.raises(ValueError, match="must be a JSON object"):
        parse_override("[1]")
    with pytest.raises(ValueError, match="is not valid JSON"):
        parse_override("{temperature: 0.5}")


# --- the files ------------------------------------------------------------------------------------


def test_a_folder_without_either_file_has_no_config(tmp_path: Path) -> None:
    assert read_generation_config(tmp_path) is None
    assert load_generation_defaults(tmp_path).sampling == {}  # auto: a tokenizer-only folder is fine
    with pytest.raises(ValueError, match=r"the folder has no generation_config\.json"):
        load_generation_defaults(tmp_path, str(tmp_path))
    with pytest.raises(ValueError, match="not a directory"):
        load_generation_defaults(tmp_path, str(tmp_path / "nope"))


def test_a_generation_config_that_is_not_a_json_object_is_refused(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text("{bad")
    with pytest.raises(ValueError, match=r"generation_config\.json is not valid JSON"):
        load_generation_defaults(tmp_path)
    (tmp_path / "generation_config.json").write_text("[1]")
    with pytest.raises(ValueError, match="must hold a JSON object"):
        load_generation_defaults(tmp_path)


def test_a_bad_value_in_the_models_file_names_its_path(tmp_path: Path) -> None:
    _write(tmp_path, {"generation_config.json": {"temperature": "hot"}})
    with pytest.raises(ValueError) as info:
        load_generation_defaults(tmp_path)
    assert str(info.value) == f"{tmp_path / 'generation_config.json'}: temperature must be a number, got 'hot'"


def test_the_start_up_line_says_which_defaults_apply(tmp_path: Path) -> None:
    _write(tmp_path, {"generation_config.json": QWEN3})
    assert load_generation_defaults(tmp_path).describe() == (
        "sampling defaults from the model's generation_config.json: temperature=0.6, top_k=20, top_p=0.95 "
        "(a request's own values win; --generation-config vllm turns them off)")
    assert load_generation_defaults(tmp_path, "vllm").describe() == (
        "sampling defaults: vLLM's own (--generation-config vllm)")
    assert load_generation_defaults(tmp_path, "vllm", {"max_new_tokens": 9}).describe() == (
        "sampling defaults from --override-generation-config: max_tokens=9 (a request's own values win); every "
        "request's output is capped at 9 tokens")
    assert load_generation_defaults(tmp_path, "auto", {"top_k": None}).describe() == (
        "sampling defaults from the model's generation_config.json and --override-generation-config: "
        "temperature=0.6, top_p=0.95 (a request's own values win; --generation-config vllm turns them off)")
    empty = _write(tmp_path / "plain", {"generation_config.json": {"eos_token_id": 2}})
    assert load_generation_defaults(empty).describe() == (
        "sampling defaults: vLLM's own (the model's generation_config.json sets none)")
    assert load_generation_defaults(tmp_path / "x", str(tmp_path)).describe().startswith(
        f"sampling defaults from {tmp_path}/generation_config.json: temperature=0.6")
