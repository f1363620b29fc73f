"""The app a ``tokenwire`` command line serves, built in the test process (the in-process ring).

``cli_client(["launch", "render", model_dir, "--state-secret", S], {"TOKENWIRE_API_KEY": K})`` parses
the arguments with the CLI's own parser and turns them into settings and gating with the CLI's own
functions (server/cli_flags.py, server/cli_settings.py), then builds the context, the services and
the app as server/runner.py does, and wraps it in Starlette's TestClient (its lifespan starts and stops the engine). What only a
process has stays with the process ring (tests/e2e): the exit codes and start-up lines, uvicorn's
socket-level behaviour (header timeouts, permessage-deflate, the access log), signals and
``--workers``, and the checks the CLI makes before loading (``check_before_loading``: flag rules
and binding the port, which tests/e2e/test_cli.py covers).

The client's address is ``http://127.0.0.1``, as a test's address for a process on a local port is,
so the Host and Origin checks see what they see there."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from os import PathLike

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from server.app import create_app
from server.cli_flags import build_parser
from server.cli_settings import settings_from_args
from server.context import build_context
from server.gating import decide
from server.services import build_services
from server.settings import Mode

BASE_URL = "http://127.0.0.1"


def cli_app(argv: Sequence[str | PathLike[str]], environ: dict[str, str] | None = None) -> Starlette:
    """The app ``tokenwire <argv>`` would serve, with ``environ`` as its whole environment."""
    environ = dict(environ or {})
    args = build_parser().parse_args([str(a) for a in argv])
    mode = Mode.RENDER if args.command == "launch" else Mode.TOKENS_ONLY if args.tokens_only else Mode.SERVE
    gating = decide(mode, environ, enable_scale_out=args.enable_scale_out, has_engine_url=bool(args.engine_url))
    ctx = build_context(settings_from_args(args, environ), gating)
    return create_app(ctx, build_services(ctx))


@contextmanager
def cli_client(argv: Sequence[str | PathLike[str]], environ: dict[str, str] | None = None) -> Iterator[TestClient]:
    """A started TestClient of :func:`cli_app` (its lifespan run: the engine started, then stopped)."""
    with TestClient(cli_app(argv, environ), base_url=BASE_URL) as client:
        yield client


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))  # the CLI's format
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@contextmanager
def logged_lines() -> Iterator[list[str]]:
    """The lines the process's log would hold for what is logged meanwhile: every record at INFO
    (the CLI's ``--log-level`` default) or above, formatted as the CLI formats them (a traceback
    included); the list fills as records come."""
    handler, root = _Lines(), logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        root.setLevel(level)
        root.removeHandler(handler)


@contextmanager
def torch_unimportable() -> Iterator[None]:
    """``import torch`` raises ImportError meanwhile, as in a process started with
    ``sys.modules['torch'] = None``: what runs meanwhile must not import it. transformers is loaded
    first, so that it keeps what it found at import for the rest of the test process (torch, where
    installed); the process form of this, a ``launch render`` where importing torch fails, is
    tests/e2e/test_cli.py."""
    import transformers.models.auto.tokenization_auto  # noqa: F401

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "torch", None)
        yield
