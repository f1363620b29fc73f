"""WebSocket sessions (docs/protocol.md): the I/O glue around ``session.machine``.

- ``endpoint``: ``/v1/session`` — the upgrade decision (``upgrade``), then one ``Connection``;
- ``connection``: one task group per connection, a single writer, bounded buffers (``outbox``);
- ``work``: one request's work against ``server.pipeline``.
"""

from __future__ import annotations

from typing import Any

from server.gating import RouteGroup

SESSION_PATH = "/v1/session"


def websocket_routes() -> list[tuple[str, Any, RouteGroup]]:
    from server.ws.endpoint import session_endpoint

    return [(SESSION_PATH, session_endpoint, RouteGroup.WEBSOCKET)]
