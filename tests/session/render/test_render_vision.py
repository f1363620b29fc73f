"""Render with images (tiny-qwen2-vl): token ids and tensors equal the model's own processor, the
features survive JSON, and every bad image is a 400 naming its content part."""

from __future__ import annotations

import base64
import hashlib
import io
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from engine.protocol import GenerateRequest, TensorData
from session.errors import RenderError
from session.protocol import ChatCompletionRequest, MessagesRequest
from session.render import Renderer
from session.render.images import ImageLimits
from session.render.vision import Vision
from tests.support.vision import (
    VL_MODEL,
    data_url,
    decoded,
    encoded,
    image,
    openai_content,
    png_header,
    reference_content,
    reference_processor,
)

ROOT = Path(__file__).resolve().parents[3]
IMAGE_PAD = 151655


@pytest.fixture(scope="module")
def vl_dir(asset: Callable[[str], Path]) -> Path:
    return asset(VL_MODEL)


@pytest.fixture(scope="module")
def vl_tok(tokenizer: Callable[[str], Any]) -> Any:
    return tokenizer(VL_MODEL)


@pytest.fixture(scope="module")
def renderer(vl_dir: Path, vl_tok: Any) -> Renderer:
    return Renderer(vl_tok, model_name=VL_MODEL, max_model_len=2048, vision=Vision.load(vl_dir, vl_tok))


@pytest.fixture(scope="module")
def processor(vl_dir: Path) -> Any:
    return reference_processor(vl_dir)


def chat(content: Any, **body: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": content}], **body})


def array(t: TensorData) -> np.ndarray[Any, Any]:
    return np.frombuffer(base64.b64decode(t.data), dtype=t.dtype).reshape(t.shape)


IMAGES = [image(0, 40, 70), image(1, 90, 60), image(2, 150, 130)]


@pytest.mark.parametrize("count", [1, 2])
def test_render_gives_the_processors_token_ids_and_tensors(renderer: Renderer, processor: Any, count: int) -> None:
    imgs = IMAGES[:count]
    messages = [{"role": "system", "content": "Look closely."},
                {"role": "user", "content": reference_content(imgs)}]
    want = processor.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=True,
                                         return_tensors="np")
    req = ChatCompletionRequest.model_validate({"messages": [
        {"role": "system", "content": "Look closely."},
        {"role": "user", "content": openai_content([data_url(im) for im in imgs])}]})
    out = renderer.render_chat(req)
    assert out.token_ids == want["input_ids"][0].tolist()
    features = out.features
    assert features is not None and features.kwargs_data is not None
    items = features.kwargs_data["image"]
    assert len(items) == count
    pixel_values = np.concatenate([array(it["pixel_values"]) for it in items if isinstance(it, dict)])
    grids = np.stack([array(it["image_grid_thw"]) for it in items if isinstance(it, dict)])
    assert np.array_equal(pixel_values, want["pixel_values"])
    assert np.array_equal(grids, want["image_grid_thw"])
    # each placeholder range is one run of <|image_pad|>, as long as the merged grid
    ids = np.array(out.token_ids)
    for r, grid in zip(features.mm_placeholders["image"], grids, strict=True):
        assert (ids[r.offset:r.offset + r.length] == IMAGE_PAD).all()
        assert ids[r.offset - 1] != IMAGE_PAD and ids[r.offset + r.length] != IMAGE_PAD
        assert r.length == int(grid.prod()) // 4
    assert int((ids == IMAGE_PAD).sum()) == sum(r.length for r in features.mm_placeholders["image"])
    assert features.mm_hashes["image"] == [hashlib.sha256(encoded(im)).hexdigest() for im in imgs]


def test_features_round_trip_through_json(renderer: Renderer) -> None:
    out = renderer.render_chat(chat(openai_content([data_url(IMAGES[0]), data_url(IMAGES[1])])))
    wire = orjson.loads(orjson.dumps(out.to_wire()))
    back = GenerateRequest.model_validate(wire)
    assert back.features == out.features
    assert back.token_ids == out.token_ids
    assert orjson.loads(orjson.dumps(back.to_wire())) == wire
    f = wire["features"]
    assert set(f) >= {"mm_hashes", "mm_placeholders", "kwargs_data"}
    item = f["kwargs_data"]["image"][1]
    assert item["pixel_values"]["dtype"] == "float32" and item["image_grid_thw"]["dtype"] == "int64"
    assert item["image_grid_thw"]["shape"] == [3]


@pytest.mark.parametrize("fmt", ["JPEG", "WEBP"])
def test_jpeg_webp_and_raw_base64_render_like_the_processor(renderer: Renderer, processor: Any, fmt: str) -> None:
    img = IMAGES[2]
    raw = base64.b64encode(encoded(img, fmt)).decode()
    want = processor.apply_chat_template([{"role": "user", "content": reference_content([decoded(img, fmt)])}],
                                         tokenize=True, add_generation_prompt=True, return_dict=True,
                                         return_tensors="np")
    for url in (data_url(img, fmt), raw):
        out = renderer.render_chat(chat(openai_content([url])))
        assert out.token_ids == want["input_ids"][0].tolist()
        assert out.features is not None and out.features.kwargs_data is not None
        item = out.features.kwargs_data["image"][0]
        assert isinstance(item, dict) and np.array_equal(array(item["pixel_values"]), want["pixel_values"])


def test_an_anthropic_image_block_renders_like_the_openai_part(renderer: Renderer) -> None:
    img = encoded(IMAGES[0])
    msg = MessagesRequest.model_validate({"model": VL_MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": base64.b64encode(img).decode()}},
        {"type": "text", "text": "What is in the picture?"}]}]})
    a = renderer.render_messages(msg)
    b = renderer.render_chat(chat(openai_content([data_url(IMAGES[0])]), max_tokens=8))
    assert a.token_ids == b.token_ids and a.features == b.features


def test_the_assistant_mask_covers_the_expanded_prompt(vl_dir: Path, vl_tok: Any) -> None:
    template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}{% generation %}"
                "{{ m.content[0].text }}{% endgeneration %}{% else %}{% for c in m.content %}"
                "{% if c.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c.text }}"
                "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}")
    r = Renderer(vl_tok, model_name=VL_MODEL, max_model_len=2048, chat_template=template,
                 vision=Vision.load(vl_dir, vl_tok))
    req = ChatCompletionRequest.model_validate({"return_assistant_tokens_mask": True, "messages": [
        {"role": "user", "content": openai_content([data_url(IMAGES[0])])},
        {"role": "assistant", "content": "A picture."}]})
    out = r.render_chat(req)
    assert out.assistant_tokens_mask is not None and len(out.assistant_tokens_mask) == len(out.token_ids)
    answer = vl_tok.encode("A picture.", add_special_tokens=False)
    first = len(out.token_ids) - len(answer) - 2  # "...A picture.<|im_end|>\n"
    assert out.token_ids[first:first + len(answer)] == answer
    assert out.assistant_tokens_mask[first:first + len(answer)] == [1] * len(answer)
    assert sum(out.assistant_tokens_mask) == len(answer)


def test_a_string_template_gets_the_placeholder_text_before_the_message_text(vl_dir: Path, vl_tok: Any) -> None:
    template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    r = Renderer(vl_tok, model_name=VL_MODEL, max_model_len=2048, chat_template=template,
                 vision=Vision.load(vl_dir, vl_tok))
    out = r.render_chat(chat(openai_content([data_url(IMAGES[0])], text="hi")))
    n = out.features.mm_placeholders["image"][0].length if out.features else 0
    text = ("<|im_start|>user\n<|vision_start|>" + "<|image_pad|>" * n + "<|vision_end|>\nhi<|im_end|>\n")
    assert out.token_ids == vl_tok.encode(text, add_special_tokens=False)


# --- bad images: a 400 naming the part and what to fix -------------------------------------------


def b64(data: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64,{base64.b64encode(data).decode()}"


PNG = encoded(IMAGES[0])
BAD = {
    "truncated": (b64(PNG[: len(PNG) // 2]), "corrupt or truncated"),
    "huge dimensions (header only)": (b64(png_header(100_000, 100_000)), "has far too many pixels"),
    "over the pixel limit": (b64(png_header(5000, 5000)), "5000x5000 pixels"),
    "a side over the limit": (b64(png_header(20_000, 2)), "20000x2 pixels"),
    "gif data": (b64(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"), "not the PNG image"),
    "declared gif": (b64(PNG, "image/gif"), "unsupported image type 'image/gif'"),
    "text data": (b64(b"just some text, not an image at all", "text/plain"), "unsupported image type"),
    "not base64": ("data:image/png;base64,%%%not-base64%%%", "not valid base64"),
    "raw not base64": ("@@@@", "not valid base64"),
    "not a base64 data url": ("data:image/png,rawbytes", "only base64 data URLs"),
    "empty": ("data:image/png;base64,", "empty"),
    "an http url": ("https://example.com/cat.png", "does not fetch images from URLs"),
    "a file url": ("file:///etc/passwd", "does not fetch images from URLs"),
    "extreme aspect ratio": (data_url(image(3, 2, 500)), "refused the image"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_image_is_a_400_naming_the_part(renderer: Renderer, case: str) -> None:
    url, expected = BAD[case]
    content = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": url}}]
    with pytest.raises(RenderError) as info:
        renderer.render_chat(chat(content))
    assert info.value.status == 400
    assert info.value.param == "messages.0.content.1.image_url"
    assert info.value.message.startswith("messages[0].content[1].image_url: ")
    assert expected in info.value.message


def test_a_bad_anthropic_image_names_the_block(renderer: Renderer) -> None:
    def render(source: dict[str, Any]) -> RenderError:
        msg = MessagesRequest.model_validate({"model": VL_MODEL, "max_tokens": 8, "system": "s", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image", "source": source}]}]})
        with pytest.raises(RenderError) as info:
            renderer.render_messages(msg)
        return info.value

    err = render({"type": "base64", "media_type": "image/png", "data": base64.b64encode(PNG[:100]).decode()})
    assert err.param == "messages.0.content.1.source" and "corrupt or truncated" in err.message
    err = render({"type": "url", "url": "https://example.com/cat.png"})
    assert err.param == "messages.0.content.1.source" and "does not fetch images" in err.message
    err = render({"type": "base64", "data": "AAAA"})
    assert err.param == "messages.0.content.1.source" and "media_type" in err.message


def test_limits_on_bytes_and_count(vl_dir: Path, vl_tok: Any) -> None:
    limits = ImageLimits(max_bytes=len(PNG) - 1, max_images=2)
    r = Renderer(vl_tok, model_name=VL_MODEL, max_model_len=2048, vision=Vision.load(vl_dir, vl_tok, limits))
    with pytest.raises(RenderError, match=f"larger than {len(PNG) - 1} bytes"):
        r.render_chat(chat(openai_content([data_url(IMAGES[0])])))
    small = data_url(image(4, 8, 8))
    r.render_chat(chat(openai_content([small, small])))
    with pytest.raises(RenderError, match="3 images; at most 2") as info:
        r.render_chat(chat(openai_content([small, small, small])))
    assert info.value.param == "messages.0.content.2.image_url"


def test_a_placeholder_typed_in_the_text_or_a_cut_prompt_is_a_400(renderer: Renderer) -> None:
    with pytest.raises(RenderError, match="2 <\\|image_pad\\|> tokens for 1 images"):
        renderer.render_chat(chat(openai_content([data_url(IMAGES[0])], text="<|image_pad|>")))
    with pytest.raises(RenderError, match="would cut a prompt") as info:
        renderer.render_chat(chat(openai_content([data_url(IMAGES[0])]), truncate_prompt_tokens=10))
    assert info.value.param == "truncate_prompt_tokens"


@pytest.mark.slow
def test_the_render_tier_decodes_and_processes_images_without_torch(vl_dir: Path) -> None:
    code = (
        "import sys\n"
        "from server.cli import keep_torch_out\n"
        "keep_torch_out()\n"
        "from pathlib import Path\n"
        "from transformers import AutoTokenizer\n"
        "from session.protocol import ChatCompletionRequest\n"
        "from session.render import Renderer\n"
        "from session.render.vision import Vision\n"
        f"d = Path({str(vl_dir)!r})\n"
        "tok = AutoTokenizer.from_pretrained(str(d))\n"
        "r = Renderer(tok, model_name='m', max_model_len=2048, vision=Vision.load(d, tok))\n"
        "req = ChatCompletionRequest.model_validate({'messages': [{'role': 'user', 'content': [\n"
        f"    {{'type': 'image_url', 'image_url': {{'url': {data_url(IMAGES[0])!r}}}}}]}}]}})\n"
        "out = r.render_chat(req)\n"
        "assert sys.modules['torch'] is None\n"
        "print(out.features.mm_placeholders['image'][0].length)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "6"  # 40×70 → 56×84 → a 4×6 patch grid → 6 merged tokens


def test_png_header_helper_is_a_valid_header() -> None:
    from PIL import Image

    assert Image.open(io.BytesIO(png_header(300, 200))).size == (300, 200)
