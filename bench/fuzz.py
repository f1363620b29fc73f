"""The long forms of the fuzzing suites (the CI forms are ``tests/e2e/test_http_fuzz.py`` and
``tests/e2e/test_ws_fuzz.py``), against real servers on loopback, with the figures
docs/reliability.md reports.

    .venv/bin/python -m bench.fuzz http [--examples 100] [--seconds 300] [--modes render tokens-only serve-scale-out]
    .venv/bin/python -m bench.fuzz ws [--examples 2000]

``http``: schemathesis (examples, coverage and fuzzing phases, tokenwire's checks) per mode; prints
the generated cases, failures and the server's state after. ``ws``: hypothesis-drawn sessions
(``tests/support/ws_strategies.py``) checked by ``tests/support/ws_fuzz.py``, with a bystander
session pinged between them; prints the messages sent, errors and closes seen, and the server's
state after.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.server_proc import ServerProcess  # noqa: E402


def http(args: argparse.Namespace) -> list[dict[str, Any]]:
    from tests.conftest import asset_path
    from tests.e2e.test_http_fuzz import MEMORY_CAP, MODES, generated_cases, run_schemathesis

    results = []
    for mode in args.modes:
        server_args, fuzz_args, _ = MODES[mode]
        with ServerProcess(server_args(asset_path), startup_timeout=300, preamble=MEMORY_CAP) as srv:
            started = time.monotonic()
            r = run_schemathesis(srv.url, examples=args.examples, seconds=args.seconds, extra=fuzz_args,
                                 timeout=args.seconds + 1200)
            out = r.stdout + r.stderr
            results.append({"mode": mode, "ok": r.returncode == 0, "cases": generated_cases(out),
                            "seconds": round(time.monotonic() - started), "server_alive": srv.proc.poll() is None,  # type: ignore[union-attr]
                            "server_tracebacks": srv.output().count("Traceback"),
                            "summary": out[out.rfind("SUMMARY"):][:1500] if r.returncode else ""})
        print(json.dumps(results[-1]), flush=True)
    return results


def ws(args: argparse.Namespace) -> dict[str, Any]:
    from hypothesis import HealthCheck, given, settings

    from tests.conftest import asset_path
    from tests.e2e.test_ws_fuzz import SERVER_ARGS
    from tests.support.ws_fuzz import exercise, open_session, ping
    from tests.support.ws_strategies import Message, sequences

    seen: collections.Counter[str] = collections.Counter()
    with ServerProcess(["serve", str(asset_path("tiny-qwen3")), *SERVER_ARGS], startup_timeout=300) as srv:
        bystander = open_session(srv.ws_url)
        started = time.monotonic()

        @settings(max_examples=args.examples, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(messages=sequences)
        def check(messages: list[Message]) -> None:
            outcome = exercise(srv.ws_url, messages)
            seen["sessions"] += 1
            seen["messages"] += len(messages)
            seen["error_frames"] += outcome.errors
            seen[f"close_{outcome.close_code}" if outcome.close_code else "lived_on"] += 1
            ping(bystander, f"b{seen['sessions']}")

        check()
        bystander.close()
        time.sleep(1)
        health = httpx.get(srv.url + "/health", timeout=30).json()
        result = {**seen, "seconds": round(time.monotonic() - started), "server_alive": srv.proc.poll() is None,  # type: ignore[union-attr]
                  "live_sequences_after": health["live_sequences"],
                  "server_tracebacks": srv.output().count("Traceback")}
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="suite", required=True)
    h = sub.add_parser("http")
    h.add_argument("--examples", type=int, default=100)
    h.add_argument("--seconds", type=int, default=300, help="time budget per mode")
    h.add_argument("--modes", nargs="*", default=["render", "tokens-only", "serve-scale-out"])
    w = sub.add_parser("ws")
    w.add_argument("--examples", type=int, default=2000)
    args = parser.parse_args()
    http(args) if args.suite == "http" else ws(args)


if __name__ == "__main__":
    main()
