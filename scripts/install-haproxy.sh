#!/usr/bin/env bash
# Install the load balancer the scale-out deployment tests drive (tests/e2e/test_deploy_*.py, the
# reference deployment in deploy/): Debian's `haproxy` package, only when it is missing. Idempotent
# and instant when haproxy is already on PATH (or in /usr/sbin, where Debian puts it).
set -euo pipefail
if command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ]; then
    exit 0
fi
status=0
bash "$(dirname "$0")/apt-install.sh" haproxy || status=$?
if [ "$status" -eq 3 ]; then
    echo "scripts/install-haproxy.sh: no haproxy and no apt-get; install HAProxy (>= 2.4) and put it on PATH" \
         "(the deployment tests, tests/e2e/test_deploy_*.py, fail without it)." >&2
    exit 0  # let the rest of the suite run
fi
[ "$status" -eq 0 ] || exit "$status"
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ]
