"""``/metrics`` under ``--workers`` (server/worker_metrics.py): several workers' expositions become
one, each family once, each sample labelled with its worker; the real processes:
tests/e2e/test_workers.py."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from server.worker_metrics import merge_expositions


def exposition(requests: int, sessions: int, latency: float) -> bytes:
    registry = CollectorRegistry()
    Counter("tw_requests", "Requests.", ["route"], registry=registry).labels("/v1/chat/completions").inc(requests)
    Gauge("tw_sessions", "Sessions open.", registry=registry).set(sessions)
    Histogram("tw_latency_seconds", "Latency.", buckets=(0.1, 1.0), registry=registry).observe(latency)
    return generate_latest(registry)


def test_each_family_once_with_every_workers_samples_labelled() -> None:
    text = merge_expositions([(0, exposition(3, 1, 0.05)), (1, exposition(5, 2, 0.5))]).decode()
    assert text.count("# TYPE tw_requests_total counter") == 1
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = {s.labels["worker"]: s.value for s in families["tw_requests"].samples}
    assert requests == {"0": 3.0, "1": 5.0}
    assert all(s.labels["route"] == "/v1/chat/completions" for s in families["tw_requests"].samples)
    assert {s.labels["worker"]: s.value for s in families["tw_sessions"].samples} == {"0": 1.0, "1": 2.0}
    buckets = {(s.labels["worker"], s.labels["le"]): s.value for s in families["tw_latency_seconds"].samples
               if s.name.endswith("_bucket")}
    assert buckets == {("0", "0.1"): 1.0, ("0", "1.0"): 1.0, ("0", "+Inf"): 1.0,
                       ("1", "0.1"): 0.0, ("1", "1.0"): 1.0, ("1", "+Inf"): 1.0}


def test_a_worker_left_out_is_absent_not_zero() -> None:
    text = merge_expositions([(1, exposition(5, 2, 0.5))]).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {s.labels["worker"] for s in families["tw_requests"].samples} == {"1"}
