"""All server I/O: the ASGI app, routes, WebSocket glue, settings, gating, the CLI."""
