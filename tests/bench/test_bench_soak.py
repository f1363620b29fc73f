"""bench/soak.py's check of a chat stream: a failing one-shot derender is reported with its status
and body (it used to count as a lost stream with nothing to say why), a good one verifies."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from bench.soak import Tally, verify_chat

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream_options": {"include_usage": True}}


def _frames(ids: list[int], text: str) -> list[dict[str, Any]]:
    return [{"type": "chat.delta", "output_token_ids": ids, "chunks": [
        {"choices": [{"delta": {"content": text}, "finish_reason": "length"}]},
        {"choices": [], "usage": {"completion_tokens": len(ids)}}]}]


def _verify(handler: Any, frames: list[dict[str, Any]]) -> Tally:
    tally = Tally()

    async def main() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://soak") as http:
            await verify_chat(http, BODY, frames, tally)

    asyncio.run(main())
    return tally


def test_a_failing_check_call_is_reported_with_its_status_and_body() -> None:
    error = {"error": {"message": "choice 0 holds token id 151669, outside this model's vocabulary (0..151668).",
                       "type": "BadRequestError", "param": "generate_response", "code": 400}}
    tally = _verify(lambda request: httpx.Response(400, json=error), _frames([1, 151669], "ab"))
    assert (tally.verify_failures, tally.lost_or_duplicated, tally.chats_verified) == (1, 0, 0)
    (line,) = tally.mismatches
    assert "answered 400" in line and "outside this model's vocabulary (0..151668)" in line


def test_a_matching_stream_verifies_and_a_different_one_is_lost() -> None:
    def answer(text: str) -> Any:
        return lambda request: httpx.Response(200, json={"choices": [{"message": {"content": text}}]})

    good = _verify(answer("ab"), _frames([1, 2], "ab"))
    assert (good.chats_verified, good.lost_or_duplicated, good.verify_failures, good.tokens) == (1, 0, 0, 2)
    bad = _verify(answer("abc"), _frames([1, 2], "ab"))
    assert (bad.chats_verified, bad.lost_or_duplicated) == (0, 1)
    assert "one-shot 'abc'" in bad.mismatches[0]
