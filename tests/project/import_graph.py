"""The project's module graph, read from its sources (``import`` statements, those inside
functions and under ``if TYPE_CHECKING:`` included): what tests/project/test_import_rules.py and
tests/project/test_private_names.py check."""

from __future__ import annotations

import ast
import sys
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("server", "session", "engine", "client_sdk", "bench")


def modules_of(package: str) -> Iterator[Path]:
    yield from sorted((ROOT / package).rglob("*.py"))



def direct_imports(path: Path) -> set[str]:
    """The dotted names a file imports anywhere in it (modules and ``module.attribute``), relative
    imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    pkg_parts = path.relative_to(ROOT).with_suffix("").parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(pkg_parts[: len(pkg_parts) - node.level + 1])
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            names.add(mod)
            names.update(f"{mod}.{alias.name}" for alias in node.names)
    return names


@dataclass(frozen=True, slots=True)
class Import:
    importer: str  # dotted module name
    path: str  # its file, relative to ROOT
    target: str  # the dotted name imported (a module, or module.attribute)
    line: int
    in_function: bool
    type_checking: bool
    from_name: str | None = None  # ``from X import from_name``: the name imported (None: ``import X``)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_files() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in modules_of(pkg)}


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def all_imports(path: Path, source: str | None = None) -> Iterator[Import]:
    module = module_name(path)
    is_pkg = path.name == "__init__.py"
    rel = path.relative_to(ROOT).as_posix()
    package = module if is_pkg else module.rpartition(".")[0]

    def visit(node: ast.AST, in_function: bool, type_checking: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(module, rel, alias.name, child.lineno, in_function, type_checking)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - child.level + 1]
                    source = ".".join([*base, child.module] if child.module else base)
                else:
                    source = child.module or ""
                for alias in child.names:
                    yield Import(module, rel, f"{source}.{alias.name}", child.lineno, in_function, type_checking,
                                  alias.name)
            elif isinstance(child, ast.If) and is_type_checking(child.test):
                for stmt in child.body:
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), in_function, True)
                for stmt in child.orelse:
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), in_function, type_checking)
            else:
                nested = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                yield from visit(child, in_function or nested, type_checking)

    text = path.read_text() if source is None else source
    yield from visit(ast.parse(text, filename=rel), False, False)


def resolve(target: str, modules: Collection[str]) -> str | None:
    """The project module an imported name loads: the longest module prefix of ``target``
    (``from a.b import c`` is the module ``a.b.c`` when it is one, else ``a.b``)."""
    parts = target.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in modules:
            return name
    return None


def graph(imports: dict[str, list[Import]] | None = None, modules: Iterable[str] | None = None
           ) -> tuple[dict[str, set[str]], dict[tuple[str, str], Import]]:
    """Module → the project modules its imports load: each named module, and the parent packages
    importing it runs first (except the importer's own, which are already running; a module that
    names its own package depends on it). ``if TYPE_CHECKING:`` imports count too: they do not run,
    but a cycle through them is still two modules that each need the other. ``imports`` and
    ``modules`` default to the project's own (the self-test passes made-up ones)."""
    if imports is None:
        imports = {m: list(all_imports(p)) for m, p in project_files().items()}
    known = set(imports if modules is None else modules)
    edges: dict[str, set[str]] = {m: set() for m in known}
    where: dict[tuple[str, str], Import] = {}
    for module, found in imports.items():
        own_parents = {".".join(module.split(".")[:n]) for n in range(1, module.count(".") + 1)}
        for imp in found:
            target = resolve(imp.target, known)
            if target is None:
                continue
            parts = target.split(".")
            implied = [".".join(parts[:n]) for n in range(1, len(parts))]  # run first, unless already running
            for name in [n for n in implied if n not in own_parents] + [target]:
                if name != module and name in known:
                    edges[module].add(name)
                    # a runtime import names the edge where there is one
                    if (module, name) not in where or where[(module, name)].type_checking:
                        where[(module, name)] = imp
    return edges, where


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    limit = sys.getrecursionlimit()  # restored: tests that run later depend on the default (deep JSON)
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(edges):
            if v not in index:
                strong(v)
    finally:
        sys.setrecursionlimit(limit)
    return out
