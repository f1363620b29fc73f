"""docs/reliability.md's threat model says what the code does: every number of its bounds table is
read from the constant, default or flag default its row cites; the route groups of each tier come
from server/gating.py, the paths of each group from the app's route list, the paths without a key
from server/auth.py; every flag and environment variable the section names exists."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import math
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from server.app import WEBSOCKET_ROUTES, all_routes
from server.auth import is_public
from server.cli_flags import build_parser
from server.gating import decide
from server.settings import Mode

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
# code that can set a value: a call passing ``name=`` there overrides the default a row cites
CODE = sorted(p for d in ("server", "session", "engine") for p in (ROOT / d).rglob("*.py"))


def _section() -> str:
    start = DOC.index("\n## Threat model\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end if end != -1 else len(DOC)]


SECTION = _section()


def _table(header: str) -> list[list[str]]:
    """The rows (cells stripped) of the section's table whose header row starts with ``header``."""
    lines = SECTION[SECTION.index(header):].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    assert rows, f"the table under {header!r} is empty"
    return rows


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


BOUNDS = _table("| bound | number | code | flag | past it |")
UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "s": 1, "min": 60, "h": 3600}


def _number(cell: str) -> float:
    match = re.fullmatch(r"([0-9][0-9,]*(?:\.[0-9]+)?)(?: (\S+).*)?", cell)
    assert match, f"not a number with a unit: {cell!r}"
    return float(match[1].replace(",", "")) * UNITS.get(match[2] or "", 1)


def _module(path: str) -> ModuleType:
    assert (ROOT / path).is_file(), path
    return importlib.import_module(path.removesuffix(".py").replace("/", "."))


def _resolve(module: ModuleType, dotted: str) -> Any:
    obj: Any = module
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _value(module: ModuleType, ref: str) -> Any:
    """``NAME``, ``Class.field`` (a dataclass field's default) or ``callable(param)`` (that parameter's
    default), looked up in ``module``'s namespace (``uvicorn.Config(...)``: the module it imports)."""
    call = re.fullmatch(r"([\w.]+)\((\w+)\)", ref)
    if call:
        return inspect.signature(_resolve(module, call[1])).parameters[call[2]].default
    owner, _, name = ref.rpartition(".")
    if owner:
        cls = _resolve(module, owner)
        if dataclasses.is_dataclass(cls):
            field = {f.name: f for f in dataclasses.fields(cls)}[name]
            assert field.default is not dataclasses.MISSING, ref
            return field.default
        return getattr(cls, name)
    return getattr(module, name)


def _subparsers() -> dict[str, Any]:
    """The ``serve`` and ``launch render`` parsers."""
    def choices(parser: Any) -> dict[str, Any]:
        action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        return dict(action.choices)

    top = choices(build_parser())
    return {"serve": top["serve"], "launch render": choices(top["launch"])["render"]}


PARSERS = _subparsers()


def _flag_defaults(flag: str) -> dict[str, Any]:
    out = {}
    for name, parser in PARSERS.items():
        for action in parser._actions:
            if flag in action.option_strings:
                out[name] = action.default
    return out


def _row_id(row: list[str]) -> str:
    return row[0][:60]


def test_the_bounds_table_has_rows_and_each_cites_code() -> None:
    assert len(BOUNDS) >= 40
    for row in BOUNDS:
        assert len(row) == 5, row
        ticked = _ticked(row[2])
        assert len(ticked) == 2 and ticked[0].endswith(".py"), f"cite `path.py` `NAME`: {row}"


@pytest.mark.parametrize("row", BOUNDS, ids=_row_id)
def test_each_number_is_what_the_cited_code_says(row: list[str]) -> None:
    path, ref = _ticked(row[2])
    value = _value(_module(path), ref)
    if ref.endswith("_MB"):  # a size the code keeps in MiB
        value *= 1024**2
    assert isinstance(value, int | float) and not isinstance(value, bool), (ref, value)
    assert math.isclose(float(value), _number(row[1])), f"{row[0]}: the doc says {row[1]}, {path} {ref} = {value}"


@pytest.mark.parametrize("row", BOUNDS, ids=_row_id)
def test_a_flag_defaults_to_the_number_and_nothing_else_overrides_a_cited_default(row: list[str]) -> None:
    path, ref = _ticked(row[2])
    number = _number(row[1])
    flags = [t for t in _ticked(row[3]) if t.startswith("--")]
    envs = [t for t in _ticked(row[3]) if t.startswith("TOKENWIRE_")]
    if ref.startswith("Settings."):
        # a server setting: the CLI's default (every command that has the flag) is the number
        assert len(flags) == 1, f"{row[0]}: name the flag that sets {ref}"
        defaults = _flag_defaults(flags[0])
        assert "serve" in defaults, flags[0]
        assert all(math.isclose(float(d), number) for d in defaults.values()), (flags[0], defaults)
        return
    for flag in flags:  # a flag that changes it without being its default (--max-model-len)
        assert _flag_defaults(flag), f"{flag} is not a flag of serve or launch render"
    for env in envs:
        assert env in (ROOT / path).read_text(encoding="utf-8"), f"{path} does not read {env}"
    call = re.fullmatch(r"([\w.]+)\((\w+)\)", ref)
    if call:
        callee, name = call[1], call[2]
    elif "." in ref:
        callee, _, name = ref.rpartition(".")
    else:
        return  # a module constant: the code uses it by name
    # a parameter's or a dataclass field's default: no call in the code passes another value
    params = list(inspect.signature(_resolve(_module(path), callee)).parameters)
    assert _overrides(callee, name, params.index(name)) == [], \
        f"{ref}: these calls pass another {name}, so the default the doc cites may not be what runs"


def _overrides(callee: str, name: str, position: int) -> list[str]:
    """``file:line`` of every call of ``callee`` in the code that passes ``name`` (by keyword or position)."""
    names = {callee, callee.rpartition(".")[2]}  # uvicorn.Config; listen, not outbox.listen
    found = []
    for path in CODE:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            if ast.unparse(node.func) in names and (any(k.arg == name for k in node.keywords) or len(node.args) > position):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


TIERS = _table("| tier | started as | route groups")


def _tier_gating(command: str) -> frozenset[str]:
    mode = Mode.RENDER if command.startswith("tokenwire launch render") else (
        Mode.TOKENS_ONLY if "--tokens-only" in command else Mode.SERVE)
    gating = decide(mode, {}, enable_scale_out="--enable-scale-out" in command,
                    has_engine_url="--engine-url" in command)
    return frozenset(g.value for g in gating.groups)


@pytest.mark.parametrize("row", TIERS, ids=lambda row: row[1])
def test_each_tier_exposes_the_route_groups_the_doc_lists(row: list[str]) -> None:
    command = _ticked(row[1])[0]
    assert set(_ticked(row[2])) == _tier_gating(command)


def test_the_tiers_cover_every_mode() -> None:
    commands = [_ticked(row[1])[0] for row in TIERS]
    assert {c.split(" --")[0] for c in commands} == {"tokenwire serve", "tokenwire launch render"}
    assert any("--tokens-only" in c for c in commands)
    assert any("--enable-scale-out" in c for c in commands) and any("--engine-url" in c for c in commands)


GROUPS = _table("| group | paths | without a key |")


def test_each_group_holds_the_paths_the_doc_lists_and_the_public_ones_need_no_key() -> None:
    registered: dict[str, set[str]] = {}
    for route in all_routes():
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)  # a path parameter, without its convertor
        path = "/static/*" if path.startswith("/static/") else path
        registered.setdefault(route.group.value, set()).add(path)
    for path, _, group in WEBSOCKET_ROUTES:
        registered.setdefault(group.value, set()).add(path)
    listed = {_ticked(row[0])[0]: set(_ticked(row[1])) for row in GROUPS}
    assert listed == registered, "the app registers other paths: update the group table of docs/reliability.md, Threat model"
    for row in GROUPS:
        public = {p for p in _ticked(row[1]) if is_public(p.replace("*", "app.js"))}
        assert set(_ticked(row[2])) == public, row[0]


def test_every_flag_and_environment_variable_the_section_names_exists() -> None:
    options = {o for parser in PARSERS.values() for a in parser._actions for o in a.option_strings}
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*[a-z])", SECTION))
    assert named, "the section names no flag"
    assert named - options == set()
    sources = "".join(p.read_text(encoding="utf-8") for p in CODE)
    envs = set(re.findall(r"\bTOKENWIRE_[A-Z_]+\b", SECTION))
    assert envs and {e for e in envs if f'"{e}"' not in sources} == set()
