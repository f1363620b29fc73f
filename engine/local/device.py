"""CPU facts the local engine decides by: the default dtype and the thread count."""

from __future__ import annotations

import logging
import os
import platform
from pathlib import Path

import torch

log = logging.getLogger("tokenwire.engine")

_DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32,
           "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16}
# CPU flags that mean native bf16 arithmetic (x86: AVX512-BF16 or AMX; Arm: the BF16 extension).
_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_flags() -> frozenset[str]:
    """The CPU feature flags from ``/proc/cpuinfo`` (empty where that file does not exist)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def native_bf16() -> bool:
    return bool(cpu_flags() & _BF16_FLAGS)


def resolve_dtype(name: str) -> tuple[torch.dtype, str]:
    """``auto`` → bf16 when the CPU computes it natively, else fp32. Returns (dtype, why)."""
    if name != "auto":
        try:
            return _DTYPES[name], "requested"
        except KeyError:
            raise ValueError(f"unknown dtype {name!r}; use auto, bfloat16, float32 or float16") from None
    flags = cpu_flags() & _BF16_FLAGS
    if flags:
        return torch.bfloat16, f"auto: CPU has {', '.join(sorted(flags))}"
    return torch.float32, f"auto: no native bf16 on this CPU ({platform.machine()})"


def resolve_threads(explicit: int | None = None) -> int:
    """Threads for torch: explicit, else ``TOKENWIRE_NUM_THREADS``, else ``OMP_NUM_THREADS``,
    else every CPU this process may run on but one, which is left to the event loop (and to the
    neighbours on a shared machine), as vLLM reserves a core for its API server.

    Why not every CPU: torch's OpenMP threads meet at a barrier after every operator, so when one
    of them is descheduled (the event loop serving, or any other process) the others spin until
    it runs again. On the 2-core machine of issue 22 a 2-thread engine fell to under 1 tok/s at
    batch 1 beside one busy process, where a 1-thread engine lost half at most
    (docs/engine-design.md, "Torch threads")."""
    return threads_choice(explicit)[0]


def threads_choice(explicit: int | None = None) -> tuple[int, str]:
    """:func:`resolve_threads`'s count and where it came from, for the start-up line."""
    sources = (("num_threads", explicit), ("TOKENWIRE_NUM_THREADS", os.environ.get("TOKENWIRE_NUM_THREADS")),
               ("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS")))
    for name, value in sources:
        if value is None or value == "":
            continue
        try:
            n = int(value)
        except ValueError:
            continue
        if n > 0:
            return n, ("--num-threads" if name == "num_threads" else name) + " " + str(n)
    cpus = usable_cpus()
    return max(1, cpus - 1), f"default: {cpus} usable CPUs, 1 left to the event loop"


def usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


DEFAULT_PREFIX_CACHE_MB = 64.0


def resolve_prefix_cache_mb(explicit: float | None = None) -> float:
    """Memory for prefix caching in MiB: explicit, else ``TOKENWIRE_PREFIX_CACHE_MB``, else
    :data:`DEFAULT_PREFIX_CACHE_MB`; 0 turns it off."""
    for value in (explicit, os.environ.get("TOKENWIRE_PREFIX_CACHE_MB")):
        if value is None or value == "":
            continue
        try:
            mb = float(value)
        except ValueError:
            log.warning("ignoring TOKENWIRE_PREFIX_CACHE_MB=%r (not a number)", value)
            continue
        if mb >= 0:
            return mb
    return DEFAULT_PREFIX_CACHE_MB
