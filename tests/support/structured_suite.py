"""JSON schemas for the structured-output acceptance tests (engine in-process, ``serve`` via the
openai SDK, the WebSocket ``chat`` frame): nested objects, arrays, enums, bounded numbers,
required and optional fields. Every string is bounded (``maxLength``, ``enum``, ``format``) and
every array has ``maxItems``, so a near-random model finishes each document well inside
``MAX_TOKENS`` (whitespace runs are bounded by the engine)."""

from __future__ import annotations

from typing import Any

MAX_TOKENS = 400
# tool_choice "required" allows any number of calls (vLLM's schema has no maxItems): room for several
TOOL_MAX_TOKENS = 600

SCHEMAS: dict[str, dict[str, Any]] = {
    "person": {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12},
                       "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"],
    },
    "optional_fields": {
        "type": "object",
        "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 9999},
                       "nickname": {"type": "string", "maxLength": 8},
                       "active": {"type": "boolean"},
                       "score": {"type": "number", "minimum": 0, "maximum": 1}},
        "required": ["id"],
        "additionalProperties": False,
    },
    "enum_and_const": {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", "blue"]},
                       "size": {"type": "string", "enum": ["S", "M", "L", "XL"]},
                       "kind": {"const": "shirt"}},
        "required": ["color", "size", "kind"],
    },
    "bounded_numbers": {
        "type": "object",
        "properties": {"temperature": {"type": "number", "minimum": -50, "maximum": 60},
                       "humidity": {"type": "integer", "minimum": 0, "maximum": 100},
                       "wind": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 200}},
        "required": ["temperature", "humidity", "wind"],
    },
    "array_of_ints": {
        "type": "array",
        "items": {"type": "integer", "minimum": -10, "maximum": 10},
        "minItems": 1,
        "maxItems": 5,
    },
    "nested_objects": {
        "type": "object",
        "properties": {
            "user": {"type": "object",
                     "properties": {"name": {"type": "string", "maxLength": 10},
                                    "address": {"type": "object",
                                                "properties": {"city": {"type": "string", "maxLength": 10},
                                                               "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                                                "required": ["city", "zip"]}},
                     "required": ["name", "address"]},
        },
        "required": ["user"],
    },
    "array_of_objects": {
        "type": "object",
        "properties": {"items": {"type": "array", "maxItems": 3,
                                 "items": {"type": "object",
                                           "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
                                                          "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
                                           "required": ["sku", "qty"]}}},
        "required": ["items"],
    },
    "union_and_null": {
        "type": "object",
        "properties": {"value": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9},
                                           {"type": "string", "maxLength": 5}, {"type": "null"}]},
                       "note": {"type": ["string", "null"], "maxLength": 6}},
        "required": ["value", "note"],
    },
    "refs_and_formats": {
        "$defs": {"point": {"type": "object",
                            "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "y": {"type": "integer", "minimum": 0, "maximum": 99}},
                            "required": ["x", "y"]}},
        "type": "object",
        "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"},
                       "day": {"type": "string", "format": "date"}},
        "required": ["start", "end", "day"],
    },
    "tuple_and_strings": {
        "type": "array",
        "prefixItems": [{"type": "string", "minLength": 1, "maxLength": 4}, {"type": "boolean"},
                        {"enum": [1, 2, 3]}],
        "items": False,
        "minItems": 3,
    },
    "matrix": {
        "type": "array",
        "minItems": 1,
        "maxItems": 3,
        "items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "integer", "minimum": 0,
                                                                          "maximum": 9}},
    },
}

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "maxLength": 10},
                                      "unit": {"enum": ["c", "f"]}},
                       "required": ["city", "unit"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two small numbers",
        "parameters": {"type": "object",
                       "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9},
                                      "b": {"type": "integer", "minimum": 0, "maximum": 9}},
                       "required": ["a", "b"]}}},
]
