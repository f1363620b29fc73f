"""The render stage: requests → vLLM 0.32-compatible :class:`~engine.protocol.GenerateRequest`.

A :class:`Renderer` is bound to one tokenizer and one chat template. It is pure and synchronous
(no I/O, no clock; callers run it on a worker thread) and safe to share between threads.

Rules, in vLLM's order: unknown model → 404; beam search refused; an untrusted request chat
template refused; ``tool_choice`` other than ``"none"`` needs a tool parser (``"auto"`` also needs
auto tool choice); the conversation is rendered with the chat template and tokenized; its images
(a model with :class:`~session.render.vision.Vision` only) are decoded and processed, their
placeholder tokens expanded and their ``features`` attached; length
rules (:mod:`session.render.limits`); sampling params from the request, with a configured tool
parser keeping special tokens (and constraining ``required`` / named tool choice to a JSON
schema); the assistant-token mask and token offsets when asked for. The model's sampling
defaults (:attr:`Renderer.generation_defaults`, session/protocol/generation_defaults.py) fill what a
request leaves unset (:meth:`Renderer.sampling_params`, :meth:`Renderer.fit`).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.protocol import GenerateRequest, MultiModalFeatures, SamplingParams
from engine.structured import structured_outputs, unsupported_schema_feature
from session.errors import ModelNotFound, RenderError
from session.parsers import TOOL_PARSERS
from session.protocol.anthropic import MessagesRequest
from session.protocol.generation_defaults import NO_DEFAULTS, GenerationDefaults
from session.protocol.openai import ChatCompletionRequest, CompletionRequest, NamedToolChoice
from session.render.anthropic import has_inline_system, keeps_inline_system, to_openai_chat
from session.render.conversation import check_roles, conversation_of, developer_as_system, tool_dicts_of
from session.render.deepseek_v32 import DeepSeekV32Encoder, function_dicts, uses_encoder
from session.render.encoder import Encoder, assistant_mask
from session.render.harmony import HarmonyRender
from session.render.harmony_structured import constrained_tools, harmony_structured_outputs
from session.render.images import ImageRef
from session.render.limits import FittedPrompt, check_text_length, fit_mask, fit_prompt
from session.render.template import ChatTemplate
from session.render.vision import Vision, expand_mask

NO_TEMPLATE = ("As of transformers v4.44, default chat template is no longer allowed, so you must provide "
               "a chat template if the tokenizer does not define one.")
UNTRUSTED_TEMPLATE = ("Chat template is passed with request, but --trust-request-chat-template is not set. "
                      "Refused request with untrusted chat template.")
AUTO_TOOL_CHOICE = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
BEAM_SEARCH = "Beam search is not supported by the render endpoint"

_TEMPLATE_CACHE_SIZE = 8


@dataclass(frozen=True, slots=True)
class _FieldNames:
    """How the client's API names the fields render's errors talk about: an Anthropic request is
    rendered as the OpenAI chat request it converts to, but its errors name its own fields."""

    anthropic: bool = False

    def max_tokens(self, req: ChatCompletionRequest) -> str:
        if self.anthropic:
            return "max_tokens"
        return "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"

    def tool_schema(self, index: int) -> str:
        return f"tools[{index}].input_schema" if self.anthropic else f"tools[{index}].function.parameters"

    def forced_tool(self, choice: Any) -> str:
        """The ``tool_choice`` that forces a call, as the schema error names it."""
        if self.anthropic:
            return self.tool_choice(choice)
        return repr(choice.function.name) if isinstance(choice, NamedToolChoice) else "required"

    def tool_choice(self, choice: Any) -> str:
        if isinstance(choice, NamedToolChoice):
            name = choice.function.name
            return f'{{"type": "tool", "name": "{name}"}}' if self.anthropic else f'function "{name}"'
        if self.anthropic:
            kind = {"required": "any"}.get(str(choice), str(choice))
            return f'{{"type": "{kind}"}}'
        return f'"{choice}"'


_OPENAI = _FieldNames()
_ANTHROPIC = _FieldNames(anthropic=True)


@dataclass(frozen=True, slots=True)
class _ChatPrompt:
    """A chat prompt before the length rules: its ids and what travels with them."""

    token_ids: list[int]
    assistant_mask: list[int] | None
    offsets: list[tuple[int, int]] | None
    features: MultiModalFeatures | None


def new_request_id(prefix: str) -> str:
    """vLLM's shape: ``<prefix>-<16 hex digits>``."""
    return f"{prefix}-{secrets.token_hex(8)}"


class Renderer:
    def __init__(self, tokenizer: Any, *, model_name: str, max_model_len: int,
                 chat_template: str | None = None, tool_call_parser: str | None = None,
                 enable_auto_tool_choice: bool = False, trust_request_chat_template: bool = False,
                 vision: Vision | None = None, architectures: Sequence[str] = (),
                 harmony: HarmonyRender | None = None,
                 generation_defaults: GenerationDefaults = NO_DEFAULTS) -> None:
        if max_model_len < 1:
            raise ValueError(f"max_model_len must be positive, got {max_model_len}")
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.tool_call_parser = tool_call_parser
        self.enable_auto_tool_choice = enable_auto_tool_choice
        self.trust_request_chat_template = trust_request_chat_template
        self.vision = vision  # the model's image side (None: the model takes no images)
        # The model's own prompt encoder instead of a chat template, exactly where vLLM 0.32 uses one
        # (DeepSeek-V3.2: config.json's architecture selects its tokenizer mode and renderer).
        self.chat_encoder = DeepSeekV32Encoder() if uses_encoder(architectures) else None
        # gpt-oss (config.json model_type gpt_oss): harmony messages instead of any template, as vLLM
        self.harmony = harmony
        # the model's sampling defaults (generation_config.json), for every request this renders
        self.generation_defaults = generation_defaults
        self.encoder = Encoder(tokenizer)
        self.max_chars_per_token = self.encoder.max_chars_per_token
        try:
            self._special = dict(getattr(tokenizer, "special_tokens_map", {}) or {})
        except (TypeError, ValueError):  # a tokenizer-like object without a usable map
            self._special = {}
        self._default_source = chat_template
        self._templates: dict[str, ChatTemplate] = {}
        if chat_template is not None:
            self._compiled(chat_template)  # fail at startup, not on the first request

    # --- entry points ------------------------------------------------------------------------

    def check_model(self, model: str | None) -> None:
        """An absent model means the served one; any other name is vLLM's 404."""
        if model is not None and model != self.model_name:
            raise ModelNotFound(model, self.model_name)

    def render_chat(self, req: ChatCompletionRequest) -> GenerateRequest:
        return self._render_chat(req, _OPENAI)

    def _render_chat(self, req: ChatCompletionRequest, names: _FieldNames) -> GenerateRequest:
        self.check_model(req.model)
        if req.use_beam_search:
            raise RenderError(BEAM_SEARCH, param="use_beam_search")
        if self.harmony is not None:
            return self._render_harmony(req, self.harmony, names)
        self._check_tool_choice(req, names)
        prompt = self._chat_prompt(req, limits=True)
        ids, mask, offsets, features = prompt.token_ids, prompt.assistant_mask, prompt.offsets, prompt.features
        fitted = self.fit(ids, requested_max_tokens=req.requested_max_tokens,
                          truncate_prompt_tokens=req.truncate_prompt_tokens, assistant_mask=mask,
                          offsets=offsets, param="messages", max_tokens_param=names.max_tokens(req))
        if features is not None and len(fitted.token_ids) != len(ids):
            raise RenderError(f"truncate_prompt_tokens={req.truncate_prompt_tokens} would cut a prompt of {len(ids)} "
                              "tokens that holds images (their placeholders must stay whole); raise it or send "
                              "fewer messages.", param="truncate_prompt_tokens")
        params = self._chat_sampling(req, fitted.max_tokens, names)
        return self._generate_request(new_request_id("chatcmpl"), fitted, params, req, features)

    def tokenize_chat(self, req: ChatCompletionRequest) -> list[int]:
        """The prompt ids a chat request renders to, as vLLM's ``/tokenize`` gives them: the same
        template, kwargs, tools and images as :meth:`render_chat`, but no length rules (vLLM's
        tokenize has no context limit) and no tool-choice or sampling checks."""
        self.check_model(req.model)
        if self.harmony is not None:
            return self.harmony.ids(req)
        return self._chat_prompt(req, limits=False).token_ids

    def tokenize_text(self, text: str, *, add_special_tokens: bool) -> list[int]:
        """A text prompt's ids (``/tokenize`` with ``prompt``): no length rules, as vLLM."""
        return self.encoder.ids(text, add_special_tokens=add_special_tokens)

    def _chat_prompt(self, req: ChatCompletionRequest, *, limits: bool) -> _ChatPrompt:
        """The conversation rendered and tokenized (images expanded), before the length rules;
        ``limits`` refuses text too long to fit the context before tokenizing it."""
        chat_encoder = self.chat_encoder
        template: ChatTemplate | None = None
        if chat_encoder is None:
            template = self._template_for(req)
            content_format = template.content_format
        else:
            self._requested_template(req)  # refused when untrusted, as vLLM does; the encoder ignores it
            content_format = chat_encoder.content_format
        images: list[ImageRef] = []
        if template is not None:
            check_roles(req.messages, template.source)
        conversation = conversation_of(req.messages, content_format, images=images,
                                       placeholder=self.vision.placeholder if self.vision else "")
        if template is not None:
            conversation = developer_as_system(conversation, template.source)
        if images:
            if self.vision is None:
                raise RenderError(f"The model `{self.model_name}` does not accept images; send text only.",
                                  param=images[0].param)
            self.vision.check_count(images)
        if template is None:  # the model's encoder: no template, no generation marks (as vLLM)
            assert chat_encoder is not None
            want_mask = False
            rendered = chat_encoder.render(conversation, req.messages, function_dicts(req.tools) if req.tools else None,
                                           req.template_kwargs())
        else:
            want_mask = req.return_assistant_tokens_mask and template.marks_generation
            rendered = template.render(
                conversation, tools=tool_dicts_of(req.tools) if req.tools else None, documents=req.documents,
                add_generation_prompt=req.add_generation_prompt,
                continue_final_message=req.continue_final_message, track_generation=want_mask,
                kwargs=template.template_kwargs(req.template_kwargs()))
        if limits:
            check_text_length(len(rendered.text), max_model_len=self.max_model_len,
                              requested_max_tokens=req.requested_max_tokens,
                              truncate_prompt_tokens=req.truncate_prompt_tokens,
                              max_chars_per_token=self.max_chars_per_token, param="messages")
        if (req.return_token_offsets and not images) or want_mask:
            encoded = self.encoder.encode(rendered.text, add_special_tokens=req.add_special_tokens)
            ids = encoded.ids
            mask = fit_mask(assistant_mask(encoded, rendered.generation_spans), len(ids)) if want_mask else None
            offsets = encoded.offsets if req.return_token_offsets and not images else None
        else:
            ids = self.encoder.ids(rendered.text, add_special_tokens=req.add_special_tokens, salt=req.cache_salt)
            mask, offsets = None, None
        features = None
        if images:  # token offsets are text positions: none for a prompt with images (as vLLM)
            assert self.vision is not None
            prepared = self.vision.prepare(images, ids)
            ids, features = prepared.token_ids, prepared.features
            if mask is not None:
                mask = expand_mask(mask, prepared.expanded_at)
        return _ChatPrompt(ids, mask, offsets, features)

    def _render_harmony(self, req: ChatCompletionRequest, harmony: HarmonyRender,
                        names: _FieldNames) -> GenerateRequest:
        """vLLM's gpt-oss path (session/render/harmony.py): no template and no tool-choice checks
        (vLLM runs none for harmony); a structured-output constraint or a forced tool call becomes
        vLLM's harmony structural tag (session/render/harmony_structured.py)."""
        ids = harmony.ids(req)
        fitted = self.fit(ids, requested_max_tokens=req.requested_max_tokens,
                          truncate_prompt_tokens=req.truncate_prompt_tokens, param="messages",
                          max_tokens_param=names.max_tokens(req))
        structured = harmony_structured_outputs(req)
        if structured is not None and structured.get("structural_tag") is not None:
            _check_strict_tool_schemas(req, names)
        params = self.sampling_params(req, fitted.max_tokens, structured_outputs=structured)
        return self._generate_request(new_request_id("chatcmpl"), fitted, params, req)

    def render_completion(self, req: CompletionRequest) -> list[GenerateRequest]:
        self.check_model(req.model)
        if req.use_beam_search:
            raise RenderError(BEAM_SEARCH, param="use_beam_search")
        if req.suffix is not None:
            raise RenderError("suffix is not currently supported", param="suffix")
        if req.prompt_embeds is not None:
            raise RenderError("prompt_embeds are not supported by tokenwire; send text or token ids.",
                              param="prompt_embeds")
        prompts = req.prompts()
        if not prompts:
            raise RenderError("Either prompt or prompt_embeds must be provided and non-empty.", param="prompt")
        base = new_request_id("cmpl")
        vocab = self.encoder.vocab_size
        out: list[GenerateRequest] = []
        for i, prompt in enumerate(prompts):
            param = "prompt" if len(prompts) == 1 else f"prompt.{i}"
            offsets: list[tuple[int, int]] | None = None
            if isinstance(prompt, str):
                check_text_length(len(prompt), max_model_len=self.max_model_len,
                                  requested_max_tokens=req.max_tokens,
                                  truncate_prompt_tokens=req.truncate_prompt_tokens,
                                  max_chars_per_token=self.max_chars_per_token, param=param)
                if req.return_token_offsets and self.encoder.has_offsets:
                    encoded = self.encoder.encode(prompt, add_special_tokens=req.add_special_tokens)
                    ids, offsets = encoded.ids, encoded.offsets
                else:
                    ids = self.encoder.ids(prompt, add_special_tokens=req.add_special_tokens)
            else:
                ids = list(prompt)
                bad = next((t for t in ids if t >= vocab), None)
                if bad is not None:
                    raise RenderError(f"Token id {bad} is out of vocabulary (the tokenizer has {vocab} tokens).",
                                      param=param)
            fitted = self.fit(ids, requested_max_tokens=req.max_tokens,
                              truncate_prompt_tokens=req.truncate_prompt_tokens, offsets=offsets, param=param)
            params = self.sampling_params(req, fitted.max_tokens)
            request_id = base if len(prompts) == 1 else f"{base}-{i}"
            out.append(self._generate_request(request_id, fitted, params, req))
        return out

    def render_messages(self, req: MessagesRequest) -> GenerateRequest:
        """Anthropic messages: converted to an OpenAI chat request, then rendered as one (its errors
        name the Anthropic request's fields)."""
        self.check_model(req.model)
        return self._render_chat(self.messages_chat(req), _ANTHROPIC)

    def messages_chat(self, req: MessagesRequest) -> ChatCompletionRequest:
        """The chat request an Anthropic request converts to, for this model: ``system`` messages
        inside ``messages`` stay where they stand when the chat template renders them there
        (:func:`~session.render.anthropic.keeps_inline_system`), else they are merged into the
        system prompt, as they are for a model rendered without a template (harmony, DeepSeek-V3.2)."""
        chat = to_openai_chat(req)
        if not has_inline_system(req):
            return chat
        if self.harmony is None and self.chat_encoder is None and keeps_inline_system(self._template_for(chat)):
            return chat
        return to_openai_chat(req, merge_inline_system=True)

    # --- the sampling decisions (the model's defaults) -----------------------------------------

    def fit(self, token_ids: list[int], *, requested_max_tokens: int | None, truncate_prompt_tokens: int | None,
            assistant_mask: list[int] | None = None, offsets: list[tuple[int, int]] | None = None,
            param: str = "messages", max_tokens_param: str = "max_tokens") -> FittedPrompt:
        """The length rules for a rendered prompt, with the model's default output limit and cap."""
        return fit_prompt(token_ids, max_model_len=self.max_model_len, requested_max_tokens=requested_max_tokens,
                          truncate_prompt_tokens=truncate_prompt_tokens, assistant_mask=assistant_mask,
                          offsets=offsets, param=param, max_tokens_param=max_tokens_param,
                          defaults=self.generation_defaults)

    def sampling_params(self, req: ChatCompletionRequest | CompletionRequest, max_tokens: int, *,
                        skip_special_tokens: bool | None = None,
                        structured_outputs: dict[str, Any] | None = None) -> SamplingParams:
        """The request's sampling params, its unset fields filled from the model's defaults."""
        if isinstance(req, CompletionRequest):
            return req.to_sampling_params(max_tokens, defaults=self.generation_defaults)
        return req.to_sampling_params(max_tokens, skip_special_tokens=skip_special_tokens,
                                      structured_outputs=structured_outputs, defaults=self.generation_defaults)

    # --- pieces ------------------------------------------------------------------------------

    def _check_tool_choice(self, req: ChatCompletionRequest, names: _FieldNames) -> None:
        choice = req.tool_choice
        if choice is None or choice == "none":
            return
        if self.tool_call_parser is None:
            if choice == "auto":
                raise RenderError(AUTO_TOOL_CHOICE, param="tool_choice")
            raise RenderError(f"tool_choice={names.tool_choice(choice)} requires --tool-call-parser to be set",
                              param="tool_choice")
        if choice == "auto" and not self.enable_auto_tool_choice:
            raise RenderError(AUTO_TOOL_CHOICE, param="tool_choice")

    def _requested_template(self, req: ChatCompletionRequest) -> str | None:
        """The request's own chat template, refused unless request templates are trusted."""
        requested = req.chat_template
        if requested is None and req.chat_template_kwargs:
            requested = req.chat_template_kwargs.get("chat_template")
        if requested is not None and not self.trust_request_chat_template:
            raise RenderError(UNTRUSTED_TEMPLATE, param="chat_template")
        return requested

    def _template_for(self, req: ChatCompletionRequest) -> ChatTemplate:
        requested = self._requested_template(req)
        if requested is not None:
            return self._compiled(requested)
        source = self._default_source
        if source is None:
            source = self._tokenizer_template(bool(req.tools))
        return self._compiled(source)

    def _tokenizer_template(self, has_tools: bool) -> str:
        template = getattr(self.tokenizer, "chat_template", None)
        if isinstance(template, dict):
            if has_tools and "tool_use" in template:
                return str(template["tool_use"])
            if "default" in template:
                return str(template["default"])
            raise RenderError("The model has several chat templates and none is named 'default'.")
        if not template:
            raise RenderError(NO_TEMPLATE)
        return str(template)

    def _compiled(self, source: str) -> ChatTemplate:
        """Compiled templates by source. Lock-free: two threads may compile the same template at
        once (one result is kept); each dict operation is atomic."""
        cached = self._templates.get(source)
        if cached is not None:
            return cached
        try:
            compiled = ChatTemplate(source, self._special)
        except ValueError as exc:
            raise RenderError(str(exc), param="chat_template") from None
        self._templates[source] = compiled
        if len(self._templates) > _TEMPLATE_CACHE_SIZE + 1:
            # drop the oldest request template (the default one stays)
            for old in list(self._templates):
                if old != self._default_source:
                    self._templates.pop(old, None)
                    break
        return compiled

    def _chat_sampling(self, req: ChatCompletionRequest, max_tokens: int, names: _FieldNames) -> SamplingParams:
        skip: bool | None = None
        structured: dict[str, Any] | None = None
        if self.tool_call_parser is not None and req.has_active_tools:
            # tool-call markup is made of special tokens in most formats: keep them for the parser
            skip = False
            # vLLM constrains "required" / named calls to JSON only for a parser that reads them as
            # JSON; one that reads them in the model's own format gets the output unconstrained
            parser = TOOL_PARSERS.get(self.tool_call_parser)
            schema = _tool_choice_schema(req) if parser is None or parser.supports_required_and_named else None
            if schema is not None:
                _check_tool_schemas(req, names)
                structured = structured_outputs(json=schema)
        return self.sampling_params(req, max_tokens, skip_special_tokens=skip, structured_outputs=structured)

    @staticmethod
    def _generate_request(request_id: str, fitted: FittedPrompt, params: SamplingParams,
                          req: ChatCompletionRequest | CompletionRequest,
                          features: MultiModalFeatures | None = None) -> GenerateRequest:
        stream = bool(req.stream)
        return GenerateRequest.model_construct(
            request_id=request_id,
            token_ids=fitted.token_ids,
            sampling_params=params,
            model=req.model,
            token_offsets=fitted.offsets,
            features=features,
            content_parts=None,
            assistant_tokens_mask=fitted.assistant_mask,
            reasoning_ended=None,
            reasoning_parser_kwargs=None,
            return_token_ids=None,
            output_mode="tokens",
            stream=stream,
            stream_options=req.stream_options if stream else None,
            cache_salt=req.cache_salt,
            priority=req.priority,
            kv_transfer_params=None,
            ec_transfer_params=None,
        )


def _tool_choice_schema(req: ChatCompletionRequest) -> dict[str, Any] | None:
    """vLLM's JSON schema for ``tool_choice: "required"`` (an array of calls) or a named tool (its
    parameters); ``None`` for ``"auto"``."""
    tools = req.tools or []
    choice = req.tool_choice
    if isinstance(choice, NamedToolChoice):
        for tool in tools:
            if tool.function.name == choice.function.name:
                return tool.function.parameters or {"type": "object", "properties": {}}
        return None
    if choice != "required":
        return None
    defs: dict[str, Any] = {}
    variants = []
    for tool in tools:
        params = dict(tool.function.parameters or {"type": "object", "properties": {}})
        defs.update(params.pop("$defs", {}) or {})
        variants.append({
            "properties": {"name": {"type": "string", "enum": [tool.function.name]}, "parameters": params},
            "required": ["name", "parameters"],
        })
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": variants}}
    if defs:
        schema["$defs"] = defs
    return schema


def _check_tool_schemas(req: ChatCompletionRequest, names: _FieldNames) -> None:
    """A forced tool call is constrained by the tools' parameter schemas: refuse (400, naming the
    keyword and the tool) a schema the engine could not enforce."""
    named = req.tool_choice.function.name if isinstance(req.tool_choice, NamedToolChoice) else None
    for i, tool in enumerate(req.tools or []):
        if named is not None and tool.function.name != named:
            continue
        bad = unsupported_schema_feature(tool.function.parameters or {})
        if bad is not None:
            where = names.tool_schema(i) + (f".{bad.field}" if bad.field else "")
            raise RenderError(f"{where} {bad.message} (tool_choice={names.forced_tool(req.tool_choice)} "
                              "constrains the output to this schema).", param=names.tool_schema(i))


def _check_strict_tool_schemas(req: ChatCompletionRequest, names: _FieldNames) -> None:
    """gpt-oss: the harmony structural tag enforces the parameter schema of each ``strict`` tool it
    may call; refuse (400, naming the keyword and the tool) one the engine could not enforce."""
    for i in constrained_tools(req):
        tool = (req.tools or [])[i]
        bad = unsupported_schema_feature(tool.function.parameters or {})
        if bad is not None:
            where = names.tool_schema(i) + (f".{bad.field}" if bad.field else "")
            raise RenderError(f"{where} {bad.message} (the tool is strict, and its calls are constrained to "
                              "this schema).", param=names.tool_schema(i))
