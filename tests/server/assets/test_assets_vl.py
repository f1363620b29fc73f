"""The tiny-qwen2-vl asset: a real Qwen2-VL directory, validated by its manifest, rebuilt identically."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from server import assets
from server.assets import cache as asset_cache
from server.assets import tiny_vl
from tests.support.vision import VL_MODEL


def test_the_asset_is_a_qwen2_vl_directory_checked_by_its_manifest(asset: Callable[[str], Path],
                                                                   tokenizer: Callable[[str], Any]) -> None:
    directory = asset(VL_MODEL)
    assert assets.status(VL_MODEL, deep=True).ok
    manifest = json.loads((directory / asset_cache.MANIFEST).read_text())
    assert set(manifest["files"]) == {"config.json", "generation_config.json", "model.safetensors",
                                      "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                                      "preprocessor_config.json"}
    config = json.loads((directory / "config.json").read_text())
    assert config["architectures"] == ["Qwen2VLForConditionalGeneration"] and config["model_type"] == "qwen2_vl"
    text, vision = config["text_config"], config["vision_config"]
    assert (text["hidden_size"], text["num_hidden_layers"], text["num_attention_heads"]) == (128, 2, 4)
    assert sum(text["rope_parameters"]["mrope_section"]) == text["hidden_size"] // text["num_attention_heads"] // 2
    assert (vision["depth"], vision["hidden_size"], vision["patch_size"], vision["spatial_merge_size"]) == (2, 128, 14, 2)
    tok = tokenizer(VL_MODEL)
    assert len(tok) == len(tokenizer("qwen2.5")) and 0 <= text["vocab_size"] - len(tok) < 128
    for name, key in (("<|image_pad|>", "image_token_id"), ("<|video_pad|>", "video_token_id"),
                      ("<|vision_start|>", "vision_start_token_id"), ("<|vision_end|>", "vision_end_token_id")):
        assert tok.convert_tokens_to_ids(name) == config[key]
    assert tok.chat_template == tiny_vl.CHAT_TEMPLATE
    pre = json.loads((directory / "preprocessor_config.json").read_text())
    assert (pre["min_pixels"], pre["max_pixels"], pre["merge_size"]) == (56 * 56, 112 * 112, 2)
    assert json.loads((directory / "generation_config.json").read_text())["eos_token_id"] == [151645, 151643]


def test_the_chat_template_renders_qwen2_vl_prompts(tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer(VL_MODEL)
    text = tok.apply_chat_template([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}],
                                   add_generation_prompt=True, tokenize=False)
    assert text == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                    "<|vision_start|><|image_pad|><|vision_end|>Hi<|im_end|>\n<|im_start|>assistant\n")


def test_the_weights_are_reproducible(asset: Callable[[str], Path], tmp_path: Path) -> None:
    directory = asset(VL_MODEL)
    tiny_vl.build(tmp_path, asset)
    for name in ("model.safetensors", "config.json", "preprocessor_config.json", "chat_template.jinja"):
        assert asset_cache.sha256_file(tmp_path / name) == asset_cache.sha256_file(directory / name), name
