"""The ``tokenwire`` command line (``tokenwire --help`` prints its description): the commands, run from
the flags the argument table (server/cli_flags.py) parsed and the settings server/cli_settings.py
made of them.

Every configuration error (a bad flag value, a port in use, a missing model directory, invalid
gating) prints one line and exits 2, and the flags and the port are checked before anything slow
(the model, the tokenizer) loads.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Sequence

from engine.local.omp import prefer_passive_wait
from server.assets.cli import main as assets_main
from server.cli_flags import EXIT_USAGE, build_parser
from server.cli_settings import check_before_loading, num_threads_to_env, settings_from_args
from server.gating import GatingError, decide
from server.settings import Mode
from server.workers import seat_of, supervise


def _fail(message: str) -> int:
    print(f"tokenwire: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def keep_torch_out() -> None:
    """Make this process behave as if torch were not installed.

    ``launch render`` needs no torch, but transformers imports it eagerly whenever it can find it
    (seconds of start-up and hundreds of MB). A ``None`` entry in ``sys.modules`` makes
    ``importlib.util.find_spec("torch")`` answer "not installed" and ``import torch`` fail, so
    transformers takes its torch-free path."""
    if "torch" not in sys.modules:
        sys.modules["torch"] = None  # type: ignore[assignment]


def quiet_transformers(*, progress_bars: bool) -> None:
    """transformers' import-time advice (``[transformers] PyTorch was not found…`` under ``launch
    render``, where torch is deliberately kept out) is noise to an operator, and so is a server's
    "Loading weights" progress bar in its log: off in tokenwire's own processes unless the
    environment sets them (``tokenwire assets`` keeps its progress bars)."""
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    if not progress_bars:
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    quiet_transformers(progress_bars=args.command == "assets")
    if args.command == "launch":
        keep_torch_out()
    num_threads_to_env(args, os.environ)
    if args.command == "serve":
        prefer_passive_wait()  # before torch loads: libgomp reads it once (engine/local/omp.py)
    if args.command == "assets":
        return assets_main(args)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    environ = dict(os.environ)
    seat = seat_of(environ)
    sock: socket.socket | None = None
    try:
        sock = check_before_loading(args, environ, seat)
        mode = Mode.RENDER if args.command == "launch" else Mode.TOKENS_ONLY if args.tokens_only else Mode.SERVE
        gating = decide(mode, environ, enable_scale_out=args.enable_scale_out,
                        has_engine_url=bool(args.engine_url))
        settings = settings_from_args(args, environ)
        if args.workers > 1 and seat is None:
            return supervise(argv, settings, sock, args.workers)
        if seat is not None:
            seat.watch_supervisor()
            settings = settings.with_(worker=seat.index)
        # lazy, after keep_torch_out(): the server's modules load transformers (and, under `serve`,
        # the local engine loads torch)
        from server.runner import run

        return run(settings, gating, sock, seat)
    except (GatingError, ValueError) as exc:  # server.context.ModelLoadError is a ValueError
        if seat is not None:  # a --workers process: its supervisor prints it, once for all
            seat.fail(str(exc))
            return EXIT_USAGE
        return _fail(str(exc))
    except KeyboardInterrupt:
        return 0
    finally:
        if sock is not None:
            sock.close()


if __name__ == "__main__":
    sys.exit(main())

