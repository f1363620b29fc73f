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


def test_a_resumed_stream_counts_one_request_more_per_256_tokens_it_covers() -> None:
    """Issue 39 item 5: a resume of N covered tokens recomputes them before its first token; it was
    charged as one request however large N was."""
    from server.limits import RESUME_TOKENS_PER_REQUEST, resume_weight

    assert RESUME_TOKENS_PER_REQUEST == 256
    assert resume_weight(None) == 1
    assert resume_weight({"output_token_ids": list(range(255))}) == 1
    assert resume_weight({"output_token_ids": list(range(1500))}) == 1 + 1500 // 256 == 6
    assert resume_weight({"output_token_ids": "not a list"}) == 1  # refused with a 400 later
    limiter = Limiter(rate_per_minute=10)
    limiter.acquire("k", now=0.0, weight=6)
    limiter.release("k")
    limiter.acquire("k", now=0.0, weight=4)  # 10 taken: the bucket is empty
    limiter.release("k")
    with pytest.raises(RateLimited) as info:
        limiter.acquire("k", now=0.0)
    assert info.value.retry_after == 6
    with pytest.raises(RateLimited) as info:
        limiter.acquire("k", now=6.0, weight=6)  # 1 token back; 5 more needed at 1 per 6 s
    assert "counts as 6 requests" in info.value.message and info.value.retry_after == 30
    # a weight past the bucket costs the whole bucket, never more, so it can still run
    limiter.acquire("k", now=60.0, weight=1000)
    limiter.release("k")


def test_a_resumed_stream_holds_concurrency_slots_by_weight_up_to_the_cap() -> None:
    limiter = Limiter(max_concurrent=4)
    held = limiter.acquire("k", now=0.0, weight=3)
    assert held == 3
    limiter.acquire("k", now=0.0)  # 4 in flight
    with pytest.raises(RateLimited) as info:
        limiter.acquire("k", now=0.0)
    assert "at most 4 in flight" in info.value.message
    limiter.release("k", held)
    with pytest.raises(RateLimited):  # a weight past the cap needs every slot: it runs alone
        limiter.acquire("k", now=0.0, weight=9)
    limiter.release("k")
    assert limiter.acquire("k", now=0.0, weight=9) == 4
    limiter.release("k", 4)
    assert limiter.acquire("k", now=0.0, weight=4) == 4
