"""Prometheus metrics: the one module that owns the metric objects (served at ``GET /metrics``).

Instrumented at the boundaries, each with one call (HTTP route wrapper, WebSocket endpoint, the
engine calls, the render and derender services), read from the engine and the process at scrape
time; the per-token ones are plain counts (:class:`TokenMetrics`). The metrics, where each is
counted and why they live in their own registry: docs/reliability.md, "Metrics".
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from engine.interface import Engine, EngineOutput, EngineStream
from engine.protocol import GenerateRequest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REGISTRY = CollectorRegistry(auto_describe=True)

# Kinds of error by HTTP status, the WebSocket error codes of docs/protocol.md.
ERROR_KIND_BY_STATUS = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                        405: "method_not_allowed", 408: "timeout", 409: "conflict", 413: "too_large",
                        415: "unsupported_media_type", 422: "invalid_request", 429: "rate_limited",
                        499: "cancelled", 500: "internal_error", 502: "engine_unavailable", 503: "overloaded",
                        504: "engine_timeout"}

_LATENCY = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_TTFT = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

HTTP_REQUESTS = Counter("tokenwire_http_requests", "HTTP requests answered, by route and status.",
                        ["route", "status"], registry=REGISTRY)
WS_REQUESTS = Counter("tokenwire_ws_requests", "WebSocket request frames started, by frame type.", ["frame"],
                      registry=REGISTRY)
ERRORS = Counter("tokenwire_errors", "Errors answered (HTTP 4xx/5xx, WebSocket error frames), by kind.",
                 ["kind", "transport"], registry=REGISTRY)
ACTIVE_SESSIONS = Gauge("tokenwire_active_sessions", "WebSocket sessions open.", registry=REGISTRY)
INFLIGHT_GENERATIONS = Gauge("tokenwire_inflight_generations", "Engine requests in flight.", registry=REGISTRY)
PROMPT_TOKENS = Counter("tokenwire_prompt_tokens", "Prompt tokens sent to the engine.", registry=REGISTRY)
IGNORED_FIELDS = Counter("tokenwire_ignored_request_fields", "Unknown top-level request fields ignored (a "
                         "misspelt `temprature`), by API; the log names each field once.", ["api"],
                         registry=REGISTRY)
RESPONSES_TOOLS_LEFT_OUT = Counter("tokenwire_responses_tools_left_out", "Responses API tools left out of the prompt "
                                  "(built-in types such as web_search, which nothing here runs).",
                                  registry=REGISTRY)
HEADER_TIMEOUTS = Counter("tokenwire_header_timeouts", "HTTP connections closed (408) because a request's headers "
                          "did not arrive within --header-timeout.", registry=REGISTRY)


class TokenMetrics(Collector):
    """The per-token metrics: generated tokens, time to first token, inter-token latency.

    They are updated once per engine output of every request (the hot path of streaming), so they
    are plain counts under one lock (about a tenth of the cost of ``prometheus_client``'s Counter
    and Histogram, whose every update takes their own locks and scans the buckets), and become
    metric families when scraped. An output of ``k`` tokens ``t`` seconds after the previous one
    counts ``k`` times ``t / k`` in the inter-token histogram."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.generated = 0
        self._ttft = _Counts(_TTFT)
        self._itl = _Counts(_LATENCY)

    def output(self, tokens: int, since_start: float | None, gap: float) -> None:
        """An output of ``tokens`` tokens (> 0): the first of its request ``since_start`` seconds
        after the request (None for later outputs), ``gap`` seconds after the previous output."""
        with self._lock:
            self.generated += tokens
            if since_start is not None:
                self._ttft.observe(since_start, 1)
                tokens -= 1
            if tokens > 0:
                self._itl.observe(gap / tokens, tokens)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            generated, ttft, itl = self.generated, self._ttft.family(), self._itl.family()
        yield CounterMetricFamily("tokenwire_generation_tokens", "Tokens the engine generated.", value=generated)
        yield HistogramMetricFamily("tokenwire_time_to_first_token_seconds",
                                    "From an engine request to its first generated token.", *ttft)
        yield HistogramMetricFamily("tokenwire_inter_token_latency_seconds",
                                    "Between generated tokens of one request (an output of k tokens after t "
                                    "seconds counts k times t/k).", *itl)


class _Counts:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float, times: int) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += times  # bucket ``le``: value <= le
        self.sum += value * times

    def family(self) -> tuple[list[tuple[str, float]], float]:
        """``buckets`` (cumulative, by ``le``) and ``sum_value`` of a HistogramMetricFamily."""
        total, buckets = 0, []
        for le, n in zip([*map(floatToGoString, self.bounds), "+Inf"], self.counts, strict=True):
            total += n
            buckets.append((le, float(total)))
        return buckets, self.sum


TOKENS = TokenMetrics()
REGISTRY.register(TOKENS)
RENDER_SECONDS = Histogram("tokenwire_render_seconds", "Render latency (template and tokenizer), by kind.",
                           ["kind"], buckets=_LATENCY, registry=REGISTRY)
DERENDER_SECONDS = Histogram("tokenwire_derender_seconds", "Derender service latency, by call.", ["call"],
                             buckets=_LATENCY, registry=REGISTRY)


# -- boundaries ------------------------------------------------------------------------------------------
def header_timeout() -> None:
    """A connection closed for headers that did not come in time (``server/header_timeout.py``)."""
    HEADER_TIMEOUTS.inc()
    error("timeout", "http")


def http_request(route: str, status: int) -> None:
    HTTP_REQUESTS.labels(route, str(status)).inc()
    if status >= 400:
        error(ERROR_KIND_BY_STATUS.get(status, "invalid_request" if status < 500 else "internal_error"), "http")


def error(kind: str, transport: str) -> None:
    ERRORS.labels(kind, transport).inc()


def ignored_fields(api: str, count: int) -> None:
    IGNORED_FIELDS.labels(api).inc(count)


def responses_tools_left_out(count: int) -> None:
    RESPONSES_TOOLS_LEFT_OUT.inc(count)


def ws_request(frame: str) -> None:
    WS_REQUESTS.labels(frame).inc()


def session_opened() -> None:
    ACTIVE_SESSIONS.inc()


def session_closed() -> None:
    ACTIVE_SESSIONS.dec()


def generate(engine: Engine, request: GenerateRequest) -> EngineStream:
    """``engine.generate(request)``, measured (:class:`GenerationMeter`, the stream's hook)."""
    stream = engine.generate(request)
    stream.measure(GenerationMeter(len(request.token_ids)))
    return stream


class GenerationMeter:
    """The metrics of one engine request (an :class:`engine.interface.StreamMeter`): in flight
    from its start to its close, prompt tokens, and each output as the engine delivers it."""

    __slots__ = ("_counted", "_first", "_last", "_started")

    def __init__(self, prompt_tokens: int) -> None:
        self._counted = True  # in INFLIGHT_GENERATIONS
        self._first = True
        self._started = self._last = time.perf_counter()
        INFLIGHT_GENERATIONS.inc()
        PROMPT_TOKENS.inc(prompt_tokens)

    def output(self, out: EngineOutput) -> None:
        choices = out.choices
        tokens = len(choices[0].token_ids) if len(choices) == 1 else sum(len(c.token_ids) for c in choices)
        if not tokens:
            return
        now = time.perf_counter()
        first, self._first = self._first, False
        TOKENS.output(tokens, now - self._started if first else None, now - self._last)
        self._last = now

    def closed(self) -> None:
        if self._counted:
            self._counted = False
            INFLIGHT_GENERATIONS.dec()


def time_methods(obj: Any, histogram: Histogram, methods: Sequence[str]) -> Any:
    """Time ``obj``'s ``methods`` into ``histogram`` (labelled by method name, ``render_`` dropped);
    returns ``obj``, whose instance now holds the timed methods."""
    for name in methods:
        setattr(obj, name, _timed(getattr(obj, name), histogram.labels(name.removeprefix("render_"))))
    return obj


def _timed(fn: Callable[..., Any], child: Any) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            child.observe(time.perf_counter() - start)
    return timed


# -- the engine, read at scrape time ---------------------------------------------------------------------
class EngineCollector(Collector):
    def __init__(self) -> None:
        self._engine: weakref.ReferenceType[Engine] | None = None

    def watch(self, engine: Engine | None) -> None:
        self._engine = weakref.ref(engine) if engine is not None else None

    def collect(self) -> Iterable[Metric]:
        engine = self._engine() if self._engine is not None else None
        if engine is None:
            return
        yield GaugeMetricFamily("tokenwire_engine_live_sequences", "Sequences holding engine memory.",
                                value=engine.live_sequences())
        stats_of = getattr(engine, "stats", None)
        stats: dict[str, Any] = stats_of() if callable(stats_of) else {}
        gauges = {"running": ("tokenwire_engine_running_requests", "Requests in the running batch."),
                  "waiting": ("tokenwire_engine_queue_depth", "Requests waiting for admission."),
                  "kv_cache_bytes": ("tokenwire_engine_kv_cache_bytes", "Bytes of KV cache allocated.")}
        for key, (name, doc) in gauges.items():
            if isinstance(stats.get(key), int):
                yield GaugeMetricFamily(name, doc, value=stats[key])
        counters = {"steps": ("tokenwire_engine_steps", "Engine steps that generated tokens (batch size = "
                              "rate(tokenwire_engine_step_tokens_total) / rate(tokenwire_engine_steps_total))."),
                    "generated_tokens": ("tokenwire_engine_step_tokens", "Tokens generated by engine steps."),
                    "closing_walks": ("tokenwire_engine_closing_walks", "Grammar walks of budget-aware closing "
                                      "(structured outputs near max_tokens)."),
                    "closing_forced": ("tokenwire_engine_closing_forced_tokens", "Tokens budget-aware closing forced."),
                    "closing_seconds": ("tokenwire_engine_closing_seconds", "Engine-thread seconds spent in "
                                        "budget-aware closing.")}
        for key, (name, doc) in counters.items():
            value = stats.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                yield CounterMetricFamily(name, doc, value=value)


class LoopCollector(Collector):
    """Tasks on the event loop that serves the scrape (a leak shows as a count that only grows)."""

    def collect(self) -> Iterable[Metric]:
        try:
            tasks = len(asyncio.all_tasks())
        except RuntimeError:  # no running loop in this thread
            return
        yield GaugeMetricFamily("tokenwire_event_loop_tasks", "Tasks on the server's event loop.", value=tasks)


ENGINE = EngineCollector()
REGISTRY.register(ENGINE)
REGISTRY.register(LoopCollector())
ProcessCollector(registry=REGISTRY)  # process_resident_memory_bytes, process_open_fds, CPU seconds


def exposition() -> bytes:
    return generate_latest(REGISTRY)
