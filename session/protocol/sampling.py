"""The request → ``SamplingParams`` details vLLM applies (shared by chat and completion)."""

from __future__ import annotations

from typing import Any

from engine.protocol import SamplingParams
from engine.structured import (
    CONSTRAINT_FIELDS,
    STRUCTURED_FIELDS,
    Problem,
    read_structured_outputs,
    structured_outputs,
    unsupported_schema_feature,
)


def or_default(value: Any, default: Any) -> Any:
    return default if value is None else value


def logit_bias_of(bias: dict[str, float] | None) -> dict[int, float] | None:
    """OpenAI sends token ids as string keys; vLLM clamps each bias to [-100, 100]."""
    if not bias:
        return None
    out: dict[int, float] = {}
    for key, value in bias.items():
        out[int(key)] = min(100.0, max(-100.0, value))  # keys checked by the request model
    return out


RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")


def structured_from_format(fmt: dict[str, Any] | None,
                           requested: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """``response_format`` (and the vLLM ``structured_outputs`` extension) → the
    ``structured_outputs`` sampling field, in vLLM's shape (every ``StructuredOutputsParams``
    key). As in vLLM, ``response_format`` sets its constraint on top of the request's own
    ``structured_outputs`` (keeping its options, such as ``disable_any_whitespace``); ``strict``
    changes nothing: the engine always enforces the schema. Both are checked by the request
    model's validators (:func:`response_format_problem`, :func:`structured_outputs_problem`)."""
    fields: dict[str, Any] = dict(requested or {})
    kind = (fmt or {}).get("type")
    if kind == "json_schema":
        fields["json"] = ((fmt or {}).get("json_schema") or {}).get("schema")
    elif kind == "json_object":
        fields["json_object"] = True
    if not any(fields.get(k) is not None for k in CONSTRAINT_FIELDS):
        return None
    return structured_outputs(**{k: v for k, v in fields.items() if k in STRUCTURED_FIELDS})


def response_format_problem(fmt: dict[str, Any]) -> str | None:
    """What is wrong with a ``response_format`` (a sentence naming the part), else None."""
    kind = fmt.get("type")
    if kind not in RESPONSE_FORMAT_TYPES:
        if kind == "structural_tag":
            return "type structural_tag is not supported; use json_schema or json_object"
        return f"type must be one of {', '.join(RESPONSE_FORMAT_TYPES)}, got {kind!r}"
    if kind != "json_schema":
        return None
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict):
        return "json_schema (an object with a name and a schema) is required when type is json_schema"
    if not isinstance(spec.get("name"), str) or not spec["name"]:
        return "json_schema.name must be a non-empty string"
    if "strict" in spec and not isinstance(spec["strict"], bool | None):
        return "json_schema.strict must be a boolean"
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        return "json_schema.schema must be a JSON schema object"
    bad = unsupported_schema_feature(schema)
    if bad is not None:
        return f"json_schema.schema{'.' + bad.field if bad.field else ''} {bad.message}"
    return None


def structured_outputs_problem(value: dict[str, Any], fmt: dict[str, Any] | None = None) -> str | None:
    """What is wrong with a request's own ``structured_outputs`` (vLLM's extension), with
    ``response_format``'s constraint set on top of it when there is one, else None."""
    unknown = sorted(set(value) - set(STRUCTURED_FIELDS))
    if unknown:
        return f"unknown key {unknown[0]!r}; the keys are {', '.join(STRUCTURED_FIELDS)}"
    read = read_structured_outputs(structured_from_format(fmt, value) if fmt else value)
    if isinstance(read, Problem):
        return f"{read.field + ' ' if read.field else ''}{read.message}"
    return None


def vllm_post_init(sp: SamplingParams) -> SamplingParams:
    """What vLLM's ``SamplingParams.__post_init__`` / greedy check change before it serializes."""
    changes: dict[str, Any] = {}
    if sp.greedy:
        # vLLM resets these for greedy sampling, so they disappear from the wire.
        changes.update(top_p=1.0, top_k=0, min_p=0.0)
    if sp.stop and not sp.include_stop_str_in_output:
        # vLLM holds back this many characters so a partial stop string is never streamed.
        extra = dict(sp.model_extra or {})
        extra["output_text_buffer_length"] = max(len(s) for s in sp.stop) - 1
        if extra["output_text_buffer_length"] == 0:
            del extra["output_text_buffer_length"]
        if extra:
            return sp.model_copy(update={**changes, **extra})
    return sp.model_copy(update=changes) if changes else sp
