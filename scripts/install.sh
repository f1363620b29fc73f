#!/usr/bin/env bash
# Install tokenwire and everything it needs into ./.venv (idempotent; fast when already done).
#   scripts/install.sh            base + engine (what `tokenwire serve` needs)
#   scripts/install.sh dev        also the test tools
set -euo pipefail
cd "$(dirname "$0")/.."
extras="engine"
[ "${1:-}" = "dev" ] && extras="engine,dev"

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "tokenwire needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip=(.venv/bin/python -m pip --disable-pip-version-check -q)

# The CPU build of torch first: a bare `torch` requirement could pull a multi-GB CUDA build.
if ! .venv/bin/python -c 'import importlib.metadata as m, sys; sys.exit(m.version("torch") != "2.13.0+cpu" and m.version("torch") != "2.13.0")' 2>/dev/null; then
    echo "installing torch 2.13.0 (CPU)…" >&2
    "${pip[@]}" install torch==2.13.0
fi
# Always resolve against pyproject.toml (a few seconds when satisfied), so an existing .venv with a
# stale dependency (e.g. a newer transformers than the pinned one) is corrected, not trusted.
echo "installing tokenwire[$extras]…" >&2
"${pip[@]}" install -e ".[$extras]"
# Structured outputs (the local engine): xgrammar without its triton requirement (GPU only).
if ! .venv/bin/python -c 'import importlib.metadata as m, sys; sys.exit(m.version("xgrammar") != "0.2.9")' 2>/dev/null; then
    echo "installing xgrammar 0.2.9…" >&2
    "${pip[@]}" install --no-deps xgrammar==0.2.9
fi
