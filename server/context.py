"""The per-process server context: settings, gating, the model's tokenizer and limits, the engine.

The services built over it (the renderer, the derender service, the state codec, the pipeline…)
are built once, at start-up, by ``server/services.py``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.interface import Engine
from engine.link import LinkEngine
from engine.remote import RemoteEngine
from server.gating import Gating
from server.settings import Settings

log = logging.getLogger("tokenwire")

DEFAULT_MAX_MODEL_LEN = 4096


class ModelLoadError(ValueError):
    """The model directory is missing or unreadable; the message is shown as is (a configuration
    error, as every ``ValueError`` the CLI reports: one line, exit 2)."""


@dataclass
class ServerContext:
    settings: Settings
    gating: Gating
    tokenizer: Any
    max_model_len: int
    engine: Engine | None = None

    @property
    def model_name(self) -> str:
        return self.settings.served_model_name


def check_model_dir(model_dir: Path) -> None:
    if not model_dir.exists():
        raise ModelLoadError(f"model directory not found: {model_dir}")
    if not model_dir.is_dir():
        raise ModelLoadError(f"model path is not a directory: {model_dir}")
    try:
        names = {p.name for p in model_dir.iterdir()}
    except OSError as exc:
        raise ModelLoadError(f"cannot read model directory {model_dir}: {exc.strerror}") from None
    if not names & {"tokenizer.json", "tokenizer_config.json", "tokenizer.model"}:
        raise ModelLoadError(f"no tokenizer in model directory {model_dir} (expected tokenizer.json)")


def load_tokenizer(model_dir: Path) -> Any:
    # lazy: `launch render` marks torch absent (server/cli.py) before transformers may load
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as exc:  # transformers raises many kinds; the operator needs one line
        raise ModelLoadError(f"cannot load the tokenizer from {model_dir}: {type(exc).__name__}") from exc


def model_max_len(model_dir: Path, tokenizer: Any, override: int | None) -> int:
    if override:
        return override
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    text = config.get("text_config")  # a vision-language model keeps the text model's limits there
    sections = [config, text] if isinstance(text, dict) else [config]
    for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        value = next((c[key] for c in sections if isinstance(c.get(key), int)), None)
        if isinstance(value, int) and value > 0:
            return value
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < 10_000_000:
        return tok_max
    return DEFAULT_MAX_MODEL_LEN


def model_vocab_size(model_dir: Path) -> int | None:
    """The model's ``vocab_size`` from its ``config.json`` (a vision-language model's
    ``text_config``), or None without one. Real models pad it past the tokenizer's ids; those
    extra ids are valid output ids that decode to nothing."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    text = config.get("text_config")
    for section in (config, text if isinstance(text, dict) else {}):
        value = section.get("vocab_size")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def model_architectures(model_dir: Path) -> tuple[str, ...]:
    """The ``architectures`` of the model's ``config.json`` (empty without one): vLLM picks a model's
    own prompt encoder from it (DeepSeek-V3.2's, session/render/deepseek_v32.py)."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return ()
    names = config.get("architectures") if isinstance(config, dict) else None
    return tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else ()


def model_type(model_dir: Path) -> str | None:
    """The ``model_type`` of the model's ``config.json`` (None without one): ``gpt_oss`` makes vLLM
    render and derender with harmony (session/render/harmony.py)."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("model_type") if isinstance(config, dict) else None
    return value if isinstance(value, str) else None


def build_context(settings: Settings, gating: Gating, *, engine: Engine | None = None) -> ServerContext:
    """Load the tokenizer and create (but not start) the engine this mode needs."""
    check_model_dir(settings.model_dir)
    tokenizer = load_tokenizer(settings.model_dir)
    max_len = model_max_len(settings.model_dir, tokenizer, settings.max_model_len)
    if engine is None:
        engine = create_engine(settings, max_len)
    return ServerContext(settings=settings, gating=gating, tokenizer=tokenizer, max_model_len=max_len,
                         engine=engine)


def create_engine(settings: Settings, max_model_len: int) -> Engine | None:
    if settings.engine_url and settings.engine_url.startswith(("ws://", "wss://")):
        # tokenwire's session protocol: many requests per socket
        return LinkEngine(settings.engine_url, model_name=settings.served_model_name, max_model_len=max_model_len,
                          api_key=settings.engine_api_key, read_timeout=settings.engine_timeout,
                          vocab_size=model_vocab_size(settings.model_dir))
    if settings.engine_url:
        return RemoteEngine(settings.engine_url, model_name=settings.served_model_name,
                            max_model_len=max_model_len, read_timeout=settings.engine_timeout,
                            api_key=settings.engine_api_key, vocab_size=model_vocab_size(settings.model_dir))
    if settings.needs_local_engine:
        from engine.local import LocalEngine  # the only place the server pulls in torch

        return LocalEngine.from_settings(settings.model_dir, model_name=settings.served_model_name,
                                         max_model_len=max_model_len, dtype=settings.dtype,
                                         max_num_seqs=settings.max_num_seqs,
                                         max_num_batched_tokens=settings.max_num_batched_tokens,
                                         max_waiting=settings.max_waiting)
    return None
