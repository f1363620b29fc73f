"""Harmony's TypeScript-like tool declarations: the ``# Tools`` section of the developer message
and oss-harmony's ``json_schema_to_typescript``, with the library's JSON display of defaults.

The full rules: docs/render.md, "gpt-oss (harmony)".
"""

from __future__ import annotations

import json
import math
from typing import Any

from session.protocol.openai import Tool

__all__ = ["json_display", "json_float", "schema_to_typescript", "tools_section"]


def _lines(text: str) -> list[str]:
    """Rust's ``str::lines``: no last empty line, a ``\\r`` before each ``\\n`` dropped."""
    if not text:
        return []
    parts = text.split("\n")
    if text.endswith("\n"):
        parts.pop()
    return [p[:-1] if p.endswith("\r") else p for p in parts]


def tools_section(tools: list[Tool]) -> str:
    """The ``# Tools`` section with the ``functions`` namespace (no namespace description)."""
    body = ["## functions\n", "namespace functions {\n"]
    for tool in tools:
        fn = tool.function
        body += [f"// {line}" for line in _lines(fn.description or "")]
        if fn.parameters is not None:
            body.append(f"type {fn.name} = (_: {schema_to_typescript(fn.parameters, '')}) => any;\n")
        else:
            body.append(f"type {fn.name} = () => any;\n")
    body.append("} // namespace functions")
    return "\n\n".join(["# Tools", "\n".join(body)])


def _get(schema: Any, key: str) -> Any:
    return schema.get(key) if isinstance(schema, dict) else None


def _is_enum(schema: Any) -> bool:
    values = _get(schema, "enum")
    return isinstance(values, list) and bool(values)


def _nullable(schema: Any, rendered: str) -> str:
    if _get(schema, "nullable") is True and "null" not in rendered:
        return f"{rendered} | null"
    return rendered


def _default_comment(schema: Any, default: Any, *, quote_enum_strings: bool) -> str:
    """``default: …``: a string default raw in quotes, an enum's string raw (or as JSON where the
    library displays the value), anything else as compact JSON."""
    if isinstance(default, str):
        if not _is_enum(schema):
            return f'default: "{default}"'
        if not quote_enum_strings:
            return f"default: {default}"
    return f"default: {json_display(default)}"


def schema_to_typescript(schema: Any, indent: str) -> str:
    """oss-harmony's ``json_schema_to_typescript``: a tool's JSON schema as the TypeScript-like
    type the model was trained on (descriptions, defaults and examples as ``//`` comments)."""
    one_of = _get(schema, "oneOf")
    if isinstance(one_of, list):
        out = ""
        for variant in one_of:
            out += f"\n{indent} | "
            out += _nullable(variant, schema_to_typescript(variant, f"{indent}   "))
            trailing: list[str] = []
            desc = _get(variant, "description")
            if isinstance(desc, str):
                trailing.append(desc)
            if isinstance(variant, dict) and "default" in variant:
                trailing.append(_default_comment(variant, variant["default"], quote_enum_strings=True))
            if trailing:
                out += f" // {' '.join(trailing)}"
        return out
    kind = _get(schema, "type")
    if isinstance(kind, list):
        names = ["number" if t == "integer" else t for t in kind if isinstance(t, str)]
        if names:
            return " | ".join(names)
    if isinstance(kind, str):
        if kind == "object":
            return _object(schema, indent)
        if kind == "string":
            values = _get(schema, "enum")
            if isinstance(values, list):
                quoted = [f'"{v}"' for v in values if isinstance(v, str)]
                if quoted:
                    return " | ".join(quoted)
            return "string"
        if kind in ("number", "integer"):
            return "number"
        if kind == "boolean":
            return "boolean"
        if kind == "array":
            if isinstance(schema, dict) and "items" in schema:
                return f"{schema_to_typescript(schema['items'], indent)}[]"
            return "Array<any>"
        return "any"
    return "any"


def _object(schema: dict[str, Any], indent: str) -> str:
    out = ""
    desc = schema.get("description")
    if isinstance(desc, str):
        out += f"{indent}// {desc}\n"
    out += "{\n"
    props = schema.get("properties")
    if isinstance(props, dict):
        req = schema.get("required")
        required = {r for r in req if isinstance(r, str)} if isinstance(req, list) else set()
        for key, val in props.items():
            mark = "" if key in required else "?"
            title = _get(val, "title")
            if isinstance(title, str):
                out += f"{indent}// {title}\n{indent}//\n"
            one_of = _get(val, "oneOf")
            if one_of is None:
                d = _get(val, "description")
                if isinstance(d, str):
                    out += f"{indent}// {d}\n"
            examples = _get(val, "examples")
            if isinstance(examples, list) and examples:
                out += f"{indent}// Examples:\n"
                for ex in examples:
                    if isinstance(ex, str):
                        out += f'{indent}// - "{ex}"\n'
            if isinstance(one_of, list):
                out += _one_of_property(val, one_of, key, mark, indent)
                continue
            out += f"{indent}{key}{mark}: "
            out += _nullable(val, schema_to_typescript(val, f"{indent}    "))
            out += ","
            if one_of is None and isinstance(val, dict) and "default" in val:
                default = val["default"]
                if isinstance(default, str):
                    out += f' // default: "{default}"' if not _is_enum(val) else f" // default: {default}"
                else:
                    out += f" // default: {json_display(default)}"
            out += "\n"
    out += f"{indent}}}"
    return out


def _one_of_property(val: dict[str, Any], one_of: list[Any], key: str, mark: str, indent: str) -> str:
    out = ""
    d = val.get("description")
    prop_desc = d if isinstance(d, str) else None
    skip = False
    if prop_desc is not None and one_of:
        first = _get(one_of[0], "description")
        skip = isinstance(first, str) and first == prop_desc
    above = False
    if not skip and prop_desc is not None:
        out += f"{indent}// {prop_desc}\n"
        above = True
    if "default" in val:
        default = val["default"]
        if isinstance(default, str) and not _is_enum(val):
            out += f'{indent}// default: "{default}"\n'
        elif isinstance(default, str):
            out += f"{indent}// default: {default}\n"
        else:
            out += f"{indent}// default: {json_display(default)}\n"
    out += f"{indent}{key}{mark}:\n"
    for i, variant in enumerate(one_of):
        out += f"{indent} | "
        out += _nullable(variant, schema_to_typescript(variant, f"{indent}   "))
        trailing: list[str] = []
        vd = _get(variant, "description")
        if not (i == 0 and above) and isinstance(vd, str) and vd != prop_desc:
            trailing.append(vd)
        if isinstance(variant, dict) and "default" in variant:
            trailing.append(_default_comment(variant, variant["default"], quote_enum_strings=False))
        if trailing:
            out += f" // {' '.join(trailing)}"
        out += "\n"
    out += f"{indent},\n"
    return out


def json_display(value: Any) -> str:
    """How the library prints a JSON value in a comment: compact JSON, UTF-8 kept, and numbers
    with the text pydantic's JSON gave them on the way to the library (:func:`json_float`)."""
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, list):
        return "[" + ",".join(json_display(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:{json_display(v)}"
                              for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def json_float(x: float) -> str:
    """pydantic-core's JSON float (ryu's shortest digits): a decimal when the point falls within
    16 digits before it or 4 zeros after, else ``De+N`` / ``De-N``."""
    if not math.isfinite(x):
        return "null"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    mantissa, _, exp = repr(abs(x)).partition("e")  # Python's repr: the same shortest digits
    whole, _, frac = mantissa.partition(".")
    raw = whole + frac
    digits = raw.lstrip("0")
    point = len(whole) - (len(raw) - len(digits)) + (int(exp) if exp else 0)  # x = 0.DIGITS * 10**point
    digits = digits.rstrip("0") or "0"
    n = len(digits)
    if n <= point <= 16:
        return f"{sign}{digits}{'0' * (point - n)}.0"
    if 0 < point <= 16:
        return f"{sign}{digits[:point]}.{digits[point:]}"
    if -5 < point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    body = digits if n == 1 else f"{digits[0]}.{digits[1:]}"
    e = point - 1
    return f"{sign}{body}e{'+' if e > 0 else '-'}{abs(e)}"
