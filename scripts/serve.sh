#!/usr/bin/env bash
# Install everything (first run only) and serve the embedded default model on http://127.0.0.1:8000.
# Extra arguments go to `tokenwire serve` (e.g. --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/tokenwire serve "$@"
