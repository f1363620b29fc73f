"""docs/engine.md's settings table and `/engine/stats` table against the code, and the engine and
benchmark pages as references: every engine flag and every environment variable the engine reads
is in the one table (and the table names nothing the code does not read), every key the local
engine's stats return is in the stats table, no page carries a development history, and every
section another file cites from these pages exists."""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
from pathlib import Path

from server.cli_flags import ENGINE_ENVIRONMENT, build_parser

ROOT = Path(__file__).resolve().parents[2]
ENGINE_MD = ROOT / "docs" / "engine.md"
DESIGN_MD = ROOT / "docs" / "engine-design.md"
BENCH_MD = ROOT / "docs" / "benchmarks.md"
ENV_NAME = re.compile(r"^(?:TOKENWIRE|OMP|GOMP)_[A-Z0-9_]+$")


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def _first_cells(section: str) -> list[str]:
    """The first cell of every row of the section's tables, past the header rows."""
    return [line.split("|")[1].strip() for line in section.splitlines()
            if line.startswith("| ") and not line.startswith(("| setting ", "| key "))]


def _table_names(section: str) -> set[str]:
    return {name for cell in _first_cells(section) for name in re.findall(r"`([^`]+)`", cell)}


def _sub(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub: argparse.ArgumentParser = action.choices[name]
    return sub


def _options(command: str) -> set[str]:
    """The long options of ``tokenwire serve`` or ``tokenwire launch render``."""
    parser = _sub(build_parser(), command)
    if command == "launch":
        parser = _sub(parser, "render")
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"}


def engine_flags() -> set[str]:
    """`serve`'s flags that `launch render` lacks (the local engine's), and every `--engine-*` flag."""
    serve = _options("serve")
    return (serve - _options("launch")) | {f for f in serve if f.startswith("--engine")}


def _engine_sources() -> list[Path]:
    return sorted((ROOT / "engine").rglob("*.py"))


def engine_environment() -> set[str]:
    """Every environment variable the engine reads: the names engine/ spells as string constants
    (TOKENWIRE_*, OMP_*, GOMP_*), the literal names it passes to ``environ.get``, and the engine
    variables `serve --help` lists."""
    found: set[str] = set()
    for path in _engine_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ENV_NAME.match(node.value):
                found.add(node.value)
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "environ"
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found.add(node.args[0].value)
    found |= set(re.findall(r"^\s+([A-Z][A-Z0-9_]+)\s", ENGINE_ENVIRONMENT, re.M))
    return found


def stats_keys() -> set[str]:
    """The string keys of the dicts the local engine's stats are made of (engine.py's ``stats``,
    the runner's ``thread_stats``, the thread plan's and the prefix cache's ``stats``)."""
    keys: set[str] = set()
    for name in ("engine.py", "runner.py", "threads.py", "prefix.py"):
        tree = ast.parse((ROOT / "engine" / "local" / name).read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name in ("stats", "thread_stats"):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Dict):
                        keys |= {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return keys


def test_the_scans_find_what_they_look_for() -> None:
    # the scans themselves: if the code moves, they must still see these
    assert {"--dtype", "--max-num-seqs", "--max-waiting", "--engine-url", "--tokens-only"} <= engine_flags()
    assert "--port" not in engine_flags() and "--api-key" not in engine_flags()
    assert {"TOKENWIRE_NUM_THREADS", "TOKENWIRE_NATIVE_SPIN_US", "OMP_WAIT_POLICY", "CC"} <= engine_environment()
    assert {"running", "linear_kernel", "prefix_cache_hits", "thread_plan", "logits_by_threads"} <= stats_keys()


def test_every_engine_flag_is_in_the_table_and_every_flag_there_exists() -> None:
    names = _table_names(_section(ENGINE_MD.read_text(), "Flags and environment variables"))
    documented = {n.split()[0] for n in names if n.startswith("--")}
    assert sorted(engine_flags() - documented) == []
    assert sorted(documented - _options("serve")) == []


def test_every_environment_variable_the_engine_reads_is_in_the_table() -> None:
    names = _table_names(_section(ENGINE_MD.read_text(), "Flags and environment variables"))
    documented = {n for n in names if re.fullmatch(r"[A-Z][A-Z0-9_]+", n)}
    assert sorted(engine_environment() - documented) == []
    cli = "\n".join(p.read_text() for p in sorted((ROOT / "server").glob("cli*.py")))  # the command line
    code = "\n".join(p.read_text() for p in _engine_sources()) + cli
    assert sorted(n for n in documented if not re.search(rf"\b{n}\b", code)) == []


def test_every_stats_key_is_in_the_stats_table_and_nothing_else() -> None:
    names = _table_names(_section(ENGINE_MD.read_text(), "`/engine/stats`"))
    assert sorted(stats_keys() - names) == []
    assert sorted(names - stats_keys()) == []


HISTORY = re.compile(r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|\d+(?:st|nd|rd|th)) "
                     r"pass(?:es)?\b|\b[Ii]ssues? \d+|\bissue-\d+|[†‡¶‖◊♦]|not kept", re.I)  # the old row markers


def test_the_pages_are_references_not_histories() -> None:
    for page in (ENGINE_MD, DESIGN_MD, BENCH_MD):
        found = [f"{page.name}:{n}: {m.group(0)}" for n, line in enumerate(page.read_text().splitlines(), 1)
                 for m in HISTORY.finditer(line)]
        assert found == []
    assert len(BENCH_MD.read_text().splitlines()) < 300


def _slug(title: str) -> str:
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _titles(page: Path) -> tuple[list[str], set[str]]:
    """A page's headings and bold leads (``- **Title.**``), backticks dropped; and their anchors."""
    text = page.read_text()
    heads = [h.replace("`", "").strip() for h in re.findall(r"^#{1,4} (.+)$", text, re.M)]
    leads = [b.replace("`", "").strip() for b in re.findall(r"^\s*- \*\*([^*]+?)[.:]?\*\*", text, re.M)]
    return heads + leads, {_slug(h) for h in heads}


# `docs/engine.md, "Exactness"`, `docs/engine.md "Closing a stream"`, `[engine.md](engine.md), "Images"`,
# `docs/engine-design.md, "Decode attention in bf16", "Linear layers" and "Torch threads"`
CITE = re.compile(r"(?<![\w-])(engine|engine-design|benchmarks)\.md(?:\]\((?:[\w./-]+\.md)?(#[\w-]+)?\))?(#[\w-]+)?"
                  r"(?:,? (?:[A-Z]\w*, )?((?:\"[^\"\n]{2,80}\"(?:,? (?:and )?)?)+))?")


def test_every_cited_section_of_these_pages_exists() -> None:
    pages = {"engine": ENGINE_MD, "engine-design": DESIGN_MD, "benchmarks": BENCH_MD}
    known = {name: _titles(path) for name, path in pages.items()}
    files = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.sh", "*.toml"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    missing = []
    for rel in files:
        path = ROOT / rel
        if not path.is_file():
            continue
        text = re.sub(r"\n\s*(?:#\s*)?", " ", path.read_text(errors="replace"))  # comments and lines joined
        for m in CITE.finditer(text):
            titles, anchors = known[m.group(1)]
            for anchor in (m.group(2), m.group(3)):
                if anchor and anchor[1:] not in anchors:
                    missing.append(f"{rel}: {m.group(1)}.md{anchor}")
            for title in re.findall(r"\"([^\"]+)\"", m.group(4) or ""):
                if not any(t == title or t.startswith(title) for t in titles):
                    missing.append(f"{rel}: {m.group(1)}.md \"{title}\"")
    assert missing == []
