"""Sampling parameters checked against the served model and resolved for the engine (no torch).

:func:`resolve` turns a wire :class:`~engine.protocol.GenerateRequest` into the prompt ids and
a :class:`ResolvedParams` the scheduler and sampler use, or raises
:class:`~engine.errors.InvalidGenerateRequest` naming the offending field, so the HTTP layer can
answer 400 with a message that says what to fix.

Stop *strings* (``sampling_params.stop``) are not the engine's business: the engine never sees
text; derender applies them. Everything else the engine cannot honour (``bad_words``,
``prompt_logprobs``) is refused, never ignored. Multimodal ``features`` are checked against the
prompt by :mod:`engine.local.vision` (a text model refuses them); here only a truncation that would
cut a prompt with images is refused. ``structured_outputs`` is
read and checked here (:mod:`engine.structured`) and enforced by :mod:`engine.local.grammar`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.errors import InvalidGenerateRequest
from engine.protocol import GenerateRequest
from engine.structured import Problem, StructuredSpec, read_structured_outputs

MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
LOGIT_BIAS_LIMIT = 100.0  # vLLM clamps biases to [-100, 100]
# What a request with a structured-output constraint is told when xgrammar cannot be imported.
XGRAMMAR_MISSING = ("Structured outputs (response_format, structured_outputs, tool_choice \"required\" or a "
                    "named tool) need the xgrammar package, which this server cannot import. Install the engine "
                    "extra with pip (pip install 'tokenwire[engine]', which brings xgrammar==0.2.9) and restart "
                    "the server.")


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """What validation needs to know about the served model."""

    vocab_size: int
    max_model_len: int
    # The model's primary eos (``config.eos_token_id``): finish "stop" with stop_reason None.
    eos_token_id: int | None = None
    # Every other id of ``generation_config.eos_token_id``: finish "stop", stop_reason = the id
    # (vLLM adds them to the request's stop_token_ids unless ignore_eos).
    extra_eos_ids: frozenset[int] = frozenset()
    max_n: int = 32
    max_logprobs: int = MAX_LOGPROBS
    # Why structured outputs cannot be served (xgrammar missing), else None: such requests are 400s.
    no_structured_outputs: str | None = None


@dataclass(frozen=True, slots=True)
class ResolvedParams:
    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: disabled
    min_p: float = 0.0
    seed: int | None = None
    max_tokens: int = 16
    min_tokens: int = 0
    ignore_eos: bool = False
    eos_token_id: int | None = None
    stop_ids: frozenset[int] = frozenset()  # stop_token_ids ∪ extra eos ids (unless ignore_eos)
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    allowed_token_ids: tuple[int, ...] | None = None
    logprobs: int | None = None
    # all ids that end generation (for min_tokens masking)
    all_stop_ids: frozenset[int] = field(default=frozenset())
    # the last ``output_offset`` prompt ids are earlier output of a resumed generation: the
    # presence / frequency penalties count them as output (``extra_args.output_offset``)
    output_offset: int = 0
    # how many of those trailing prompt ids the engine computes one decode step each (replaying the
    # interrupted stream's steps, so a resumed generation continues exactly in every dtype) instead of
    # in the prefill; ``extra_args.resume_replay: false`` gives 0 (a faster, inexact-in-bf16 re-prefill)
    replay: int = 0
    structured: StructuredSpec | None = None  # a structured-output constraint (engine.local.grammar)
    # budget-aware closing of a constrained output (engine.local.structured_closing); False: vLLM's behaviour,
    # a truncated document with "length" (``extra_args.structured_closing``)
    structured_closing: bool = True

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5

    @property
    def needs_penalties(self) -> bool:
        return (self.repetition_penalty != 1.0 or self.presence_penalty != 0.0
                or self.frequency_penalty != 0.0)

    @property
    def needs_filtering(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0


def _bad(message: str, param: str) -> InvalidGenerateRequest:
    return InvalidGenerateRequest(message, param=param)


def _check_ids(ids: list[int] | tuple[int, ...], vocab: int, param: str) -> None:
    for i, tok in enumerate(ids):
        if not 0 <= tok < vocab:
            raise _bad(f"{param}[{i}] = {tok} is out of range: this model's vocabulary has {vocab} "
                       f"tokens (ids 0..{vocab - 1}).", param)


def resolve(request: GenerateRequest, limits: ModelLimits) -> tuple[list[int], ResolvedParams]:
    """Validate ``request`` for this model; return the prompt ids and the resolved params."""
    sp = request.sampling_params
    vocab, max_len = limits.vocab_size, limits.max_model_len
    prompt = list(request.token_ids)
    if sp.truncate_prompt_tokens is not None:
        k = sp.truncate_prompt_tokens
        if k == -1:
            k = max_len
        if k < 1:
            raise _bad("sampling_params.truncate_prompt_tokens must be -1 or at least 1.",
                       "sampling_params.truncate_prompt_tokens")
        if request.features is not None and k < len(prompt):
            raise _bad(f"sampling_params.truncate_prompt_tokens={k} would cut a prompt of {len(prompt)} tokens "
                       "that holds images (their placeholder offsets refer to the whole prompt); raise it.",
                       "sampling_params.truncate_prompt_tokens")
        prompt = prompt[-k:]
    _check_ids(prompt, vocab, "token_ids")
    if len(prompt) >= max_len:
        raise _bad(f"The prompt is {len(prompt)} tokens long; this model's maximum context length is "
                   f"{max_len} tokens, which must also leave room for at least one output token.",
                   "token_ids")

    _check_float(sp.temperature, "temperature")
    if sp.temperature < 0:
        raise _bad(f"sampling_params.temperature must be at least 0, got {sp.temperature}.",
                   "sampling_params.temperature")
    _check_float(sp.top_p, "top_p")
    if not 0 < sp.top_p <= 1:
        raise _bad(f"sampling_params.top_p must be in (0, 1], got {sp.top_p}.", "sampling_params.top_p")
    if sp.top_k < -1:
        raise _bad(f"sampling_params.top_k must be -1 or 0 (disabled) or at least 1, got {sp.top_k}.",
                   "sampling_params.top_k")
    _check_float(sp.min_p, "min_p")
    if not 0 <= sp.min_p <= 1:
        raise _bad(f"sampling_params.min_p must be in [0, 1], got {sp.min_p}.", "sampling_params.min_p")
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(sp, name)
        _check_float(value, name)
        if not -2 <= value <= 2:
            raise _bad(f"sampling_params.{name} must be in [-2, 2], got {value}.", f"sampling_params.{name}")
    _check_float(sp.repetition_penalty, "repetition_penalty")
    if not 0 < sp.repetition_penalty <= 2:
        raise _bad(f"sampling_params.repetition_penalty must be in (0, 2], got {sp.repetition_penalty}.",
                   "sampling_params.repetition_penalty")
    if not 1 <= sp.n <= limits.max_n:
        raise _bad(f"sampling_params.n must be between 1 and {limits.max_n}, got {sp.n}.", "sampling_params.n")

    # max_tokens is an upper bound, as in vLLM 0.32: the output gets at most the room the prompt
    # leaves (vLLM's engine ends such a request with "length" at the context length).
    room = max_len - len(prompt)
    requested = room if sp.max_tokens is None else sp.max_tokens
    if requested < 1:
        raise _bad(f"sampling_params.max_tokens must be at least 1, got {requested}.",
                   "sampling_params.max_tokens")
    if not 0 <= sp.min_tokens <= requested:
        raise _bad(f"sampling_params.min_tokens must be between 0 and max_tokens ({requested}), "
                   f"got {sp.min_tokens}.", "sampling_params.min_tokens")
    max_tokens = min(requested, room)
    min_tokens = min(sp.min_tokens, max_tokens)

    if sp.logprobs is not None and not 0 <= sp.logprobs <= limits.max_logprobs:
        raise _bad(f"sampling_params.logprobs must be between 0 and {limits.max_logprobs}, got {sp.logprobs}.",
                   "sampling_params.logprobs")
    if sp.prompt_logprobs is not None:
        raise _bad("sampling_params.prompt_logprobs is not supported by this engine.",
                   "sampling_params.prompt_logprobs")
    if sp.bad_words:
        raise _bad("sampling_params.bad_words needs a tokenizer; a tokens-only engine cannot apply it. "
                   "Send the banned token ids as logit_bias entries of -100 instead.",
                   "sampling_params.bad_words")
    structured = _structured(sp.structured_outputs, sp.ignore_eos, sp.min_tokens)
    if structured is not None and limits.no_structured_outputs is not None:
        raise _bad(limits.no_structured_outputs, "sampling_params.structured_outputs")

    _check_ids(sp.stop_token_ids, vocab, "sampling_params.stop_token_ids")
    bias: list[tuple[int, float]] = []
    for tok, value in (sp.logit_bias or {}).items():
        if not 0 <= tok < vocab:
            raise _bad(f"sampling_params.logit_bias has token id {tok}, out of range for a vocabulary of "
                       f"{vocab} tokens.", "sampling_params.logit_bias")
        _check_float(value, "logit_bias")
        bias.append((tok, max(-LOGIT_BIAS_LIMIT, min(LOGIT_BIAS_LIMIT, float(value)))))
    allowed: tuple[int, ...] | None = None
    if sp.allowed_token_ids is not None:
        if not sp.allowed_token_ids:
            raise _bad("sampling_params.allowed_token_ids must not be empty.",
                       "sampling_params.allowed_token_ids")
        _check_ids(sp.allowed_token_ids, vocab, "sampling_params.allowed_token_ids")
        allowed = tuple(sorted(set(sp.allowed_token_ids)))

    stop_ids = set(sp.stop_token_ids)
    eos = limits.eos_token_id
    if not sp.ignore_eos:
        stop_ids |= limits.extra_eos_ids
    all_stop = set(stop_ids)
    if eos is not None and not sp.ignore_eos:
        all_stop.add(eos)
    greedy = sp.temperature < 1e-5
    offset = (sp.extra_args or {}).get("output_offset", 0)
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < len(prompt):
        raise _bad(f"sampling_params.extra_args.output_offset must be an integer in [0, {len(prompt)}) "
                   "(how many trailing prompt ids are earlier output).", "sampling_params.extra_args.output_offset")
    replay_flag = (sp.extra_args or {}).get("resume_replay", True)
    if not isinstance(replay_flag, bool):
        raise _bad("sampling_params.extra_args.resume_replay must be a boolean (true, the default: a resumed "
                   "generation's earlier output is recomputed one decode step per token, so it continues exactly "
                   "as the interrupted one; false: one prefill, faster, not exact in bf16).",
                   "sampling_params.extra_args.resume_replay")
    closing = (sp.extra_args or {}).get("structured_closing", True)
    if not isinstance(closing, bool):
        raise _bad("sampling_params.extra_args.structured_closing must be a boolean (false: a constrained output "
                   "that runs out of max_tokens ends with \"length\" and a truncated document, as in vLLM).",
                   "sampling_params.extra_args.structured_closing")
    return prompt, ResolvedParams(
        n=sp.n,
        temperature=0.0 if greedy else float(sp.temperature),
        top_p=float(sp.top_p),
        top_k=0 if sp.top_k <= 0 or sp.top_k >= vocab else sp.top_k,
        min_p=float(sp.min_p),
        seed=sp.seed,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=sp.ignore_eos,
        eos_token_id=None if sp.ignore_eos else eos,
        stop_ids=frozenset(stop_ids),
        repetition_penalty=float(sp.repetition_penalty),
        presence_penalty=float(sp.presence_penalty),
        frequency_penalty=float(sp.frequency_penalty),
        logit_bias=tuple(bias),
        allowed_token_ids=allowed,
        logprobs=sp.logprobs,
        all_stop_ids=frozenset(all_stop),
        output_offset=offset,
        replay=offset if replay_flag else 0,
        structured=structured,
        structured_closing=closing,
    )


def _structured(raw: object, ignore_eos: bool, min_tokens: int) -> StructuredSpec | None:
    read = read_structured_outputs(raw, structural_tag=True)
    if isinstance(read, Problem):
        param = "sampling_params.structured_outputs" + (f".{read.field}" if read.field else "")
        raise _bad(f"{param} {read.message}.", param)
    if read is not None and (ignore_eos or min_tokens):
        name = "ignore_eos" if ignore_eos else "min_tokens"
        raise _bad(f"sampling_params.{name} cannot be combined with structured_outputs: the constraint decides "
                   "where the output ends (with the eos token).", f"sampling_params.{name}")
    return read


def _check_float(value: float, name: str) -> None:
    if not math.isfinite(value):
        raise _bad(f"sampling_params.{name} must be a finite number.", f"sampling_params.{name}")
