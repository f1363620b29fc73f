"""tokenwire's render answers against real vLLM 0.32 render samples, over a real server process.

The samples came from a vLLM render server with a "tiny-model" whose tokenizer is DeepSeek-V3's
vocabulary plus ``<|im_start|>``, ``<|im_end|>``, ``<tool_call>``, ``</tool_call>`` (ids
129280-129283), the Qwen2 chat template (Qwen2.5's with the plain default system prompt),
``max_model_len`` 4096 and a tool parser with auto tool choice. The fixture rebuilds that
tokenizer from the DeepSeek-V3.1 asset, and the answers must equal vLLM's except for the fields
documented as different in docs/render.md (``DOCUMENTED_DIFFERENCES`` below).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.slow

SAMPLES: dict[str, Any] = json.loads((Path(__file__).parents[1] / "data" / "vllm" / "render_samples.json").read_text())
OK_SAMPLES = sorted(k for k, v in SAMPLES.items() if not k.startswith("_") and v["status"] == 200)
# Fields of a render answer documented as different from vLLM (docs/render.md): random ids.
DOCUMENTED_DIFFERENCES = {"request_id"}
QWEN2_SYSTEM = "You are a helpful assistant."


def build_tiny_model_tokenizer(asset: Callable[[str], Path], dst: Path) -> Path:
    src = asset("deepseek-v3.1")
    spec = json.loads((src / "tokenizer.json").read_text())
    for i, (content, special) in enumerate([("<|im_start|>", True), ("<|im_end|>", True),
                                            ("<tool_call>", False), ("</tool_call>", False)]):
        spec["added_tokens"].append({"id": 129280 + i, "content": content, "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": False, "special": special})
    spec["post_processor"] = None  # the sample tokenizer adds no BOS to completion prompts
    dst.mkdir(parents=True)
    (dst / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    (dst / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "TokenizersBackend", "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|im_end|>", "model_max_length": 131072, "clean_up_tokenization_spaces": False}))
    template = (asset("qwen2.5") / "chat_template.jinja").read_text()
    qwen25_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    assert qwen25_system in template
    (dst / "chat_template.jinja").write_text(template.replace(qwen25_system, QWEN2_SYSTEM))
    (dst / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    return dst


@pytest.fixture(scope="module")
def client(asset: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    model = build_tiny_model_tokenizer(asset, tmp_path_factory.mktemp("vllm") / "tiny-model")
    args: list[str | Path] = ["launch", "render", model, "--served-model-name", "tiny-model",
            "--tool-call-parser", "hermes", "--enable-auto-tool-choice"]
    try:
        with ServerProcess(args) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
            yield c
    finally:
        shutil.rmtree(model, ignore_errors=True)


def without_documented(value: Any) -> Any:
    if isinstance(value, list):
        return [without_documented(v) for v in value]
    return {k: v for k, v in value.items() if k not in DOCUMENTED_DIFFERENCES}


@pytest.mark.parametrize("name", OK_SAMPLES)
def test_render_equals_the_vllm_sample_except_documented_fields(client: httpx.Client, name: str) -> None:
    sample = SAMPLES[name]
    r = client.post(sample["path"], json=sample["request"])
    assert r.status_code == 200, r.text
    ours = r.json()
    assert without_documented(ours) == without_documented(sample["response"])
    ids = [ours["request_id"]] if isinstance(ours, dict) else [g["request_id"] for g in ours]
    # vLLM's ids are PREFIX + 16 hex; a Responses id is OpenAI's length, resp_ + 48 hex (docs/responses.md)
    prefix, digits = {"/v1/completions/render": ("cmpl-", 16), "/v1/responses/render": ("resp_", 48)}.get(
        sample["path"], ("chatcmpl-", 16))
    assert all(i.startswith(prefix) and len(i) == len(prefix) + digits for i in ids)


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("requested", [4076, 4090, 4096])
def test_max_tokens_past_the_room_renders_as_vllm_fills_the_room(client: httpx.Client, field: str,
                                                                 requested: int) -> None:
    # vLLM 0.32 clamps a max_tokens the prompt leaves no room for to what is left (issue 20 item 3): the
    # same answer as its sample without max_tokens, where it fills in max_model_len - prompt_len (4075)
    sample = SAMPLES["chat_render_no_model"]
    assert "max_tokens" not in sample["request"] and sample["response"]["sampling_params"]["max_tokens"] == 4075
    r = client.post(sample["path"], json={**sample["request"], field: requested})
    assert r.status_code == 200, r.text
    assert without_documented(r.json()) == without_documented(sample["response"])


def test_the_unknown_model_error_matches_vllm_but_for_the_alias_list(client: httpx.Client) -> None:
    sample = SAMPLES["err_wrong_model"]
    r = client.post(sample["path"], json=sample["request"])
    assert r.status_code == sample["status"] == 404
    ours, theirs = r.json()["error"], sample["response"]["error"]
    assert {k: ours[k] for k in ("type", "param", "code")} == {k: theirs[k] for k in ("type", "param", "code")}
    # the same first sentence; then vLLM names its aliases ("Valid aliases: <path>"), tokenwire the
    # one model it serves
    first = "The model `nope` does not exist."
    assert theirs["message"].startswith(first)
    assert ours["message"] == f"{first} This server serves `tiny-model`."


def test_a_missing_field_error_matches_vllms_status_and_param(client: httpx.Client) -> None:
    sample = SAMPLES["chat_render_missing_messages"]
    r = client.post(sample["path"], json=sample["request"])
    assert r.status_code == sample["status"] == 400
    # vLLM's param is "body.messages" and its message a pydantic dump; ours names the field plainly
    assert r.json()["error"]["param"] == "messages"
    assert sample["response"]["error"]["param"] == "body.messages"
