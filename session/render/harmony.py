"""gpt-oss prompts as vLLM 0.32 builds them: harmony messages, not a chat template.

The full rules: docs/render.md, "gpt-oss (harmony)".
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from session.errors import RenderError
from session.protocol.openai import ChatCompletionRequest, ChatMessage, Tool

__all__ = ["DATE_ENV", "SYSTEM_INSTRUCTIONS_ENV", "FormattingToken", "HarmonyPrompt", "HarmonyRender", "is_harmony_model_type",
           "render_text", "schema_to_typescript"]

DATE_ENV = "VLLM_SYSTEM_START_DATE"  # vLLM's pin for the "Current date" line
SYSTEM_INSTRUCTIONS_ENV = "VLLM_GPT_OSS_HARMONY_SYSTEM_INSTRUCTIONS"

MODEL_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
KNOWLEDGE_CUTOFF = "2024-06"
CHANNELS = ("analysis", "commentary", "final")
EFFORTS = ("high", "medium", "low")  # vLLM's REASONING_EFFORT, in its order (the error lists them so)



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


# --- the conversation --------------------------------------------------------------------------


@dataclass(slots=True)
class _Msg:
    """One harmony message: the author (role, or a tool's name), header fields and text contents."""

    role: str
    contents: list[str]
    name: str | None = None  # a tool author's name (``functions.NAME``)
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None
    tools: bool = field(default=False)  # a developer message declaring function tools


@dataclass(frozen=True, slots=True)
class HarmonyPrompt:
    """The rendered prompt as pieces: text (each encoded on its own) and formatting tokens."""

    pieces: tuple[str, ...]

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def _flatten(content: Any) -> str | None:
    """vLLM's ``flatten_input_text_content``: a string as is; parts' texts joined (no separator);
    ``None`` when there is no text."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        else:
            text = _part_text(part)
            if text is not None:
                texts.append(text)
    return "".join(texts) if texts else None


def _part_text(part: Any) -> str | None:
    text = getattr(part, "text", None)
    if text is None and part.model_extra:
        text = part.model_extra.get("text")
    return text if isinstance(text, str) else None


def _reasoning(msg: ChatMessage) -> str | None:
    return msg.reasoning if msg.reasoning is not None else msg.reasoning_content


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    if not value:
        return ""
    return json.dumps(value, ensure_ascii=False)


def _effort(value: str | None) -> str | None:
    if value is None:
        return None
    if value == "none":
        raise RenderError(f"Harmony does not support reasoning_effort={value!r}", param="reasoning_effort")
    if value not in EFFORTS:
        raise RenderError(f"reasoning_effort={value!r} is not supported by Harmony. Supported values are: "
                          f"{', '.join(EFFORTS)}.", param="reasoning_effort")
    return value


class _Builder:
    def __init__(self, *, start_date: str, system_instructions: bool) -> None:
        self.start_date = start_date
        self.system_instructions = system_instructions

    def system(self, *, effort: str | None = None, instructions: str | None = None) -> _Msg:
        identity = MODEL_IDENTITY
        if instructions is not None and self.system_instructions:
            identity = f"{identity}\n{instructions}" if identity else instructions
        # the sections; the channels line's last part depends on the whole conversation (render)
        top = "\n".join([identity, f"Knowledge cutoff: {KNOWLEDGE_CUTOFF}", f"Current date: {self.start_date}"])
        return _Msg("system", [top, f"Reasoning: {effort or 'medium'}"])

    def developer(self, *, instructions: str | None, tools: list[Tool] | None) -> _Msg:
        sections: list[str] = []
        if instructions is not None and not self.system_instructions:
            sections += ["# Instructions", instructions]
        declared = False
        if tools:
            sections.append(tools_section(tools))
            declared = True
        return _Msg("developer", ["\n\n".join(sections)], tools=declared)

    def system_or_developer(self, role: str, instructions: str) -> _Msg:
        if role == "system" and self.system_instructions:
            return self.system(instructions=instructions)
        return self.developer(instructions=instructions, tools=None)


def harmony_messages(req: ChatCompletionRequest, *, start_date: str, system_instructions: bool) -> list[_Msg]:
    """The harmony conversation of a chat request (vLLM's preamble and message rules)."""
    b = _Builder(start_date=start_date, system_instructions=system_instructions)
    messages = list(req.messages)
    instructions: str | None = None
    if messages and messages[0].role in ("system", "developer"):
        instructions = _flatten(messages[0].content)
        messages = messages[1:]
    effort = _effort(req.reasoning_effort)
    tools = req.tools
    out = [b.system(effort=effort, instructions=instructions if system_instructions else None)]
    developer_instructions = None if system_instructions else instructions
    if developer_instructions or tools:
        out.append(b.developer(instructions=developer_instructions, tools=tools))
    names: dict[str | None, str] = {}
    for msg in messages:
        for call in msg.tool_calls or []:
            names[call.id] = call.function.name
    for index, msg in enumerate(messages):
        out += _chat_message(b, msg, names, index + (len(req.messages) - len(messages)))
    return _drop_analysis(out)


def _chat_message(b: _Builder, msg: ChatMessage, names: Mapping[str | None, str], index: int) -> list[_Msg]:
    role = msg.role
    out: list[_Msg] = []
    if role == "assistant" and msg.tool_calls:
        content = _flatten(msg.content)
        if content:
            out.append(_Msg("assistant", [content], channel="commentary"))
        reasoning = _reasoning(msg)
        if reasoning:
            out.append(_Msg("assistant", [reasoning], channel="analysis"))
        for call in msg.tool_calls:
            out.append(_Msg("assistant", [_arguments(call.function.arguments)], channel="commentary",
                            recipient=f"functions.{call.function.name}", content_type="json"))
        return out
    if role == "tool":
        name = names.get(msg.tool_call_id if msg.tool_call_id is not None else "", "")
        return [_Msg("tool", [_flatten(msg.content) or ""], name=f"functions.{name}", channel="commentary",
                     recipient="assistant")]
    if role == "assistant":
        reasoning = _reasoning(msg)
        if reasoning:
            out.append(_Msg("assistant", [reasoning], channel="analysis"))
    contents = _contents(msg.content)
    if role == "assistant":
        if contents and contents[0]:
            out.append(_Msg("assistant", contents, channel="final"))
    elif role in ("system", "developer"):
        instructions = _flatten(msg.content)
        if instructions is not None:
            out.append(b.system_or_developer(role, instructions))
    elif role == "user":
        out.append(_Msg("user", contents))
    else:
        raise RenderError(f"messages[{index}]: harmony has no role {role!r} (its roles: system, developer, user, "
                          "assistant, tool).", param=f"messages.{index}.role")
    return out


def _contents(content: Any) -> list[str]:
    """A user / final message's text contents, one per part (each encoded on its own); a part
    without text (an image) is an empty text, as vLLM makes it."""
    if content is None:
        return [""]
    if isinstance(content, str):
        return [content]
    return [part if isinstance(part, str) else (_part_text(part) or "") for part in content]


def _drop_analysis(msgs: list[_Msg]) -> list[_Msg]:
    """vLLM's ``auto_drop_analysis_messages``: analysis messages before the last assistant
    ``final`` message go (the library's own dropping is off)."""
    last = -1
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].role == "assistant" and msgs[i].channel == "final":
            last = i
            break
    return [m for i, m in enumerate(msgs) if not (i < last and m.channel == "analysis")]


# --- rendering ---------------------------------------------------------------------------------


def render_pieces(msgs: list[_Msg]) -> HarmonyPrompt:
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


def _system_text(m: _Msg, has_tools: bool) -> str:
    top, effort = m.contents
    channels = f"# Valid channels: {', '.join(CHANNELS)}. Channel must be included for every message."
    if has_tools:
        channels += "\nCalls to these tools must go to the commentary channel: 'functions'."
    return "\n\n".join([top, effort, channels])


def render_text(req: ChatCompletionRequest, *, start_date: str, system_instructions: bool = False) -> str:
    """The prompt's text (special tokens spelled out): for logs and tests."""
    return render_pieces(harmony_messages(req, start_date=start_date, system_instructions=system_instructions)).text


# --- tools: harmony's TypeScript-like declarations ---------------------------------------------


def _lines(text: str) -> list[str]:
    """Rust's ``str::lines``: no last empty line, a ``\\r`` before each ``\\n`` dropped."""
    if not text:
        return []
    parts = text.split("\n")
    if text.endswith("\n"):
        parts.pop()
    return [p[:-1] if p.endswith("\r") else p for p in parts]


def tools_section(tools: list[Tool]) -> str:
    """The ``# Tools`` section with the ``functions`` namespace (no namespace description)."""
    body = ["## functions\n", "namespace functions {\n"]
    for tool in tools:
        fn = tool.function
        body += [f"// {line}" for line in _lines(fn.description or "")]
        if fn.parameters is not None:
            body.append(f"type {fn.name} = (_: {schema_to_typescript(fn.parameters, '')}) => any;\n")
        else:
            body.append(f"type {fn.name} = () => any;\n")
    body.append("} // namespace functions")
    return "\n\n".join(["# Tools", "\n".join(body)])


def _get(schema: Any, key: str) -> Any:
    return schema.get(key) if isinstance(schema, dict) else None


def _is_enum(schema: Any) -> bool:
    values = _get(schema, "enum")
    return isinstance(values, list) and bool(values)


def _nullable(schema: Any, rendered: str) -> str:
    if _get(schema, "nullable") is True and "null" not in rendered:
        return f"{rendered} | null"
    return rendered


def _default_comment(schema: Any, default: Any, *, quote_enum_strings: bool) -> str:
    """``default: …``: a string default raw in quotes, an enum's string raw (or as JSON where the
    library displays the value), anything else as compact JSON."""
    if isinstance(default, str):
        if not _is_enum(schema):
            return f'default: "{default}"'
        if not quote_enum_strings:
            return f"default: {default}"
    return f"default: {json_display(default)}"


def schema_to_typescript(schema: Any, indent: str) -> str:
    """oss-harmony's ``json_schema_to_typescript``: a tool's JSON schema as the TypeScript-like
    type the model was trained on (descriptions, defaults and examples as ``//`` comments)."""
    one_of = _get(schema, "oneOf")
    if isinstance(one_of, list):
        out = ""
        for variant in one_of:
            out += f"\n{indent} | "
            out += _nullable(variant, schema_to_typescript(variant, f"{indent}   "))
            trailing: list[str] = []
            desc = _get(variant, "description")
            if isinstance(desc, str):
                trailing.append(desc)
            if isinstance(variant, dict) and "default" in variant:
                trailing.append(_default_comment(variant, variant["default"], quote_enum_strings=True))
            if trailing:
                out += f" // {' '.join(trailing)}"
        return out
    kind = _get(schema, "type")
    if isinstance(kind, list):
        names = ["number" if t == "integer" else t for t in kind if isinstance(t, str)]
        if names:
            return " | ".join(names)
    if isinstance(kind, str):
        if kind == "object":
            return _object(schema, indent)
        if kind == "string":
            values = _get(schema, "enum")
            if isinstance(values, list):
                quoted = [f'"{v}"' for v in values if isinstance(v, str)]
                if quoted:
                    return " | ".join(quoted)
            return "string"
        if kind in ("number", "integer"):
            return "number"
        if kind == "boolean":
            return "boolean"
        if kind == "array":
            if isinstance(schema, dict) and "items" in schema:
                return f"{schema_to_typescript(schema['items'], indent)}[]"
            return "Array<any>"
        return "any"
    return "any"


def _object(schema: dict[str, Any], indent: str) -> str:
    out = ""
    desc = schema.get("description")
    if isinstance(desc, str):
        out += f"{indent}// {desc}\n"
    out += "{\n"
    props = schema.get("properties")
    if isinstance(props, dict):
        req = schema.get("required")
        required = {r for r in req if isinstance(r, str)} if isinstance(req, list) else set()
        for key, val in props.items():
            mark = "" if key in required else "?"
            title = _get(val, "title")
            if isinstance(title, str):
                out += f"{indent}// {title}\n{indent}//\n"
            one_of = _get(val, "oneOf")
            if one_of is None:
                d = _get(val, "description")
                if isinstance(d, str):
                    out += f"{indent}// {d}\n"
            examples = _get(val, "examples")
            if isinstance(examples, list) and examples:
                out += f"{indent}// Examples:\n"
                for ex in examples:
                    if isinstance(ex, str):
                        out += f'{indent}// - "{ex}"\n'
            if isinstance(one_of, list):
                out += _one_of_property(val, one_of, key, mark, indent)
                continue
            out += f"{indent}{key}{mark}: "
            out += _nullable(val, schema_to_typescript(val, f"{indent}    "))
            out += ","
            if one_of is None and isinstance(val, dict) and "default" in val:
                default = val["default"]
                if isinstance(default, str):
                    out += f' // default: "{default}"' if not _is_enum(val) else f" // default: {default}"
                else:
                    out += f" // default: {json_display(default)}"
            out += "\n"
    out += f"{indent}}}"
    return out


def _one_of_property(val: dict[str, Any], one_of: list[Any], key: str, mark: str, indent: str) -> str:
    out = ""
    d = val.get("description")
    prop_desc = d if isinstance(d, str) else None
    skip = False
    if prop_desc is not None and one_of:
        first = _get(one_of[0], "description")
        skip = isinstance(first, str) and first == prop_desc
    above = False
    if not skip and prop_desc is not None:
        out += f"{indent}// {prop_desc}\n"
        above = True
    if "default" in val:
        default = val["default"]
        if isinstance(default, str) and not _is_enum(val):
            out += f'{indent}// default: "{default}"\n'
        elif isinstance(default, str):
            out += f"{indent}// default: {default}\n"
        else:
            out += f"{indent}// default: {json_display(default)}\n"
    out += f"{indent}{key}{mark}:\n"
    for i, variant in enumerate(one_of):
        out += f"{indent} | "
        out += _nullable(variant, schema_to_typescript(variant, f"{indent}   "))
        trailing: list[str] = []
        vd = _get(variant, "description")
        if not (i == 0 and above) and isinstance(vd, str) and vd != prop_desc:
            trailing.append(vd)
        if isinstance(variant, dict) and "default" in variant:
            trailing.append(_default_comment(variant, variant["default"], quote_enum_strings=False))
        if trailing:
            out += f" // {' '.join(trailing)}"
        out += "\n"
    out += f"{indent},\n"
    return out


def json_display(value: Any) -> str:
    """How the library prints a JSON value in a comment: compact JSON, UTF-8 kept, and numbers
    with the text pydantic's JSON gave them on the way to the library (:func:`_float`)."""
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, list):
        return "[" + ",".join(json_display(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:{json_display(v)}"
                              for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def _float(x: float) -> str:
    """pydantic-core's JSON float (ryu's shortest digits): a decimal when the point falls within
    16 digits before it or 4 zeros after, else ``De+N`` / ``De-N``."""
    if not math.isfinite(x):
        return "null"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    mantissa, _, exp = repr(abs(x)).partition("e")  # Python's repr: the same shortest digits
    whole, _, frac = mantissa.partition(".")
    raw = whole + frac
    digits = raw.lstrip("0")
    point = len(whole) - (len(raw) - len(digits)) + (int(exp) if exp else 0)  # x = 0.DIGITS * 10**point
    digits = digits.rstrip("0") or "0"
    n = len(digits)
    if n <= point <= 16:
        return f"{sign}{digits}{'0' * (point - n)}.0"
    if 0 < point <= 16:
        return f"{sign}{digits[:point]}.{digits[point:]}"
    if -5 < point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    body = digits if n == 1 else f"{digits[0]}.{digits[1:]}"
    e = point - 1
    return f"{sign}{body}e{'+' if e > 0 else '-'}{abs(e)}"


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
