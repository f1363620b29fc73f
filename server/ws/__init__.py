"""WebSocket sessions (docs/protocol.md): the I/O glue around ``session.machine``.

- ``endpoint``: ``/v1/session`` — the upgrade decision (``upgrade``), then one ``Connection``
  (``server/app.py`` registers it);
- ``connection``: one task group per connection, a single writer, bounded buffers (``send_queue``);
- ``work``: one request's work against the stages (``stages``, over ``server.pipeline``).
"""
