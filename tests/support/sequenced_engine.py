"""A scripted engine (tests/support/scripted_engine.py) that answers a conversation: its n-th request
gets the n-th script, the last one from then on. For agent clients that call a tool and then expect an
answer that ends (tests/e2e/test_codex_cli.py, tests/e2e/test_claude_code.py)."""

from __future__ import annotations

from typing import Any

from tests.support.scripted_engine import ScriptedEngine


class SequencedEngine(ScriptedEngine):
    def __init__(self, scripts: list[list[int]], *, step: int = 2) -> None:
        super().__init__(scripts[0], step=step)
        self.scripts = scripts

    def _events(self, body: dict[str, Any], fault: str | None) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
        # the request being answered is already in self.requests (both transports append it first)
        self.token_ids = self.scripts[min(len(self.requests), len(self.scripts)) - 1]
        return super()._events(body, fault)
