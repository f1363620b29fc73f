"""Code and docs cite only files in this repository (docs/ holds what they need: docs/assets.md,
docs/vllm-baseline.md), never notes kept outside it, and every repository path a doc names exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the names of notes kept outside the repository, spelled so that this file does not cite them itself
_DESIGN, _SHARED = "DESIGN" + r"\.md", r"\.\./" + "shared"
OUTSIDE = re.compile(rf"{_DESIGN}|reference/assets\.md|{_SHARED}|" + "shared" + "/reference")
# A path into the repository as docs cite them: tests/…py, docs/…md, server/…py, and the like
# (bench/results/ holds a benchmark run's output, which is not committed).
CITED = re.compile(r"(?<![\w/.])((?:tests|docs|server|session|engine|client_sdk|bench|scripts|packaging)/[\w./-]+"
                   r"\.(?:py|md|sh|json|js|html|css|toml))\b")


def tracked(*suffixes: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / p for p in out.splitlines() if p.endswith(suffixes) and (ROOT / p).is_file()]


def test_nothing_cites_files_kept_outside_the_repository() -> None:
    me = Path(__file__).resolve()
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in tracked(".py", ".md", ".sh", ".js", ".toml", ".html")
             if p != me for m in OUTSIDE.finditer(p.read_text(errors="replace"))]
    assert found == []


def test_every_repository_path_the_docs_cite_exists() -> None:
    missing = [f"{doc.relative_to(ROOT)}: {m.group(1)}" for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
               for m in CITED.finditer(doc.read_text())
               if not m.group(1).startswith("bench/results/") and not (ROOT / m.group(1)).exists()]
    assert missing == []
