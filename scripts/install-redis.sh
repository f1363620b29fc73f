#!/usr/bin/env bash
# Install the store the shared-responses tests start (tests/app/test_responses_redis.py: several front
# ends sharing stored responses through TOKENWIRE_RESPONSES_STORE=redis://…): Debian's `redis-server`
# package, only when it is missing. Idempotent and instant when redis-server is already on PATH.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
status=0
bash "$(dirname "$0")/apt-install.sh" redis-server || status=$?
if [ "$status" -eq 3 ]; then
    echo "scripts/install-redis.sh: no redis-server and no apt-get; install Redis and put redis-server on PATH" \
         "(tests/app/test_responses_redis.py skips without it)." >&2
    exit 0  # let the rest of the suite run
fi
[ "$status" -eq 0 ] || exit "$status"
command -v redis-server >/dev/null
