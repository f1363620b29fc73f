"""The per-process server context: settings, the model's tokenizer, the engine, and services.

Services (the renderer, the derender service, the pipeline…) are built lazily, once, through
``ctx.service(factory)``, where ``factory(ctx)`` builds one; the route modules own their
factories, so adding a stage never edits this file.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from engine.interface import Engine
from server.gating import Gating
from server.settings import Settings

log = logging.getLogger("tokenwire")

T = TypeVar("T")

DEFAULT_MAX_MODEL_LEN = 4096


class ModelLoadError(Exception):
    """The model directory is missing or unreadable; the message is shown as is."""


@dataclass
class ServerContext:
    settings: Settings
    gating: Gating
    tokenizer: Any
    max_model_len: int
    engine: Engine | None = None
    _services: dict[Callable[..., Any], Any] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)  # factories may use other services

    @property
    def model_name(self) -> str:
        return self.settings.served_model_name

    def service(self, factory: Callable[[ServerContext], T]) -> T:
        try:
            return self._services[factory]  # type: ignore[no-any-return]
        except KeyError:
            with self._lock:
                if factory not in self._services:
                    self._services[factory] = factory(self)
                return self._services[factory]  # type: ignore[no-any-return]


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
        from engine.link import LinkEngine  # tokenwire's session protocol: many requests per socket

        return LinkEngine(settings.engine_url, model_name=settings.served_model_name, max_model_len=max_model_len)
    if settings.engine_url:
        from engine.remote import RemoteEngine

        return RemoteEngine(settings.engine_url, model_name=settings.served_model_name,
                            max_model_len=max_model_len, read_timeout=settings.engine_timeout)
    if settings.needs_local_engine:
        from engine.local import LocalEngine  # the only place the server pulls in torch

        return LocalEngine.from_settings(settings.model_dir, model_name=settings.served_model_name,
                                         max_model_len=max_model_len, dtype=settings.dtype,
                                         max_num_seqs=settings.max_num_seqs,
                                         max_num_batched_tokens=settings.max_num_batched_tokens,
                                         max_waiting=settings.max_waiting)
    return None
