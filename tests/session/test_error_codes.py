"""The one error-code table (session/error_codes.py) is docs/protocol.md §7, and every side uses it:
the session machine's error frames, the server's ``error`` frames for errors it knows by their
HTTP status, and client_sdk's errors from HTTP answers (its HTTP fallback), which once reported a
429 as ``too_many_requests`` where the server's own frames say ``rate_limited`` (and a 409 as
``duplicate_id`` where the server said ``conflict``)."""

from __future__ import annotations

import re

import pytest

from client_sdk import errors
from server.errors import ApiError
from server.ws.connection import error_info
from session import error_codes
from session import server_frames as sf
from session.error_codes import CODE_OF_STATUS, STATUS_OF, code_for_status
from session.machine import Send, Session, SessionConfig
from tests.project.import_graph import ROOT

# Statuses outside the table, which fall back to internal_error / invalid_request.
OTHER_STATUSES = (405, 408, 409, 415, 418, 501, 507)


def section_7() -> str:
    text = (ROOT / "docs/protocol.md").read_text()
    start = text.index("\n## 7. Errors and close codes")
    return text[start:text.index("\n## 8.", start)]


def doc_table(header: str) -> list[list[str]]:
    """The rows of the §7 table whose header row is ``header``, cells stripped of backticks."""
    lines = section_7().splitlines()
    at = lines.index(header)
    assert re.fullmatch(r"\|(---\|)+", lines[at + 1]), lines[at + 1]
    rows = []
    for line in lines[at + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    assert rows, f"the table {header!r} in docs/protocol.md §7 is empty"
    return rows


def first_code(cell: str) -> str:
    match = re.match(r"`([a-z_]+)`", cell)
    assert match, cell
    return match[1]


def test_the_code_table_is_the_one_in_protocol_md_section_7() -> None:
    rows = doc_table("| code | status | meaning |")
    documented = {first_code(code): int(status) for code, status, _ in rows}
    assert len(documented) == len(rows), "a code is listed twice in docs/protocol.md §7"
    assert documented == STATUS_OF


def test_the_code_of_each_http_status_is_the_one_in_protocol_md_section_7() -> None:
    documented: dict[int, str] = {}
    for statuses, code in doc_table("| HTTP status | code |"):
        for status in statuses.split(", "):
            documented[int(status)] = first_code(code)
    assert documented == CODE_OF_STATUS
    # each is a documented code, of that very status (422 is pydantic's 400)
    assert {s: STATUS_OF[c] for s, c in CODE_OF_STATUS.items()} == {s: 400 if s == 422 else s
                                                                   for s in CODE_OF_STATUS}
    assert [code_for_status(s) for s in OTHER_STATUSES] == ["invalid_request"] * 5 + ["internal_error"] * 2


@pytest.mark.parametrize("status", [*CODE_OF_STATUS, *OTHER_STATUSES])
def test_the_server_frame_and_the_sdk_http_fallback_give_a_status_the_same_code(status: int) -> None:
    frame = error_info(ApiError(status, "refused")).as_dict()
    body = b'{"error": {"message": "refused", "type": "X", "param": null, "code": %d}}' % status
    from_http = errors.from_http(status, body)
    assert isinstance(from_http, errors.APIError)
    assert (from_http.code, from_http.status) == (frame["code"], frame["status"]) == (code_for_status(status), status)


def test_the_sdk_reports_an_http_429_as_rate_limited_like_the_servers_error_frame() -> None:
    # what the server answers a client past --rate-limit, in the OpenAI and the Anthropic envelope
    openai = errors.from_http(429, b'{"error": {"message": "Rate limit of 2 requests per minute reached.", '
                                   b'"type": "RateLimitError", "param": null, "code": 429}}')
    anthropic = errors.from_http(429, b'{"type": "error", "error": {"type": "rate_limit_error", '
                                      b'"message": "Rate limit of 2 requests per minute reached."}}')
    for exc in (openai, anthropic):
        assert isinstance(exc, errors.RateLimitError)
        assert (exc.code, exc.status) == ("rate_limited", 429)
        assert exc.message == "Rate limit of 2 requests per minute reached."


def test_the_machine_stamps_its_error_frames_with_the_tables_status() -> None:
    session = Session(SessionConfig(model="m", frames=frozenset({"chat"}), max_in_flight=1), now=0.0)
    for frame in ('{"type": "nonsense", "event_id": "e1"}', '{"type": "cancel", "id": "nope"}',
                  '{"type": "chat", "id": 7}', '{"type": "render", "id": "r", "kind": "chat", "body": {}}',
                  '{"type": "chat", "id": "c", "body": {}}', '{"type": "chat", "id": "c", "body": {}}',
                  '{"type": "chat", "id": "d", "body": {}}'):
        session.receive_text(frame, now=0.0)
    sent = [action.frame for action in session.actions() if isinstance(action, Send)]
    codes = [(frame.error["code"], frame.error["status"]) for frame in sent if isinstance(frame, sf.ErrorFrame)]
    expected = ("unknown_type", "unknown_id", "invalid_frame", "not_enabled", "duplicate_id", "too_many_requests")
    assert codes == [(code, STATUS_OF[code]) for code in expected]
    assert STATUS_OF.keys() >= error_codes.LOAD_REFUSALS
