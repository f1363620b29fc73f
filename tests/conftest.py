"""Shared fixtures: offline assets (built once into the cache, reused) and tokenizers."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Asset names (see server/assets): the default model, the real chat tokenizers, tiny models.
DEFAULT_MODEL = "smollm2-135m-instruct"
TOKENIZERS = ("qwen3", "qwen2.5", "llama3.1", "mistral-nemo", "deepseek-v3.1")
TINY_MODELS = ("tiny-qwen3", "tiny-llama")


@functools.cache
def asset_path(name: str) -> Path:
    from server.assets import ensure

    return ensure(name)


@functools.cache
def tokenizer_of(name: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(asset_path(name)), local_files_only=True)


@pytest.fixture(scope="session")
def asset() -> Callable[[str], Path]:
    """``asset("tiny-qwen3")`` → the built asset directory (built on first use)."""
    return asset_path


@pytest.fixture(scope="session")
def tokenizer() -> Callable[[str], Any]:
    """``tokenizer("qwen3")`` → a cached ``AutoTokenizer`` for that asset."""
    return tokenizer_of
