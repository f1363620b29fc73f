"""Images in the local engine: the model's vision side, ``features`` checked and decoded, M-RoPE.
:class:`VisionSpec` (from ``config.json``, no torch work), :func:`read_features` (every check a 400
naming the field, off the event loop) and :func:`prepare` (the vision tower and the 3-D positions, on
the engine thread at the first prefill chunk). The checks and the prefill: docs/engine.md, "Images".
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.errors import InvalidGenerateRequest
from engine.protocol import MultiModalFeatures, TensorData

SUPPORTED = ("qwen2_vl",)
_NUMPY = {"float32": np.float32, "float16": np.float16, "int64": np.int64, "int32": np.int32}


@dataclass(frozen=True, slots=True)
class VisionSpec:
    model_type: str
    image_token_id: int
    patch_dim: int  # in_channels · temporal_patch_size · patch_size²: one row of pixel_values
    merge: int  # spatial_merge_size: merge² patches become one placeholder token

    @classmethod
    def read(cls, model_dir: Path) -> VisionSpec | None:
        try:
            config = json.loads((model_dir / "config.json").read_text())
        except (OSError, ValueError):
            return None
        vision = config.get("vision_config")
        if config.get("model_type") not in SUPPORTED or not isinstance(vision, dict):
            return None
        patch, temporal = int(vision.get("patch_size", 14)), int(vision.get("temporal_patch_size", 2))
        return cls(model_type=str(config["model_type"]), image_token_id=int(config.get("image_token_id", 151655)),
                   patch_dim=int(vision.get("in_channels", 3)) * temporal * patch * patch,
                   merge=int(vision.get("spatial_merge_size", 2)))


@dataclass(slots=True)
class ImageItem:
    offset: int
    length: int
    pixel_values: torch.Tensor  # [patches, patch_dim] float32
    grid: tuple[int, int, int]  # (t, h, w) in patches


@dataclass(slots=True)
class VisionPrompt:
    """A request's images (``RequestGroup.mm``). ``embeds`` and ``positions`` are filled by
    :func:`prepare` on the engine thread; the embeddings are dropped once the prompt is prefilled."""

    items: list[ImageItem]
    embeds: torch.Tensor | None = None  # [sum of lengths, hidden], in placeholder order
    positions: torch.Tensor | None = None  # [3, prompt length] M-RoPE positions
    delta: int = 0  # decode position = sequence index + delta
    starts: list[int] = field(default_factory=list)  # each item's first row in ``embeds``


def _bad(message: str, param: str = "features") -> InvalidGenerateRequest:
    return InvalidGenerateRequest(message, param=param)


def read_features(features: MultiModalFeatures, prompt: list[int], spec: VisionSpec | None) -> VisionPrompt:
    """Check ``features`` against ``prompt`` and the model; decode the tensors."""
    if spec is None:
        raise _bad("This model does not accept images: `features` need a vision-language model "
                   "(tokenwire's local engine runs Qwen2-VL); send token ids only.")
    for name, value in (("mm_hashes", features.mm_hashes), ("mm_placeholders", features.mm_placeholders),
                        ("kwargs_data", features.kwargs_data or {})):
        other = sorted(set(value) - {"image"})
        if other:
            raise _bad(f"features.{name} has modality {other[0]!r}; this engine accepts images only.",
                       f"features.{name}")
    if features.kwargs_data is None:
        raise _bad("features.kwargs_data is null: this engine keeps no multimodal cache, so every image's "
                   "tensors must be sent (render them with tokenwire's render endpoint).", "features.kwargs_data")
    ranges = features.mm_placeholders.get("image", [])
    hashes = features.mm_hashes.get("image", [])
    data = features.kwargs_data.get("image", [])
    if not ranges:
        raise _bad("features.mm_placeholders has no image: send features only for a prompt with images.",
                   "features.mm_placeholders")
    if not len(ranges) == len(hashes) == len(data):
        raise _bad(f"features lists differ in length: mm_hashes.image has {len(hashes)}, mm_placeholders.image "
                   f"{len(ranges)}, kwargs_data.image {len(data)} (one entry per image each).")
    items: list[ImageItem] = []
    end = 0
    for i, (r, item) in enumerate(zip(ranges, data, strict=True)):
        where = f"features.mm_placeholders.image[{i}]"
        if r.offset < end:
            raise _bad(f"{where} starts at {r.offset}, inside or before the previous image's placeholders: ranges "
                       "must be sorted and must not overlap.", "features.mm_placeholders")
        end = r.offset + r.length
        if end > len(prompt):
            raise _bad(f"{where} (offset {r.offset}, length {r.length}) ends past the prompt's {len(prompt)} "
                       "tokens.", "features.mm_placeholders")
        wrong = next((k for k in range(r.offset, end) if prompt[k] != spec.image_token_id), None)
        if wrong is not None:
            raise _bad(f"{where}: token_ids[{wrong}] is {prompt[wrong]}, not the image placeholder token "
                       f"{spec.image_token_id}; the range must cover exactly the image's placeholder tokens.",
                       "features.mm_placeholders")
        pixels, grid = _item_tensors(item, i, spec)
        t, h, w = grid
        if t * h * w // spec.merge ** 2 != r.length:
            raise _bad(f"{where} has length {r.length}, but image_grid_thw {list(grid)} needs "
                       f"{t * h * w // spec.merge ** 2} placeholder tokens (t·h·w / {spec.merge}²).",
                       "features.mm_placeholders")
        items.append(ImageItem(r.offset, r.length, pixels, grid))
    covered = sum(it.length for it in items)
    total = sum(1 for tok in prompt if tok == spec.image_token_id)
    if total != covered:
        stray = next(k for k, tok in enumerate(prompt) if tok == spec.image_token_id
                     and not any(it.offset <= k < it.offset + it.length for it in items))
        raise _bad(f"token_ids[{stray}] is the image placeholder token {spec.image_token_id} but no "
                   "features.mm_placeholders range covers it.", "token_ids")
    return VisionPrompt(items)


def _item_tensors(item: object, i: int, spec: VisionSpec) -> tuple[torch.Tensor, tuple[int, int, int]]:
    where = f"features.kwargs_data.image[{i}]"
    if item is None:
        raise _bad(f"{where} is null: this engine keeps no multimodal cache; send the image's tensors.",
                   "features.kwargs_data")
    if isinstance(item, str):
        raise _bad(f"{where} is a string (vLLM's msgpack encoding), which this engine does not read; send "
                   "{\"pixel_values\": tensor, \"image_grid_thw\": tensor} objects as tokenwire's render "
                   "does (docs/render.md).", "features.kwargs_data")
    assert isinstance(item, dict)
    missing = [k for k in ("pixel_values", "image_grid_thw") if k not in item]
    if missing:
        raise _bad(f"{where} has no {missing[0]!r} tensor.", "features.kwargs_data")
    grid_arr = _array(item["image_grid_thw"], f"{where}.image_grid_thw")
    if grid_arr.dtype.kind != "i" or grid_arr.size != 3 or grid_arr.ndim not in (1, 2):
        raise _bad(f"{where}.image_grid_thw must be 3 integers (t, h, w), got shape {list(grid_arr.shape)} "
                   f"{grid_arr.dtype.name}.", "features.kwargs_data")
    t, h, w = (int(v) for v in grid_arr.reshape(3))
    if min(t, h, w) < 1 or h % spec.merge or w % spec.merge:
        raise _bad(f"{where}.image_grid_thw {[t, h, w]} must be positive, with h and w multiples of the "
                   f"vision tower's merge size {spec.merge}.", "features.kwargs_data")
    pixels = _array(item["pixel_values"], f"{where}.pixel_values")
    if pixels.dtype.kind != "f" or pixels.ndim != 2 or pixels.shape != (t * h * w, spec.patch_dim):
        raise _bad(f"{where}.pixel_values must be a float tensor of shape [{t * h * w}, {spec.patch_dim}] "
                   f"(t·h·w patches of C·T·P·P values), got {list(pixels.shape)} {pixels.dtype.name}.",
                   "features.kwargs_data")
    tensor = torch.from_numpy(pixels.astype(np.float32))
    if not bool(torch.isfinite(tensor).all()):
        raise _bad(f"{where}.pixel_values holds NaN or infinite values.", "features.kwargs_data")
    return tensor, (t, h, w)


def _array(data: TensorData, where: str) -> np.ndarray[Any, Any]:
    try:
        raw = base64.b64decode(data.data, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(f"{where}.data is not valid base64.", "features.kwargs_data") from None
    dtype = np.dtype(_NUMPY[data.dtype]).newbyteorder("<")
    count = int(np.prod(data.shape, dtype=np.int64)) if data.shape else 1
    if len(raw) != count * dtype.itemsize:
        raise _bad(f"{where} has {len(raw)} bytes of data; shape {data.shape} of {data.dtype} needs "
                   f"{count * dtype.itemsize}.", "features.kwargs_data")
    return np.frombuffer(raw, dtype=dtype).reshape(data.shape).astype(dtype.newbyteorder("="))


def prepare(model: Any, mm: VisionPrompt, prompt: list[int], spec: VisionSpec) -> None:
    """Run the vision tower and compute the M-RoPE positions (engine thread, once per request)."""
    inner = model.model
    pixels = torch.cat([it.pixel_values for it in mm.items])
    grids = torch.tensor([it.grid for it in mm.items], dtype=torch.long)
    out = inner.get_image_features(pixels, grids, return_dict=True)
    embeds = torch.cat(list(out.pooler_output), dim=0)
    mm.embeds = embeds.to(model.get_input_embeddings().weight.dtype)
    starts, row = [], 0
    for it in mm.items:
        starts.append(row)
        row += it.length
    mm.starts = starts
    ids = torch.tensor([prompt])
    types = torch.zeros_like(ids, dtype=torch.int)
    for it in mm.items:
        types[0, it.offset:it.offset + it.length] = 1
    positions, deltas = inner.get_rope_index(ids, mm_token_type_ids=types, image_grid_thw=grids)
    mm.positions = positions[:, 0]
    mm.delta = int(deltas.reshape(-1)[0])


def merge_chunk(mm: VisionPrompt, embeds: torch.Tensor, start: int, count: int, pad: int) -> None:
    """Write the image embeddings of prompt positions ``start .. start+count-1`` into one row of a
    left-padded ``embeds`` (``[width, hidden]``; position ``start + q`` sits at column ``pad + q``)."""
    assert mm.embeds is not None
    for it, first in zip(mm.items, mm.starts, strict=True):
        lo, hi = max(it.offset, start), min(it.offset + it.length, start + count)
        if lo < hi:
            embeds[pad + lo - start:pad + hi - start] = mm.embeds[first + lo - it.offset:first + hi - it.offset]
