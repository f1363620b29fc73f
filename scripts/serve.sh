#!/usr/bin/env bash
# Install everything (the first run, and after pyproject.toml or the install scripts change; otherwise
# scripts/install.sh returns at once) and serve the embedded default model on http://127.0.0.1:8000.
# Extra arguments go to `tokenwire serve` (e.g. --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/tokenwire serve "$@"
