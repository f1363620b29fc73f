#!/usr/bin/env bash
# Install a C compiler for the local engine's native decode attention (engine/local/native.py builds it
# once per machine at first use; without a compiler the engine decodes with grouped matmuls, slower, and
# the attention tests fail): Debian's `gcc`, only when `cc` (or $CC) is missing. Idempotent and instant
# when a compiler is already on PATH.
set -euo pipefail
if command -v "${CC:-cc}" >/dev/null 2>&1; then
    exit 0
fi
status=0
bash "$(dirname "$0")/apt-install.sh" gcc libc6-dev || status=$?
if [ "$status" -eq 3 ]; then
    echo "scripts/install-compiler.sh: no C compiler and no apt-get; install gcc or clang as cc" \
         "(the local engine then decodes with its slower grouped attention)." >&2
    exit 0  # let the rest run
fi
[ "$status" -eq 0 ] || exit "$status"
command -v "${CC:-cc}" >/dev/null
