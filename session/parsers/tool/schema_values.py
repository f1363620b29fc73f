"""Tool-call argument values typed by the request's JSON schema, as vLLM 0.32 types them (one
place for every parser that does: ``coerce_to_schema_type`` / ``extract_types_from_schema`` in
``vllm/tool_parsers/utils.py`` and ``ParserEngine._fix_arg_types`` / ``_coerce_value``).
Formats whose arguments arrive as raw strings (Qwen3-Coder's ``<parameter=k>v</parameter>``,
GLM's ``<arg_value>``, MiniMax-M2's ``<parameter name=…>``, Gemma 4's scalars) convert each value
by the type its property declares (:func:`coerce`); formats whose arguments are already JSON
(DeepSeek-V3.2's DSML) fit each parsed value to its property (:func:`fit`, :func:`fit_members`).

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["always_string", "coerce", "fit", "fit_members", "json_capable", "may_be_container",
           "properties_of", "types_of", "value_types"]

_ALIASES = {
    "str": "string", "text": "string", "varchar": "string", "char": "string", "enum": "string",
    "int": "integer", "int32": "integer", "int64": "integer", "uint": "integer", "uint32": "integer",
    "uint64": "integer", "long": "integer", "short": "integer", "unsigned": "integer",
    "float": "number", "float32": "number", "float64": "number", "double": "number",
    "bool": "boolean", "dict": "object", "arr": "array", "list": "array", "sequence": "array",
}
_BEFORE_STRING = ("null", "integer", "number", "boolean", "object", "array")
_CONTAINERS = frozenset(("object", "array"))


def properties_of(tools: Iterable[Mapping[str, Any]], name: str) -> dict[str, Any]:
    """The ``properties`` of the first function tool called ``name`` (vLLM's
    ``find_tool_properties``; {} when none, or when the schema has none or they are not an
    object)."""
    for tool in tools:
        if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
            continue
        function = tool.get("function")
        if not isinstance(function, Mapping) or function.get("name") != name:
            continue
        params = function.get("parameters")
        props = params.get("properties") if isinstance(params, Mapping) else None
        if isinstance(props, dict):
            return props  # (read, never changed, by every user)
        return dict(props) if isinstance(props, Mapping) else {}
    return {}


def _schema_types(schema: Any, out: set[str]) -> None:
    if not isinstance(schema, Mapping):
        return
    declared = schema.get("type")
    if isinstance(declared, str):
        out.add(declared)
    elif isinstance(declared, list):
        out.update(t for t in declared if isinstance(t, str))
    enum = schema.get("enum")
    if isinstance(enum, list):
        for value in enum:
            kind = _json_type(value)
            if kind is not None:
                out.add(kind)
    for key in ("anyOf", "oneOf", "allOf"):
        members = schema.get(key)
        if isinstance(members, list):
            for member in members:
                _schema_types(member, out)


def _json_type(value: Any) -> str | None:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string" if isinstance(value, str) else None


def types_of(schema: Any) -> frozenset[str] | None:
    """The normalized types a property ``schema`` allows (``{"string"}`` when it names none), or
    None when it is no schema (not an object: the value stays a string whatever it holds)."""
    if not isinstance(schema, Mapping):
        return None
    found: set[str] = set()
    _schema_types(schema, found)
    if not found:
        return frozenset(("string",))
    return frozenset(_ALIASES.get(t.strip().lower(), t.strip().lower()) for t in found)


def value_types(properties: Mapping[str, Any], key: str) -> frozenset[str] | None:
    """The normalized types the value of ``key`` may take, or None when it stays a string
    whatever it holds (no schema for it)."""
    return types_of(properties.get(key)) if properties else None


def always_string(types: frozenset[str] | None) -> bool:
    """Whether every value converts to itself as a string (so it can stream as it comes)."""
    return types is None or ("string" in types and not types.intersection(_BEFORE_STRING))


def json_capable(types: frozenset[str] | None) -> bool:
    """Whether a value that is none of null / integer / number / boolean may still become a
    parsed JSON value (``object`` / ``array`` declared, or no ``string`` to fall back to)."""
    return types is not None and ("object" in types or "array" in types or "string" not in types)


def may_be_container(types: frozenset[str] | None) -> bool:
    """Whether ``object`` or ``array`` is declared (a string may become a parsed object / array)."""
    return types is not None and not _CONTAINERS.isdisjoint(types)


def _finite(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return False
    return True


def _as_null(value: str) -> tuple[bool, Any]:
    return value.lower() == "null", None


def _as_integer(value: str) -> tuple[bool, Any]:
    try:
        return True, int(value)
    except (ValueError, TypeError):
        return False, None


def _as_number(value: str) -> tuple[bool, Any]:
    try:
        number = float(value)
    except (ValueError, TypeError):
        return False, None
    if not math.isfinite(number):
        return False, None
    return True, int(number) if number == int(number) else number


def _as_boolean(value: str) -> tuple[bool, Any]:
    word = value.lower().strip()
    if word in ("true", "1"):
        return True, True
    if word in ("false", "0"):
        return True, False
    return False, None


def _as_json(value: str) -> tuple[bool, Any]:
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return False, None
    return (True, parsed) if _finite(parsed) else (False, None)


_READERS = {"null": _as_null, "integer": _as_integer, "number": _as_number, "boolean": _as_boolean,
            "object": _as_json, "array": _as_json}


def coerce(value: str, types: frozenset[str] | None) -> Any:
    """``value`` (a raw string) as the first of ``types`` it reads as (see the module docstring);
    ``types`` None keeps it a string."""
    if types is None:
        return value
    for kind in _BEFORE_STRING:
        if kind in types:
            ok, converted = _READERS[kind](value)
            if ok:
                return converted
    if "string" in types:
        return value
    ok, converted = _as_json(value)
    return converted if ok else value


def fit(value: Any, schema: Mapping[str, Any]) -> Any:
    """A parsed argument ``value`` as vLLM's ``ParserEngine._coerce_value`` leaves it for a
    property of this ``schema`` (objects and arrays are changed in place, as there)."""
    if isinstance(value, str):
        return coerce(value, types_of(schema))
    if isinstance(value, dict):
        nested = schema.get("properties")
        if isinstance(nested, Mapping):
            fit_members(value, nested)
        return value
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                value[i] = fit(item, items)
        return value
    fitted = coerce(json.dumps(value, ensure_ascii=False), types_of(schema))
    return fitted if type(fitted) is not type(value) or fitted != value else value


def fit_members(args: dict[str, Any], properties: Mapping[str, Any]) -> dict[str, Any]:
    """Every member of ``args`` whose property schema is an object, fitted in place
    (``ParserEngine._coerce_dict``)."""
    for key, value in args.items():
        schema = properties.get(key)
        if isinstance(schema, Mapping):
            args[key] = fit(value, schema)
    return args
