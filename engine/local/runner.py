"""The model side of the local engine: load a transformers causal LM (or a Qwen2-VL image-text model)
and run batched prefill and decode forwards on the engine thread, through the model's own SDPA path
and :class:`engine.local.kv.StepCache`; :meth:`ModelRunner.load` refuses architectures that cannot
run that way. The forwards' inputs and masks are built by engine/local/step_inputs.py; what is read
of the model directory before loading, by engine/local/model_files.py. The two forwards and their
masks: docs/engine-design.md, "Scheduler and continuous batching".
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from engine.errors import EngineUnavailable
from engine.local import attention, lean_decode, vision
from engine.local.kv import KVStore, StepCache, WritePlan
from engine.local.packed import children, pack_linears
from engine.local.prefix import PrefixCache
from engine.local.scheduler import KVOp, PrefillChunk, Sequence
from engine.local.step_inputs import decode_inputs, layer_masks, prefill_inputs
from engine.local.threads import ThreadPlan
from engine.local.vision import VisionPrompt, VisionSpec

log = logging.getLogger("tokenwire.engine")


class ModelRunner:
    def __init__(self, model_dir: Path, *, dtype: torch.dtype, max_rows: int, max_model_len: int,
                 vision: VisionSpec | None = None, prefix: PrefixCache | None = None,
                 packed_linear: bool | None = None) -> None:
        self.model_dir = model_dir
        self.vision = vision  # a vision-language model: images in prefill, 3-D (M-RoPE) positions
        self.dtype = dtype
        self.max_rows = max_rows
        self.max_model_len = max_model_len
        self.model: Any = None
        self.kv: KVStore | None = None
        self.sliding_window: int | None = None
        self.vocab_size = 0
        self.prefix = prefix  # prefix caching: its entries' tensors are filled and read here
        self.trim_due = False
        self.trims = 0
        self.packed_wanted = packed_linear  # None: TOKENWIRE_PACKED_LINEAR decides
        self.packed_linears = 0  # linears with prepacked weights (engine.local.packed)
        self.linear_kernel = "not loaded"
        self.attention_kernel = "not loaded"  # engine.local.attention
        self.lean: lean_decode.LeanDecoder | None = None  # decode steps without the model call
        self.decode_forward = "not loaded"
        self.one_pass_replay = False  # a resumed generation's earlier output recomputed in one forward per chunk
        self.resume_replay = "not loaded"  # how, in words (/engine/stats)
        self._replay_width = 0  # the widest per-token row of an elementwise operator (the cap below)
        self.threads = ThreadPlan(1)  # each forward's torch thread count (engine/local/threads.py)
        self.logits_threads = ThreadPlan(1)  # the output projection's, inside each forward
        self._torch_threads = 0  # what torch was last set to here (0: not yet)

    def plan_threads(self, plan: ThreadPlan) -> None:
        """Run the forwards from here on at the thread counts ``plan`` chooses (engine thread), and
        each forward's output projection at the count a plan of its own chooses."""
        self.threads = plan
        self.logits_threads = ThreadPlan(plan.threads, plan.plan)
        self._torch_threads = 0

    def thread_stats(self) -> dict[str, object]:
        """``/engine/stats``' thread plan: the forwards' counts and the output projections' (none
        counted where the projection runs at its forward's count: one thread, or ``fixed``)."""
        plan = self.logits_threads
        return {**self.threads.stats(), "logits_by_threads": plan.counts() if plan.timed else {}}

    # --- loading ---------------------------------------------------------------------------
    def load(self) -> None:
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

        auto: Any = AutoModelForImageTextToText if self.vision is not None else AutoModelForCausalLM
        try:
            try:
                model: Any = auto.from_pretrained(
                    str(self.model_dir), dtype=self.dtype, attn_implementation="sdpa", local_files_only=True)
            except ValueError as exc:
                if "scaled_dot_product_attention" not in str(exc):
                    raise
                # a model transformers runs only through its own attention (gpt-oss: attention
                # sinks): the plain transformers path (engine/local/attention.py, install)
                log.info("%s has no SDPA attention in transformers: loading it with its own (eager) attention",
                         self.model_dir.name)
                model = auto.from_pretrained(
                    str(self.model_dir), dtype=self.dtype, attn_implementation="eager", local_files_only=True)
        except Exception as exc:  # many kinds (OSError, ValueError, safetensors errors…)
            log.exception("cannot load model from %s", self.model_dir)
            raise EngineUnavailable(
                f"cannot load the model from {self.model_dir} ({type(exc).__name__}); see the server log.") from exc
        model.eval()
        config = model.config.get_text_config()  # a vision-language model's text side
        self.model = model
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        layer_types = getattr(config, "layer_types", None) or ()
        if "sliding_attention" in layer_types:
            self.sliding_window = int(config.sliding_window)
        self.kv = KVStore(config.num_hidden_layers, max_rows=self.max_rows + 1,
                          max_len=self.max_model_len + 1, dtype=self.dtype)
        self.attention_kernel = attention.install(model, self.dtype)
        log.info("attention: %s", self.attention_kernel)
        self._check_architecture()
        self.packed_linears, self.linear_kernel = pack_linears(model, self.dtype, self.packed_wanted)
        log.info("linear layers: %s (%d packed)", self.linear_kernel, self.packed_linears)
        self._plan_projection()  # before the lean decoder, which calls the projection it finds
        self.lean, self.decode_forward = self._lean_decoder()
        log.info("decode forward: %s", self.decode_forward)
        self.one_pass_replay, self.resume_replay = self._one_pass_replay()
        log.info("resume replay: %s", self.resume_replay)
        # the heap that the dense weights' copies, the packing's scratch and the check steps used
        _malloc_trim()

    def _plan_projection(self) -> None:
        """Put the output projection behind :class:`_PlannedProjection`. It is one large product
        (SmolLM2's 49,152 × 576 weights are a fifth of the model), the one place in a forward
        where a second passive thread's wake-up costs far less than it saves: docs/engine-design.md,
        "Each forward's thread count"."""
        head = self.model.get_output_embeddings()
        if head is None:
            return
        for parent, name, child in children(self.model):
            if child is head:
                setattr(parent, name, _PlannedProjection(head, self))

    def _project(self, head: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        """``head(x)`` at the thread count :attr:`logits_threads` chooses for its rows, timed for
        it; torch goes back to the forward's count afterwards."""
        plan = self.logits_threads
        if not plan.timed:
            out: torch.Tensor = head(x)
            return out
        n = plan.choose("logits", x.numel() // x.shape[-1], 0)
        outer = torch.get_num_threads()
        if n == outer:
            return _measured(plan, head, x)
        torch.set_num_threads(n)
        try:
            return _measured(plan, head, x)
        finally:  # back to the forward's count, even if the projection raised
            torch.set_num_threads(outer)

    def _lean_decoder(self) -> tuple[lean_decode.LeanDecoder | None, str]:
        """The lean decode forward (engine/local/lean_decode.py) when it gives the model's own
        logits bit for bit, on a step whose rows differ in length (masked) and on one whose rows
        are all at the same position (no mask)."""
        assert self.kv is not None
        lean, why = lean_decode.build(self.model, vision=self.vision is not None, sliding_window=self.sliding_window)
        if lean is None:
            return None, why
        ids = torch.tensor([[11], [12]])
        try:
            for positions in ([3, 5], [4, 4]):
                pos, mask, plan = self._decode_inputs(positions)
                with torch.inference_mode():
                    want = self._forward(ids, pos[:, None], mask, plan)
                    got = lean(ids, pos[:, None], mask, plan, self.kv)
                if not torch.equal(want, got):
                    return None, "model forward (the lean decode's logits differ from the model's)"
        except Exception as exc:  # an optional fast path: whatever stops it, the model's forward serves
            log.warning("no lean decode forward for %s: %s: %s", type(self.model).__name__, type(exc).__name__, exc)
            return None, f"model forward ({type(exc).__name__} in the lean decode's check)"
        finally:
            self.kv.release_memory()
        return lean, "lean (same bits as the model's forward)"

    def _one_pass_replay(self) -> tuple[bool, str]:
        """Whether a resumed generation's earlier output (``output_offset``) can be recomputed in
        one forward per chunk (:meth:`LeanDecoder.replay`) with the bits of one decode step per
        token, and why, in words. It needs the lean decoder, the native linears (each output's bits
        are its row's alone: docs/engine-design.md, "Linear layers") and the native decode attention
        (bits independent of the batch and of the length past a row's mask), and per-token rows
        that torch's vectorized elementwise loops cover without a scalar tail (an intermediate
        size a multiple of 64, a head size a multiple of 32: a tail runs ``std::exp`` where the
        vector body runs Sleef's, other bits). Then it checks: 12 tokens one-pass against 12
        decode steps, the last logits and every key and value the same bits."""
        if self.lean is None:
            return False, f"one decode step per token (no lean decode forward: {self.decode_forward})"
        if not self.linear_kernel.startswith("native"):
            return False, ("one decode step per token (the linears are not the native kernel, whose bits do not "
                           f"depend on the number of rows: {self.linear_kernel})")
        if not self.attention_kernel.startswith("native"):
            return False, f"one decode step per token (the decode attention is not the native kernel: {self.attention_kernel})"
        config = self.model.config.get_text_config()
        head = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
        inter = int(config.intermediate_size)
        if inter % 64 or head % 32:
            return False, (f"one decode step per token (intermediate size {inter} or head size {head} leaves torch's "
                           "vectorized loops a scalar tail, whose bits depend on the number of rows)")
        self._replay_width = max(inter, int(config.hidden_size),
                                 head * (int(config.num_attention_heads) + 2 * int(config.num_key_value_heads)))
        assert self.kv is not None
        ids = [(7 * i + 3) % self.vocab_size for i in range(17)]
        start = 5
        try:
            with torch.inference_mode():
                for row in (0, 1):
                    self.reserve(2, len(ids))
                    self._forward(torch.tensor([ids[:start]]), torch.arange(start)[None], None,
                                  WritePlan(row, [0], [start], start))
                step = None
                for p in range(start, len(ids)):
                    pos = torch.tensor([p])
                    step = self.lean(torch.tensor([[ids[p]]]), pos[:, None], None,
                                     WritePlan(0, [p], [1], p + 1, positions=pos, same_position=p), self.kv)
                one = self.lean.replay(ids[start:], start, 1, self.kv)
            same = step is not None and torch.equal(step, one) and all(
                torch.equal(buf[0, :, :len(ids)], buf[1, :, :len(ids)])
                for buf in (*self.kv.keys, *self.kv.values) if buf is not None)
        except Exception as exc:  # an optional fast path: whatever stops it, the per-token replay serves
            log.warning("no one-pass resume replay: %s: %s", type(exc).__name__, exc)
            return False, f"one decode step per token ({type(exc).__name__} in the one-pass check)"
        finally:
            self.kv.release_memory()
        if not same:
            return False, "one decode step per token (the one-pass replay's bits differ from the decode steps')"
        return True, "one pass per chunk (the same bits as one decode step per token)"

    def replay_chunk(self, budget: int) -> int:
        """The most earlier-output tokens one replay forward takes (0: no one-pass replay): the step's
        token budget; with more than one thread, also few enough that no elementwise operator of the
        forward reaches torch's parallel grain (32,768 elements), where splitting it between threads
        can put a scalar tail in the middle of a row."""
        if not self.one_pass_replay:
            return 0
        if self.threads.threads > 1 and self._replay_width:
            return max(1, min(budget, (GRAIN - 1) // self._replay_width))
        return budget

    def _check_architecture(self) -> None:
        """One tiny forward through StepCache: every layer must have written its keys/values."""
        assert self.kv is not None
        cache = StepCache(self.kv, WritePlan(0, [0], [1], 1), record=True)
        try:
            self.reserve(1, 2)
            with torch.inference_mode():
                self.model(input_ids=torch.tensor([[0]]), position_ids=torch.tensor([[0]]), attention_mask=None,
                           past_key_values=cache, use_cache=True, logits_to_keep=1)
        except Exception as exc:
            log.exception("model check failed")
            raise EngineUnavailable(
                f"the model in {self.model_dir} ({type(self.model).__name__}) is not supported by the local "
                f"engine ({type(exc).__name__}); see the server log.") from exc
        expected = int(self.model.config.get_text_config().num_hidden_layers)
        seen = cache.layers_seen or set()
        if len(seen) != expected:
            raise EngineUnavailable(
                f"the model in {self.model_dir} ({type(self.model).__name__}) is not supported by the local "
                f"engine: only {len(seen)} of its {expected} layers use a standard KV cache.")
        if self.prefix is not None:  # what one cached position costs: keys and values of every layer
            self.prefix.bytes_per_token = sum(
                t.shape[1] * t.shape[3] * t.element_size() for t in (*self.kv.keys, *self.kv.values)
                if t is not None)
        self.kv.release_memory()

    # --- KV housekeeping -------------------------------------------------------------------
    def reserve(self, rows: int, length: int) -> None:
        assert self.kv is not None
        self.kv.reserve(rows, length)

    def apply(self, ops: list[KVOp]) -> None:
        assert self.kv is not None
        if not ops:
            return
        need_rows = max(max(op.src, op.dst) for op in ops) + 1
        need_len = max(op.length for op in ops)
        self.kv.reserve(max(need_rows, 1), max(need_len, 1))
        for op in ops:
            if op.kind == "move":
                self.kv.move_row(op.src, op.dst, op.length)
            elif op.kind == "swap":
                self.kv.swap_rows(op.src, op.dst, op.length, op.length)
            elif op.kind == "save":
                op.entry.data = self.kv.read_row(op.src, op.length)
            else:  # "load"
                self.kv.write_row(op.dst, op.entry.data, op.length)

    def fit(self, rows: int, length: int) -> None:
        """Shrink the KV buffers towards what ``rows`` live sequences of at most ``length``
        positions need (called after sequences finish)."""
        if self.kv is not None:
            self.kv.shrink_to(rows, length)

    def release(self) -> None:
        """Give the KV memory back (called when no sequence is live). After large buffers, glibc
        should also return its free heap pages (:meth:`trim`): it raises its mmap threshold as big
        blocks are freed, so later large tensors come from the heap and stay in the RSS after
        they are freed."""
        if self.kv is None:
            return
        freed = self.kv.nbytes()
        self.kv.release_memory()
        if freed >= TRIM_AFTER_BYTES:
            self.trim_due = True  # the engine calls trim() once it has been idle a moment

    def trim(self) -> None:
        self.trim_due = False
        self.trims += 1
        _malloc_trim()  # about 15 ms with SmolLM2 loaded

    def kv_bytes(self) -> int:
        return self.kv.nbytes() if self.kv is not None else 0

    # --- forwards --------------------------------------------------------------------------
    def prefill(self, chunks: list[PrefillChunk]) -> torch.Tensor:
        """Run prompt chunks; returns ``[len(chunks), vocab]`` logits of each chunk's last token.
        Prompt chunks of consecutive rows run as one batch; a resumed generation's replay chunk
        (:attr:`PrefillChunk.replay`) runs in a forward of its own (:meth:`LeanDecoder.replay`)."""
        if not any(c.replay for c in chunks):
            return self._prefill_batch(chunks)
        out: list[torch.Tensor] = []
        run: list[PrefillChunk] = []  # consecutive rows of prompt chunks: one batch
        for c in chunks:
            if run and (c.replay or c.seq.row != run[-1].seq.row + 1):
                out.extend(self._prefill_batch(run))
                run = []
            if c.replay:
                out.extend(self._timed("replay", c.count, c.start + c.count, self._replay, c))
            else:
                run.append(c)
        if run:
            out.extend(self._prefill_batch(run))
        return torch.stack(out)

    def _prefill_batch(self, chunks: list[PrefillChunk]) -> torch.Tensor:
        kv_len = max(c.start + c.count for c in chunks)
        return self._timed("prefill", sum(c.count for c in chunks), kv_len, self._prefill, chunks)

    def _replay(self, chunk: PrefillChunk) -> torch.Tensor:
        assert self.lean is not None and self.kv is not None
        end = chunk.start + chunk.count
        self.reserve(chunk.seq.row + 1, end)
        return self.lean.replay(chunk.seq.prompt[chunk.start:end], chunk.start, chunk.seq.row, self.kv)

    def _prefill(self, chunks: list[PrefillChunk]) -> torch.Tensor:
        ids, pos, mask, plan = prefill_inputs(chunks, self.sliding_window)
        self.reserve(plan.first_row + len(chunks), plan.kv_len)
        images = [(i, c, c.seq.group.mm) for i, c in enumerate(chunks) if c.seq.group.mm is not None]
        if not images:
            return self._forward(ids, pos, mask, plan)
        return self._prefill_images(ids, pos, mask, plan, chunks, images)

    def _prefill_images(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None, plan: WritePlan,
                        chunks: list[PrefillChunk], images: list[tuple[int, PrefillChunk, VisionPrompt]]
                        ) -> torch.Tensor:
        """A prefill batch with image rows: their embeddings merged at the placeholders and their
        M-RoPE positions (text rows keep their plain positions on all three axes)."""
        assert self.vision is not None
        width = ids.shape[1]
        rope = pos[None].expand(3, -1, -1).clone()
        embeds = self.model.get_input_embeddings()(ids)
        for i, c, mm in images:
            if c.start == 0:
                vision.prepare(self.model, mm, c.seq.prompt, self.vision)
            assert mm.positions is not None
            pad = width - c.count
            rope[:, i, pad:] = mm.positions[:, c.start:c.start + c.count]
            vision.merge_chunk(mm, embeds[i], c.start, c.count, pad)
        logits = self._forward(ids, pos, mask, plan, embeds=embeds, rope=rope)
        for _, c, mm in images:
            if c.completes:  # decode needs only the delta
                mm.embeds, mm.positions, mm.items = None, None, []
        return logits

    def decode(self, seqs: list[Sequence]) -> torch.Tensor:
        """One token for each of ``seqs`` (rows ``0 .. len(seqs)-1``); returns ``[d, vocab]``."""
        return self._timed("decode", len(seqs), max(s.computed for s in seqs) + 1, self._decode, seqs)

    def _timed(self, kind: str, tokens: int, kv_len: int, forward: Callable[[Any], torch.Tensor],
               arg: Any) -> torch.Tensor:
        """One forward at the thread count :attr:`threads` chooses for its size, timed for it."""
        n = self.threads.choose(kind, tokens, kv_len)
        if n != self._torch_threads:
            torch.set_num_threads(n)  # about 0.1 µs; the OpenMP pool stays
            self._torch_threads = n
        return _measured(self.threads, forward, arg)

    def _decode(self, seqs: list[Sequence]) -> torch.Tensor:
        pos, mask, plan = self._decode_inputs([s.computed for s in seqs])
        ids = torch.tensor([[s.next_input] for s in seqs])
        rope = None
        if any(s.group.mm is not None for s in seqs):  # M-RoPE: sequence index + the request's delta
            deltas = torch.tensor([s.group.mm.delta if s.group.mm is not None else 0 for s in seqs])
            rope = (pos + deltas)[None, :, None].expand(3, -1, -1)
        if self.lean is not None and rope is None:
            assert self.kv is not None
            return self.lean(ids, pos[:, None], mask, plan, self.kv)
        return self._forward(ids, pos[:, None], mask, plan, rope=rope)

    def _decode_inputs(self, positions: list[int]) -> tuple[torch.Tensor, torch.Tensor | None, WritePlan]:
        """A decode step's inputs (:func:`~engine.local.step_inputs.decode_inputs`); reserves the KV room."""
        self.reserve(len(positions), max(positions) + 1)
        return decode_inputs(positions, self.sliding_window)

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None, plan: WritePlan, *,
                 embeds: torch.Tensor | None = None, rope: torch.Tensor | None = None) -> torch.Tensor:
        """``pos``: each token's place in its KV row (mask and writes); ``rope``: its rotary
        positions when they differ (``[3, batch, width]`` M-RoPE), else ``pos`` is used."""
        assert self.kv is not None
        attention: Any = mask
        if self.sliding_window is not None:
            attention = layer_masks(mask, pos, plan.kv_len, self.sliding_window)
        tokens = {"input_ids": ids} if embeds is None else {"inputs_embeds": embeds}
        out = self.model(**tokens, position_ids=pos if rope is None else rope, attention_mask=attention,
                         past_key_values=StepCache(self.kv, plan), use_cache=True, logits_to_keep=1)
        logits: torch.Tensor = out.logits[:, -1, :]
        return logits


def _measured(plan: ThreadPlan, call: Callable[[Any], torch.Tensor], arg: Any) -> torch.Tensor:
    """``call(arg)``, its wall time recorded by ``plan`` when the plan learns from it."""
    if not plan.timed:
        return call(arg)
    start = time.perf_counter()
    out = call(arg)
    plan.record(time.perf_counter() - start)
    return out


class _PlannedProjection(torch.nn.Module):
    """A model's output projection, run through :meth:`ModelRunner._project`."""

    def __init__(self, head: torch.nn.Module, runner: ModelRunner) -> None:
        super().__init__()
        self.head = head
        self.runner = runner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.runner._project(self.head, x)


TRIM_AFTER_BYTES = 16 << 20
GRAIN = 32768  # torch's parallel grain (at::internal::GRAIN_SIZE): smaller elementwise operators run on one thread


def _malloc_trim() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to do
        ctypes.CDLL("libc.so.6").malloc_trim(0)
