"""tokenwire's derender routes against vLLM 0.32's answers for issue 20 items 1, 2 and 4
(``tests/data/vllm/issue20_answers.json``; what each answer holds is said in its ``_source``): the
same request to an in-process app with the same tokenizer, model directory and parsers gives the
fields vLLM gave."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings

ANSWERS: dict[str, Any] = json.loads((Path(__file__).parents[1] / "data" / "vllm" / "issue20_answers.json").read_text())
CASES = sorted(k for k in ANSWERS if not k.startswith("_"))


@pytest.mark.parametrize("name", CASES)
def test_the_derender_gives_vllms_answer(name: str, asset: Callable[[str], Path],
                                         tokenizer: Callable[[str], Any]) -> None:
    case = ANSWERS[name]
    settings = Settings(mode=Mode.RENDER, model_dir=asset(case["model"]), served_model_name="m", environ={},
                        state_secret=b"answers-0123456789-abcdefghijklmnopqrstuvwxyz", **case["flags"])
    ctx = ServerContext(settings=settings, gating=decide(Mode.RENDER, {}), tokenizer=tokenizer(case["model"]),
                        max_model_len=4096)
    if "text" in case:  # the ids are that text's
        ids = case["request"]["generate_response"]["choices"][0]["token_ids"]
        assert tokenizer(case["model"]).decode(ids) == case["text"]
    with TestClient(create_app(ctx)) as client:
        r = client.post("/v1/chat/completions/derender", json=case["request"])
    want = case["vllm"]
    assert r.status_code == want["status"], r.text
    message = r.json()["choices"][0]["message"]
    for field, value in want["message"].items():
        if field == "tool_calls":
            assert [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                    for c in message["tool_calls"]] == value
        else:
            assert message[field] == value, field
