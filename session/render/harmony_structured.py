"""Structured outputs for gpt-oss: the xgrammar *structural tags* vLLM 0.32 writes over harmony's channels.

For a ``gpt_oss`` model vLLM's HarmonyParser (``vllm/parser/harmony.py``) rewrites a request's own
constraint (``response_format`` json_schema / json_object, ``structured_outputs`` json / regex /
choice / grammar) into a structural tag that leaves the ``analysis`` channel free and constrains
only the ``final`` message (``_adjust_output_format``), and ``tool_choice`` ``"required"`` / a named
function (``"auto"`` only with a ``strict`` tool or ``parallel_tool_calls: false``) into one over
``to=functions.NAME`` messages (``get_harmony_structural_tag`` through
``DelegatingParser._apply_structural_tag``). This module builds the same tags as plain dicts and
serializes them as vLLM does (``json.dumps(StructuralTag.model_dump())``), so the ``structural_tag``
string render writes is vLLM's byte for byte (``tests/engine/local/test_harmony_structured.py`` against
answers recorded from vLLM). The rules: docs/render.md, "gpt-oss (harmony)", "Structured outputs".
"""

from __future__ import annotations

import json
from typing import Any

from engine.structured import structured_outputs
from session.protocol.openai import ChatCompletionRequest, NamedToolChoice
from session.protocol.sampling import structured_from_format

_JSON_CONSTRAINS = (" json", " <|constrain|>json")
# Harmony's stop tokens (<|return|>, <|call|>, <|endoftext|>) end a message too: "" (vLLM's comment:
# xgrammar disallows stop tokens while under a constraint)
_END_TAG = ["<|end|>", ""]
_FINAL_BEGIN = "<|channel|>final{constrain}<|message|>"
_TOOL_CALL_CHANNELS = ("<|channel|>commentary", "<|channel|>analysis", "<|channel|>final")
_FUNCTION_CALL_BEGINS = (
    " to=functions.{name}{channel}{constrain}<|message|>",
    "{channel} to=functions.{name}{constrain}<|message|>",
)
_CONSTRAINT_KEYS = ("json", "regex", "choice", "grammar", "json_object")


def _any_text() -> dict[str, Any]:
    return {"type": "any_text", "excludes": [], "max_tokens": None, "max_chars": None}


def _json_format(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": schema, "style": "json", "any_order": False,
            "max_whitespace_cnt": None, "excludes": []}


def _tag(begin: str, content: dict[str, Any], end: Any) -> dict[str, Any]:
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def _channel_prefix(channel: str) -> dict[str, Any]:
    """An optional whole ``channel`` message before the constrained one (free text)."""
    return {"type": "optional", "content": {"type": "sequence", "elements": [
        _tag(f"<|channel|>{channel}<|message|>", _any_text(), "<|end|>"),
        {"type": "const_string", "value": "<|start|>assistant"}]}}


def _assemble(*, commentary: bool, content: dict[str, Any]) -> dict[str, Any]:
    elements = [_channel_prefix("analysis")]
    if commentary:
        elements.append(_channel_prefix("commentary"))
    elements.append(content)
    return {"type": "structural_tag", "format": {"type": "sequence", "elements": elements}}


def _final_format(params: dict[str, Any]) -> dict[str, Any] | None:
    """vLLM's ``structured_outputs_to_format``, for the constraints a request can carry."""
    if params.get("json_object"):
        return _json_format({"type": "object"})
    if params.get("json") is not None:
        schema = params["json"]
        return _json_format(json.loads(schema) if isinstance(schema, str) else schema)
    if params.get("regex") is not None:
        return {"type": "regex", "pattern": params["regex"]}
    if params.get("choice") is not None:
        return {"type": "or", "elements": [{"type": "const_string", "value": c} for c in params["choice"]]}
    if params.get("grammar") is not None:
        return {"type": "grammar", "grammar": params["grammar"]}
    return None


def _dumps(tag: dict[str, Any]) -> str:
    return json.dumps(tag)  # vLLM: json.dumps(structural_tag.model_dump()), ASCII, ", " and ": "


def _final_constraint(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """``_adjust_output_format``: the request's constraint moved onto the ``final`` message."""
    if params is None:
        return None
    content = _final_format(params)
    if content is None:
        return params
    if content["type"] == "json_schema":
        final = {"type": "or", "elements": [_tag(_FINAL_BEGIN.format(constrain=c), content, _END_TAG)
                                            for c in _JSON_CONSTRAINS]}
    else:
        final = _tag(_FINAL_BEGIN.format(constrain=""), content, _END_TAG)
    tag = _assemble(commentary=False, content=final)
    return {**params, **dict.fromkeys(_CONSTRAINT_KEYS), "structural_tag": _dumps(tag)}


def _strict(tool: Any) -> bool:
    return (tool.function.model_extra or {}).get("strict") is True


def _tools_tag(tools: list[Any], choice: str, strict_of: list[bool]) -> dict[str, Any]:
    """``get_harmony_structural_tag`` over function tools (``choice``: auto, required, forced)."""
    tags = []
    for tool, strict in zip(tools, strict_of, strict=True):
        params = tool.function.parameters
        schema: Any = params if strict and params is not None else True
        for pattern in _FUNCTION_CALL_BEGINS:
            for constrain in _JSON_CONSTRAINS:
                for channel in _TOOL_CALL_CHANNELS:
                    begin = pattern.format(name=tool.function.name, channel=channel, constrain=constrain)
                    tags.append(_tag(begin, _json_format(schema), _END_TAG))
    if choice == "auto":
        tags.extend(_tag(_FINAL_BEGIN.format(constrain=c), _any_text(), _END_TAG) for c in (*_JSON_CONSTRAINS, ""))
    return _assemble(commentary=True, content={"type": "or", "elements": tags})


def harmony_structured_outputs(req: ChatCompletionRequest) -> dict[str, Any] | None:
    """The ``structured_outputs`` sampling field vLLM 0.32 writes for this gpt-oss request (with its
    harmony parsers configured), or None when nothing is constrained."""
    params = _final_constraint(structured_from_format(req.response_format, req.structured_outputs))
    choice = req.tool_choice
    named = isinstance(choice, NamedToolChoice)
    if not req.tools or not (named or choice in ("auto", "required")):
        return params
    is_auto = choice == "auto"
    # --tool-strict-level auto (vLLM's default); parallel_tool_calls false raises it to "function"
    # (the call envelope constrained) unless auto already carries a structured-output constraint
    function_level = req.parallel_tool_calls is False and not (is_auto and params is not None)
    if is_auto and not function_level and not any(_strict(t) for t in req.tools):
        return params  # vLLM: no structural tag for auto without a strict tool
    output_format = json.loads(params["structural_tag"])["format"] if is_auto and params is not None else None
    if named:
        assert isinstance(choice, NamedToolChoice)
        tools = [t for t in req.tools if t.function.name == choice.function.name]
        simplified = "forced"
    else:
        tools = list(req.tools)
        simplified = "required" if output_format is not None else str(choice)
    tag = _tools_tag(tools, simplified, [_strict(t) for t in tools])
    if output_format is not None:
        tag = {"type": "structural_tag", "format": {"type": "or", "elements": [tag["format"], output_format]}}
    return structured_outputs(structural_tag=_dumps(tag))


def constrained_tools(req: ChatCompletionRequest) -> list[int]:
    """Indexes of the tools whose parameter schema the structural tag enforces (strict ones it may
    call); the caller checks that the engine can enforce them."""
    choice = req.tool_choice
    named = choice.function.name if isinstance(choice, NamedToolChoice) else None
    return [i for i, t in enumerate(req.tools or [])
            if _strict(t) and t.function.parameters is not None and (named is None or t.function.name == named)]
