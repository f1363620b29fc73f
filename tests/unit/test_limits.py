"""The per-client limiter (server/limits.py): a token bucket holding a minute's worth of requests and a
concurrency cap, with the clock passed in."""

from __future__ import annotations

import pytest

from server.limits import Limiter, RateLimited, client_key, key_of


def test_a_burst_of_a_minutes_worth_passes_then_the_rate_refills_the_bucket() -> None:
    limiter = Limiter(rate_per_minute=60)
    for _ in range(60):
        limiter.acquire("k", now=0.0)
        limiter.release("k")
    with pytest.raises(RateLimited) as info:
        limiter.acquire("k", now=0.0)
    assert info.value.status == 429 and info.value.retry_after == 1
    limiter.acquire("k", now=1.0)  # one token per second
    with pytest.raises(RateLimited):
        limiter.acquire("k", now=1.5)


def test_clients_have_their_own_budgets() -> None:
    limiter = Limiter(rate_per_minute=1)
    limiter.acquire("a", now=0.0)
    limiter.acquire("b", now=0.0)
    with pytest.raises(RateLimited) as info:
        limiter.acquire("a", now=0.0)
    assert info.value.retry_after == 60


def test_the_concurrency_cap_counts_requests_in_flight_until_released() -> None:
    limiter = Limiter(max_concurrent=2)
    limiter.acquire("k", now=0.0)
    limiter.acquire("k", now=0.0)
    with pytest.raises(RateLimited) as info:
        limiter.acquire("k", now=0.0)
    assert "at most 2 in flight" in info.value.message
    limiter.release("k")
    limiter.acquire("k", now=0.0)


def test_a_refused_request_takes_nothing() -> None:
    limiter = Limiter(rate_per_minute=60, max_concurrent=1)
    limiter.acquire("k", now=0.0)
    for _ in range(100):
        with pytest.raises(RateLimited):
            limiter.acquire("k", now=0.0)  # concurrency: refused before taking a token
    limiter.release("k")
    for _ in range(59):
        limiter.acquire("k", now=0.0)
        limiter.release("k")


def test_off_by_default_and_the_client_table_stays_bounded() -> None:
    assert not Limiter().enabled
    limiter = Limiter(rate_per_minute=10, max_clients=100)
    for i in range(1000):
        limiter.acquire(f"c{i}", now=float(i))
    assert len(limiter._clients) == 100


def test_the_client_key_is_the_hashed_api_key_else_the_address() -> None:
    by_key = client_key({b"authorization": b"Bearer secret"}, ("10.0.0.1", 5))
    assert by_key == client_key({b"x-api-key": b"secret"}, ("10.0.0.2", 6))
    assert by_key.startswith("key:") and "secret" not in by_key
    assert client_key({}, ("10.0.0.1", 5)) == "addr:10.0.0.1"
    assert key_of("secret", None) == by_key  # a WebSocket session's key, from a header or the subprotocol
