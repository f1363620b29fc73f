#!/usr/bin/env bash
# Install the headless browser the browser tests drive (tests/e2e/test_browser_*.py): Debian's
# `chromium` package, only when it is missing. The tests talk to it over the DevTools protocol with
# the `websockets` package the project already depends on, so nothing else is needed (no browser
# download of its own: `playwright install` and the like cannot work offline).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "scripts/install-browser.sh: no chromium and no apt-get; install Chromium and put it on PATH" \
         "(the browser tests, marked 'browser', fail without it; deselect them with -m 'not browser')." >&2
    exit 0  # let the rest of the suite run
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing chromium (Debian package)…" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium >/dev/null
