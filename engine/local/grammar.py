"""Structured outputs in the local engine: xgrammar grammars, compiled once (in the compile worker,
LRU-cached), enforced per row (a bitmask on the constrained rows only, one matcher per sequence,
advanced over a resumed prompt's tail), ended by the stop ids, kept within ``max_tokens`` by
:class:`~engine.local.structured_closing.Closing`. How a constrained request runs:
docs/structured-outputs.md, "How the local engine enforces it" and "Inside the engine".
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from engine.errors import EngineUnavailable, InvalidGenerateRequest
from engine.local.grammar_worker import MAX_WHITESPACE as MAX_WHITESPACE
from engine.local.grammar_worker import Cancelled, CompileWorker, Refused
from engine.local.params import ResolvedParams
from engine.local.structured_closing import Closing, Vocab, tag_shape
from engine.structured import StructuredSpec

log = logging.getLogger("tokenwire.engine")

PARAM = "sampling_params.structured_outputs"


class CompiledConstraint:
    """A compiled grammar and the stop ids its matchers end with (opaque outside this module)."""

    __slots__ = ("grammar", "shape", "spec", "stop_ids")

    def __init__(self, grammar: Any, spec: StructuredSpec, stop_ids: list[int]) -> None:
        self.grammar = grammar
        self.spec = spec
        self.stop_ids = stop_ids
        # a structural tag's markers, for closing (engine.local.structured_closing.TagShape)
        self.shape = tag_shape(spec.value) if spec.kind == "structural_tag" else None


class Grammars:
    """Compiles constraints (any thread) and enforces them on the engine thread."""

    def __init__(self, model_dir: Path, vocab_size: int, *, cache_size: int = 128,
                 worker_options: dict[str, Any] | None = None) -> None:
        self.model_dir = model_dir
        self.vocab_size = vocab_size
        self.cache_size = cache_size
        self._lock = threading.Lock()  # the cache
        self._compile_lock = threading.Lock()  # the worker (started on first use) and compiling
        self._worker: CompileWorker | None = None
        self.worker_options = dict(worker_options or {})
        self._alock: asyncio.Lock | None = None  # compiles waiting (event loop side)
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._refused: OrderedDict[str, InvalidGenerateRequest] = OrderedDict()  # keys refused, answered at once
        self.compiled = 0  # grammars compiled (cache misses), for stats and tests
        # engine-thread work on constrained rows: rows masked, seconds masking + advancing
        self.rows_masked = 0
        self.mask_seconds = 0.0
        # budget-aware closing: walks run, tokens forced or replaced, seconds walking (within mask_seconds)
        self.closing_walks = 0
        self.closing_forced = 0
        self.closing_seconds = 0.0
        self._vocab: Vocab | None = None
        self._tag_vocab: Vocab | None = None  # closing inside structural tags: special tokens too
        self._bytes_of: list[bytes] = []
        self._bitmask: torch.Tensor | None = None
        self._json_words = torch.empty(0, dtype=torch.int32)
        self._xgr: Any = None

    # --- any thread ----------------------------------------------------------------------------
    def prepare(self, params: ResolvedParams, prompt: Sequence[int],
                cancel: threading.Event | None = None) -> CompiledConstraint:
        """Compile (or find) the request's grammar and check a resumed prompt's tail against it.
        Blocking (it waits for the compile worker): call it from a worker thread."""
        spec = params.structured
        assert spec is not None
        grammar = self._compiled(spec, cancel)
        return self._checked(params, prompt, CompiledConstraint(grammar, spec, sorted(params.all_stop_ids)))

    async def prepare_async(self, params: ResolvedParams, prompt: Sequence[int]) -> CompiledConstraint:
        """:meth:`prepare` for the event loop: a cached grammar is found at once; a new one waits
        for the compile worker on one worker thread (compiles queue on an asyncio lock, not on
        threads), and a request cancelled meanwhile cancels its compile."""
        spec = params.structured
        assert spec is not None
        grammar = self._cached(spec)
        if grammar is None:
            if self._alock is None:
                self._alock = asyncio.Lock()
            async with self._alock:
                grammar = self._cached(spec)
                if grammar is None:
                    cancel = threading.Event()
                    try:
                        grammar = await asyncio.to_thread(self._compiled, spec, cancel)
                    except asyncio.CancelledError:
                        cancel.set()
                        raise
        done = CompiledConstraint(grammar, spec, sorted(params.all_stop_ids))
        if not params.output_offset:
            return done
        return await asyncio.to_thread(self._checked, params, prompt, done)

    def _checked(self, params: ResolvedParams, prompt: Sequence[int], done: CompiledConstraint) -> CompiledConstraint:
        offset = params.output_offset
        if offset:
            matcher = self._matcher(done, prompt[len(prompt) - offset:])
            if matcher is None:
                raise InvalidGenerateRequest(
                    f"The last {offset} prompt tokens (earlier output, sampling_params.extra_args.output_offset) "
                    "do not follow the structured output constraint.", param="sampling_params.extra_args.output_offset")
        return done

    def _cached(self, spec: StructuredSpec) -> Any | None:
        with self._lock:
            refused = self._refused.get(spec.key)
            if refused is not None:
                self._refused.move_to_end(spec.key)
                raise refused
            hit = self._cache.get(spec.key)
            if hit is not None:
                self._cache.move_to_end(spec.key)
            return hit

    def _compiled(self, spec: StructuredSpec, cancel: threading.Event | None = None) -> Any:
        # One compile at a time: two requests with a new schema compile it once, and a cached
        # grammar is found without waiting (the cache has its own lock).
        hit = self._cached(spec)
        if hit is not None:
            return hit
        with self._compile_lock:
            hit = self._cached(spec)
            if hit is not None:
                return hit
            return self._compile_and_keep(spec, cancel)

    def _compile_and_keep(self, spec: StructuredSpec, cancel: threading.Event | None) -> Any:
        worker = self._worker_once()
        field = f"{PARAM}.{spec.kind}"
        try:
            grammar = worker.compile(spec.kind, _wire_value(spec), spec.any_whitespace, cancel)
        except Cancelled:
            raise EngineUnavailable("The structured output constraint's compile was cancelled.") from None
        except (OSError, RuntimeError) as exc:  # the worker could not start
            log.error("grammar compile worker: %s", exc)
            raise EngineUnavailable("Structured outputs are unavailable: the grammar compile worker could not "
                                    "start; see the server log.") from None
        if isinstance(grammar, Refused):
            log.info("structured output constraint refused (%s): %s", grammar.reason, grammar.detail[:200])
            error = InvalidGenerateRequest(_refusal_message(spec, grammar, worker), param=field)
            with self._lock:
                self._refused[spec.key] = error
                while len(self._refused) > self.cache_size:
                    self._refused.popitem(last=False)
            raise error
        with self._lock:
            self.compiled += 1
            self._cache[spec.key] = grammar
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return grammar

    def _worker_once(self) -> CompileWorker:
        if self._worker is None:
            import xgrammar as xgr
            from transformers import AutoTokenizer

            try:
                tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir), local_files_only=True)
            except Exception as exc:  # many kinds: no tokenizer files, a broken one…
                log.exception("cannot load the tokenizer of %s for structured outputs", self.model_dir)
                raise EngineUnavailable(
                    "Structured outputs need the model's tokenizer, and it could not be loaded from the model "
                    "directory; see the server log.") from exc
            vocab = max(self.vocab_size, len(tokenizer))
            info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab)
            bytes_of = list(info.decoded_vocab)  # the property rebuilds the list on each access
            self._json_words = _json_text_words(bytes_of, vocab)
            # closing paths use plain tokens only: no special or added token, none a JSON row refuses
            excluded = {*tokenizer.all_special_ids, *tokenizer.added_tokens_decoder, *info.special_token_ids}
            excluded.update(t for t, text in enumerate(bytes_of) if any(b in _NOT_IN_JSON for b in text))
            self._vocab = Vocab(bytes_of, excluded)
            # a structural tag's markers are often special tokens (harmony's <|channel|>, <|end|>…), which
            # its closing path must use as the model does; only the ones xgrammar never allows are left out
            self._tag_vocab = Vocab(bytes_of, {*info.special_token_ids, *(
                t for t, text in enumerate(bytes_of) if any(b in _NOT_IN_JSON for b in text))})
            self._bytes_of = bytes_of
            self._xgr = xgr
            self.vocab_size = vocab
            self._worker = CompileWorker(info, **self.worker_options)
        return self._worker

    def close(self) -> None:
        """Stop the compile worker (the engine is closing)."""
        if self._worker is not None:
            self._worker.close()

    def _matcher(self, done: CompiledConstraint, prefix: Sequence[int]) -> Any | None:
        """A fresh matcher advanced over ``prefix``; None when the grammar refuses it."""
        matcher = self._xgr.GrammarMatcher(done.grammar, override_stop_tokens=done.stop_ids or None)
        for tok in prefix:
            if not matcher.accept_token(int(tok)):
                return None
        return matcher

    # --- engine thread -------------------------------------------------------------------------
    def constrain(self, logits: torch.Tensor, rows: Sequence[Any], indices: list[int]) -> None:
        """Mask ``logits[indices]`` (float32, ``[batch, vocab]``) to what each row's grammar allows
        next. ``rows[j]`` is the sequence at ``indices[j]``."""
        start = time.perf_counter()
        bitmask = self._bitmask_for(logits.shape[0])
        for seq, i in zip(rows, indices, strict=True):
            matcher = self._matcher_of(seq)
            if matcher is None:  # the grammar refused an earlier token: only a stop token may follow
                bitmask[i].zero_()
                for tok in seq.group.grammar.stop_ids or ():
                    bitmask[i, tok // 32] |= _bit(tok % 32)
            else:
                closing = seq.closing
                only = None
                if closing is not None:
                    remaining = seq.group.params.max_tokens - len(seq.output)
                    only = self._closing(closing, closing.before, matcher, len(seq.output), remaining)
                if only is not None:  # forced along the closing path
                    bitmask[i].zero_()
                    for tok in only:
                        bitmask[i, tok // 32] |= _bit(tok % 32)
                    self.closing_forced += 1
                else:
                    matcher.fill_next_token_bitmask(bitmask, i)
                    if seq.group.grammar.spec.kind in _JSON_KINDS:
                        bitmask[i] &= self._json_words
        width = min(logits.shape[-1], self.vocab_size)
        self._xgr.apply_token_bitmask_inplace(logits, bitmask, indices=indices, vocab_size=width)
        if logits.shape[-1] > width:  # padded vocabulary rows the tokenizer never produces
            logits[indices, width:] = float("-inf")
        self.rows_masked += len(indices)
        self.mask_seconds += time.perf_counter() - start

    def advance(self, rows: Sequence[Any], tokens: Sequence[int]) -> list[tuple[int, int]]:
        """Each constrained row's matcher accepts the token just sampled for it. Returns the
        replacements budget-aware closing made, ``(j, token)``: ``rows[j]`` takes ``token``
        instead (its matcher already stands after it)."""
        start = time.perf_counter()
        replaced: list[tuple[int, int]] = []
        for j, (seq, tok) in enumerate(zip(rows, tokens, strict=True)):
            matcher = seq.matcher
            if matcher is None or matcher is _REFUSED:
                continue
            if not matcher.accept_token(tok):
                # Only possible when other settings (allowed_token_ids, logit_bias of -inf…) left no
                # token the grammar allows; end the sequence at the next step.
                log.warning("structured outputs: request %s sampled token %d outside its grammar",
                            seq.group.external_id, tok)
                seq.matcher = _REFUSED
                continue
            closing = seq.closing
            if closing is not None:
                other = self._closing(closing, closing.after, matcher, tok,
                                      seq.group.params.max_tokens - len(seq.output) - 1)
                if other is not None:
                    replaced.append((j, other))
                    self.closing_forced += 1
        self.mask_seconds += time.perf_counter() - start
        return replaced

    def _closing(self, closing: Closing, step: Callable[..., Any], *args: Any) -> Any:
        """``step(*args)`` (a :class:`Closing` method), counting the walks it ran and their time."""
        walks, t0 = closing.walks, time.perf_counter()
        result = step(*args)
        if closing.walks != walks:
            self.closing_walks += closing.walks - walks
            self.closing_seconds += time.perf_counter() - t0
        return result

    def _matcher_of(self, seq: Any) -> Any | None:
        matcher = seq.matcher
        if matcher is _REFUSED:
            return None
        if matcher is None:
            group = seq.group
            offset = group.params.output_offset
            prefix = [*group.prompt[len(group.prompt) - offset:], *seq.output] if offset else list(seq.output)
            matcher = self._matcher(group.grammar, prefix)
            seq.matcher = matcher if matcher is not None else _REFUSED
            if matcher is not None and group.params.structured_closing and self._vocab is not None:
                shape = group.grammar.shape
                vocab = self._tag_vocab if shape is not None and self._tag_vocab is not None else self._vocab
                seq.closing = Closing(vocab, self._bytes_of, group.grammar.stop_ids,
                                      group.grammar.spec.kind in _JSON_KINDS, prefix, shape)
        return matcher

    def _bitmask_for(self, rows: int) -> torch.Tensor:
        words = (self.vocab_size + 31) // 32
        if self._bitmask is None or self._bitmask.shape[0] < rows:
            self._bitmask = torch.full((max(rows, 8), words), -1, dtype=torch.int32)
        return self._bitmask


class _Refused:
    """Marks a sequence whose grammar refused a token (see :meth:`Grammars.advance`)."""


_REFUSED = _Refused()

_WHAT = {"json": "JSON schema", "json_object": "JSON object constraint", "regex": "regular expression",
         "choice": "list of choices", "grammar": "EBNF grammar", "structural_tag": "structural tag"}


_JSON_KINDS = ("json", "json_object")
# Control characters JSON text never holds raw (inside strings they must be escaped; between
# tokens only space, tab, LF and CR are whitespace, and tab is never needed).
_NOT_IN_JSON = frozenset(range(32)) - {10, 13}


def _json_text_words(decoded_vocab: Sequence[bytes], vocab: int) -> torch.Tensor:
    """A bitmask row allowing every token but those holding a raw control character (LF and CR
    aside). xgrammar 0.2.9 lets a string with ``minLength`` / ``maxLength`` take any character but
    a quote, a backslash, CR and LF, so a tab or another control character could land raw inside
    it, which is not JSON; JSON rows are ANDed with this row. Nothing JSON needs is lost."""
    allowed = torch.ones(((vocab + 31) // 32) * 32, dtype=torch.bool)
    for tok, text in enumerate(decoded_vocab):
        if any(b in _NOT_IN_JSON for b in text):
            allowed[tok] = False
    weights = torch.tensor([_bit(i) for i in range(32)], dtype=torch.int64)
    words = (allowed.view(-1, 32).to(torch.int64) * weights).sum(dim=1)
    return words.to(torch.int32)


def _bit(i: int) -> int:
    """Bit ``i`` of an int32 word (bit 31 is the sign bit)."""
    return (1 << i) - (1 << 32) if i == 31 else 1 << i


def _wire_value(spec: StructuredSpec) -> Any:
    return list(spec.value) if spec.kind == "choice" else spec.value


def _refusal_message(spec: StructuredSpec, refused: Refused, worker: CompileWorker) -> str:
    field = f"{PARAM}.{spec.kind}"
    what = _WHAT[spec.kind]
    if refused.reason == "invalid":
        return f"{field} could not be compiled into a grammar; check that it is a valid {what}."
    if refused.reason == "too_long":
        return (f"{field} demands documents too long to generate: some point of the {what} still needs about "
                f"{refused.detail} bytes to be complete (the limit is {worker.max_completion}). Lower its "
                "repetition counts (x{n}, minLength, minItems) or nesting.")
    if refused.reason == "time":
        return (f"{field} is too complex: compiling the {what} took more than the server's budget of "
                f"{worker.cpu_s:g} s. Simplify it (fewer or smaller bounded repetitions, fewer optional parts).")
    return (f"{field} is too complex: compiling the {what} needed more than the server's memory budget "
            f"({worker.memory_bytes >> 20} MiB). Simplify it (smaller repetition counts, less nesting).")
