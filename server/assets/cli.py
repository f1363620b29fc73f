"""``tokenwire assets``: list the offline assets or build them into the cache."""

from __future__ import annotations

import argparse
import os
import sys
import time

from server.assets import ASSETS, DownloadError, cache_dir, ensure, status
from server.assets.cache import CACHE_ENV, asset_path


def main(args: argparse.Namespace) -> int:
    if getattr(args, "cache_dir", None):
        os.environ[CACHE_ENV] = str(args.cache_dir)
    names: list[str] = list(ASSETS) if not args.only else list(args.only)
    unknown = [n for n in names if n not in ASSETS]
    if unknown:
        print(f"tokenwire: error: unknown asset(s) {', '.join(unknown)}; valid names: {', '.join(ASSETS)}",
              file=sys.stderr)
        return 2

    if args.list:
        print(f"cache: {cache_dir()}")
        width = max(len(n) for n in names)
        for name in names:
            state = status(name)
            detail = "" if state.ok or state.state == "missing" else f"  ({state.reason})"
            print(f"{name:<{width}}  {ASSETS[name].kind:<10}  {state.state:<7}  {asset_path(name)}{detail}")
        return 0

    failed = 0
    for name in names:
        start = time.monotonic()
        try:
            path = ensure(name)
        except (DownloadError, OSError, RuntimeError) as exc:
            failed += 1
            print(f"tokenwire: error: building {name} failed: {exc}", file=sys.stderr)
            continue
        print(f"{name}: {path} ({time.monotonic() - start:.1f} s)")
    return 1 if failed else 0
