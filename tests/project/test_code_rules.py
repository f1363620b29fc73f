"""House-keeping rules of the code base, read from the source (no imports):

- one ``Kind`` (the pipeline kinds ``chat`` / ``completion`` / ``messages``), defined in
  ``session/client_frames.py`` and imported everywhere else; no other module reuses the name;
- module docstrings stay short (a summary and a pointer): the design text lives in docs/.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("session", "engine", "server", "client_sdk", "packaging")
MAX_DOCSTRING_LINES = 16  # the closing quotes' line included
# Modules whose design text has not moved to docs/ yet (another change is editing them): the list
# may only shrink.
LONG_DOCSTRINGS_PENDING: frozenset[str] = frozenset()


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def _kind_definitions(path: Path) -> list[int]:
    """Lines where ``path`` binds the module-level name ``Kind`` other than by importing it."""
    lines = []
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.ClassDef) and node.name == "Kind":
            lines.append(node.lineno)
        lines += [node.lineno for t in targets if isinstance(t, ast.Name) and t.id == "Kind"]
    return lines


def test_kind_is_defined_once_in_the_sans_io_layer() -> None:
    found = {p.relative_to(ROOT).as_posix(): lines for p in _modules() if (lines := _kind_definitions(p))}
    assert found == {"session/client_frames.py": found.get("session/client_frames.py", [])}
    assert len(found["session/client_frames.py"]) == 1


def test_module_docstrings_are_short_and_point_to_docs() -> None:
    long = {}
    for path in _modules():
        doc = ast.get_docstring(ast.parse(path.read_text(), filename=str(path)), clean=False)
        if doc and doc.count("\n") + 1 > MAX_DOCSTRING_LINES:
            long[path.relative_to(ROOT).as_posix()] = doc.count("\n") + 1
    assert sorted(set(long) - LONG_DOCSTRINGS_PENDING) == [], (
        f"module docstrings over {MAX_DOCSTRING_LINES} lines: keep a summary and a pointer, move the design "
        "text to the docs/ page that covers the module")
    assert sorted(p for p in LONG_DOCSTRINGS_PENDING if p not in long) == [], (
        "shortened: remove these from LONG_DOCSTRINGS_PENDING")
