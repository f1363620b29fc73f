"""``sampling_params.structured_outputs``: vLLM's shape, and what the grammar engine can enforce.

A wire-level module (no torch, no grammar library) shared by render (which writes the field and
refuses schemas it cannot honour with a 400) and the local engine (which reads it from any client
and checks it again). The field's shape and the schema keywords accepted and refused (found with
xgrammar 0.2.9): docs/structured-outputs.md, "What a client sends" and "Which schemas are accepted".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from engine.json_depth import MAX_JSON_DEPTH, too_deep

# vLLM's StructuredOutputsParams, field for field, in its order.
CONSTRAINT_FIELDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
_DEFAULTS: dict[str, Any] = {
    "json": None,
    "regex": None,
    "choice": None,
    "grammar": None,
    "json_object": None,
    "disable_any_whitespace": False,
    "disable_additional_properties": False,
    "whitespace_pattern": None,
    "structural_tag": None,
}

STRUCTURED_FIELDS = tuple(_DEFAULTS)

GrammarKind = Literal["json", "json_object", "regex", "choice", "grammar", "structural_tag"]


def structured_outputs(**fields: Any) -> dict[str, Any]:
    """The field as vLLM writes it: every public key, the given ones set."""
    unknown = set(fields) - set(_DEFAULTS)
    if unknown:
        raise TypeError(f"not a StructuredOutputsParams field: {sorted(unknown)}")
    return {**_DEFAULTS, **fields}


@dataclass(frozen=True, slots=True)
class Problem:
    """What is wrong with a request's structured output constraint (callers raise their own
    400 with it). ``field`` is relative to the structured-outputs object (``json``,
    ``json.properties.age``…) or empty for the object itself."""

    message: str
    field: str = ""


@dataclass(frozen=True, slots=True)
class StructuredSpec:
    """One validated constraint, ready to compile. ``key`` identifies the grammar (the compile
    cache key): the same constraint always gives the same key."""

    kind: GrammarKind
    value: Any  # schema dict (json), True (json_object), regex / grammar str, list of choices, tag dict
    any_whitespace: bool = True
    key: str = ""


def read_structured_outputs(raw: Any, *, structural_tag: bool = False) -> StructuredSpec | Problem | None:
    """Read the wire field: ``None`` when it constrains nothing, a spec, or the problem.
    ``structural_tag``: accept that kind (the engine: render writes it for gpt-oss; a client's own
    request keeps it refused)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        return Problem("must be an object with one of the keys json, json_object, regex, choice, grammar")
    set_ = [k for k in CONSTRAINT_FIELDS if raw.get(k) is not None]
    if not set_:
        if any(raw.get(k) not in (None, False) for k in raw):
            return Problem("sets options but no constraint: give one of json, json_object, regex, choice, "
                           "grammar")
        return None
    if len(set_) > 1:
        return Problem(f"can use only one kind of constraint, got {', '.join(set_)}")
    kind = set_[0]
    if raw.get("whitespace_pattern") is not None:
        return Problem("whitespace_pattern is not supported by this engine; use disable_any_whitespace",
                       "whitespace_pattern")
    any_ws = not bool(raw.get("disable_any_whitespace"))
    value = raw[kind]
    if kind == "structural_tag":
        if not structural_tag:
            return Problem("structural_tag is not supported by this engine", "structural_tag")
        return _read_structural_tag(value)
    if kind == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except (ValueError, RecursionError):
                return Problem("json must be a JSON schema (an object, or a string holding one)", "json")
            if too_deep(value, raw=raw[kind]) is not None:  # the compile worker serializes it again
                return Problem(f"(a JSON string) nests deeper than {MAX_JSON_DEPTH} levels of JSON arrays and "
                               f"objects; flatten it to at most {MAX_JSON_DEPTH} levels", "json")
        if not isinstance(value, dict | bool):
            return Problem("json must be a JSON schema object", "json")
        bad = unsupported_schema_feature(value)
        if bad is not None:
            return Problem(bad.message, "json" + (f".{bad.field}" if bad.field else ""))
        return StructuredSpec("json", value, any_ws, _key("json", value, any_ws))
    if kind == "json_object":
        if value is not True:
            return Problem("json_object must be true", "json_object")
        return StructuredSpec("json_object", True, any_ws, _key("json_object", True, any_ws))
    if kind == "choice":
        if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
            return Problem("choice must be a non-empty list of strings", "choice")
        return StructuredSpec("choice", tuple(value), any_ws, _key("choice", value, any_ws))
    if not isinstance(value, str) or not value:
        return Problem(f"{kind} must be a non-empty string", kind)
    return StructuredSpec(kind, value, any_ws, _key(kind, value, any_ws))  # type: ignore[arg-type]


def _read_structural_tag(value: Any) -> StructuredSpec | Problem:
    """An xgrammar structural tag (vLLM: a JSON string): ``{"type": "structural_tag", "format": …}``;
    every ``json_schema`` inside it is checked as a schema is. The rest of its shape is the compile's."""
    field = "structural_tag"
    if isinstance(value, str):
        try:
            tag = json.loads(value)
        except (ValueError, RecursionError):
            return Problem("must be a JSON string holding a structural tag object", field)
        if too_deep(tag, raw=value) is not None:
            return Problem(f"nests deeper than {MAX_JSON_DEPTH} levels of JSON arrays and objects", field)
    else:
        tag = value
    if not isinstance(tag, dict):
        return Problem("must be a structural tag object", field)
    if "structures" in tag or "triggers" in tag:
        return Problem('uses the legacy form (structures and triggers), which this engine does not compile; use '
                       '{"type": "structural_tag", "format": …}', field)
    if tag.get("type") != "structural_tag" or not isinstance(tag.get("format"), dict):
        return Problem('must be {"type": "structural_tag", "format": {…}}', field)
    bad = _tag_schema_problem(tag["format"], "format", 0)
    if bad is not None:
        return Problem(bad.message, f"{field}.{bad.field}")
    return StructuredSpec("structural_tag", tag, True, _key("structural_tag", tag, True))


def _tag_schema_problem(node: Any, path: str, depth: int) -> Problem | None:
    """The first JSON schema inside a structural tag that cannot be enforced."""
    if depth > _MAX_DEPTH:
        return Problem(f"nests deeper than {_MAX_DEPTH} levels", path)
    if isinstance(node, list):
        for i, item in enumerate(node):
            found = _tag_schema_problem(item, f"{path}[{i}]", depth + 1)
            if found is not None:
                return found
        return None
    if not isinstance(node, dict):
        return None
    if node.get("type") == "json_schema" and "json_schema" in node:
        schema = node["json_schema"]
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except (ValueError, RecursionError):
                return Problem("is not a JSON schema", f"{path}.json_schema")
        bad = unsupported_schema_feature(schema)
        if bad is not None:
            return Problem(bad.message, f"{path}.json_schema" + (f".{bad.field}" if bad.field else ""))
        return None
    for key, child in node.items():
        if isinstance(child, dict | list):
            found = _tag_schema_problem(child, f"{path}.{key}", depth + 1)
            if found is not None:
                return found
    return None


def _key(kind: str, value: Any, any_ws: bool) -> str:
    return json.dumps([kind, value, any_ws], sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --- schema support -----------------------------------------------------------------------------

STRING_FORMATS = frozenset({
    "email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname", "uuid", "uri",
    "uri-reference", "uri-template", "json-pointer", "relative-json-pointer",
})
# Standard keywords whose constraint xgrammar drops (or compiles wrongly).
_UNSUPPORTED = frozenset({
    "uniqueItems", "contains", "minContains", "maxContains", "not", "if", "then", "else",
    "dependentRequired", "dependentSchemas", "dependencies", "additionalItems", "$dynamicRef",
    "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor",
})
_ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$comment", "$schema", "$id", "$anchor",
    "deprecated", "readOnly", "writeOnly", "contentEncoding", "contentMediaType", "$defs",
    "definitions",
})
_NUMERIC = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_STRING = ("minLength", "maxLength", "pattern", "format")
_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SUBSCHEMAS = ("additionalProperties", "items", "propertyNames", "unevaluatedProperties",
               "unevaluatedItems")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAX_DEPTH = 64


def unsupported_schema_feature(schema: Any) -> Problem | None:
    """The first keyword of ``schema`` that cannot be enforced, with where it is; else None."""
    return _check(schema, "", 0)


def _types(node: dict[str, Any]) -> set[str] | None:
    t = node.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return {x for x in t if isinstance(x, str)}
    return None


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check(node: Any, path: str, depth: int) -> Problem | None:
    if isinstance(node, bool):
        return None
    if not isinstance(node, dict):
        return Problem("is not a JSON schema (an object or a boolean)", path)
    if depth > _MAX_DEPTH:
        return Problem(f"nests deeper than {_MAX_DEPTH} levels", path)
    found = _check_here(node, path)
    if found is not None:
        return found
    for key in _SUBSCHEMA_MAPS:
        sub = node.get(key)
        if isinstance(sub, dict):
            for name, child in sub.items():
                found = _check(child, _at(_at(path, key), str(name)), depth + 1)
                if found is not None:
                    return found
    for key in _SUBSCHEMAS:
        if key in node:
            found = _check(node[key], _at(path, key), depth + 1)
            if found is not None:
                return found
    for key in _SUBSCHEMA_LISTS:
        items = node.get(key)
        if isinstance(items, list):
            for i, child in enumerate(items):
                found = _check(child, f"{_at(path, key)}[{i}]", depth + 1)
                if found is not None:
                    return found
        elif key in node:
            return Problem(f"`{key}` must be a list of schemas", _at(path, key))
    return None


def _check_here(node: dict[str, Any], path: str) -> Problem | None:
    for key in node:
        if key in _UNSUPPORTED:
            return Problem(f"uses the keyword `{key}`, which structured outputs cannot enforce", _at(path, key))
    types = _types(node)
    if "type" in node and (types is None or not types or not types <= _JSON_TYPES):
        return Problem(f"has an invalid `type`: {node['type']!r}", _at(path, "type"))
    assertions = [k for k in node if k not in _ANNOTATIONS and k != "type"]
    ref = node.get("$ref")
    if ref is not None:
        if not isinstance(ref, str) or not ref.startswith("#"):
            return Problem("uses a `$ref` outside this schema; only local references (#/$defs/…) are supported",
                           _at(path, "$ref"))
        others = [k for k in assertions if k != "$ref"] + (["type"] if "type" in node else [])
        if others:
            return Problem(f"combines `$ref` with `{others[0]}`, which structured outputs cannot enforce "
                           "(move it into the referenced schema)", _at(path, others[0]))
    if len(node.get("allOf") or ()) > 1:
        return Problem("uses `allOf` with more than one schema, which structured outputs cannot enforce "
                       "(merge them into one schema)", _at(path, "allOf"))
    for union in ("anyOf", "oneOf"):
        if union in node:
            others = [k for k in assertions if k != union]
            if others:
                return Problem(f"combines `{union}` with `{others[0]}`, which structured outputs cannot enforce "
                               f"(move it into each `{union}` branch)", _at(path, others[0]))
            if types is not None:
                for i, branch in enumerate(node.get(union) or ()):
                    bt = _types(branch) if isinstance(branch, dict) else None
                    if bt is not None and not bt <= types:
                        return Problem(f"has a `{union}` branch whose type is not allowed by `type`",
                                       f"{_at(path, union)}[{i}]")
    for literal in ("enum", "const"):
        if literal in node:
            others = [k for k in assertions if k != literal]
            if others:
                return Problem(f"combines `{literal}` with `{others[0]}`, which structured outputs cannot enforce",
                               _at(path, others[0]))
            if literal == "enum" and (not isinstance(node["enum"], list) or not node["enum"]):
                return Problem("has an empty or invalid `enum`", _at(path, "enum"))
    numeric = [k for k in _NUMERIC if k in node]
    if numeric and not (types and types & {"integer", "number"}):
        return Problem(f"uses `{numeric[0]}` without `type: integer` or `type: number`", _at(path, numeric[0]))
    if "multipleOf" in node and types and "number" in types:
        return Problem("uses `multipleOf` on a number; structured outputs enforce it on integers only",
                       _at(path, "multipleOf"))
    text = [k for k in _STRING if k in node]
    if text and not (types and "string" in types):
        return Problem(f"uses `{text[0]}` without `type: string`", _at(path, text[0]))
    if ("pattern" in node or "format" in node) and ("minLength" in node or "maxLength" in node):
        bound = "minLength" if "minLength" in node else "maxLength"
        return Problem(f"combines `{'pattern' if 'pattern' in node else 'format'}` with `{bound}`, which "
                       "structured outputs cannot enforce together", _at(path, bound))
    fmt = node.get("format")
    if fmt is not None and fmt not in STRING_FORMATS:
        return Problem(f"uses `format: {fmt}`, which structured outputs cannot enforce (supported: "
                       f"{', '.join(sorted(STRING_FORMATS))})", _at(path, "format"))
    for key, kind in (("minItems", "array"), ("maxItems", "array"), ("minProperties", "object"),
                      ("maxProperties", "object")):
        if key in node and not _is_kind(node, types, kind):
            return Problem(f"uses `{key}` without `type: {kind}`", _at(path, key))
    required = node.get("required")
    if required is not None:
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            return Problem("has a `required` that is not a list of property names", _at(path, "required"))
        declared = node.get("properties")
        props: dict[str, Any] = declared if isinstance(declared, dict) else {}
        missing = [r for r in required if r not in props]
        if missing:
            return Problem(f"requires `{missing[0]}`, which is not in `properties`", _at(path, "required"))
    return None


def _is_kind(node: dict[str, Any], types: set[str] | None, kind: str) -> bool:
    if types is not None:
        return kind in types
    if kind == "array":
        return "items" in node or "prefixItems" in node
    return "properties" in node or "additionalProperties" in node
