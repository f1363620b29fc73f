"""tokenwire's render answers under ``--generation-config`` against vLLM 0.32's render server.

tests/data/vllm/generation_render.json holds ``vllm launch render DIR`` answers (recorded by
scripts/record_vllm_generation_render.py) for chat, streamed chat, completion and Anthropic
messages requests, with and without sampling fields, under four configurations: Qwen3's
generation_config.json sampling values; a file with ``max_new_tokens``, ``repetition_penalty``
and ``min_p``; ``--generation-config vllm`` with an override that caps the output; and an override
that replaces one value and removes another. tokenwire's ``launch render`` app renders the same
requests on the same directory with the same flags: each answer equals vLLM's but for the random
``request_id`` (docs/render.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.context import ServerContext, model_max_len
from server.gating import decide
from server.settings import Mode, Settings

RECORDED: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "vllm" / "generation_render.json").read_text())
SECRET = b"test-state-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


def _without_id(answer: Any) -> Any:
    if isinstance(answer, list):
        return [_without_id(a) for a in answer]
    return {k: v for k, v in answer.items() if k != "request_id"}


@pytest.mark.parametrize("name", sorted(RECORDED["configs"]))
def test_render_answers_equal_vllms_under_each_generation_config(
        name: str, asset: Callable[[str], Path], tokenizer: Callable[[str], Any], tmp_path: Path) -> None:
    spec = RECORDED["configs"][name]
    directory = tmp_path / "model"
    directory.mkdir()
    for f in asset(RECORDED["asset"]).iterdir():
        if f.is_file():
            (directory / f.name).symlink_to(f)
    (directory / "config.json").write_text(json.dumps(RECORDED["config"]))
    (directory / "generation_config.json").write_text(json.dumps(spec["generation_config"]))
    flags = spec["flags"]
    settings = Settings(mode=Mode.RENDER, model_dir=directory, served_model_name="m", environ={}, state_secret=SECRET,
                        generation_config=flags.get("generation_config", "auto"),
                        override_generation_config=flags.get("override_generation_config", {}))
    tok = tokenizer(RECORDED["asset"])
    ctx = ServerContext(settings=settings, gating=decide(Mode.RENDER, {}), tokenizer=tok,
                        max_model_len=model_max_len(directory, tok, None))
    with TestClient(create_app(ctx)) as client:
        for req in RECORDED["requests"]:
            want = spec["answers"][req["name"]]
            r = client.post(req["path"], json={"model": "m", **req["body"]})
            assert r.status_code == want["status"], (req["name"], r.text)
            assert _without_id(r.json()) == _without_id(want["response"]), req["name"]
