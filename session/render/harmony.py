"""gpt-oss prompts as vLLM 0.32 builds them: harmony messages, not a chat template.

The full rules: docs/render.md, "gpt-oss (harmony)".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from session.protocol.openai import ChatCompletionRequest
from session.render.harmony_messages import Message, harmony_messages
from session.render.harmony_tools import json_display, json_float, schema_to_typescript, tools_section

__all__ = ["DATE_ENV", "SYSTEM_INSTRUCTIONS_ENV", "FormattingToken", "HarmonyPrompt", "HarmonyRender",
           "harmony_messages", "is_harmony_model_type", "json_display", "render_pieces", "render_text",
           "schema_to_typescript", "tools_section"]

_float = json_float  # the name tests/session/render/test_render_harmony.py imports

DATE_ENV = "VLLM_SYSTEM_START_DATE"  # vLLM's pin for the "Current date" line
SYSTEM_INSTRUCTIONS_ENV = "VLLM_GPT_OSS_HARMONY_SYSTEM_INSTRUCTIONS"
CHANNELS = ("analysis", "commentary", "final")


class FormattingToken(str):
    """A harmony formatting token in a rendered prompt: one id (text pieces are plain ``str``,
    encoded as ordinary text even when they spell a token)."""

    __slots__ = ()


START, MESSAGE, END, CALL = (FormattingToken(t) for t in ("<|start|>", "<|message|>", "<|end|>", "<|call|>"))
CHANNEL, CONSTRAIN = FormattingToken("<|channel|>"), FormattingToken("<|constrain|>")
FORMATTING = (START, MESSAGE, END, CALL, CHANNEL, CONSTRAIN)


def is_harmony_model_type(model_type: str | None) -> bool:
    """vLLM 0.32 renders (and derenders) with harmony exactly when ``model_type`` is ``gpt_oss``."""
    return model_type == "gpt_oss"


@dataclass(frozen=True, slots=True)
class HarmonyPrompt:
    """The rendered prompt as pieces: text (each encoded on its own) and formatting tokens."""

    pieces: tuple[str, ...]

    @property
    def text(self) -> str:
        return "".join(self.pieces)


# --- rendering ---------------------------------------------------------------------------------


def render_pieces(msgs: list[Message]) -> HarmonyPrompt:
    """The library's ``render_conversation_for_completion`` (next role assistant) followed by
    vLLM's ``_use_legacy_tool_call_headers`` rewrite of assistant tool-call headers."""
    has_tools = any(m.tools for m in msgs)
    pieces: list[str] = []
    for m in msgs:
        pieces.append(START)
        if m.role == "assistant" and m.channel and m.recipient and m.content_type and m.name is None:
            # vLLM's legacy header: `assistant to=R<|channel|>CHANNEL TYPE`
            pieces += [f"assistant to={m.recipient}", CHANNEL, f"{m.channel} {m.content_type}"]
        else:
            pieces.append(m.name if m.role == "tool" and m.name is not None else m.role)
            if m.channel is not None:
                pieces += [CHANNEL, m.channel]
            if m.recipient is not None and m.recipient != "all":
                pieces.append(f" to={m.recipient}")
            if m.content_type is not None:
                pieces += [" ", CONSTRAIN, m.content_type]
        pieces.append(MESSAGE)
        if m.role == "system":
            pieces.append(_system_text(m, has_tools))
        else:
            pieces += m.contents
        pieces.append(CALL if m.role == "assistant" and m.recipient is not None else END)
    pieces += [START, "assistant"]
    return HarmonyPrompt(tuple(pieces))


def _system_text(m: Message, has_tools: bool) -> str:
    top, effort = m.contents
    channels = f"# Valid channels: {', '.join(CHANNELS)}. Channel must be included for every message."
    if has_tools:
        channels += "\nCalls to these tools must go to the commentary channel: 'functions'."
    return "\n\n".join([top, effort, channels])


def render_text(req: ChatCompletionRequest, *, start_date: str, system_instructions: bool = False) -> str:
    """The prompt's text (special tokens spelled out): for logs and tests."""
    return render_pieces(harmony_messages(req, start_date=start_date, system_instructions=system_instructions)).text


# --- ids ---------------------------------------------------------------------------------------


class HarmonyRender:
    """Chat requests → harmony prompt ids for one tokenizer (thread-safe; built once per server).

    ``start_date`` pins the ``Current date`` line (``VLLM_SYSTEM_START_DATE``); without it each
    render asks ``today`` (the local date, ``YYYY-MM-DD``), as vLLM reads its clock per request.
    """

    def __init__(self, tokenizer: Any, *, start_date: str | None = None, system_instructions: bool = False,
                 today: Callable[[], str] | None = None) -> None:
        self.start_date = start_date
        self.system_instructions = system_instructions
        self._today = today or _local_date
        self._rust = _ordinary_tokenizer(tokenizer)
        self._slow = tokenizer if self._rust is None else None
        vocab = tokenizer.get_vocab()
        missing = [t for t in FORMATTING if t not in vocab]
        if missing:
            raise ValueError(f"the tokenizer lacks harmony's formatting tokens {missing}: not a gpt-oss tokenizer")
        self._special = {t: int(vocab[t]) for t in FORMATTING}

    @classmethod
    def from_environ(cls, tokenizer: Any, environ: Mapping[str, str]) -> HarmonyRender:
        """vLLM's two environment settings for harmony prompts (read once, as vLLM reads them)."""
        flag = environ.get(SYSTEM_INSTRUCTIONS_ENV, "0").strip() or "0"
        try:
            system_instructions = bool(int(flag))
        except ValueError:
            raise ValueError(f"{SYSTEM_INSTRUCTIONS_ENV} must be an integer (0 or 1), got {flag!r}") from None
        return cls(tokenizer, start_date=environ.get(DATE_ENV) or None, system_instructions=system_instructions)

    def prompt(self, req: ChatCompletionRequest) -> HarmonyPrompt:
        date = self.start_date or self._today()
        return render_pieces(harmony_messages(req, start_date=date, system_instructions=self.system_instructions))

    def ids(self, req: ChatCompletionRequest) -> list[int]:
        return self.encode(self.prompt(req))

    def encode(self, prompt: HarmonyPrompt) -> list[int]:
        texts = [p for p in prompt.pieces if not isinstance(p, FormattingToken)]
        encoded = iter(self._encode_texts(texts))
        ids: list[int] = []
        for p in prompt.pieces:
            if isinstance(p, FormattingToken):
                ids.append(self._special[p])
            else:
                ids += next(encoded)
        return ids

    def _encode_texts(self, texts: list[str]) -> list[list[int]]:
        if self._rust is not None:
            return [e.ids for e in self._rust.encode_batch_fast(texts, add_special_tokens=False)]
        assert self._slow is not None
        return [list(self._slow(t, add_special_tokens=False, split_special_tokens=True)["input_ids"]) for t in texts]


def _local_date() -> str:
    import datetime

    return datetime.datetime.now().strftime("%Y-%m-%d")


def _ordinary_tokenizer(tokenizer: Any) -> Any:
    """A private copy of the Rust tokenizer that reads special-token text as ordinary text."""
    from tokenizers import Tokenizer

    backend = getattr(tokenizer, "_tokenizer", None)
    if not isinstance(backend, Tokenizer):
        return None
    rust = Tokenizer.from_str(backend.to_str())
    rust.no_truncation()
    rust.no_padding()
    rust.encode_special_tokens = True
    return rust
