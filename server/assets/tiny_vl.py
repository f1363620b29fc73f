"""``tiny-qwen2-vl``: a random-weight Qwen2-VL (vision tower included) on the qwen2.5 tokenizer, built
offline from the cache: seeded weights of the tiny models' text shape and Qwen2-VL's patching, the
vision tokens at Qwen2-VL's ids, Qwen2-VL's chat template, a small-image processor config. What
makes it a real Qwen2-VL directory: docs/assets.md, "Tiny random-weight models".
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from server.assets.cache import progress

NAME = "tiny-qwen2-vl"
TOKENIZER = "qwen2.5"
SEED = 1234
DTYPE = "bfloat16"
# Wider than transformers' 0.02: with 0.02 a model this small repeats one token whatever the image,
# with 0.1 its greedy output varies with the image, so the tests can tell a wrong merge apart.
INIT_STD = 0.1

IMAGE_TOKEN_ID = 151655  # <|image_pad|>
VIDEO_TOKEN_ID = 151656  # <|video_pad|>
VISION_START_ID = 151652  # <|vision_start|>
VISION_END_ID = 151653  # <|vision_end|>
EOS_IDS = (151645, 151643)  # <|im_end|>, <|endoftext|>
PAD_ID = 151643
VOCAB_TOKENS = 151665  # len(qwen2.5 tokenizer)

CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2VLProcessor",
    "do_convert_rgb": True,
    "do_resize": True,
    "resample": 3,  # bicubic
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],  # OpenAI CLIP
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "min_pixels": 56 * 56,
    "max_pixels": 112 * 112,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
}


def build(out: Path, ensure: Callable[[str], Path]) -> None:
    """Build the model into ``out``; ``ensure`` (``server.assets.ensure``) gives its tokenizer asset."""
    import torch
    from transformers import GenerationConfig, Qwen2VLConfig, Qwen2VLForConditionalGeneration

    tok_dir = ensure(TOKENIZER)
    progress(f"{NAME} 1/2: random Qwen2-VL weights with a vision tower (seed {SEED})")
    for fname in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(tok_dir / fname, out / fname)
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2, sort_keys=True) + "\n")
    vocab = -(-VOCAB_TOKENS // 128) * 128
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": vocab, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 6, 6]},
            "bos_token_id": PAD_ID, "eos_token_id": EOS_IDS[0], "pad_token_id": PAD_ID,
            "initializer_range": INIT_STD,
        },
        vision_config={
            "depth": 2, "embed_dim": 32, "hidden_size": 128, "num_heads": 2, "mlp_ratio": 2, "in_channels": 3,
            "patch_size": PREPROCESSOR["patch_size"], "spatial_merge_size": PREPROCESSOR["merge_size"],
            "temporal_patch_size": PREPROCESSOR["temporal_patch_size"], "initializer_range": INIT_STD,
        },
        image_token_id=IMAGE_TOKEN_ID, video_token_id=VIDEO_TOKEN_ID, vision_start_token_id=VISION_START_ID,
        vision_end_token_id=VISION_END_ID, tie_word_embeddings=True, dtype=DTYPE)
    torch.manual_seed(SEED)
    model = Qwen2VLForConditionalGeneration._from_config(config, dtype=getattr(torch, DTYPE))  # type: ignore[no-untyped-call]
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        bos_token_id=PAD_ID, eos_token_id=list(EOS_IDS), pad_token_id=PAD_ID)
    progress(f"{NAME} 2/2: saving to {out}")
    model.save_pretrained(str(out))
