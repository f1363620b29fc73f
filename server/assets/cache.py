"""The asset cache: where assets live, atomic builds, manifests and corruption checks.

Layout under :func:`cache_dir`::

    assets/<name>/            a built asset (a Hugging Face directory)
    assets/<name>/.tokenwire-manifest.json   written last: recipe version, every file's size and sha256
    downloads/                pinned package files (see ``downloads.py``)
    locks/<name>.lock         fcntl locks serialising builds across threads and processes
    tmp/<name>/               build directories, renamed into ``assets/`` when complete

An entry whose manifest is missing (a build that never finished), whose recipe version differs,
or whose files do not match it (size always; sha256 for files up to ``HASH_LIMIT`` bytes) is
rebuilt by :func:`server.assets.ensure`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# the directory itself is engine/user_cache.py's decision (the engine's built kernels live there too)
from engine.user_cache import CACHE_ENV as CACHE_ENV
from engine.user_cache import cache_dir as cache_dir

MANIFEST = ".tokenwire-manifest.json"
HASH_LIMIT = 32 * 1024 * 1024  # files up to this size are re-hashed on every check


def asset_path(name: str) -> Path:
    return cache_dir() / "assets" / name


def progress(message: str) -> None:
    """One progress line on stderr (builds run on first use; the user must see something)."""
    print(f"tokenwire assets: {message}", file=sys.stderr, flush=True)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """An exclusive lock for ``name``, across threads (one open file each) and processes."""
    lock_dir = cache_dir() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with (lock_dir / f"{name}.lock").open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@dataclass(frozen=True)
class Check:
    """The state of a cached entry: ``state`` is built, missing, partial, stale or corrupt."""

    state: str
    reason: str

    @property
    def ok(self) -> bool:
        return self.state == "built"


def write_manifest(directory: Path, name: str, version: int, build_seconds: float) -> None:
    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST):
        files[path.relative_to(directory).as_posix()] = {
            "size": path.stat().st_size, "sha256": sha256_file(path)}
    manifest = {"name": name, "version": version, "built_at": time.time(),
                "build_seconds": round(build_seconds, 1), "files": files}
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    with tmp.open("rb") as fh:
        os.fsync(fh.fileno())
    tmp.rename(directory / MANIFEST)


def read_manifest(directory: Path) -> dict[str, object] | None:
    try:
        data = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check(directory: Path, version: int, *, deep: bool = True) -> Check:
    """Is ``directory`` a complete build of recipe ``version``? ``deep`` re-hashes small files."""
    if not directory.is_dir():
        return Check("missing", "not built")
    manifest = read_manifest(directory)
    if manifest is None:
        return Check("partial", "incomplete (no manifest: a build was interrupted)")
    if manifest.get("version") != version:
        return Check("stale", f"stale (recipe version {manifest.get('version')}, want {version})")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return Check("corrupt", "corrupt manifest")
    for rel, meta in files.items():
        path = directory / rel
        try:
            size = path.stat().st_size
        except OSError:
            return Check("corrupt", f"corrupt: {rel} is missing")
        if size != meta["size"]:
            return Check("corrupt", f"corrupt: {rel} has {size} bytes, manifest says {meta['size']}")
        if deep and size <= HASH_LIMIT and sha256_file(path) != meta["sha256"]:
            return Check("corrupt", f"corrupt: {rel} does not match its sha256")
    return Check("built", "ok")


def new_build_dir(name: str) -> Path:
    tmp = cache_dir() / "tmp" / name
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / f"build.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    path.mkdir()
    return path


def install(build: Path, final: Path) -> None:
    """Move a finished build into place (the old entry, if any, is moved aside first)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    old: Path | None = None
    if final.exists() or final.is_symlink():
        old = build.parent / f"old.{uuid.uuid4().hex[:8]}"
        final.rename(old)
    build.rename(final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def clean_stale_builds(name: str) -> None:
    """Remove leftovers of interrupted builds of ``name`` (call while holding its lock)."""
    shutil.rmtree(cache_dir() / "tmp" / name, ignore_errors=True)
