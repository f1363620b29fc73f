"""The local engine's native kernels: decode attention (``native/decode_attention.c``) and bf16
linear layers (``native/linear.c``), one library built with the C compiler (``$CC``, else ``cc``;
``-O3`` for the architecture's baseline, the AVX512-BF16 paths chosen on the CPU at run time:
``native/cpu.h``), keyed by the sources, the flags and the architecture, and loaded with ctypes
(no torch headers) with the types of :data:`PROTOTYPES` (``native/tokenwire.h``'s declarations).
``python -m engine.local.native build`` (run by scripts/install.sh) builds it at install into
:data:`INSTALLED`; where that has no library for these sources :func:`load` builds one into
``<cache>/kernels/`` at the first bf16 model load. Where none can be built, :func:`shared` warns
and the engine keeps its grouped matmuls (``engine/local/attention.py``) and oneDNN's linears
(``engine/local/packed.py``); :func:`describe` says which for ``/engine/stats``. Each kernel shares
its work among the forward's torch thread count with threads of its own (``native/pool.c``), not
OpenMP's. What they cost and change: docs/engine-design.md, "Decode attention in bf16", "Linear
layers", "Building the native kernels" and "The native kernels' threads".
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.local.device import usable_cpus
from engine.user_cache import cache_dir

log = logging.getLogger("tokenwire.engine")

NATIVE = Path(__file__).with_name("native")
SOURCES = (NATIVE / "decode_attention.c", NATIVE / "linear.c", NATIVE / "pool.c")
# included by the sources: part of the cache key too; tokenwire.h and pool.h declare what is exported
HEADERS = (NATIVE / "bf16.h", NATIVE / "cpu.h", NATIVE / "pool.h", NATIVE / "tokenwire.h")
CFLAGS_ENV = "TOKENWIRE_NATIVE_CFLAGS"  # more compiler flags, after FLAGS' own (scripts/sanitize-native.sh)
FLAGS = ("-O3", "-fno-math-errno", "-shared", "-fPIC", "-fopenmp-simd",
         *shlex.split(os.environ.get(CFLAGS_ENV, "")))
# where `python -m engine.local.native build` puts the library: this environment's own (the image ships it)
INSTALLED = Path(sys.prefix) / "share" / "tokenwire" / "kernels"
# With the kernels' own threads (native/pool.c) first; where they do not build, one thread.
VARIANTS = (("threads", ("-pthread",)), ("one thread", ("-DTW_ONE_THREAD",)))
SPIN_ENV = "TOKENWIRE_NATIVE_SPIN_US"
DEFAULT_SPIN_US = 100.0  # how long an idle pool thread waits awake for the next kernel, with a core to spare
MAX_GROUP, MAX_DIM = 32, 512  # as the source's limits
GRAIN = 32768  # elements of K below which one thread does it all (torch's own operators' grain size)
LINEAR_GRAIN = 1 << 18  # multiply-adds below which one thread does a whole product
BUILD_TIMEOUT_S = 120

_I, _P = ctypes.c_int64, ctypes.c_void_p
TASK = ctypes.CFUNCTYPE(None, _P, _I, _I, _I)  # pool.h's tw_task
# Every function the library exports, as native/tokenwire.h and native/pool.h declare it: the result's
# ctypes type, then each argument's name and type (tests/engine/local/test_engine_native_binding.py
# holds this table to the headers, names included).
PROTOTYPES: dict[str, tuple[Any, tuple[tuple[str, Any], ...]]] = {
    "tw_decode_attention": (ctypes.c_int, (
        ("b", _I), ("hq", _I), ("hkv", _I), ("t", _I), ("d", _I), ("scale", ctypes.c_float),
        ("q", _P), ("qsb", _I), ("qsh", _I),
        ("k", _P), ("ksb", _I), ("ksh", _I), ("kst", _I),
        ("v", _P), ("vsb", _I), ("vsh", _I), ("vst", _I),
        ("mask", _P), ("msb", _I), ("out", _P), ("scratch", _P), ("threads", _I))),
    "tw_linear_vector": (ctypes.c_int, ()),
    "tw_linear_packed_size": (_I, (("n", _I), ("k", _I))),
    "tw_linear_pack": (None, (("n", _I), ("k", _I), ("w", _P), ("ws", _I), ("out", _P))),
    "tw_linear": (ctypes.c_int, (("m", _I), ("k", _I), ("n", _I), ("x", _P), ("xs", _I), ("w", _P), ("bias", _P),
                                 ("out", _P), ("os", _I), ("threads", _I))),
    "tw_pool_run": (None, (("threads", _I), ("n", _I), ("chunk", _I), ("fn", TASK), ("ctx", _P))),
    "tw_pool_spin": (None, (("ns", _I),)),
    "tw_pool_threads": (_I, ()),
    "tw_pool_parallel": (ctypes.c_int, ()),
}


def bind(path: Path) -> ctypes.CDLL:
    """The library at ``path`` with every function of :data:`PROTOTYPES` typed (an ``AttributeError``
    names one it lacks)."""
    lib = ctypes.CDLL(str(path))
    for name, (result, args) in PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = result, [kind for _, kind in args]
    return lib


class Library:
    """The built library at ``path`` and its two kernels."""

    def __init__(self, path: Path) -> None:
        self.path = path
        lib = bind(path)
        self.parallel = bool(lib.tw_pool_parallel())  # built with the pool: work shared among torch's thread count
        self.spin_us = spin_us(threads=torch.get_num_threads())
        lib.tw_pool_spin(round(self.spin_us * 1000))
        self.attention = NativeAttention(lib, parallel=self.parallel)
        self.linear = NativeLinear(lib, parallel=self.parallel)


@dataclass(frozen=True, slots=True)
class Loaded:
    """The outcome of :func:`load`: the library, or None and why."""

    library: Library | None
    detail: str


class NativeAttention:
    """The built kernel. :meth:`__call__` takes what ``attention.decode_attention`` takes and
    returns the same layout, or None for inputs it does not handle (not bf16, a head_dim that is
    not contiguous, an additive mask, more than 32 query heads per key-value head). Its bits do
    not depend on the batch or on the thread count."""

    def __init__(self, lib: ctypes.CDLL, *, parallel: bool) -> None:
        self.parallel = parallel  # rows shared among torch's thread count (native/pool.c)
        self._fn = lib.tw_decode_attention

    def __call__(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                 scaling: float) -> torch.Tensor | None:
        b, hq, _, d = query.shape
        hkv, t = key.shape[1], key.shape[2]
        if (query.dtype != torch.bfloat16 or key.dtype != torch.bfloat16 or value.dtype != torch.bfloat16
                or d > MAX_DIM or hq // hkv > MAX_GROUP or t == 0
                or query.stride(3) != 1 or key.stride(3) != 1 or value.stride(3) != 1
                or (mask is not None and mask.dtype != torch.bool)):
            return None
        mask_ptr, mask_stride = None, 0
        if mask is not None:
            rows = mask.reshape(b, t) if mask.stride(-1) == 1 else mask.contiguous().reshape(b, t)
            mask_ptr, mask_stride = rows.data_ptr(), rows.stride(0)
        threads = min(torch.get_num_threads(), b * hkv) if self.parallel and b * hkv * t * d >= GRAIN else 1
        out = torch.empty(b, 1, hq, d, dtype=torch.bfloat16)
        scratch = torch.empty(threads * (hq // hkv) * t, dtype=torch.float32)
        status = self._fn(b, hq, hkv, t, d, scaling,
                          query.data_ptr(), query.stride(0), query.stride(1),
                          key.data_ptr(), key.stride(0), key.stride(1), key.stride(2),
                          value.data_ptr(), value.stride(0), value.stride(1), value.stride(2),
                          mask_ptr, mask_stride, out.data_ptr(), scratch.data_ptr(), threads)
        return out if status == 0 else None


class NativeLinear:
    """The bf16 linear kernel: :meth:`pack` a weight once, then :meth:`__call__` computes
    ``F.linear`` with it (fp32 sums in input order, one rounding). Each output's bits depend on its
    row and weights alone: not on the number of rows, the thread count or sibling outputs packed
    beside it. ``vector``: the AVX512-BF16 path runs on this CPU (else portable loops)."""

    def __init__(self, lib: ctypes.CDLL, *, parallel: bool) -> None:
        self.parallel = parallel
        self.vector = bool(lib.tw_linear_vector())
        self._size = lib.tw_linear_packed_size
        self._pack = lib.tw_linear_pack
        self._fn = lib.tw_linear

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        """``weight`` ``[out, in]`` bf16 in the kernel's layout (a new tensor)."""
        if weight.dtype != torch.bfloat16 or weight.dim() != 2:
            raise ValueError(f"the native linear packs 2-d bf16 weights, not {weight.dtype} {tuple(weight.shape)}")
        w = weight if weight.stride(1) == 1 else weight.contiguous()
        out = torch.empty(self._size(*w.shape), dtype=torch.bfloat16)
        self._pack(w.shape[0], w.shape[1], w.data_ptr(), w.stride(0), out.data_ptr())
        return out

    @staticmethod
    def pack_bias(bias: torch.Tensor | None) -> torch.Tensor | None:
        """``bias`` as the kernel reads it: fp32, zero padded to whole panels of 64 outputs."""
        if bias is None:
            return None
        out = torch.zeros(-(-bias.numel() // 64) * 64, dtype=torch.float32)
        out[: bias.numel()] = bias.detach().float()
        return out

    def __call__(self, x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, n: int) -> torch.Tensor:
        """``F.linear(x, weight, bias)`` for the ``n``-output weight ``packed`` by :meth:`pack` and
        ``bias`` from :meth:`pack_bias`."""
        k = x.shape[-1]
        if x.dtype != torch.bfloat16:
            raise TypeError(f"the native linear takes bf16 inputs, not {x.dtype}")
        rows = x.reshape(-1, k) if x.stride(-1) == 1 else x.contiguous().reshape(-1, k)
        if rows.stride(0) < k:  # an expanded row, or a lone row with an odd stride
            rows = rows.contiguous()
        m = rows.shape[0]
        out = torch.empty(*x.shape[:-1], n, dtype=torch.bfloat16)
        threads = torch.get_num_threads() if self.parallel and m * n * k >= LINEAR_GRAIN else 1
        if m and self._fn(m, k, n, rows.data_ptr(), rows.stride(0), packed.data_ptr(),
                          None if bias is None else bias.data_ptr(), out.data_ptr(), n, threads) != 0:
            raise ValueError(f"the native linear does not take {m} x {k} -> {n}")
        return out


def spin_us(environ: Mapping[str, str] | None = None, *, threads: int | None = None,
            cpus: int | None = None) -> float:
    """``TOKENWIRE_NATIVE_SPIN_US``: how long (µs) an idle pool thread of the native kernels waits
    awake for the next kernel before it sleeps, 0 sleeps at once. Unset: :data:`DEFAULT_SPIN_US`
    while the engine's ``threads`` leave a CPU of the ``cpus`` this process may use (default: its
    affinity) to the event loop, else 0: with every CPU a torch thread, a spinning pool thread takes
    the core the engine thread or the loop needs (docs/engine-design.md, "Where the time goes at 1 and 2 threads").
    A value that is not a number from 0 to 1,000,000 is ignored, with a warning."""
    text = (os.environ if environ is None else environ).get(SPIN_ENV, "").strip()
    default = DEFAULT_SPIN_US
    if threads is not None and threads >= (cpus if cpus is not None else usable_cpus()):
        default = 0.0
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1_000_000:
        log.warning("ignoring %s=%r (a number of µs from 0 to 1000000)", SPIN_ENV, text)
        return default
    return value



def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC") or "cc")


def library_name(flags: tuple[str, ...]) -> str:
    """The file name of the library built from these sources with ``flags`` for this architecture."""
    digest = hashlib.sha256()
    for part in (*(f.read_bytes() for f in (*SOURCES, *HEADERS)), " ".join(flags).encode(), platform.machine().encode()):
        digest.update(part)
        digest.update(b"\0")
    return f"tokenwire-{digest.hexdigest()[:16]}.so"


def build(target: Path, compiler: str, flags: tuple[str, ...]) -> None:
    """Compile the sources into ``target`` (atomically: a partly written file never has its name).
    Raises ``RuntimeError`` with the compiler's message."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.name, suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run([compiler, *flags, "-o", tmp, *map(str, SOURCES)], capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[-500:]}")
        os.chmod(tmp, 0o755)  # mkstemp's 0600 would hide an installed library from other users
        os.replace(tmp, target)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"{compiler} could not run: {exc}") from exc
    finally:
        Path(tmp).unlink(missing_ok=True)


FALLBACK = "grouped attention matmuls and oneDNN linears instead, slower"


def shared() -> Loaded:
    """:func:`load` once per process (the attention and the linears share it), the installed
    library first; a WARNING where there is none."""
    global _shared
    if _shared is None:
        _shared = load(installed=INSTALLED)
        if _shared.library is None:
            log.warning("NATIVE KERNELS UNAVAILABLE (%s): %s; a C compiler and `python -m engine.local.native "
                        "build` (scripts/install.sh) build them", _shared.detail, FALLBACK)
    return _shared


_shared: Loaded | None = None


def describe() -> str:
    """``/engine/stats``' ``native_kernels``: the library this process loaded, or why it runs the fallbacks."""
    if _shared is None:
        return "not loaded (only a bf16 model uses them)"
    if _shared.library is None:
        return f"unavailable, fallback: {FALLBACK} ({_shared.detail})"
    return f"{_shared.library.path} ({_shared.detail})"


def load(cache: Path | None = None, *, installed: Path | None = None) -> Loaded:
    """The library for these sources: from ``installed`` or ``<cache>/kernels/`` where one of them
    has it, else built into ``<cache>/kernels/`` (``cache``: default the user cache); with its own
    threads, else for one thread, else None and why."""
    kernels = (cache or cache_dir()) / "kernels"
    wanted = [(name, (*FLAGS, *extra)) for name, extra in VARIANTS]
    failures = []
    for name, flags in wanted:
        for where in (installed, kernels):
            target = None if where is None else where / library_name(flags)
            if target is not None and target.exists():
                try:
                    return _loaded(target, f"{'installed' if where == installed else 'cached'}")
                except (OSError, AttributeError) as exc:
                    failures.append(f"{name} at {target}: {exc}")
    compiler = _compiler()
    if compiler is None:
        return Loaded(None, "; ".join([*failures, f"no C compiler ({os.environ.get('CC') or 'cc'} not found)"]))
    for name, flags in wanted:
        target = kernels / library_name(flags)
        try:
            log.info("building the native kernels (%s) with %s into %s", name, compiler, kernels)
            build(target, compiler, flags)
            return _loaded(target, f"built by {compiler}")
        except (RuntimeError, OSError, AttributeError) as exc:
            failures.append(f"{name}: {exc}")
    return Loaded(None, "build failed: " + "; ".join(failures))


def _loaded(target: Path, how: str) -> Loaded:
    library = Library(target)
    paths = "AVX512-BF16" if library.linear.vector else "portable loops"
    threads = f"own threads, idle spin {library.spin_us:g} µs" if library.parallel else "one thread"
    return Loaded(library, f"{how}, {paths}, {threads}")


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.local.native build``: the library in :data:`INSTALLED`, built there where
    it is not yet, as :func:`load` builds into the cache at first use (scripts/install.sh runs it)."""
    if (sys.argv[1:] if argv is None else argv) != ["build"]:
        print("usage: python -m engine.local.native build", file=sys.stderr)
        return 2
    loaded = load(INSTALLED.parent)  # INSTALLED is <that>/kernels
    if loaded.library is None:
        print(f"the native kernels were not built ({loaded.detail}): the engine will run {FALLBACK}", file=sys.stderr)
        return 1
    print(f"native kernels: {loaded.library.path} ({loaded.detail})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
