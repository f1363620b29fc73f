"""The Host allow-list (server/hosts.py): what a Host header names, what is always allowed, and the
CLI's defaults per bind address (issue 19 item 6, DNS rebinding)."""

from __future__ import annotations

import socket

import pytest

from server.hosts import default_allowed_hosts, host_allowed, host_name


@pytest.mark.parametrize(("header", "name"), [
    ("Example.COM:8000", "example.com"), ("example.com.", "example.com"), ("[::1]:8000", "::1"),
    ("127.0.0.1", "127.0.0.1"), ("[::1", None), ("", None),
])
def test_the_name_in_a_host_header(header: str, name: str | None) -> None:
    assert host_name(header) == name


def test_ip_literals_and_localhost_are_always_allowed_and_other_names_only_when_listed() -> None:
    for header in ("127.0.0.1:8000", "10.1.2.3", "[::1]:80", "localhost:8000", "LOCALHOST", "a.localhost:1"):
        assert host_allowed(header, ())
    assert not host_allowed("rebind.example:8000", ())
    assert not host_allowed("localhost.rebind.example", ())
    assert not host_allowed("[::1", ())  # unreadable
    assert host_allowed("Api.Example:8000", ("api.example",))
    assert host_allowed("anything.example", ("*",))
    assert host_allowed(None, ())  # no Host (HTTP/1.0 tools): browsers always send one


def test_the_default_names_per_bind_address() -> None:
    assert default_allowed_hosts("127.0.0.1", api_keys=False) == ()  # loopback names and IPs only
    assert default_allowed_hosts("::1", api_keys=False) == ()
    assert default_allowed_hosts("localhost", api_keys=False) == ()
    assert default_allowed_hosts("gpu-box.lan", api_keys=False) == ("gpu-box.lan",)
    everywhere = default_allowed_hosts("0.0.0.0", api_keys=False)
    assert socket.gethostname().lower() in everywhere
    assert default_allowed_hosts("::", api_keys=False) == everywhere
    assert not host_allowed("rebind.example", everywhere)
    # with an API key, a rebinding page cannot authenticate: any name
    assert default_allowed_hosts("127.0.0.1", api_keys=True) == ("*",)
