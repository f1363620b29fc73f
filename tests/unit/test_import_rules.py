"""The dependency directions between the packages (README.md, "Layout"), enforced by reading imports.

- ``session`` never imports asyncio / anyio / torch / ``server`` (it may use ``engine.protocol`` and
  ``engine.structured``, the wire types of the generate stage);
- ``engine`` never imports ``session``, ``server`` or ``client_sdk``; only ``engine/local`` imports torch;
- ``client_sdk`` imports neither torch, transformers, ``engine.local`` nor ``server``, not even
  transitively (checked in a subprocess);
- only ``server/pipeline.py`` chains render and derender;
- importing the server for ``launch render`` never imports torch (checked in a subprocess);
- ``engine.local``'s torch-free modules, and the unit tests of them (the torch-free ring), import
  where torch cannot be imported (checked in a subprocess).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules(package: str) -> Iterator[Path]:
    yield from sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> set[str]:
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


def _violations(package: str, forbidden: tuple[str, ...], *, allow: tuple[str, ...] = (),
                skip: tuple[str, ...] = ()) -> list[str]:
    out = []
    for path in _modules(package):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(skip):
            continue
        for name in _imports(path):
            if name.startswith(allow):
                continue
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                out.append(f"{rel} imports {name}")
    return sorted(set(out))


def test_session_is_sans_io_and_torch_free() -> None:
    forbidden = ("asyncio", "anyio", "torch", "server", "client_sdk", "starlette", "uvicorn", "httpx",
                 "websockets", "socket", "threading", "engine")
    assert _violations("session", forbidden, allow=("engine.protocol", "engine.structured")) == []


def test_engine_never_imports_session_server_or_client() -> None:
    assert _violations("engine", ("session", "server", "client_sdk")) == []


def test_only_engine_local_imports_torch() -> None:
    assert _violations("engine", ("torch", "transformers.modeling_utils"), skip=("engine/local/",)) == []
    assert _violations("session", ("torch",)) == []
    assert _violations("client_sdk", ("torch",)) == []


def test_client_sdk_needs_neither_torch_nor_transformers_nor_server() -> None:
    assert _violations("client_sdk", ("torch", "transformers", "engine.local", "server")) == []


def test_only_the_pipeline_module_chains_render_and_derender() -> None:
    chains = []
    for path in _modules("server"):
        names = _imports(path)
        if any(n.startswith("session.render") for n in names) and any(
            n.startswith("session.derender") for n in names
        ):
            chains.append(path.relative_to(ROOT).as_posix())
    assert set(chains) <= {"server/pipeline.py"}


def test_server_modules_only_import_torch_through_the_local_engine() -> None:
    assert _violations("server", ("torch",), skip=("server/assets/",)) == []


def test_the_render_server_imports_and_builds_without_torch() -> None:
    # `launch render` marks torch as absent before anything imports transformers; every module the
    # render server may load must then import cleanly (an `import torch` anywhere would fail here).
    code = (
        "import sys, importlib\n"
        "from server.cli import keep_torch_out\n"
        "keep_torch_out()\n"
        "import server.app as app\n"
        "for name in app.ROUTE_MODULES + app.WEBSOCKET_MODULES:\n"
        "    importlib.import_module(name)\n"
        "import server.context, server.gating, server.runner, transformers\n"
        "from transformers import AutoTokenizer\n"
        "assert sys.modules['torch'] is None\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_cli_module_alone_does_not_import_transformers_or_torch() -> None:
    code = "import sys, server.cli; print(any(m in sys.modules for m in ('torch', 'transformers')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_importing_client_sdk_loads_neither_torch_nor_transformers() -> None:
    # Transitively too: the session modules the client uses (frames, protocol models, settings)
    # must stay free of both.
    code = ("import sys, client_sdk, client_sdk.sync, client_sdk.http_fallback, client_sdk.connection\n"
            "print(sorted(m for m in ('torch', 'transformers', 'tokenizers', 'engine.local') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# engine/local modules that need no torch (engine.local.__init__ loads LocalEngine lazily), and the
# unit test modules that exercise them: both must import where torch cannot be imported.
TORCH_FREE_ENGINE_MODULES = ("engine.local", "engine.local.scheduler", "engine.local.params",
                             "engine.local.prefix", "engine.local.step", "engine.local.structured_closing",
                             "engine.local.grammar_bound", "engine.local.grammar_worker", "engine.outbox")
TORCH_FREE_TESTS = ("tests.unit.test_engine_scheduler", "tests.unit.test_engine_params",
                    "tests.unit.test_engine_outbox", "tests.unit.test_engine_stream")


def _without_torch(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where ``import torch`` raises ImportError."""
    prelude = "import sys\nsys.modules['torch'] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_the_torch_free_engine_modules_and_their_unit_tests_import_without_torch() -> None:
    names = TORCH_FREE_ENGINE_MODULES + TORCH_FREE_TESTS
    out = _without_torch(f"import importlib\nfor name in {names!r}:\n    importlib.import_module(name)\n"
                         "print(sys.modules['torch'] is None)\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_local_engine_is_loaded_on_first_access_and_other_names_are_attribute_errors() -> None:
    code = ("import engine.local as pkg\n"
            "before = 'torch' in sys.modules or 'engine.local.engine' in sys.modules\n"
            "from engine.local import LocalEngine\n"
            "from engine.local.engine import LocalEngine as Direct\n"
            "try:\n    pkg.NoSuchName\nexcept AttributeError as exc:\n    missing = str(exc)\n"
            "print(before, LocalEngine is Direct, missing)\n")
    out = subprocess.run([sys.executable, "-c", "import sys\n" + code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False True module 'engine.local' has no attribute 'NoSuchName'"
