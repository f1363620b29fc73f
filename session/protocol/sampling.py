"""The request → ``SamplingParams`` details vLLM applies (shared by chat and completion)."""

from __future__ import annotations

from typing import Any

from engine.protocol import SamplingParams


def or_default(value: Any, default: Any) -> Any:
    return default if value is None else value


def logit_bias_of(bias: dict[str, float] | None) -> dict[int, float] | None:
    """OpenAI sends token ids as string keys; vLLM clamps each bias to [-100, 100]."""
    if not bias:
        return None
    out: dict[int, float] = {}
    for key, value in bias.items():
        out[int(key)] = min(100.0, max(-100.0, value))  # keys checked by the request model
    return out


def structured_from_format(fmt: dict[str, Any] | None) -> dict[str, Any] | None:
    """``response_format`` → vLLM's ``structured_outputs`` (json / json_object)."""
    if not fmt:
        return None
    kind = fmt.get("type")
    if kind == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        return {"json": schema if schema is not None else {}}
    if kind == "json_object":
        return {"json_object": True}
    return None


def vllm_post_init(sp: SamplingParams) -> SamplingParams:
    """What vLLM's ``SamplingParams.__post_init__`` / greedy check change before it serializes."""
    changes: dict[str, Any] = {}
    if sp.greedy:
        # vLLM resets these for greedy sampling, so they disappear from the wire.
        changes.update(top_p=1.0, top_k=0, min_p=0.0)
    if sp.stop and not sp.include_stop_str_in_output:
        # vLLM holds back this many characters so a partial stop string is never streamed.
        extra = dict(sp.model_extra or {})
        extra["output_text_buffer_length"] = max(len(s) for s in sp.stop) - 1
        if extra["output_text_buffer_length"] == 0:
            del extra["output_text_buffer_length"]
        if extra:
            return sp.model_copy(update={**changes, **extra})
    return sp.model_copy(update=changes) if changes else sp
