"""The per-token metrics (``server.metrics.TokenMetrics``) expose what prometheus_client's own Counter and
Histogram would for the same observations."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from server.metrics import _LATENCY, _TTFT, TokenMetrics

OUTPUTS = [(1, 0.2, 0.2), (1, None, 0.0004), (3, None, 0.03), (1, None, 0.0005), (2, None, 11.0), (5, None, 0.1)]


def _samples(registry: CollectorRegistry) -> dict[str, float]:
    out = {}
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#") and "_created" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_token_metrics_expose_what_prometheus_clients_own_would() -> None:
    mine = CollectorRegistry()
    tokens = TokenMetrics()
    mine.register(tokens)
    theirs = CollectorRegistry()
    generated = Counter("tokenwire_generation_tokens", "d", registry=theirs)
    ttft = Histogram("tokenwire_time_to_first_token_seconds", "d", buckets=_TTFT, registry=theirs)
    itl = Histogram("tokenwire_inter_token_latency_seconds", "d", buckets=_LATENCY, registry=theirs)
    for n, since_start, gap in OUTPUTS:
        tokens.output(n, since_start, gap)
        generated.inc(n)
        rest = n
        if since_start is not None:
            ttft.observe(since_start)
            rest -= 1
        for _ in range(rest):
            itl.observe(gap / rest)
    got, want = _samples(mine), _samples(theirs)
    assert got.keys() == want.keys()
    assert all(abs(got[k] - want[k]) < 1e-9 for k in want), (got, want)
    assert got['tokenwire_inter_token_latency_seconds_bucket{le="0.0005"}'] == 2  # a value on a bound is in it
    assert got["tokenwire_inter_token_latency_seconds_count"] == 12
