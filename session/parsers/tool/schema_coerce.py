"""vLLM 0.32's schema-typed argument values, written again: what its engine parsers do to a call's
arguments once they are a JSON object (``ParserEngine._fix_arg_types`` and its helpers in
``vllm/tool_parsers/utils.py``), so that a parser reproduces the final arguments exactly and can
tell, per parameter, whether a value may stream before it ends.

:func:`tool_properties` finds a function's ``properties``; :func:`schema_types` the type names a
schema allows; :func:`coerce_string` makes a raw string the first type it fits (null, integer,
number, boolean, object, array, string; else ``json.loads`` of it; else the string);
:func:`coerce_value` fits a parsed value to its property (recursing where the schema has
``properties`` / ``items``); :func:`string_stays_string` says whether every string fits unchanged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

_ALIASES = {
    "str": "string", "text": "string", "varchar": "string", "char": "string", "enum": "string",
    "int": "integer", "int32": "integer", "int64": "integer", "uint": "integer", "uint32": "integer",
    "uint64": "integer", "long": "integer", "short": "integer", "unsigned": "integer",
    "float": "number", "float32": "number", "float64": "number", "double": "number",
    "bool": "boolean", "dict": "object", "arr": "array", "list": "array", "sequence": "array",
}
_PRIORITY = ("null", "integer", "number", "boolean", "object", "array", "string")
_NOT_STRING = frozenset(_PRIORITY[:-1])


def tool_properties(tools: Iterable[dict[str, Any]], name: str) -> dict[str, Any]:
    """The ``parameters.properties`` of the first function tool called ``name`` (``{}`` if none)."""
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            continue
        fn = tool.get("function")
        if not isinstance(fn, dict) or fn.get("name") != name:
            continue
        params = fn.get("parameters") or {}
        props = params.get("properties", {}) if isinstance(params, dict) else {}
        return props if isinstance(props, dict) else {}
    return {}


def schema_types(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return {"string"}
    types: set[str] = set()
    kind = schema.get("type")
    if isinstance(kind, str):
        types.add(kind)
    elif isinstance(kind, list):
        types.update(t for t in kind if isinstance(t, str))
    enum = schema.get("enum")
    if isinstance(enum, list):
        for value in enum:
            if value is None:
                types.add("null")
            elif isinstance(value, bool):
                types.add("boolean")
            elif isinstance(value, int):
                types.add("integer")
            elif isinstance(value, float):
                types.add("number")
            elif isinstance(value, str):
                types.add("string")
            elif isinstance(value, list):
                types.add("array")
            elif isinstance(value, dict):
                types.add("object")
    for choice in ("anyOf", "oneOf", "allOf"):
        options = schema.get(choice)
        if isinstance(options, list):
            for option in options:
                types.update(schema_types(option))
    return types or {"string"}


def _normalized(types: Iterable[str]) -> set[str]:
    out = set()
    for t in types:
        key = t.strip().lower()
        out.add(_ALIASES.get(key, key))
    return out


def _finite(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError):
        return False
    return True


def coerce_string(value: str, types: Iterable[str]) -> Any:
    normalized = _normalized(types)
    for kind in _PRIORITY:
        if kind not in normalized:
            continue
        if kind == "null":
            if value.lower() == "null":
                return None
        elif kind == "string":
            return value
        elif kind == "integer":
            try:
                return int(value)
            except (ValueError, TypeError):
                pass
        elif kind == "number":
            try:
                number = float(value)
            except (ValueError, TypeError):
                continue
            if math.isfinite(number):
                return number if number != int(number) else int(number)
        elif kind == "boolean":
            low = value.lower().strip()
            if low in ("true", "1"):
                return True
            if low in ("false", "0"):
                return False
        else:  # object / array
            try:
                parsed = json.loads(value)
            except (ValueError, TypeError):
                continue
            if _finite(parsed):
                return parsed
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    return parsed if _finite(parsed) else value


def coerce_value(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` as vLLM's ``_coerce_value`` leaves it for a property of this ``schema`` (objects
    and arrays are changed in place, as there)."""
    if isinstance(value, str):
        return coerce_string(value, schema_types(schema))
    if isinstance(value, dict):
        nested = schema.get("properties")
        if isinstance(nested, dict):
            coerce_members(value, nested)
        return value
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                value[i] = coerce_value(item, items)
        return value
    coerced = coerce_string(json.dumps(value, ensure_ascii=False), schema_types(schema))
    if type(coerced) is not type(value) or coerced != value:
        return coerced
    return value


def coerce_members(args: dict[str, Any], properties: dict[str, Any]) -> dict[str, Any]:
    """Every member of ``args`` whose property schema is an object, coerced in place."""
    for key, value in args.items():
        prop = properties.get(key)
        if isinstance(prop, dict):
            args[key] = coerce_value(value, prop)
    return args


def string_stays_string(schema: Any) -> bool:
    """Whether :func:`coerce_value` returns every string unchanged for this property schema."""
    if not isinstance(schema, dict):
        return True
    normalized = _normalized(schema_types(schema))
    return "string" in normalized and not normalized & _NOT_STRING


def may_be_container(schema: Any) -> bool:
    """Whether the schema lets a string become an object or an array."""
    return isinstance(schema, dict) and bool(_normalized(schema_types(schema)) & {"object", "array"})
