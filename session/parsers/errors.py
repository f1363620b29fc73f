"""Errors of the parser package.

::

    ValueError
    ├── UnknownParser       a ``--tool-call-parser`` / ``--reasoning-parser`` name that does not
    │                       exist; the message lists the valid names (a startup error)
    └── MalformedSnapshot   a parser snapshot this parser cannot continue from (another parser's,
                            or fields missing / of the wrong type); the derenderer reports it as a
                            bad ``stream_state``

Parsing itself never raises: malformed model output degrades to content (see docs/parsers.md).
"""

from __future__ import annotations


class UnknownParser(ValueError):
    def __init__(self, kind: str, name: str, valid: list[str]) -> None:
        super().__init__(f"unknown {kind} parser {name!r}; valid names: {', '.join(valid)}")
        self.kind = kind
        self.name = name
        self.valid = valid


class MalformedSnapshot(ValueError):
    """A snapshot that this parser cannot continue from."""
