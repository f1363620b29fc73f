"""The WebSocket upgrade decision: Origin, API key (header or browser subprotocol), version."""

from __future__ import annotations

from typing import Any

import pytest

from server.ws.upgrade import Accepted, Refused, auth_subprotocol, decide, origin_allowed


def check(headers: dict[str, str] | None = None, subprotocols: tuple[str, ...] = (), query: str = "", *,
          keys: tuple[str, ...] = (), origins: tuple[str, ...] = ()) -> Accepted | Refused:
    return decide({"host": "api.example:8000", **(headers or {})}, list(subprotocols), query,
                  allowed_origins=origins, key_ok=lambda k: k in keys, keys_required=bool(keys))


def test_no_key_configured_no_origin_and_no_version_accepts_version_1_without_a_subprotocol() -> None:
    assert check() == Accepted(1, None)


@pytest.mark.parametrize(("headers", "subprotocols", "status"), [
    ({}, (), 401),
    ({"authorization": "Bearer wrong"}, (), 403),
    ({"authorization": "Basic abc"}, (), 401),
    ({"x-api-key": "wrong"}, (), 403),
    ({}, ("tokenwire.v1", auth_subprotocol("wrong")), 403),
    ({}, ("tokenwire.v1", "tokenwire.auth.!!!"), 401),
])
def test_a_missing_key_is_401_and_a_wrong_one_403(headers: dict[str, str], subprotocols: tuple[str, ...],
                                                   status: int) -> None:
    result = check(headers, subprotocols, keys=("right key/+",))
    assert isinstance(result, Refused) and result.status == status


@pytest.mark.parametrize(("headers", "subprotocols", "expected"), [
    ({"authorization": "Bearer right key/+"}, (), Accepted(1, None)),
    ({"authorization": "bearer  right key/+ "}, ("tokenwire.v1",), Accepted(1, "tokenwire.v1")),
    ({"x-api-key": "right key/+"}, (), Accepted(1, None)),
    ({}, ("tokenwire.v1", auth_subprotocol("right key/+")), Accepted(1, "tokenwire.v1")),
])
def test_the_right_key_is_accepted_in_every_form(headers: dict[str, str], subprotocols: tuple[str, ...],
                                                 expected: Accepted) -> None:
    result = check(headers, subprotocols, keys=("right key/+",))
    assert result == expected
    assert isinstance(result, Accepted) and result.api_key == "right key/+"  # the limiter's client key


def test_the_browser_subprotocol_needs_a_version_next_to_it() -> None:
    result = check({}, (auth_subprotocol("k"),), keys=("k",))
    assert isinstance(result, Refused) and result.status == 400 and "tokenwire.v1" in result.message


@pytest.mark.parametrize(("subprotocols", "query", "expected"), [
    (("tokenwire.v1",), "", Accepted(1, "tokenwire.v1")),
    (("chat", "tokenwire.v1", "tokenwire.v9"), "", Accepted(1, "tokenwire.v1")),
    (("tokenwire.v9",), "", 400),
    (("tokenwire.vx",), "", 400),
    ((), "v=1", Accepted(1, None)),
    ((), "v=2", 400),
    ((), "v=one", 400),
    ((), "other=1", Accepted(1, None)),
])
def test_version_negotiation(subprotocols: tuple[str, ...], query: str, expected: Any) -> None:
    result = check({}, subprotocols, query)
    if isinstance(expected, int):
        assert isinstance(result, Refused) and result.status == expected
    else:
        assert result == expected


@pytest.mark.parametrize(("origin", "allowed", "ok"), [
    ("http://api.example:8000", (), True),
    ("https://API.example:8000/", (), True),
    ("http://api.example", (), False),
    ("https://evil.example", (), False),
    ("null", (), False),
    ("https://app.example", ("https://app.example",), True),
    ("https://app.example/", ("https://APP.example",), True),
    ("http://api.example:8000", ("https://app.example",), False),
    ("https://anything", ("*",), True),
])
def test_origin_allowlist(origin: str, allowed: tuple[str, ...], ok: bool) -> None:
    assert origin_allowed(origin, "api.example:8000", allowed) is ok


def test_origin_is_checked_before_the_key() -> None:
    result = check({"origin": "https://evil.example"}, keys=("k",))
    assert isinstance(result, Refused) and result.status == 403 and "Origin" in result.message


@pytest.mark.parametrize(("host", "origin", "accepted"), [
    # DNS rebinding: a page on rebind.example, its name re-pointed at the loopback address: Origin
    # equals Host, which the same-host check alone accepted (issue 19 item 6)
    ("rebind.example:8000", "http://rebind.example:8000", False),
    ("rebind.example:8000", None, False),
    ("localhost:8000", "http://localhost:8000", True),
    ("127.0.0.1:8000", "http://127.0.0.1:8000", True),
    ("[::1]:8000", "http://[::1]:8000", True),
    ("app.localhost:8000", "http://app.localhost:8000", True),
    ("api.example:8000", "http://api.example:8000", True),  # a name the operator allowed
])
def test_the_host_must_be_one_of_the_servers_names_so_dns_rebinding_is_refused(
        host: str, origin: str | None, accepted: bool) -> None:
    headers = {"host": host, **({"origin": origin} if origin else {})}
    result = decide(headers, [], "", allowed_origins=(), key_ok=lambda k: True, keys_required=False,
                    allowed_hosts=("api.example",))
    assert isinstance(result, Accepted) is accepted, result
    if not accepted:
        assert isinstance(result, Refused) and result.status == 400
        assert "--allowed-host rebind.example" in result.message
