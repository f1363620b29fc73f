#!/usr/bin/env bash
# Install Debian packages for the scripts/install-*.sh helpers: `apt-get update`, then the packages
# without recommends, with sudo unless run as root. Exits 3 when there is no apt-get, so the caller
# can say what to install by hand.
#   bash scripts/apt-install.sh PACKAGE...
set -euo pipefail
command -v apt-get >/dev/null 2>&1 || exit 3
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing $* (Debian packages)…" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
