"""Structured outputs at render: ``response_format`` / ``structured_outputs`` / forced tool choice
become vLLM's ``structured_outputs`` field, and schemas the engine cannot enforce are refused
with a 400 that names the keyword and where it is (sans-I/O, no model)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from engine.structured import (
    STRUCTURED_FIELDS,
    Problem,
    StructuredSpec,
    read_structured_outputs,
    structured_outputs,
    unsupported_schema_feature,
)
from session.errors import RenderError
from session.protocol.openai import ChatCompletionRequest, CompletionRequest
from session.render.renderer import Renderer
from tests.support.structured_suite import SCHEMAS, TOOLS

USER = [{"role": "user", "content": "hi"}]
VLLM_KEYS = ["json", "regex", "choice", "grammar", "json_object", "disable_any_whitespace",
             "disable_additional_properties", "whitespace_pattern", "structural_tag"]


def chat(**body: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": USER, **body})


def refusal(**body: Any) -> tuple[str, str]:
    with pytest.raises(ValidationError) as info:
        chat(**body)
    err = info.value.errors()[0]
    return ".".join(map(str, err["loc"])), err["msg"]


def json_schema(schema: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, **extra}}


def test_the_field_has_vllms_structured_outputs_params_keys_in_order() -> None:
    assert list(structured_outputs(json={})) == VLLM_KEYS == list(STRUCTURED_FIELDS)


@pytest.mark.parametrize("strict", [True, False, None])
def test_json_schema_response_format_becomes_the_json_constraint(strict: bool | None) -> None:
    schema = SCHEMAS["person"]
    wire = chat(response_format=json_schema(schema, strict=strict)).to_sampling_params(16).to_wire()
    assert wire["structured_outputs"] == structured_outputs(json=schema)


def test_json_object_response_format_becomes_json_object_true() -> None:
    sp = chat(response_format={"type": "json_object"}).to_sampling_params(16)
    assert sp.structured_outputs == structured_outputs(json_object=True)


def test_text_response_format_constrains_nothing() -> None:
    assert "structured_outputs" not in chat(response_format={"type": "text"}).to_sampling_params(16).to_wire()


def test_response_format_sets_its_constraint_on_the_requests_own_options() -> None:
    sp = chat(response_format={"type": "json_object"},
              structured_outputs={"disable_any_whitespace": True}).to_sampling_params(16)
    assert sp.structured_outputs == structured_outputs(json_object=True, disable_any_whitespace=True)


def test_the_vllm_structured_outputs_extension_passes_through() -> None:
    sp = chat(structured_outputs={"choice": ["a", "b"]}).to_sampling_params(16)
    assert sp.structured_outputs == structured_outputs(choice=["a", "b"])


def test_completions_take_response_format_too() -> None:
    req = CompletionRequest.model_validate({"prompt": "x", "response_format": {"type": "json_object"}})
    assert req.to_sampling_params(8).structured_outputs == structured_outputs(json_object=True)


@pytest.mark.parametrize(("schema", "keyword", "where"), [
    ({"type": "array", "uniqueItems": True}, "uniqueItems", "schema.uniqueItems"),
    ({"type": "object", "properties": {"a": {"type": "array", "contains": {"const": 1}}}}, "contains",
     "schema.properties.a.contains"),
    ({"not": {"type": "null"}}, "not", "schema.not"),
    ({"if": {"type": "integer"}, "then": {"minimum": 1}}, "if", "schema.if"),
    ({"type": "object", "dependentRequired": {"a": ["b"]}}, "dependentRequired", "schema.dependentRequired"),
    ({"allOf": [{"type": "object"}, {"required": []}]}, "allOf", "schema.allOf"),
    ({"type": "number", "multipleOf": 0.5}, "multipleOf", "schema.multipleOf"),
    ({"minimum": 3}, "minimum", "schema.minimum"),
    ({"maxLength": 3}, "maxLength", "schema.maxLength"),
    ({"type": "string", "pattern": "^a+$", "maxLength": 3}, "maxLength", "schema.maxLength"),
    ({"type": "string", "format": "regex"}, "format", "schema.format"),
    ({"enum": [1, 5], "minimum": 3}, "minimum", "schema.minimum"),
    ({"type": "integer", "anyOf": [{"minimum": 3}]}, "minimum", "schema.anyOf[0].minimum"),
    ({"$defs": {"A": {"type": "integer"}}, "$ref": "#/$defs/A", "maximum": 5}, "maximum", "schema.maximum"),
    ({"$ref": "https://example.com/schema.json"}, "$ref", "schema.$ref"),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "z"]}, "z",
     "schema.required"),
    ({"type": "object", "$defs": {"B": {"type": "array", "uniqueItems": True}}}, "uniqueItems",
     "schema.$defs.B.uniqueItems"),
])
def test_unsupported_schemas_are_400s_naming_the_keyword_and_where(schema: dict[str, Any], keyword: str,
                                                                    where: str) -> None:
    loc, msg = refusal(response_format=json_schema(schema))
    assert loc == "response_format"
    assert f"json_schema.{where} " in msg
    assert keyword in msg


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_acceptance_suite_schemas_are_supported(name: str) -> None:
    assert unsupported_schema_feature(SCHEMAS[name]) is None


def test_annotations_and_unknown_keywords_pass() -> None:
    schema = {"type": "object", "title": "T", "description": "d", "examples": [{}], "x-vendor": 1,
              "properties": {"a": {"type": "string", "nullable": True, "default": "x", "deprecated": True}},
              "discriminator": {"propertyName": "a"}}
    assert unsupported_schema_feature(schema) is None


@pytest.mark.parametrize(("fmt", "fragment"), [
    ({"type": "xml"}, "type must be one of"),
    ({"type": "structural_tag"}, "structural_tag is not supported"),
    ({"type": "json_schema"}, "json_schema (an object with a name and a schema) is required"),
    ({"type": "json_schema", "json_schema": {"schema": {}}}, "json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, "json_schema.schema must be a JSON schema object"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strict": "yes"}}, "strict"),
])
def test_malformed_response_formats_are_400s_saying_what_to_fix(fmt: dict[str, Any], fragment: str) -> None:
    loc, msg = refusal(response_format=fmt)
    assert loc == "response_format" and fragment in msg


@pytest.mark.parametrize(("so", "fragment"), [
    ({"json": {}, "regex": "a"}, "only one kind of constraint"),
    ({"structural_tag": "{}"}, "structural_tag is not supported"),
    ({"json_object": True, "whitespace_pattern": " *"}, "whitespace_pattern"),
    ({"choice": []}, "choice must be a non-empty list"),
    ({"jsonn": {}}, "unknown key 'jsonn'"),
])
def test_malformed_structured_outputs_are_400s(so: dict[str, Any], fragment: str) -> None:
    loc, msg = refusal(structured_outputs=so)
    assert loc == "structured_outputs" and fragment in msg


def test_response_format_and_another_constraint_conflict() -> None:
    loc, msg = refusal(response_format={"type": "json_object"}, structured_outputs={"regex": "a+"})
    assert loc == "structured_outputs" and "only one kind" in msg


def test_read_accepts_vllms_full_form_the_compact_form_and_a_schema_string() -> None:
    full = read_structured_outputs(structured_outputs(json={"type": "integer"}, disable_any_whitespace=True))
    compact = read_structured_outputs({"json": '{"type": "integer"}'})
    assert isinstance(full, StructuredSpec) and isinstance(compact, StructuredSpec)
    assert full.value == compact.value == {"type": "integer"}
    assert not full.any_whitespace and compact.any_whitespace
    assert full.key != compact.key  # whitespace is part of the grammar
    assert read_structured_outputs(structured_outputs()) is None
    assert isinstance(read_structured_outputs({"json": "{not json"}), Problem)


def test_same_constraint_same_cache_key_whatever_the_key_order() -> None:
    a = read_structured_outputs({"json": {"type": "object", "properties": {"x": {"type": "integer"}}}})
    b = read_structured_outputs({"json": {"properties": {"x": {"type": "integer"}}, "type": "object"}})
    assert isinstance(a, StructuredSpec) and isinstance(b, StructuredSpec) and a.key == b.key


# --- forced tool choice (render with a tool parser) ---------------------------------------------

@pytest.fixture(scope="module")
def qwen(tokenizer: Any) -> Any:
    return tokenizer("qwen3")


def test_required_tool_choice_writes_the_array_of_calls_schema_in_vllms_shape(qwen: Any) -> None:
    r = Renderer(qwen, model_name="m", max_model_len=4096, tool_call_parser="hermes")
    sp = r.render_chat(chat(tools=TOOLS, tool_choice="required")).sampling_params
    so = sp.structured_outputs or {}
    assert list(so) == VLLM_KEYS
    items = so["json"]["items"]
    assert [v["properties"]["name"]["enum"] for v in items["anyOf"]] == [["get_weather"], ["add"]]
    assert items["anyOf"][1]["properties"]["parameters"] == TOOLS[1]["function"]["parameters"]


def test_a_tool_schema_the_engine_cannot_enforce_is_refused_naming_the_tool(qwen: Any) -> None:
    tools = [TOOLS[0], {"type": "function", "function": {"name": "tag", "parameters": {
        "type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}}}]
    r = Renderer(qwen, model_name="m", max_model_len=4096, tool_call_parser="hermes")
    with pytest.raises(RenderError) as info:
        r.render_chat(chat(tools=tools, tool_choice="required"))
    assert info.value.param == "tools[1].function.parameters"
    assert "tools[1].function.parameters.properties.tags.uniqueItems" in info.value.message
    # a named choice only constrains to its own tool's schema
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert r.render_chat(chat(tools=tools, tool_choice=named)).sampling_params.structured_outputs


def test_the_engine_request_carries_the_field_unchanged_to_a_remote_engine() -> None:
    # RemoteEngine posts GenerateRequest.to_wire(): the field survives a JSON round trip as is.
    from engine.protocol import GenerateRequest

    so = structured_outputs(json=SCHEMAS["nested_objects"], disable_any_whitespace=True)
    req = GenerateRequest.model_validate({"token_ids": [1, 2], "sampling_params": {"structured_outputs": so}})
    again = GenerateRequest.model_validate_json(GenerateRequest.model_validate(req.to_wire()).model_dump_json())
    assert req.to_wire()["sampling_params"]["structured_outputs"] == so
    assert again.sampling_params.structured_outputs == so
