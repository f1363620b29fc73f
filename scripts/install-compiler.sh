#!/usr/bin/env bash
# Install a C compiler for the local engine's native decode attention (engine/local/native.py builds it
# once per machine at first use; without a compiler the engine decodes with grouped matmuls, slower, and
# the attention tests fail): Debian's `gcc`, only when `cc` (or $CC) is missing. Idempotent and instant
# when a compiler is already on PATH.
set -euo pipefail
if command -v "${CC:-cc}" >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "scripts/install-compiler.sh: no C compiler and no apt-get; install gcc or clang as cc" \
         "(the local engine then decodes with its slower grouped attention)." >&2
    exit 0  # let the rest run
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing gcc (Debian package)…" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null
command -v "${CC:-cc}" >/dev/null
