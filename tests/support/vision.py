"""Images and the transformers reference for the vision tests (tiny-qwen2-vl).

- :func:`image` / :func:`data_url`: small seeded noise images, encoded as PNG / JPEG / WebP;
- :func:`reference_processor`: the model's own processor, ``Qwen2VLProcessor`` over the model
  directory's tokenizer, image processor and chat template. ``AutoProcessor`` cannot build it in
  this environment: it also loads the Qwen2-VL *video* processor, which needs torchvision (not
  installed: the engine needs none). The subclass below only skips ``ProcessorMixin``'s argument
  class check, which looks the video processor class up in a registry torchvision fills; every
  code path a chat with images takes (template, placeholder expansion, image processing) is
  ``Qwen2VLProcessor``'s own;
- :class:`VisionReference`: ``model.generate`` on the processor's tensors, what the engine's
  greedy output must equal.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

VL_MODEL = "tiny-qwen2-vl"


def image(seed: int, height: int, width: int) -> Any:
    import numpy as np
    from PIL import Image

    pixels = (np.random.RandomState(seed).rand(height, width, 3) * 255).astype("uint8")
    return Image.fromarray(pixels)


def encoded(img: Any, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


def data_url(img: Any, fmt: str = "PNG") -> str:
    media = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}[fmt]
    return f"data:{media};base64,{base64.b64encode(encoded(img, fmt)).decode()}"


def decoded(img: Any, fmt: str) -> Any:
    """What the server sees after decoding ``img`` encoded as ``fmt`` (lossy formats differ)."""
    from PIL import Image

    out = Image.open(io.BytesIO(encoded(img, fmt)))
    out.load()
    return out


def png_header(width: int, height: int) -> bytes:
    """A PNG signature and IHDR chunk announcing ``width`` × ``height``, then a truncated IDAT: a
    tiny file whose header claims any size (what a decompression bomb looks like to a decoder)."""
    import zlib

    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    chunk = b"IHDR" + ihdr
    body = len(ihdr).to_bytes(4, "big") + chunk + zlib.crc32(chunk).to_bytes(4, "big")
    return b"\x89PNG\r\n\x1a\n" + body + b"\x00\x00\x10\x00IDAT" + b"\x78\x9c" + b"\x00" * 64


def openai_content(urls: list[str], text: str = "What is in the picture?") -> list[dict[str, Any]]:
    return [*({"type": "image_url", "image_url": {"url": u}} for u in urls), {"type": "text", "text": text}]


def reference_content(images: list[Any], text: str = "What is in the picture?") -> list[dict[str, Any]]:
    return [*({"type": "image", "image": im} for im in images), {"type": "text", "text": text}]


def reference_processor(model_dir: Path) -> Any:
    from transformers import AutoImageProcessor, AutoTokenizer, Qwen2VLProcessor

    class Processor(Qwen2VLProcessor):
        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            return type(argument)

    images: Any = AutoImageProcessor
    build: Any = Processor
    return build(image_processor=images.from_pretrained(str(model_dir), local_files_only=True),
                 tokenizer=AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True),
                 video_processor=None, chat_template=(model_dir / "chat_template.jinja").read_text())


class VisionReference:
    """The processor + ``model.generate`` (greedy) on the same weights."""

    def __init__(self, model_dir: Path, dtype: str = "float32") -> None:
        import torch
        from transformers import AutoModelForImageTextToText

        self.torch = torch
        self.processor = reference_processor(model_dir)
        model: Any = AutoModelForImageTextToText.from_pretrained(
            str(model_dir), dtype=getattr(torch, dtype), attn_implementation="sdpa", local_files_only=True)
        self.model: Any = model.eval()

    def inputs(self, messages: list[dict[str, Any]]) -> Any:
        return self.processor.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                                  return_dict=True, return_tensors="pt")

    def greedy(self, messages: list[dict[str, Any]], max_new_tokens: int) -> list[int]:
        inputs = self.inputs(messages)
        with self.torch.inference_mode():
            out = self.model.generate(**inputs, do_sample=False, max_new_tokens=max_new_tokens)
        tokens: list[int] = out[0, inputs["input_ids"].shape[1]:].tolist()
        return tokens

    def greedy_ids(self, prompt: list[int], max_new_tokens: int) -> list[int]:
        """A text-only prompt."""
        torch = self.torch
        ids = torch.tensor([prompt])
        with torch.inference_mode():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=max_new_tokens)
        tokens: list[int] = out[0, len(prompt):].tolist()
        return tokens
