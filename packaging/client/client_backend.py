"""PEP 517 build backend of ``tokenwire-client``: the Python client SDK alone, without the server.

Built from the repository's own files: ``client_sdk`` whole and exactly the ``session`` / ``engine``
modules it imports (:data:`MODULES`, checked by ``tests/client_sdk/test_client_dist.py``), requirements
and version read from ``pyproject.toml``, a reproducible wheel with no build dependencies. How and
why: docs/client.md, "The client-only distribution".
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import tarfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

NAME = "tokenwire-client"
SUMMARY = "Python client of tokenwire (WebSocket sessions with HTTP fallback), without the server."
PACKAGES = ("client_sdk",)  # included whole: every module and the web/ assets
# The modules of the server's packages that client_sdk imports (transitively), parents included.
MODULES = (
    "engine",
    "engine.errors",
    "engine.interface",
    "engine.json_depth",
    "engine.protocol",
    "engine.structured",
    "engine.task_host",
    "session",
    "session.error_codes",
    "session.client_frames",
    "session.protocol",
    "session.protocol.anthropic",
    "session.protocol.generation_defaults",
    "session.protocol.openai",
    "session.protocol.openai_messages",
    "session.protocol.openai_responses",
    "session.protocol.sampling",
    "session.server_frames",
    "session.settings",
)
# Distributions the modules above import (names as in the repository's dependencies).
REQUIREMENTS = ("websockets", "httpx", "pydantic", "orjson", "anyio")  # anyio: the task groups, engine.interface

HERE = Path(__file__).resolve().parent
_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip timestamps: the same files give the same wheel


def source_root() -> Path:
    """Where the files come from: ``src/`` in an sdist, else the repository (two levels up)."""
    sdist = HERE / "src"
    return sdist if sdist.is_dir() else HERE.parents[1]


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((source_root() / "pyproject.toml").read_text())["project"]
    return project


def version() -> str:
    return str(_project()["version"])


def requirements() -> list[str]:
    """:data:`REQUIREMENTS` with the version bounds the repository's ``pyproject.toml`` gives them."""
    declared = {re.split(r"[\[<>=!~; ]", d, maxsplit=1)[0].lower(): d for d in _project()["dependencies"]}
    missing = [r for r in REQUIREMENTS if r not in declared]
    if missing:
        raise RuntimeError(f"not among the repository's dependencies: {', '.join(missing)}")
    return [declared[r] for r in REQUIREMENTS]


def files() -> list[str]:
    """Paths (relative to :func:`source_root`, ``/``-separated) of everything the wheel holds."""
    root = source_root()
    out: set[str] = set()
    for package in PACKAGES:
        for path in (root / package).rglob("*"):
            rel = path.relative_to(root)
            if path.is_file() and "__pycache__" not in rel.parts and path.suffix != ".pyc":
                out.add(rel.as_posix())
    for module in MODULES:
        base = root.joinpath(*module.split("."))
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not path.is_file():
            raise RuntimeError(f"{module}: no {path.relative_to(root)}")
        out.add(path.relative_to(root).as_posix())
    return sorted(out)


def metadata() -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version()}", f"Summary: {SUMMARY}",
             "License: Apache-2.0", "Requires-Python: >=3.11"]
    lines += [f"Requires-Dist: {r}" for r in requirements()]
    body = ("The tokenwire client SDK (`import client_sdk`) without the server: it installs neither torch, "
            "transformers, tokenizers nor jinja2. See the repository's README, section \"Python SDK\".\n")
    return "\n".join(lines) + "\nDescription-Content-Type: text/markdown\n\n" + body


def _dist_name() -> str:
    return f"{NAME.replace('-', '_')}-{version()}"


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _zip_write(zf: zipfile.ZipFile, path: str, data: bytes) -> None:
    info = zipfile.ZipInfo(path, date_time=_EPOCH)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)


# --- PEP 517 hooks ---------------------------------------------------------------------------------
def build_wheel(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                metadata_directory: str | None = None) -> str:
    root = source_root()
    dist_info = f"{_dist_name()}.dist-info"
    entries = [(path, (root / path).read_bytes()) for path in files()]
    entries.append((f"{dist_info}/METADATA", metadata().encode()))
    entries.append((f"{dist_info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: {NAME} client_backend\n"
                                           "Root-Is-Purelib: true\nTag: py3-none-any\n").encode()))
    record = [_record_line(path, data) for path, data in entries] + [f"{dist_info}/RECORD,,"]
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    name = f"{_dist_name()}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / name, "w") as zf:
        for path, data in entries:
            _zip_write(zf, path, data)
    return name


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    root = source_root()
    base = _dist_name()
    members = [(name, (HERE / name).read_bytes()) for name in ("pyproject.toml", "client_backend.py")]
    members += [(f"src/{path}", (root / path).read_bytes()) for path in [*files(), "pyproject.toml"]]
    members.append(("PKG-INFO", metadata().encode()))
    name = f"{base}.tar.gz"
    with tarfile.open(Path(sdist_directory) / name, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path, data in members:
            info = tarfile.TarInfo(f"{base}/{path}")
            info.size, info.mode, info.mtime = len(data), 0o644, 315532800
            tar.addfile(info, io.BytesIO(data))
    return name
