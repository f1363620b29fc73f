"""``--generation-config`` as an operator meets it: ``tokenwire serve`` on a real model (the tiny-qwen3
asset, copied with a ``generation_config.json`` that sets sampling defaults), its start-up line, what
the local engine does with no sampling parameters, ``--generation-config vllm`` and the override,
and the one-line errors."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server_proc import ServerProcess, run_cli

pytestmark = pytest.mark.slow

NO_MODEL_LIBS = "import sys\nsys.modules['torch'] = None\nsys.modules['transformers'] = None\n"
# greedy by default, so the local engine's answer to a request without sampling parameters is fixed
MODEL_DEFAULTS = {"temperature": 0.0, "top_k": 20, "top_p": 0.95, "max_new_tokens": 5}
USER = [{"role": "user", "content": "Tell me a long story about the sea."}]


@pytest.fixture(scope="module")
def model_dir(asset: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny-qwen3 (its weights linked, not copied) with sampling defaults in its generation_config.json."""
    src = asset("tiny-qwen3")
    out = tmp_path_factory.mktemp("gen") / "tiny-qwen3"
    out.mkdir()
    for f in src.iterdir():
        if f.name != "generation_config.json":
            (out / f.name).symlink_to(f)
    config = json.loads((src / "generation_config.json").read_text())
    (out / "generation_config.json").write_text(json.dumps({**config, **MODEL_DEFAULTS}))
    return out


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[ServerProcess]:
    with ServerProcess(["serve", model_dir, "--enable-scale-out", "--max-model-len", "512"]) as srv:
        yield srv


def _chat(url: str, **fields: Any) -> dict[str, Any]:
    r = httpx.post(url + "/v1/chat/completions", json={"messages": USER, **fields}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_the_start_up_line_names_the_models_defaults(server: ServerProcess) -> None:
    assert ("sampling defaults from the model's generation_config.json: temperature=0.0, top_k=20, top_p=0.95, "
            "max_tokens=5 (a request's own values win; --generation-config vllm turns them off)") in server.output()


def test_a_request_without_sampling_parameters_is_sampled_as_the_model_asks(server: ServerProcess) -> None:
    rendered = httpx.post(server.url + "/v1/chat/completions/render", json={"messages": USER}, timeout=60).json()
    sp = rendered["sampling_params"]
    assert (sp["temperature"], sp.get("top_k"), sp["max_tokens"]) == (0.0, None, 5)  # greedy: vLLM drops top_k
    plain = [_chat(server.url) for _ in range(2)]
    greedy = _chat(server.url, temperature=0, max_tokens=5)
    texts = {c["choices"][0]["message"]["content"] for c in [*plain, greedy]}
    assert len(texts) == 1, texts  # the model's temperature 0: the same answer as an explicit greedy request
    assert all(c["usage"]["completion_tokens"] <= 5 for c in plain)  # its max_new_tokens: the default limit
    longer = _chat(server.url, max_tokens=8, temperature=0)  # a request's own limit wins
    assert longer["usage"]["completion_tokens"] > 5 or longer["choices"][0]["finish_reason"] == "stop"


def test_generation_config_vllm_and_the_override(model_dir: Path) -> None:
    args: list[str | Path] = ["serve", model_dir, "--enable-scale-out", "--max-model-len", "512",
                              "--generation-config", "vllm", "--override-generation-config", '{"top_p": 0.5}']
    with ServerProcess(args) as srv:
        r = httpx.post(srv.url + "/v1/chat/completions/render", json={"messages": USER}, timeout=60)
        output = srv.output()
    sp = r.json()["sampling_params"]
    assert (sp["temperature"], sp["top_p"], sp["max_tokens"]) == (1.0, 0.5, 512 - len(r.json()["token_ids"]))
    assert "sampling defaults from --override-generation-config: top_p=0.5 (a request's own values win)" in output


@pytest.mark.parametrize(("flags", "message"), [
    (["--override-generation-config", "[1]"],
     "tokenwire serve: error: argument --override-generation-config: must be a JSON object, such as "
     "'{\"temperature\": 0.5}', got '[1]' (see tokenwire serve --help)"),
    (["--override-generation-config", '{"temperature": -1}'],
     "tokenwire: error: --override-generation-config: temperature is -1, out of range (0 or more)"),
    (["--generation-config", "/nonexistent-folder"],
     "tokenwire: error: --generation-config /nonexistent-folder: not a directory (give a folder holding a "
     "generation_config.json, or auto, or vllm)"),
])
def test_a_bad_generation_config_flag_is_one_line_and_exit_2_before_any_model_loads(
        flags: list[str], message: str) -> None:
    done = run_cli(["serve", *flags], preamble=NO_MODEL_LIBS)
    assert done.returncode == 2, done.stderr
    assert done.stderr == message + "\n"


def test_a_bad_value_in_the_models_generation_config_is_one_line_and_exit_2(
        asset: Callable[[str], Path], tmp_path: Path) -> None:
    for f in asset("qwen3").iterdir():
        (tmp_path / f.name).symlink_to(f)
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": "hot"}))
    done = run_cli(["launch", "render", tmp_path, "--port", "0"])
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"tokenwire: error: {tmp_path / 'generation_config.json'}: temperature must be a number, got 'hot'")
