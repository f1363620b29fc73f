"""The dependency directions between the packages (README.md, "Layout"), enforced by reading imports.

- ``session`` never imports asyncio / anyio / torch / ``server`` (it may use ``engine.protocol`` and
  ``engine.structured``, the wire types of the generate stage);
- ``engine`` never imports ``session``, ``server`` or ``client_sdk``; only ``engine/local`` imports torch;
- ``client_sdk`` imports neither torch, transformers, ``engine.local`` nor ``server``, not even
  transitively (checked in a subprocess);
- only the ``server/pipeline/`` package chains render and derender;
- no import cycle, ``if TYPE_CHECKING:`` imports included;
- importing the server for ``launch render`` never imports torch (checked in a subprocess);
- ``engine.local``'s torch-free modules, and the unit tests of them (the torch-free ring), import
  where torch cannot be imported (checked in a subprocess).
"""

from __future__ import annotations

import subprocess
import sys

from tests.project.import_graph import (
    ROOT,
    all_imports,
    cycles,
    direct_imports,
    graph,
    modules_of,
    project_files,
    resolve,
)


def _violations(package: str, forbidden: tuple[str, ...], *, allow: tuple[str, ...] = (),
                skip: tuple[str, ...] = ()) -> list[str]:
    out = []
    for path in modules_of(package):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(skip):
            continue
        for name in direct_imports(path):
            if name.startswith(allow):
                continue
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                out.append(f"{rel} imports {name}")
    return sorted(set(out))


def test_session_is_sans_io_and_torch_free() -> None:
    forbidden = ("asyncio", "anyio", "torch", "server", "client_sdk", "starlette", "uvicorn", "httpx",
                 "websockets", "socket", "threading", "engine")
    allowed = ("engine.protocol", "engine.structured", "engine.json_depth")  # pure data and checks
    assert _violations("session", forbidden, allow=allowed) == []


def test_engine_never_imports_session_server_or_client() -> None:
    assert _violations("engine", ("session", "server", "client_sdk")) == []


def test_only_engine_local_imports_torch() -> None:
    assert _violations("engine", ("torch", "transformers.modeling_utils"), skip=("engine/local/",)) == []
    assert _violations("session", ("torch",)) == []
    assert _violations("client_sdk", ("torch",)) == []


def test_client_sdk_needs_neither_torch_nor_transformers_nor_server() -> None:
    assert _violations("client_sdk", ("torch", "transformers", "engine.local", "server")) == []


def test_only_the_pipeline_package_chains_render_and_derender() -> None:
    chains = []
    for path in modules_of("server"):
        names = direct_imports(path)
        if any(n.startswith("session.render") for n in names) and any(
            n.startswith("session.derender") for n in names
        ):
            chains.append(path.relative_to(ROOT).as_posix())
    # server/services.py builds the renderer and the derender service (once, at start-up), chaining neither
    assert set(chains) - {"server/services.py"} == {"server/pipeline/prepare.py"}


def test_server_modules_only_import_torch_through_the_local_engine() -> None:
    assert _violations("server", ("torch",), skip=("server/assets/",)) == []


def test_the_render_server_imports_and_builds_without_torch() -> None:
    # `launch render` marks torch as absent before anything imports transformers; every module the
    # render server may load must then import cleanly (an `import torch` anywhere would fail here).
    code = (
        "import sys\n"
        "from server.cli import keep_torch_out\n"
        "keep_torch_out()\n"
        "import server.app, server.services, server.context, server.gating, server.runner, transformers\n"
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
                             "engine.local.model_files", "engine.local.prefix", "engine.local.step",
                             "engine.local.structured_closing", "engine.local.grammar_bound",
                             "engine.local.grammar_worker", "engine.outbox")
TORCH_FREE_TESTS = ("tests.engine.local.test_engine_scheduler", "tests.engine.local.test_engine_params",
                    "tests.engine.test_engine_outbox", "tests.engine.test_engine_stream")


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
    # Without torch: the package imports and leaves engine.local.engine alone until LocalEngine is
    # asked for, which then fails on torch; another name is an AttributeError.
    out = _without_torch("import engine.local as pkg\n"
                         "print('engine.local.engine' in sys.modules)\n"
                         "try:\n    pkg.NoSuchName\nexcept AttributeError as exc:\n    print(exc)\n"
                         "try:\n    pkg.LocalEngine\nexcept ImportError as exc:\n    print(exc)\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["False", "module 'engine.local' has no attribute 'NoSuchName'",
                                       "import of torch halted; None in sys.modules"]
    # With torch (this process): the name is the engine module's class.
    from engine.local import LocalEngine
    from engine.local.engine import LocalEngine as Direct

    assert LocalEngine is Direct


# --- the module graph: cycles, route imports, imports inside functions ------------------------------------

# Imports inside functions that server/ keeps, each for a reason: (file, imported module) → why. All
# are of the model stack (torch, transformers, tokenizers, gguf), which start-up, `launch render` and
# importing server.assets must not pay for.
LAZY_IMPORTS = {
    ("server/context.py", "transformers"): "loads the tokenizer; `launch render` marks torch absent first "
                                           "(server/cli.py keep_torch_out), which must run before transformers loads",
    ("server/context.py", "engine.local"): "the local engine: the only place the server imports torch",
    ("server/cli.py", "server.runner"): "the whole server (transformers; torch under `serve`), after keep_torch_out()",
    ("server/assets/models.py", "torch"): "builds a model asset: torch only while building",
    ("server/assets/models.py", "transformers"): "builds a model asset: transformers (torch) only while building",
    ("server/assets/tiny_vl.py", "torch"): "builds the tiny vision model: torch only while building",
    ("server/assets/tiny_vl.py", "transformers"): "builds the tiny vision model: transformers only while building",
    ("server/assets/tokenizers.py", "transformers"): "builds a tokenizer asset: transformers only while building",
    ("server/assets/tokenizers.py", "tokenizers"): "the Rust tokenizers library, only while building a tokenizer "
                                                   "asset: importing server.assets stays light (tests/server/assets/test_assets.py)",
    ("server/assets/models.py", "tokenizers"): "the Rust tokenizers library, only while building the default model",
    ("server/assets/tokenizers.py", "gguf"): "reads a GGUF vocabulary while building a tokenizer asset (gguf "
                                             "loads numpy: half a second, for `tokenwire --help` too)",
    ("server/assets/harmony.py", "transformers"): "builds the gpt-oss assets: transformers only while building",
    ("server/assets/harmony.py", "tokenizers"): "the Rust tokenizers library, only while building the gpt-oss "
                                                "tokenizer",
    ("server/assets/harmony.py", "torch"): "builds the tiny gpt-oss model: torch only while building",
}


def test_the_project_has_no_import_cycles() -> None:
    edges, where = graph()
    report = []
    for component in cycles(edges):
        members = set(component)
        lines = [f"  {where[(a, b)].path}:{where[(a, b)].line} {a} -> {b}"
                 + (" (inside a function)" if where[(a, b)].in_function else "")
                 + (" (under TYPE_CHECKING)" if where[(a, b)].type_checking else "")
                 for a in component for b in sorted(edges[a] & members)]
        report.append("cycle among " + ", ".join(component) + ":\n" + "\n".join(lines))
    assert report == [], "\n".join(report)


def test_the_graph_sees_imports_inside_functions_and_under_type_checking() -> None:
    # The checks here are only as good as the parser: it must find a function-level import, resolve a
    # relative one, and see one under TYPE_CHECKING (a cycle through it is still a cycle).
    src = ("from typing import TYPE_CHECKING\nfrom . import sibling\nif TYPE_CHECKING:\n    import typed.only\n"
           "def f():\n    import lazy.one\n    return lazy\n")
    found = {(i.target, i.in_function, i.type_checking)
             for i in all_imports(ROOT / "server" / "ws" / "probe.py", source=src)}
    assert ("server.ws.sibling", False, False) in found
    assert ("typed.only", False, True) in found
    assert ("lazy.one", True, False) in found
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    # the cycle of two modules where one imports the other only for its annotations
    a = list(all_imports(ROOT / "pkg" / "a.py", source="from pkg.b import B\n"))
    b = list(all_imports(ROOT / "pkg" / "b.py", source=(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n")))
    edges, where = graph({"pkg.a": a, "pkg.b": b}, ["pkg", "pkg.a", "pkg.b"])
    assert cycles(edges) == [["pkg.a", "pkg.b"]]
    assert where[("pkg.b", "pkg.a")].type_checking and not where[("pkg.a", "pkg.b")].type_checking


def test_only_the_app_imports_route_modules() -> None:
    modules = project_files()
    offenders = []
    for path in modules.values():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("server/routes/") or rel == "server/app.py":
            continue
        for imp in all_imports(path):
            target = resolve(imp.target, modules) or ""
            if target == "server.routes" or target.startswith("server.routes."):
                offenders.append(f"{rel}:{imp.line} imports {imp.target}")
    assert offenders == []


def test_route_modules_import_no_other_route_module() -> None:
    modules = project_files()
    offenders = []
    for module, path in modules.items():
        if not module.startswith("server.routes."):
            continue
        for imp in all_imports(path):
            target = resolve(imp.target, modules) or ""
            if target.startswith("server.routes") and target != module:
                offenders.append(f"{path.relative_to(ROOT).as_posix()}:{imp.line} imports {imp.target}")
    assert offenders == []


def test_server_imports_inside_functions_only_the_named_lazy_torch_imports() -> None:
    found = set()
    offenders = []
    for path in modules_of("server"):
        for imp in all_imports(path):
            if not imp.in_function or imp.type_checking:
                continue
            key = next(((imp.path, m) for m in (imp.target.split(".")[0], imp.target.rpartition(".")[0], imp.target)
                        if (imp.path, m) in LAZY_IMPORTS), None)
            if key is None:
                offenders.append(f"{imp.path}:{imp.line} imports {imp.target} inside a function")
            else:
                found.add(key)
    assert offenders == []
    assert set(LAZY_IMPORTS) - found == set(), "allow-list entries that match nothing: drop them"


def test_the_http_engine_client_uses_no_http_library() -> None:
    # engine/remote.py speaks HTTP/1.1 itself (asyncio protocols): one path, no httpx twin beside it
    assert _violations("engine", ("httpx", "httpcore", "aiohttp", "requests")) == []
