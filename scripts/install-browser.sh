#!/usr/bin/env bash
# Install the headless browser the browser tests drive (tests/e2e/test_browser_*.py): Debian's
# `chromium` package, only when it is missing. The tests talk to it over the DevTools protocol with
# the `websockets` package the project already depends on, so nothing else is needed (no browser
# download of its own: `playwright install` and the like cannot work offline).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
status=0
bash "$(dirname "$0")/apt-install.sh" chromium fonts-dejavu-core || status=$?
if [ "$status" -eq 3 ]; then
    echo "scripts/install-browser.sh: no chromium and no apt-get; install Chromium and put it on PATH" \
         "(the browser tests, marked 'browser', fail without it; deselect them with -m 'not browser')." >&2
    exit 0  # let the rest of the suite run
fi
[ "$status" -eq 0 ] || exit "$status"
command -v chromium >/dev/null
