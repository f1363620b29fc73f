"""The embedded engine: torch + transformers with continuous batching (the only torch importer).

:class:`LocalEngine` (:mod:`engine.local.engine`) loads on first access (PEP 562), so importing the
package or its torch-free modules (``scheduler``, ``params``, ``prefix``, ``step``,
``structured_closing`` with its ``_text`` and ``_walk``, ``grammar_bound``, ``grammar_worker``)
imports no torch. The modules and how the engine works: docs/engine-design.md.
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
