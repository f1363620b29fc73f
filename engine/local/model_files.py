"""What the local engine reads of a model directory before its weights load (no torch work): the
vocabulary size and eos ids (``config.json``, ``generation_config.json``) as
:class:`~engine.local.params.ModelLimits`, so that requests are validated at once, and whether
structured outputs can run (xgrammar imports).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from engine.errors import EngineUnavailable
from engine.local.params import XGRAMMAR_MISSING, ModelLimits

log = logging.getLogger("tokenwire.engine")


def read_limits(model_dir: Path, max_model_len: int, *, max_n: int) -> ModelLimits:
    """Vocabulary size and eos ids from ``config.json`` / ``generation_config.json`` (no torch
    work; used before the weights are loaded so requests can be validated at once)."""
    config = _read_json(model_dir / "config.json")
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else {}
    vocab = config.get("vocab_size") or text.get("vocab_size")
    if not isinstance(vocab, int) or vocab <= 0:
        raise EngineUnavailable(f"cannot serve {model_dir}: no vocab_size in its config.json "
                                f"(is it a Hugging Face causal-LM directory?)")
    primary = _ids(config.get("eos_token_id", text.get("eos_token_id")))
    gen = _ids(_read_json(model_dir / "generation_config.json").get("eos_token_id"))
    eos = primary[0] if primary else None
    extra = frozenset((set(primary) | set(gen)) - ({eos} if eos is not None else set()))
    return ModelLimits(vocab_size=vocab, max_model_len=max_model_len, eos_token_id=eos,
                       extra_eos_ids=extra, max_n=max_n, no_structured_outputs=structured_outputs_missing())


def structured_outputs_missing() -> str | None:
    """Import xgrammar once at startup (about 0.1 s with torch loaded): None when it works, else
    the message every structured-output request is refused with (and one warning line in the log),
    so a server installed without it answers 400s that say how to install it, never a 500."""
    try:
        import xgrammar  # noqa: F401
    except Exception as exc:  # ImportError, or a broken native library (OSError…)
        log.warning("structured outputs are unavailable: cannot import xgrammar (%s: %s); requests that "
                    "ask for them get a 400. Install with: pip install 'tokenwire[engine]'",
                    type(exc).__name__, exc)
        return XGRAMMAR_MISSING
    return None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _ids(value: object) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return []
