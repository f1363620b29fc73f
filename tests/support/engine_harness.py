"""Drive a real ``LocalEngine`` from synchronous tests, and the transformers reference it must match.

The engine lives on an event loop in a background thread (an anyio blocking portal), so one
loaded model serves a whole test module; tests call :meth:`EngineHarness.run` with requests and
get each request's tokens back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from anyio.from_thread import BlockingPortal, start_blocking_portal

from engine.interface import EngineOutput
from engine.local import LocalEngine
from engine.protocol import GenerateRequest, SamplingParams, TokenLogprob
from tests.support.waiting import WaitTimeout


@dataclass
class Result:
    """Everything one request produced, per choice index."""

    tokens: dict[int, list[int]] = field(default_factory=dict)
    finish: dict[int, str | None] = field(default_factory=dict)
    stop_reason: dict[int, Any] = field(default_factory=dict)
    logprobs: dict[int, list[TokenLogprob]] = field(default_factory=dict)
    outputs: list[EngineOutput] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        return self.tokens.get(0, [])


def request(token_ids: Sequence[int], request_id: str | None = None, **params: Any) -> GenerateRequest:
    params.setdefault("temperature", 0.0)
    return GenerateRequest(request_id=request_id, token_ids=list(token_ids),
                           sampling_params=SamplingParams(**params))


async def collect(engine: LocalEngine, req: GenerateRequest, *, stop_after: int | None = None) -> Result:
    """Run one request; with ``stop_after`` leave the iteration after that many outputs."""
    res = Result()
    agen = engine.generate(req)
    async with contextlib.aclosing(agen):
        async for out in agen:
            res.outputs.append(out)
            for c in out.choices:
                res.tokens.setdefault(c.index, []).extend(c.token_ids)
                if c.logprobs:
                    res.logprobs.setdefault(c.index, []).extend(c.logprobs)
                if c.finish_reason is not None:
                    res.finish[c.index] = c.finish_reason
                    res.stop_reason[c.index] = c.stop_reason
            if stop_after is not None and len(res.outputs) >= stop_after:
                break
    return res


class EngineHarness:
    def __init__(self, portal: BlockingPortal, engine: LocalEngine) -> None:
        self.portal = portal
        self.engine = engine

    def run(self, *reqs: GenerateRequest, stagger: float = 0.0) -> list[Result]:
        """Run requests concurrently (optionally starting them ``stagger`` seconds apart)."""
        async def main() -> list[Result]:
            async def one(i: int, r: GenerateRequest) -> Result:
                if stagger:
                    await asyncio.sleep(i * stagger)
                return await collect(self.engine, r)
            return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(reqs))))
        return self.portal.call(main)

    def call(self, fn: Any, *args: Any) -> Any:
        return self.portal.call(fn, *args)

    def wait_idle(self, timeout: float = 10.0) -> int:
        """Wait until the engine holds no sequence (returns 0, the live count); fails past ``timeout``."""
        async def main() -> int:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while self.engine.live_sequences():
                if loop.time() >= deadline:
                    raise WaitTimeout(f"waited {timeout:g} s for the engine to hold no sequence "
                                      f"({self.engine.live_sequences()} live)")
                await asyncio.sleep(0.01)
            return 0
        return self.portal.call(main)


@contextlib.contextmanager
def running_engine(model_dir: Path, **kwargs: Any) -> Iterator[EngineHarness]:
    kwargs.setdefault("max_model_len", 2048)
    kwargs.setdefault("num_threads", 1)
    with start_blocking_portal("asyncio") as portal:
        engine = LocalEngine(model_dir, model_name=model_dir.name, **kwargs)
        portal.call(engine.start)
        try:
            yield EngineHarness(portal, engine)
        finally:
            portal.call(engine.close)


class Reference:
    """``model.generate`` on the same weights: what greedy output must equal. In bf16 it decodes
    with the engine's attention (engine/local/attention.py) unless ``attention="sdpa"``, and its
    linears are packed as the engine's (engine/local/packed.py), so it runs the engine's
    computation; fp32 is transformers' own either way."""

    def __init__(self, model_dir: Path, dtype: str, attention: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from engine.local import attention as engine_attention
        from engine.local.packed import pack_linears

        self.torch = torch
        if attention is None:
            attention = engine_attention.register() if engine_attention.wanted(getattr(torch, dtype)) else "sdpa"
        model = AutoModelForCausalLM.from_pretrained(
            str(model_dir), dtype=getattr(torch, dtype), attn_implementation=attention, local_files_only=True)
        self.model: Any = cast(Any, model).eval()
        self.linear_kernel = pack_linears(self.model, getattr(torch, dtype))[1]

    def greedy(self, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
        torch = self.torch
        ids = torch.tensor([list(prompt)])
        gc = self.model.generation_config
        pad = gc.pad_token_id if gc.pad_token_id is not None else 0
        with torch.inference_mode():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=max_new_tokens, pad_token_id=pad)
        tokens: list[int] = out[0, len(prompt):].tolist()
        return tokens
