"""The local engine with images (tiny-qwen2-vl, fp32): greedy output equals ``model.generate`` on
the processor's tensors, alone, sharing a batch with a text request, and with a prefill chunked
through an image; ``features`` that do not fit the prompt or the model are 400s naming the field."""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.errors import InvalidGenerateRequest
from engine.local.vision import VisionSpec, read_features
from engine.protocol import GenerateRequest, MultiModalFeatures
from session.protocol import ChatCompletionRequest
from session.render import Renderer
from session.render.vision import Vision
from tests.support.engine_harness import EngineHarness, request, running_engine
from tests.support.vision import VL_MODEL, VisionReference, data_url, image, openai_content, reference_content

NEW = 10
IMAGES = [image(0, 40, 70), image(1, 90, 60)]


@pytest.fixture(scope="module")
def vl_dir(asset: Callable[[str], Path]) -> Path:
    return asset(VL_MODEL)


@pytest.fixture(scope="module")
def renderer(vl_dir: Path, tokenizer: Callable[[str], Any]) -> Renderer:
    tok = tokenizer(VL_MODEL)
    return Renderer(tok, model_name=VL_MODEL, max_model_len=2048, vision=Vision.load(vl_dir, tok))


@pytest.fixture(scope="module")
def reference(vl_dir: Path) -> VisionReference:
    return VisionReference(vl_dir, "float32")


@pytest.fixture(scope="module")
def engine(vl_dir: Path) -> Iterator[EngineHarness]:
    with running_engine(vl_dir, dtype="float32") as h:
        yield h


def rendered(renderer: Renderer, count: int, **sampling: Any) -> GenerateRequest:
    body = {"messages": [{"role": "user", "content": openai_content([data_url(im) for im in IMAGES[:count]])}],
            "max_tokens": NEW, "temperature": 0, **sampling}
    wire = renderer.render_chat(ChatCompletionRequest.model_validate(body)).to_wire()
    return GenerateRequest.model_validate(wire)  # as the engine receives it: through JSON


def expected(reference: VisionReference, count: int) -> list[int]:
    return reference.greedy([{"role": "user", "content": reference_content(IMAGES[:count])}], NEW)


@pytest.mark.slow
def test_greedy_with_one_and_two_images_matches_model_generate(
        engine: EngineHarness, renderer: Renderer, reference: VisionReference) -> None:
    want = [expected(reference, 1), expected(reference, 2)]
    assert want[0] != want[1]  # the images change the output: the test can see a wrong merge
    got = [engine.run(rendered(renderer, k))[0].ids for k in (1, 2)]
    assert got == want


@pytest.mark.slow
def test_images_and_text_share_a_batch_and_both_stay_correct(
        engine: EngineHarness, renderer: Renderer, reference: VisionReference, tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer(VL_MODEL)
    text = tok.apply_chat_template([{"role": "user", "content": "Tell me about rivers."}],
                                   add_generation_prompt=True, tokenize=True, return_dict=False)
    want_text = reference.greedy_ids(list(text), NEW)
    one, two = rendered(renderer, 1), rendered(renderer, 2, n=2)
    got = engine.run(one, request(text, max_tokens=NEW), two, request(text, max_tokens=NEW - 4), stagger=0.02)
    assert got[0].ids == expected(reference, 1)
    assert got[1].ids == want_text and got[3].ids == want_text[:NEW - 4]
    assert got[2].tokens[0] == got[2].tokens[1] == expected(reference, 2)  # n=2 greedy: both choices
    assert engine.wait_idle() == 0


def test_a_prefill_chunked_through_an_image_matches(vl_dir: Path, renderer: Renderer,
                                                    reference: VisionReference) -> None:
    req = rendered(renderer, 2)
    assert req.features is not None
    first = req.features.mm_placeholders["image"][0]
    with running_engine(vl_dir, dtype="float32", max_num_batched_tokens=first.offset + 3) as h:
        assert h.run(req)[0].ids == expected(reference, 2)


def test_a_text_model_refuses_features(asset: Callable[[str], Path], renderer: Renderer) -> None:
    assert VisionSpec.read(asset("tiny-qwen3")) is None
    req = rendered(renderer, 1)
    assert req.features is not None
    with pytest.raises(InvalidGenerateRequest, match="does not accept images") as info:
        read_features(req.features, list(req.token_ids), None)
    assert info.value.param == "features"


# --- features that do not fit -----------------------------------------------------------------


def broken(req: GenerateRequest, edit: Callable[[dict[str, Any], list[int]], None]) -> tuple[MultiModalFeatures,
                                                                                             list[int]]:
    assert req.features is not None
    wire = copy.deepcopy(req.features.model_dump(mode="json"))
    prompt = list(req.token_ids)
    edit(wire, prompt)
    return MultiModalFeatures.model_validate(wire), prompt


def _item(w: dict[str, Any]) -> dict[str, Any]:
    return w["kwargs_data"]["image"][0]  # type: ignore[no-any-return]


def _grid(w: dict[str, Any], values: list[int]) -> None:
    import numpy as np

    _item(w)["image_grid_thw"]["data"] = base64.b64encode(np.array(values, dtype=np.int64).tobytes()).decode()


def _shift(w: dict[str, Any], p: list[int]) -> None:
    w["mm_placeholders"]["image"][0]["offset"] -= 1


def _stray(w: dict[str, Any], p: list[int]) -> None:
    p[1] = 151655


BROKEN: dict[str, tuple[Callable[[dict[str, Any], list[int]], None], str, str]] = {
    "offset past the prompt": (lambda w, p: w["mm_placeholders"]["image"][0].update(offset=len(p)),
                               "features.mm_placeholders", "ends past the prompt"),
    "range not on the placeholder tokens": (_shift, "features.mm_placeholders", "not the image placeholder token"),
    "length differs from the grid": (lambda w, p: _grid(w, [1, 4, 8]), "features.kwargs_data",
                                     "pixel_values must be a float tensor of shape [32, 1176]"),
    "grid not a multiple of the merge size": (lambda w, p: _grid(w, [1, 3, 6]), "features.kwargs_data",
                                              "multiples of the vision tower's merge size 2"),
    "pixel bytes cut": (lambda w, p: _item(w)["pixel_values"].update(data=_item(w)["pixel_values"]["data"][:-8]),
                        "features.kwargs_data", "bytes of data"),
    "pixels not base64": (lambda w, p: _item(w)["pixel_values"].update(data="@@@@"), "features.kwargs_data",
                          "not valid base64"),
    "integer pixels": (lambda w, p: _item(w)["pixel_values"].update(dtype="int32"), "features.kwargs_data",
                       "must be a float tensor"),
    "no kwargs_data": (lambda w, p: w.update(kwargs_data=None), "features.kwargs_data", "no multimodal cache"),
    "a cached item": (lambda w, p: w["kwargs_data"].update(image=[None]), "features.kwargs_data", "is null"),
    "a vLLM msgpack item": (lambda w, p: w["kwargs_data"].update(image=["bXNncGFjaw=="]), "features.kwargs_data",
                            "msgpack"),
    "a missing tensor": (lambda w, p: _item(w).pop("image_grid_thw"), "features.kwargs_data", "image_grid_thw"),
    "video": (lambda w, p: w["mm_hashes"].update(video=["x"]), "features.mm_hashes", "modality 'video'"),
    "lists of different lengths": (lambda w, p: w["mm_hashes"]["image"].append("x"), "features",
                                   "lists differ in length"),
    "a stray placeholder token": (_stray, "token_ids", "token_ids[1] is the image placeholder token"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_features_that_do_not_fit_are_400s_naming_the_field(renderer: Renderer, vl_dir: Path, case: str) -> None:
    edit, param, message = BROKEN[case]
    features, prompt = broken(rendered(renderer, 1), edit)
    with pytest.raises(InvalidGenerateRequest) as info:
        read_features(features, prompt, VisionSpec.read(vl_dir))
    assert info.value.status == 400
    assert (info.value.param, message in info.value.message) == (param, True), info.value.message


def test_the_engine_answers_a_bad_features_request_with_a_400(engine: EngineHarness, renderer: Renderer) -> None:
    req = rendered(renderer, 1)
    features, prompt = broken(req, _shift)
    bad = req.model_copy(update={"features": features, "token_ids": prompt})

    async def main() -> str:
        try:
            async for _ in engine.engine.generate(bad):
                pass
        except InvalidGenerateRequest as exc:
            return exc.param or ""
        return "no error"

    assert engine.call(main) == "features.mm_placeholders"
    assert engine.wait_idle() == 0


def test_the_remote_engine_passes_features_on_unchanged(renderer: Renderer) -> None:
    import asyncio
    import json

    import httpx

    from engine.remote import RemoteEngine

    sent: list[dict[str, Any]] = []

    async def remote(req: httpx.Request) -> httpx.Response:
        sent.append(json.loads(req.content))
        return httpx.Response(200, json={"request_id": "generate-tokens-x", "choices": [
            {"index": 0, "finish_reason": "length", "token_ids": [1]}]})

    ours = rendered(renderer, 2).to_wire()
    vllm = {**ours, "features": {"mm_hashes": {"image": ["h"]}, "mm_placeholders": {"image": [{"offset": 3,
            "length": 4}]}, "kwargs_data": {"image": ["bXNncGFjaw=="]}, "mm_metadata": {"image": [None]}}}

    from tests.support.http_answers import serve, stop_all

    async def main() -> None:
        engine = RemoteEngine(serve(remote), model_name="m", max_model_len=4096)
        try:
            for body in (ours, vllm):
                async for _ in engine.generate(GenerateRequest.model_validate(body)):
                    pass
        finally:
            await engine.close()

    try:
        asyncio.run(main())
    finally:
        stop_all()
    assert [b["features"] for b in sent] == [ours["features"], vllm["features"]]
