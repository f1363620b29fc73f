"""Reading ``--generation-config`` / ``--override-generation-config`` at start-up.

What vLLM 0.32 reads (``try_get_generation_config`` in ``vllm/transformers_utils/config.py``, with
the transformers 5 that vLLM 0.32 installs): the folder's ``generation_config.json``; without one,
the generation fields its ``config.json`` still carries, which transformers 5 keeps only for
``min_p`` and ``max_new_tokens`` (it drops the legacy ones, ``temperature``, ``top_p``, ``top_k``,
``repetition_penalty``…, from model configs), from the top level or, where unset there, from its
``text_config`` / ``decoder`` / ``generator`` section. The rules that turn that into defaults are
``session/protocol/generation_defaults.py``'s.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from session.protocol.generation_defaults import AUTO, VLLM, GenerationDefaults, resolve

log = logging.getLogger("tokenwire")

# The generation fields transformers 5 still takes from a config.json (the others are popped).
_MODEL_CONFIG_KEYS = ("min_p", "max_new_tokens")
_TEXT_SECTIONS = ("decoder", "generator", "text_config")


def parse_override(text: str) -> dict[str, Any]:
    """``--override-generation-config`` (a JSON object), or ValueError saying what is wrong."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"--override-generation-config is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"--override-generation-config must be a JSON object, such as "
                         f'\'{{"temperature": 0.5}}\', got {text!r}')
    return value


def read_generation_config(folder: Path) -> dict[str, Any] | None:
    """The generation config of ``folder`` (None when it has neither file), or ValueError for a
    file that is not a JSON object."""
    path = folder / "generation_config.json"
    if path.is_file():
        config = _json_object(path)
        return {k: v for k, v in config.items() if v is not None}
    path = folder / "config.json"
    if not path.is_file():
        return None
    model = _json_object(path)
    section = next((s for name in _TEXT_SECTIONS if isinstance(s := model.get(name), dict) and s), {})
    out: dict[str, Any] = {}
    for key in _MODEL_CONFIG_KEYS:
        value = model.get(key)
        if value is None:
            value = section.get(key)
        if value is not None:
            out[key] = value
    return out


def _json_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return value


def load_generation_defaults(model_dir: Path, source: str = AUTO,
                             override: Mapping[str, Any] | None = None) -> GenerationDefaults:
    """The defaults ``--generation-config source`` and ``--override-generation-config`` give for
    the model in ``model_dir``; ValueError for a folder without a generation config or a bad value."""
    config: dict[str, Any] | None = None
    where = "generation_config.json"
    if source != VLLM:
        folder = model_dir if source == AUTO else Path(source).expanduser()
        if source != AUTO and not folder.is_dir():
            raise ValueError(f"--generation-config {source}: not a directory (give a folder holding a "
                             "generation_config.json, or auto, or vllm)")
        config = read_generation_config(folder)
        if config is None and source != AUTO:
            raise ValueError(f"--generation-config {source}: the folder has no generation_config.json "
                             "(nor a config.json)")
        has_file = (folder / "generation_config.json").is_file()
        where = str(folder / ("generation_config.json" if has_file else "config.json"))
    return resolve(config, source=source if source in (AUTO, VLLM) else str(Path(source).expanduser()),
                   override=override, where=where)


def log_generation_defaults(defaults: GenerationDefaults) -> None:
    """The one start-up line that says which defaults the model set."""
    log.info("%s", defaults.describe())
