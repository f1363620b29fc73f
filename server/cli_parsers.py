"""The ``--tool-call-parser`` / ``--reasoning-parser`` names: checked against the registered parsers
as the flags are parsed, and ``auto`` resolved from the model directory's chat template and
``config.json`` (session/parsers/auto.py), without loading the tokenizer.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from session.parsers.auto import AUTO
from session.parsers.auto import resolve as resolve_auto


def parser_name(kind: str, known: Mapping[str, object]) -> Callable[[str], str]:
    """An argparse type: a registered parser name or ``auto``, checked when the flags are parsed
    (a misspelt name is a usage error naming the valid ones, before any model loads)."""
    def check(value: str) -> str:
        if value == AUTO or value in known:
            return value
        raise argparse.ArgumentTypeError(f"unknown {kind} parser {value!r}; valid names: auto, "
                                         f"{', '.join(sorted(known))}")
    return check


def model_chat_template(model_dir: Path) -> str | None:
    """The chat template a model directory ships (``chat_template.jinja``, else the default one in
    ``tokenizer_config.json``), without loading the tokenizer."""
    path = model_dir / "chat_template.jinja"
    if path.is_file():
        return path.read_text(encoding="utf-8")
    try:
        config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def auto_parsers(args: argparse.Namespace, model_dir: Path, template: str | None) -> tuple[str | None, str | None]:
    """``--tool-call-parser`` / ``--reasoning-parser`` with ``auto`` resolved from the model's chat
    template (``--chat-template`` when given) and ``config.json``, logged in one line."""
    tool, reasoning = args.tool_call_parser, args.reasoning_parser
    if AUTO not in (tool, reasoning):
        return tool, reasoning
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    tool, reasoning, line = resolve_auto(tool, reasoning, template or model_chat_template(model_dir),
                                         config if isinstance(config, dict) else None)
    if line:
        logging.getLogger("tokenwire").info("%s", line)
    return tool, reasoning
