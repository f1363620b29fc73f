"""The image side of a vision-language model, as the model's own processor does it (no torch):
:meth:`Vision.load` binds a Qwen2-VL directory's image processor (transformers' PIL backend), and
:meth:`Vision.prepare` processes a request's images, expands each ``<|image_pad|>`` and builds the
``features``. The processing, the expansion and the ``features``: docs/render.md, "Images".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.protocol import MultiModalFeatures, PlaceholderRangeInfo, TensorData
from session.errors import RenderError
from session.render.images import DecodedImage, ImageLimits, ImageRef, decode

# model_type → (image placeholder token, the text a template without image handling gets per image)
ARCHITECTURES: dict[str, tuple[str, str]] = {
    "qwen2_vl": ("<|image_pad|>", "<|vision_start|><|image_pad|><|vision_end|>"),
}


@dataclass(frozen=True, slots=True)
class PreparedImages:
    """A prompt's images after processing: the expanded ids and what the engine needs."""

    token_ids: list[int]
    features: MultiModalFeatures
    expanded_at: list[tuple[int, int]]  # (index of the template's pad in the unexpanded ids, copies)


class Vision:
    def __init__(self, processor: Any, *, image_token: str, image_token_id: int, placeholder: str,
                 merge_size: int, limits: ImageLimits | None = None) -> None:
        self.processor = processor
        self.image_token = image_token
        self.image_token_id = image_token_id
        self.placeholder = placeholder
        self.merge_size = merge_size
        self.limits = limits or ImageLimits()

    @classmethod
    def load(cls, model_dir: Path, tokenizer: Any, limits: ImageLimits | None = None) -> Vision | None:
        """The model's image side, or ``None`` when it takes no images (no image processor, or an
        architecture render cannot expand placeholders for). Raises ``ValueError`` for a directory
        whose image files contradict each other."""
        if not (model_dir / "preprocessor_config.json").is_file():
            return None
        try:
            config = json.loads((model_dir / "config.json").read_text())
        except (OSError, ValueError):
            return None
        arch = ARCHITECTURES.get(str(config.get("model_type")))
        if arch is None:
            return None
        from transformers import AutoImageProcessor

        try:
            processor = AutoImageProcessor.from_pretrained(  # type: ignore[no-untyped-call]
                str(model_dir), backend="pil", local_files_only=True)
        except Exception as exc:  # transformers raises many kinds; the operator needs one line
            raise ValueError(f"cannot load the image processor from {model_dir} ({type(exc).__name__}: "
                             f"{str(exc)[:200]})") from None
        token, placeholder = arch
        token_id = tokenizer.convert_tokens_to_ids(token)
        if not isinstance(token_id, int) or token_id != config.get("image_token_id", token_id):
            raise ValueError(f"{model_dir}: the tokenizer's {token} is id {token_id}, config.json says "
                             f"image_token_id {config.get('image_token_id')}")
        return cls(processor, image_token=token, image_token_id=token_id, placeholder=placeholder,
                   merge_size=int(processor.merge_size), limits=limits)

    def check_count(self, refs: list[ImageRef]) -> None:
        if len(refs) > self.limits.max_images:
            raise RenderError(f"The request has {len(refs)} images; at most {self.limits.max_images} are "
                              "accepted per request.", param=refs[self.limits.max_images].param)

    def prepare(self, refs: list[ImageRef], token_ids: list[int]) -> PreparedImages:
        """Decode and process ``refs`` and expand their placeholders in ``token_ids``."""
        self.check_count(refs)
        images = [decode(ref, self.limits) for ref in refs]
        pads = [i for i, t in enumerate(token_ids) if t == self.image_token_id]
        if len(pads) != len(images):
            raise RenderError(
                f"The rendered prompt has {len(pads)} {self.image_token} tokens for {len(images)} images: "
                f"message text must not contain {self.image_token} itself, and the chat template must place "
                "one per image.", param="messages")
        processed = [self._process(d) for d in images]
        out: list[int] = []
        ranges: list[PlaceholderRangeInfo] = []
        expanded: list[tuple[int, int]] = []
        last = 0
        for pad, (_, _, copies) in zip(pads, processed, strict=True):
            out.extend(token_ids[last:pad])
            ranges.append(PlaceholderRangeInfo.model_construct(offset=len(out), length=copies))
            expanded.append((pad, copies))
            out.extend([self.image_token_id] * copies)
            last = pad + 1
        out.extend(token_ids[last:])
        features = MultiModalFeatures.model_construct(
            mm_hashes={"image": [d.digest for d in images]},
            mm_placeholders={"image": ranges},
            kwargs_data={"image": [{"pixel_values": TensorData.of(pv), "image_grid_thw": TensorData.of(grid)}
                                   for pv, grid, _ in processed]})
        return PreparedImages(out, features, expanded)

    def _process(self, image: DecodedImage) -> tuple[Any, Any, int]:
        """``(pixel_values [patches, C·T·P·P] float32, image_grid_thw [3] int64, placeholder count)``."""
        try:
            batch = self.processor(images=[image.image], return_tensors="np")
        except ValueError as exc:  # e.g. "absolute aspect ratio must be smaller than 200"
            raise RenderError(f"{image.ref.where}: the model's image processor refused the image ({exc}).",
                              param=image.ref.param) from None
        pixel_values = batch["pixel_values"].astype("float32", copy=False)
        grid = batch["image_grid_thw"][0].astype("int64", copy=False)
        copies = int(grid.prod()) // self.merge_size ** 2
        return pixel_values, grid, copies


def expand_mask(mask: list[int], expanded_at: list[tuple[int, int]]) -> list[int]:
    """The assistant-token mask of the unexpanded ids, with each expanded pad's value repeated."""
    out: list[int] = []
    last = 0
    for pad, copies in expanded_at:
        out.extend(mask[last:pad])
        out.extend(mask[pad:pad + 1] * copies)
        last = pad + 1
    out.extend(mask[last:])
    return out
