"""Run the app under uvicorn on a socket we bind ourselves (so ``--port 0`` can print the port).

The CLI binds it before the model loads (``server/listener.py``), so a port in use fails at once."""

from __future__ import annotations

import logging
import socket

import uvicorn

from server import worker_metrics
from server.app import create_app
from server.context import build_context
from server.gating import Gating
from server.header_timeout import http_protocol
from server.listener import bind, listen
from server.services import build_services
from server.settings import Settings
from server.shutdown import GracefulServer
from server.workers import Seat

log = logging.getLogger("tokenwire")


def quiet_client_utf8_errors(record: logging.LogRecord) -> bool:
    """uvicorn logs a client's invalid UTF-8 text message with a traceback (and closes 1007): a client
    could flood the log with tracebacks. Keep one warning line, without the traceback."""
    if record.msg == "Invalid UTF-8 sequence received from client." and record.exc_info:
        record.exc_info, record.exc_text = None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
    return True


# What uvicorn (and websockets under it) log on ``uvicorn.error`` about each WebSocket connection:
# the access log of WebSocket sessions, so ``--disable-access-log`` drops them with the HTTP lines.
WEBSOCKET_ACCESS_LINES = frozenset({'%s - "WebSocket %s" [accepted]', '%s - "WebSocket %s" 403',
                                    '%s - "WebSocket %s" %d', "connection open", "connection closed"})


def no_websocket_access_lines(record: logging.LogRecord) -> bool:
    return not (record.levelno == logging.INFO and record.msg in WEBSOCKET_ACCESS_LINES)


def run(settings: Settings, gating: Gating, sock: socket.socket | None = None, seat: Seat | None = None) -> int:
    """Serve until stopped. ``sock``: the socket the CLI bound before loading anything (else bound here);
    ``seat``: where this process is one of ``--workers N`` (server/workers.py)."""
    if sock is None:
        sock = bind(settings.host, settings.port, send_buffer=settings.socket_send_buffer)
    ctx = build_context(settings, gating)
    services = build_services(ctx)  # the renderer, derender service, pipeline…, once, before serving
    app = create_app(ctx, services)
    listen(sock)
    host, port = sock.getsockname()[:2]
    url_host = f"[{host}]" if ":" in host else host
    app.state.listen_url = f"http://{url_host}:{port}"
    app.state.worker_seat = seat
    config = uvicorn.Config(app, log_level=settings.log_level, lifespan="on", ws="websockets-sansio",
                            http=http_protocol(settings.header_timeout),
                            ws_max_size=settings.ws_max_frame_bytes,
                            ws_per_message_deflate=settings.ws_per_message_deflate,
                            timeout_graceful_shutdown=5, access_log=settings.access_log)
    logging.getLogger("uvicorn.error").addFilter(quiet_client_utf8_errors)
    if not settings.access_log:
        logging.getLogger("uvicorn.error").addFilter(no_websocket_access_lines)
    server = GracefulServer(config, services.drain, ctx.engine, shutdown_timeout=settings.shutdown_timeout,
                            on_started=(lambda: worker_metrics.started(seat)) if seat is not None else None)
    if seat is None:
        log.info("tokenwire %s on %s (model %s)", settings.mode.value, app.state.listen_url,
                 settings.served_model_name)
        print(f"tokenwire: listening on {app.state.listen_url}", flush=True)
    else:  # the supervisor prints the "listening on" line once every worker is ready
        log.info("tokenwire %s worker %d of %d on %s (model %s)", settings.mode.value, seat.index, seat.count,
                 app.state.listen_url, settings.served_model_name)
    server.run(sockets=[sock])
    return 0
