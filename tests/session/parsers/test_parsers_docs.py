"""docs/parsers.md's two name tables list exactly the registered parsers, each under vLLM 0.32's name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from session.parsers import REASONING_PARSERS, TOOL_PARSERS

DOCS = (Path(__file__).parents[3] / "docs" / "parsers.md").read_text(encoding="utf-8")


def _table_names(heading: str) -> list[str]:
    """First-column names of the table right under ``heading``'s first row."""
    start = DOCS.index(heading)
    rows = []
    for line in DOCS[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    names = []
    for row in rows:
        cell = row.split("|")[1]
        found = re.findall(r"`([a-z0-9_]+)`", cell)
        assert found, f"a row of the {heading!r} table names no parser: {row}"
        names.extend(found)
    return names


@pytest.mark.parametrize(("heading", "registry"), [("| `--tool-call-parser` |", TOOL_PARSERS),
                                                   ("| `--reasoning-parser` |", REASONING_PARSERS)])
def test_the_docs_tables_list_every_registered_name_once(heading: str, registry: dict[str, object]) -> None:
    names = _table_names(heading)
    assert len(names) == len(set(names)), "a name is listed twice"
    assert set(names) == set(registry)
