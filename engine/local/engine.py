"""``LocalEngine``: torch + transformers, continuous batching on one engine thread.

Threads and hand-offs::

    event loop (asyncio)                         engine thread (torch)
    ────────────────────                         ─────────────────────
    generate(): validate, Outbox, ─ inbox ─────▶ drain inbox → Scheduler.plan()
                 await outbox.get()               → ModelRunner.prefill / decode
    abort() / leaving generate() ── inbox ─────▶ → sample → stop checks → free rows
    _deliver(): outbox.push(...) ◀── one call_soon_threadsafe per step, all requests' outputs

The loop never waits on the engine thread (the only lock guards the inbox for a few
instructions); model loading, forwards and sampling all run on the engine thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from engine.errors import EngineError, EngineOverloaded, EngineShutDown, EngineUnavailable
from engine.interface import Engine, EngineHealth, EngineStream
from engine.local import native
from engine.local.device import resolve_dtype, resolve_prefix_cache_mb, threads_choice
from engine.local.grammar import Grammars
from engine.local.model_files import read_limits
from engine.local.omp import wait_policy
from engine.local.params import ModelLimits, resolve
from engine.local.prefix import PrefixCache
from engine.local.runner import ModelRunner
from engine.local.sampling import Sampled, SampleRow, sample
from engine.local.scheduler import Overloaded, RequestGroup, Scheduler
from engine.local.scheduler import Sequence as Seq
from engine.local.step import Delivery, final_output, run_step
from engine.local.threads import ThreadPlan, resolve_plan
from engine.local.vision import VisionSpec, read_features
from engine.outbox import DEFAULT_CAPACITY, Outbox, OutboxStream
from engine.protocol import GenerateRequest

log = logging.getLogger("tokenwire.engine")

_Msg = tuple[str, Any]
IDLE_TRIM_S = 1.0
_Delivery = Delivery


class LocalEngine(Engine):
    """Serve one local Hugging Face causal-LM directory."""

    def __init__(self, model_dir: Path, *, model_name: str, max_model_len: int, dtype: str = "auto",
                 max_num_seqs: int = 32, max_num_batched_tokens: int = 2048, max_waiting: int = 256,
                 num_threads: int | None = None, outbox_capacity: int = DEFAULT_CAPACITY,
                 prefix_cache_mb: float | None = None, packed_linear: bool | None = None,
                 thread_plan: str | None = None) -> None:
        self.model_dir = Path(model_dir)
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.dtype, self.dtype_reason = resolve_dtype(dtype)
        self.num_threads, self.threads_reason = threads_choice(num_threads)
        self.thread_plan = resolve_plan(thread_plan)  # engine/local/threads.py
        self.max_waiting = max_waiting
        self.outbox_capacity = outbox_capacity
        self.limits: ModelLimits = read_limits(self.model_dir, max_model_len, max_n=max_num_seqs)
        self.vision = VisionSpec.read(self.model_dir)  # None: a text model (features refused)
        self.prefix = PrefixCache(int(resolve_prefix_cache_mb(prefix_cache_mb) * 2**20))
        self.scheduler = Scheduler(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                   max_waiting=max_waiting + 1, prefix=self.prefix)
        self.runner = ModelRunner(self.model_dir, dtype=self.dtype, max_rows=max_num_seqs,
                                  max_model_len=max_model_len, vision=self.vision, prefix=self.prefix,
                                  packed_linear=packed_linear)
        self.runner.plan_threads(ThreadPlan(self.num_threads, self.thread_plan))
        self.grammars = Grammars(self.model_dir, self.limits.vocab_size)
        # shared with the engine thread (guarded by _cv)
        self._cv = threading.Condition()
        self._inbox: deque[_Msg] = deque()
        self._inbox_adds = 0
        self._sched_waiting = 0
        self._stopping = False
        # loop side
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._outboxes: dict[str, Outbox] = {}
        self._by_external: dict[str, set[str]] = {}
        self._ids = itertools.count()
        self._failure: str | None = None
        # engine-thread counters (read from the loop for stats; ints are safe to read)
        self._live = 0
        self._steps = 0
        self._generated = 0
        self._step_seconds = 0.0  # wall time inside model steps (engine thread)
        self._step_cpu_seconds = 0.0  # the engine thread's CPU time inside them

    @classmethod
    def from_settings(cls, model_dir: Path, *, model_name: str, max_model_len: int, dtype: str = "auto",
                      max_num_seqs: int = 32, max_num_batched_tokens: int = 2048,
                      max_waiting: int = 256) -> LocalEngine:
        """Build from server settings; configuration problems are ``ValueError`` with a message
        the CLI prints as is."""
        if min(max_num_seqs, max_num_batched_tokens) < 1 or max_waiting < 0:
            raise ValueError("--max-num-seqs and --max-num-batched-tokens must be at least 1, "
                             "--max-waiting at least 0")
        try:
            return cls(model_dir, model_name=model_name, max_model_len=max_model_len, dtype=dtype,
                       max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                       max_waiting=max_waiting)
        except EngineError as exc:
            raise ValueError(exc.message) from None

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        if self._thread is not None:
            return
        loop = asyncio.get_running_loop()
        self._loop = loop
        ready: asyncio.Future[None] = loop.create_future()
        self._thread = threading.Thread(target=self._thread_main, args=(loop, ready),
                                        name="tokenwire-engine", daemon=True)
        self._thread.start()
        await ready
        log.info("local engine ready: %s, dtype %s (%s), %d threads (%s; %s; OpenMP wait: %s), max %d sequences",
                 self.model_dir.name, str(self.dtype).removeprefix("torch."), self.dtype_reason,
                 self.num_threads, self.threads_reason, self.runner.threads.describe(), wait_policy(),
                 self.scheduler.max_num_seqs)

    async def close(self) -> None:
        thread = self._thread
        if thread is None:
            return
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        await asyncio.to_thread(thread.join, 30)
        self._thread = None
        await asyncio.to_thread(self.grammars.close)  # the grammar compile worker
        err = EngineShutDown("The server is shutting down; retry the request (on another replica).")
        for box in list(self._outboxes.values()):
            box.push(err)

    # --- the Engine interface --------------------------------------------------------------
    def generate(self, request: GenerateRequest) -> EngineStream:
        external = request.request_id or secrets.token_hex(8)
        key = f"{external}\x00{next(self._ids)}"

        def forget() -> None:
            self._outboxes.pop(key, None)
            keys = self._by_external.get(external)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_external[external]

        async def abort() -> None:
            self._post("abort", ([key], False))

        return OutboxStream(lambda: self._enqueue(request, external, key), forget=forget, abort=abort)

    async def _enqueue(self, request: GenerateRequest, external: str, key: str) -> Outbox:
        """Check and admit ``request`` (its grammar compiled first), and return its outbox."""
        self._check_serving()
        prompt, params = resolve(request, self.limits)
        grammar = None
        if params.structured is not None:  # compile (or find) the grammar before admission
            grammar = await self.grammars.prepare_async(params, prompt)
        mm = None
        if request.features is not None:  # checked and decoded off the loop (megabytes of base64)
            mm = await asyncio.to_thread(read_features, request.features, prompt, self.vision)
        base_seed = params.seed if params.seed is not None else secrets.randbits(63)
        group = RequestGroup(key, prompt, params, [base_seed] * params.n, external_id=external, grammar=grammar,
                             mm=mm, cache_salt=request.cache_salt)
        box = Outbox(self.outbox_capacity)
        with self._cv:
            if self._inbox_adds + self._sched_waiting >= self.max_waiting:
                raise EngineOverloaded(
                    f"The engine is overloaded: {self.max_waiting} requests are already waiting. "
                    "Retry later.")
            self._outboxes[key] = box
            self._by_external.setdefault(external, set()).add(key)
            self._inbox.append(("add", group))
            self._inbox_adds += 1
            self._cv.notify()
        return box

    async def abort(self, request_ids: Sequence[str]) -> None:
        keys: list[str] = []
        for rid in request_ids:
            found = self._by_external.get(rid)
            if found is None and rid.startswith("generate-tokens-"):
                found = self._by_external.get(rid.removeprefix("generate-tokens-"))
            keys.extend(found or ())
        if keys:
            self._post("abort", (keys, True))

    async def health(self) -> EngineHealth:
        ok = self._failure is None and self._thread is not None and self._thread.is_alive()
        detail = self._failure or ("" if ok else "engine not running")
        return EngineHealth(ok=ok, detail=detail, stats=self.stats())

    def live_sequences(self) -> int:
        return self._live

    def stats(self) -> dict[str, Any]:
        return {
            "running": self.scheduler.running_groups,
            "waiting": self._inbox_adds + self._sched_waiting,
            "live_sequences": self._live,
            "kv_cache_bytes": self.runner.kv_bytes(),
            "steps": self._steps,
            "generated_tokens": self._generated,
            # time inside model steps (prefill, decode, sampling), summed over the engine's life:
            # wall seconds, and the engine thread's own CPU seconds (torch's worker threads, when
            # there is more than one, are not in it)
            "step_seconds": round(self._step_seconds, 6),
            "step_cpu_seconds": round(self._step_cpu_seconds, 6),
            "dtype": str(self.dtype).removeprefix("torch."),
            "dtype_reason": self.dtype_reason,
            "threads": self.num_threads,
            **self.runner.thread_stats(),  # engine/local/threads.py; read as they are
            "linear_kernel": self.runner.linear_kernel,  # engine/local/packed.py
            "attention_kernel": self.runner.attention_kernel,  # engine/local/attention.py
            "native_kernels": native.describe(),  # engine/local/native.py: the library, or the fallback and why
            "decode_forward": self.runner.decode_forward,  # engine/local/lean_decode.py
            "resume_replay": self.runner.resume_replay,  # how a resume recomputes its earlier output
            "resume_replay_chunk": self.scheduler.replay_chunk,  # tokens per replay forward (0: per token)
            "omp_wait_policy": wait_policy(),  # engine/local/omp.py
            "grammars_compiled": self.grammars.compiled,
            # budget-aware closing of structured outputs (engine/local/structured_closing.py): walks made,
            # tokens it forced, seconds spent (written by the engine thread; read as they are)
            "closing_walks": self.grammars.closing_walks,
            "closing_forced": self.grammars.closing_forced,
            "closing_seconds": round(self.grammars.closing_seconds, 6),
            "max_num_seqs": self.scheduler.max_num_seqs,
            "max_num_batched_tokens": self.scheduler.max_num_batched_tokens,
            **self.prefix.stats(),  # written by the engine thread; read as they are
        }

    def set_threads(self, n: int, plan: str | None = None) -> None:
        """Change the engine thread's torch thread count (and its plan: None keeps it) from the
        next step on (benchmarks)."""
        if n < 1:
            raise ValueError("threads must be at least 1")
        self._post("threads", (n, self.thread_plan if plan is None else resolve_plan(plan)))

    # --- loop side helpers -----------------------------------------------------------------
    def _check_serving(self) -> None:
        if self._failure is not None:
            raise EngineUnavailable(f"The engine is not available: {self._failure}")
        if self._thread is None or not self._thread.is_alive():
            raise EngineUnavailable("The engine is not running.")

    def _post(self, kind: str, payload: Any) -> None:
        with self._cv:
            self._inbox.append((kind, payload))
            self._cv.notify()

    def _deliver(self, items: _Delivery) -> None:
        for key, item in items:
            box = self._outboxes.get(key)
            if box is not None:
                box.push(item)

    # --- engine thread ---------------------------------------------------------------------
    def _thread_main(self, loop: asyncio.AbstractEventLoop, ready: asyncio.Future[None]) -> None:
        torch.set_num_threads(self.num_threads)
        try:
            with torch.inference_mode():
                self.runner.load()
        except EngineError as exc:
            self._failure = exc.message
            loop.call_soon_threadsafe(_settle, ready, exc)
            return
        except Exception as exc:  # a bug or an environment problem: say so once, clearly
            log.exception("engine failed to start")
            self._failure = "the model could not be loaded; see the server log"
            loop.call_soon_threadsafe(_settle, ready, EngineUnavailable(self._failure))
            del exc
            return
        self.scheduler.replay_chunk = self.runner.replay_chunk(self.scheduler.max_num_batched_tokens)
        loop.call_soon_threadsafe(_settle, ready, None)
        try:
            with torch.inference_mode():
                self._serve(loop)
        except Exception:
            log.exception("engine thread crashed")
            self._failure = "the engine stopped after an internal error; see the server log"

    def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        sched = self.scheduler
        while True:
            with self._cv:
                while not self._inbox and not sched.has_work and not self._stopping:
                    # idle for a second after large KV buffers went: return the free heap to the OS
                    if not self._cv.wait(IDLE_TRIM_S if self.runner.trim_due else None):
                        self.runner.trim()
                if self._stopping:
                    return
                msgs = list(self._inbox)
                self._inbox.clear()
                self._inbox_adds -= sum(1 for kind, _ in msgs if kind == "add")
            out: _Delivery = []
            for kind, payload in msgs:
                if kind == "add":
                    self._admit(payload, out)
                elif kind == "threads":
                    self.num_threads, self.thread_plan = payload
                    self.runner.plan_threads(ThreadPlan(*payload))
                    sched.replay_chunk = self.runner.replay_chunk(sched.max_num_batched_tokens)
                else:
                    keys, notify = payload
                    for group in sched.abort(keys):
                        if notify:
                            out.append((group.request_id, final_output(group, [])))
            if sched.has_work:
                self._step(out)
            with self._cv:
                self._sched_waiting = len(sched.waiting)
            live = sched.live_sequences
            if live == 0:  # idle: give all KV memory back
                self.runner.apply(sched.take_ops())
                self.runner.release()
            elif live < self._live:  # sequences left: shrink the buffers if they are far too big
                self.runner.apply(sched.take_ops())
                self.runner.fit(live, sched.kv_need())
            self._live = live
            if out:
                try:
                    loop.call_soon_threadsafe(self._deliver, out)
                except RuntimeError:  # the loop is closed: nobody is listening any more
                    return

    def _admit(self, group: RequestGroup, out: _Delivery) -> None:
        try:
            self.scheduler.add(group)
        except Overloaded:
            out.append((group.request_id, EngineOverloaded("The engine is overloaded; retry later.")))

    def _step(self, out: _Delivery) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        result = run_step(self.scheduler, self.runner, self._sample, max_model_len=self.max_model_len)
        self._step_cpu_seconds += time.thread_time() - cpu
        self._step_seconds += time.perf_counter() - wall
        if result.tokens:
            self._steps += 1
            self._generated += result.tokens
        out.extend(result.outputs)

    def _sample(self, logits: list[torch.Tensor], seqs: list[Seq]) -> list[Sampled]:
        x = torch.stack(logits)
        constrained = [i for i, s in enumerate(seqs) if s.group.grammar is not None]
        if constrained:  # structured outputs: mask those rows only, then advance their grammars
            x = x.float()
            rows = [seqs[i] for i in constrained]
            self.grammars.constrain(x, rows, constrained)
        picks = sample(x, [SampleRow(s.group.params, s.seed, s.index, s.group.prompt, s.output) for s in seqs])
        if constrained:
            replaced = self.grammars.advance(rows, [picks[i].token_id for i in constrained])
            for j, tok in replaced:  # budget-aware closing took the closing path's token instead
                i = constrained[j]
                only = torch.full_like(x[i:i + 1], float("-inf"))
                only[0, tok] = 0.0
                picks[i] = sample(only, [SampleRow(seqs[i].group.params, seqs[i].seed, seqs[i].index,
                                                   seqs[i].group.prompt, seqs[i].output)])[0]
        return picks


def _settle(fut: asyncio.Future[None], exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)

