#!/usr/bin/env bash
# Install everything the tests need (Python packages, model assets, a headless browser, HAProxy, Redis,
# a C compiler, the agent CLIs) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh dev
if [ -f scripts/install-browser.sh ]; then bash scripts/install-browser.sh; fi
if [ -f scripts/install-haproxy.sh ]; then bash scripts/install-haproxy.sh; fi
if [ -f scripts/install-redis.sh ]; then bash scripts/install-redis.sh; fi
if [ -f scripts/install-compiler.sh ]; then bash scripts/install-compiler.sh; fi
# The pinned agent CLIs (Codex CLI, Claude Code) from npm, cached; exit 3 (no npm or no registry) lets
# the rest run, and their tests then skip saying why.
if [ -f scripts/install-agent-clis.sh ]; then bash scripts/install-agent-clis.sh >/dev/null || [ $? -eq 3 ]; fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Build (or verify) the offline model assets once, with progress, before the tests use them.
.venv/bin/tokenwire assets
# One pytest worker per CPU, up to 4, each taking whole test files (so a file's servers start once).
# About 1 core is busy on average with one worker (tests wait on server processes), so on this 2-core
# machine two workers take the suite from about 26 to about 15 minutes. `-n 0` after the command runs
# it in one process.
workers=$(nproc 2>/dev/null || echo 1)
[ "$workers" -gt 4 ] && workers=4
parallel=()
[ "$workers" -ge 2 ] && parallel=(-n "$workers" --dist loadfile)
set +e
.venv/bin/python -m pytest ${parallel[@]+"${parallel[@]}"} "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "scripts/test.sh: pytest collected no tests; that is a failure of this suite." >&2
    exit 1
fi
exit "$rc"
