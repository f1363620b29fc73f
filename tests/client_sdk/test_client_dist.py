"""The client-only distribution's one list of modules (``packaging/client/client_backend.py``) is
complete and exact: it is what ``client_sdk`` imports, transitively, read from the sources; none of
those modules imports torch, transformers, tokenizers, jinja2 or the server; and its requirements
are exactly the third-party packages they import. (Building and installing the wheel into a fresh
environment is ``tests/e2e/test_client_dist.py``.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tests.project.import_graph import ROOT, direct_imports

FIRST_PARTY = ("client_sdk", "session", "engine", "server")
HEAVY = ("torch", "transformers", "tokenizers", "jinja2", "server", "engine.local")
# Import names of packages whose distribution is named otherwise (pydantic pins its core exactly).
DIST_OF_IMPORT = {"pydantic_core": "pydantic"}


def backend() -> ModuleType:
    spec = importlib.util.spec_from_file_location("client_backend", ROOT / "packaging/client/client_backend.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def first_party_module(name: str) -> str | None:
    """The module an imported name lives in (``session.client_frames.Chat`` → ``session.client_frames``)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        candidate = ".".join(parts[:k])
        if module_file(candidate) is not None:
            return candidate
    return None


def client_closure() -> set[str]:
    """Every first-party module importing ``client_sdk`` (all of it) can load, parents included."""
    todo = [".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            for p in (ROOT / "client_sdk").rglob("*.py")]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:k]) for k in range(1, len(parts))]
        path = module_file(name)
        assert path is not None, name
        for imported in direct_imports(path):
            if imported.split(".")[0] in FIRST_PARTY:
                module = first_party_module(imported)
                assert module is not None, f"{path.relative_to(ROOT)} imports {imported}, which does not exist"
                todo.append(module)
    return seen


def test_the_module_list_is_exactly_what_client_sdk_imports_transitively() -> None:
    closure = client_closure()
    listed = set(backend().MODULES)
    outside = {m for m in closure if not m.startswith("client_sdk")}
    assert outside - listed == set(), "client_sdk imports modules the client distribution lacks"
    assert listed - outside == set(), "the client distribution lists modules client_sdk does not import"


def test_none_of_the_distributed_modules_imports_the_heavy_packages_or_the_server() -> None:
    bad = []
    for rel in backend().files():
        if rel.endswith(".py"):
            for name in direct_imports(ROOT / rel):
                if any(name == h or name.startswith(h + ".") for h in HEAVY):
                    bad.append(f"{rel} imports {name}")
    assert bad == []


def test_the_requirements_are_exactly_the_third_party_packages_the_modules_import() -> None:
    b = backend()
    used: set[str] = set()
    for rel in b.files():
        if rel.endswith(".py"):
            for name in direct_imports(ROOT / rel):
                top = name.split(".")[0]
                if top and top not in sys.stdlib_module_names and top not in FIRST_PARTY and top != "__future__":
                    used.add(DIST_OF_IMPORT.get(top, top))
    assert used == set(b.REQUIREMENTS)
    # with the repository's version bounds, one line each
    assert [r.split(">")[0].split("=")[0] for r in b.requirements()] == list(b.REQUIREMENTS)


def test_the_wheel_holds_the_whole_client_package_with_its_web_assets() -> None:
    held = set(backend().files())
    client = {p.relative_to(ROOT).as_posix() for p in (ROOT / "client_sdk").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts}
    assert client <= held
    assert "client_sdk/web/tokenwire.js" in held
    assert not any(p.startswith(("server/", "session/render/", "session/derender/", "engine/local/")) for p in held)
