"""tokenwire's derender against vLLM 0.32's own answers, recorded by ``scripts/record_vllm_parsers.py``
into ``tests/data/vllm/parsers/FAMILY.json`` (each file's ``_source`` says how).

For every recorded case, the in-process app on the same tokenizer, template, config.json and parser
flags derenders the same output token ids after the same prompt ids:

- non-streaming, and streaming one token per call with the signed state carried between calls;
- both give vLLM's non-streaming split (content, reasoning, tool-call names and arguments, and the
  call ids where vLLM's are not random), unless the case records a deliberate difference (``differs``:
  tokenwire then gives vLLM's streaming split, or the split given there), which docs/parsers.md lists;
- finish_reason as vLLM's streaming derender reports it, on both sides (with tool calls "tool_calls";
  vLLM's non-streaming says "stop" there: docs/derender.md).

A generation that ended on an end token was recorded from vLLM without that token, as ``vllm serve``
detokenizes it (the recorder's docstring says why); tokenwire gets the ids as an engine sends them.

The render cases of each file check the prompt ids: tokenwire's ``/v1/chat/completions/render`` gives
the ids vLLM's render gave (or a 400 where vLLM refused the request); the ``messages_render`` cases do the
same for Anthropic requests through ``/v1/messages/render``. An entry's ``environ`` (vLLM's environment
when it was recorded, e.g. ``VLLM_SYSTEM_START_DATE`` for gpt-oss's date line) is tokenwire's too, and
a file's ``recorded_on`` is today's date for the templates that print it (granite-3.3's ``strftime_now``).
"""

from __future__ import annotations

import datetime
import functools
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.context import build_context
from server.gating import decide
from server.settings import Mode, Settings

DATA = Path(__file__).parents[1] / "data" / "vllm" / "parsers"
FILES = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(DATA.glob("*.json"))}
CASES = [(family, name) for family, data in FILES.items() for name in data["cases"]]
RENDERS = [(family, name) for family, data in FILES.items() for name in data.get("render", {})]
MESSAGES_RENDERS = [(family, name) for family, data in FILES.items() for name in data.get("messages_render", {})]
DOCS = (Path(__file__).parents[2] / "docs" / "parsers.md").read_text(encoding="utf-8")
# vLLM's ids that are random per call ("chatcmpl-tool-…" / 16 hex, Mistral's 9 alphanumerics): not compared
_RANDOM_ID = re.compile(r"^((chatcmpl-tool-)?[0-9a-f]{16}|[A-Za-z0-9]{9})$")
# the ids a parser takes from the model's output (Kimi-K2: functions.NAME:IDX), not random
_KIMI_ID = re.compile(r"^.+:\d+$")
SECRET = b"parity-0123456789-abcdefghijklmnopqrstuvwxyz"


def _pin_the_date(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A template's ``strftime_now`` (transformers' jinja global, read at render time) prints the
    day vLLM's answers were recorded on, not the day the test runs."""
    day = FILES[family].get("recorded_on")
    if day is None:
        return
    from transformers.utils import chat_template_utils

    noon = datetime.datetime.combine(datetime.date.fromisoformat(day), datetime.time(12))

    class _RecordedDay(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> _RecordedDay:
            return cls.fromtimestamp(noon.timestamp(), tz)

    monkeypatch.setattr(chat_template_utils, "datetime", _RecordedDay)


@functools.cache
def _model_dir(asset: str, config: str) -> Path:
    from server.assets import ensure

    src = ensure(asset)
    out = Path(tempfile.mkdtemp(prefix=f"parity-{asset}-"))
    for f in src.iterdir():
        if f.is_file() and f.name not in ("config.json", "generation_config.json"):
            (out / f.name).write_bytes(f.read_bytes())
    cfg = json.loads(config)
    (out / "config.json").write_text(json.dumps(cfg))
    eos = cfg.get("eos_token_id")
    if eos is not None:
        (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    return out


@functools.cache
def _client(asset: str, flags: str, config: str, environ: str = "{}") -> TestClient:
    settings = Settings(mode=Mode.RENDER, model_dir=_model_dir(asset, config), served_model_name="m",
                        environ=json.loads(environ), state_secret=SECRET, **json.loads(flags))
    ctx = build_context(settings, decide(Mode.RENDER, {}))
    client = TestClient(create_app(ctx))
    client.__enter__()
    return client


def client_for(entry: dict[str, Any]) -> TestClient:
    return _client(entry["asset"], json.dumps(entry["flags"], sort_keys=True), json.dumps(entry["config"], sort_keys=True),
                   json.dumps(entry.get("environ", {}), sort_keys=True))


def _norm(split: dict[str, Any]) -> dict[str, Any]:
    calls = []
    for call in split.get("tool_calls") or []:
        item = {"name": call["name"], "arguments": call["arguments"]}
        if call.get("id") and not _RANDOM_ID.match(call["id"]):
            item["id"] = call["id"]
        calls.append(item)
    return {"content": split.get("content") or "", "reasoning": split.get("reasoning") or "", "tool_calls": calls}


def _derender_full(client: TestClient, case: dict[str, Any]) -> dict[str, Any]:
    body = {"generate_response": {"request_id": "chatcmpl-rec", "choices": [
        {"index": 0, "finish_reason": case["finish_reason"], "token_ids": case["token_ids"]}]},
        "prompt_tokens": len(case["prompt_token_ids"]), "prompt_token_ids": case["prompt_token_ids"],
        "chat_request": case["request"]}
    r = client.post("/v1/chat/completions/derender", json=body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    message = choice["message"]
    calls = [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for c in message.get("tool_calls") or []]
    return {"content": message.get("content"), "reasoning": message.get("reasoning"), "tool_calls": calls,
            "finish_reason": choice["finish_reason"]}


def _derender_stream(client: TestClient, case: dict[str, Any]) -> dict[str, Any]:
    state = None
    content, reasoning, finish = [], [], None
    calls: dict[int, dict[str, Any]] = {}
    ids = case["token_ids"]
    for k, token in enumerate(ids):
        last = k == len(ids) - 1
        body = {"stream": True, "generate_chunk": {"request_id": "chatcmpl-rec", "choices": [
            {"index": 0, "finish_reason": case["finish_reason"] if last else None, "token_ids": [token]}]},
            "stream_state": state, "prompt_tokens": len(case["prompt_token_ids"]),
            "prompt_token_ids": case["prompt_token_ids"], "chat_request": {**case["request"], "stream": True}}
        r = client.post("/v1/chat/completions/derender", json=body)
        assert r.status_code == 200, f"token {k}: {r.text}"
        answer = r.json()
        state = answer["stream_state"]
        json.loads(json.dumps(state))  # the state is plain JSON the client carries
        for choice in answer["chunk"]["choices"]:
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            reasoning.append(delta.get("reasoning") or "")
            for tc in delta.get("tool_calls") or []:
                call = calls.setdefault(tc["index"], {"id": None, "name": None, "arguments": ""})
                if tc.get("id"):
                    assert call["id"] is None, "a call's id is sent once"
                    call["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    assert call["name"] is None, "a call's name is sent once"
                    call["name"] = fn["name"]
                call["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return {"content": "".join(content), "reasoning": "".join(reasoning),
            "tool_calls": [calls[i] for i in sorted(calls)], "finish_reason": finish}


def expected(case: dict[str, Any]) -> dict[str, Any]:
    differs = case.get("differs")
    if differs is None:
        want = _norm(case["vllm"]["full"])
        # vLLM's non-streaming derender gives every call a random id (online_derenderer.py), where
        # `vllm serve` returns the parser's own (Kimi-K2's functions.NAME:IDX) as its stream does
        for call, streamed in zip(want["tool_calls"], _norm(case["vllm"]["stream"])["tool_calls"], strict=False):
            if "id" not in call and _KIMI_ID.match(streamed.get("id", "")) and streamed["name"] == call["name"]:
                call["id"] = streamed["id"]
        return want
    if differs["expect"] == "stream":
        return _norm(case["vllm"]["stream"])
    return _norm(differs["expect"])


@pytest.mark.parametrize(("family", "name"), CASES, ids=[f"{f}/{n}" for f, n in CASES])
def test_the_derender_gives_vllms_split(family: str, name: str) -> None:
    case = FILES[family]["cases"][name]
    assert case["vllm"]["full"]["status"] == 200 and case["vllm"]["stream"]["status"] == 200, case["vllm"]
    client = client_for(case)
    want = expected(case)
    full = _derender_full(client, case)
    assert _norm(full) == want
    stream = _derender_stream(client, case)
    assert _norm(stream) == want
    if case.get("differs") is None:
        assert full["finish_reason"] == stream["finish_reason"] == case["vllm"]["stream"]["finish_reason"]


@pytest.mark.parametrize(("family", "name"), [c for c in CASES if "differs" in FILES[c[0]]["cases"][c[1]]],
                         ids=lambda v: str(v))
def test_every_deliberate_difference_is_documented(family: str, name: str) -> None:
    case = FILES[family]["cases"][name]
    assert case["differs"]["why"].strip()
    assert f"`{family}/{name}`" in DOCS, f"docs/parsers.md does not list the deliberate difference {family}/{name}"


@pytest.mark.parametrize(("family", "name"), RENDERS, ids=[f"{f}/{n}" for f, n in RENDERS])
def test_the_render_gives_vllms_prompt_ids(family: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _pin_the_date(family, monkeypatch)
    item = FILES[family]["render"][name]
    client = client_for(item)
    r = client.post("/v1/chat/completions/render", json={**item["request"], "model": "m"})
    if item["status"] != 200:
        assert r.status_code == 400, r.text
        return
    assert r.status_code == 200, r.text
    assert r.json()["token_ids"] == item["token_ids"]


@pytest.mark.parametrize(("family", "name"), MESSAGES_RENDERS, ids=[f"{f}/{n}" for f, n in MESSAGES_RENDERS])
def test_the_messages_render_gives_vllms_prompt_ids(family: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _pin_the_date(family, monkeypatch)
    item = FILES[family]["messages_render"][name]
    client = client_for(item)
    r = client.post("/v1/messages/render", json={**item["request"], "model": "m"})
    if item["status"] != 200:
        assert r.status_code == 400, r.text
        return
    assert r.status_code == 200, r.text
    assert r.json()["token_ids"] == item["token_ids"]
