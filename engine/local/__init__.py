"""The embedded engine: torch + transformers with continuous batching (the only torch importer).

- :mod:`engine.local.engine` — :class:`LocalEngine`, the asyncio face and the engine thread;
- :mod:`engine.local.scheduler` — admission, KV rows and step planning (no torch);
- :mod:`engine.local.runner` — model loading and batched prefill / decode forwards;
- :mod:`engine.local.kv` — the per-row KV buffers the model reads through a duck-typed cache;
- :mod:`engine.local.vision` — vision-language models: ``features`` checked and decoded, the
  vision tower, M-RoPE positions;
- :mod:`engine.local.sampling` — penalties, filters, seeded draws and logprobs;
- :mod:`engine.local.params` — request validation against the served model (no torch);
- :mod:`engine.outbox` (outside this package, shared with the engine link) — bounded per-request buffers on the event loop;
- :mod:`engine.local.device` — dtype and thread choices for this CPU.

Importing the package imports no torch: :class:`LocalEngine` loads on first access (PEP 562), so the
torch-free modules (``scheduler``, ``params``, ``prefix``, ``step``, ``structured_closing``,
``grammar_bound``, ``grammar_worker``) import, and their unit tests run, where torch is absent.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.local.engine import LocalEngine

__all__ = ["LocalEngine"]


def __getattr__(name: str) -> Any:
    if name == "LocalEngine":  # imports torch
        return importlib.import_module("engine.local.engine").LocalEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
