"""How deep a request's JSON may nest: :data:`MAX_JSON_DEPTH` levels, checked where a body or a
frame is parsed and where a JSON string inside one is (a tool call's arguments, a ``json`` schema).

orjson parses up to 1,024 levels but serializes at most 255, and Python's ``json`` (templates'
``tojson``) recurses once per level: a body nested past 255 levels would pass the parser and fail
wherever a part of it is serialized again (a state's context digest, the link to a remote engine,
the grammar worker). Every such place wraps the request's parts in a few levels at most, so a
bound of 128 keeps all of them far from both limits (docs/reliability.md, "Limits and abuse").
"""

from __future__ import annotations

from typing import Any

MAX_JSON_DEPTH = 128
SHOWN = 8  # path components a message names before "…"


def too_deep(value: Any, limit: int = MAX_JSON_DEPTH, *, raw: bytes | str | None = None) -> list[str | int] | None:
    """The path to the first array or object of ``value`` that nests past ``limit`` levels (the
    top-level value is level 1), else None. ``raw``, the text ``value`` was parsed from, makes the
    common case free: fewer brackets than ``limit`` cannot nest deeper."""
    if raw is not None:
        opens = raw.count(b"{") + raw.count(b"[") if isinstance(raw, bytes) else raw.count("{") + raw.count("[")
        if opens <= limit:
            return None
    if not isinstance(value, dict | list):
        return None
    return _walk(value, limit - 1)


def field_name(path: list[str | int], prefix: str = "") -> str:
    """``path`` as a field name (``tools[0].function.parameters.properties…``), cut after a few
    components; ``prefix``: the field ``path`` starts in."""
    text = prefix
    for k, part in enumerate(path):
        if k == SHOWN:
            return text + "…"
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def too_deep_message(field: str, limit: int = MAX_JSON_DEPTH) -> str:
    return (f"{field} nests deeper than {limit} levels of JSON arrays and objects; "
            f"flatten it to at most {limit} levels.")


_CONTAINERS = frozenset((dict, list))


def _walk(node: dict[str, Any] | list[Any], room: int) -> list[str | int] | None:
    """Recursion to at most ``limit`` frames; a list of scalars (token ids) is passed over at C
    speed. Parsed JSON holds plain ``dict`` and ``list`` only."""
    items = node.values() if isinstance(node, dict) else node
    if _CONTAINERS.isdisjoint(map(type, items)):
        return None
    pairs = node.items() if isinstance(node, dict) else enumerate(node)
    for key, child in pairs:
        if type(child) in _CONTAINERS:
            if room == 0:
                return [key]
            found = _walk(child, room - 1)
            if found is not None:
                return [key, *found]
    return None
