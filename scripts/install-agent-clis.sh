#!/usr/bin/env bash
# Install the agent CLIs the end-to-end tests drive (tests/e2e/test_claude_code.py,
# tests/e2e/test_codex_cli.py): Claude Code and Codex CLI, pinned by version and by the sha512 of
# every tarball in scripts/agent-clis/package-lock.json, installed from npm with `npm ci`.
#
# The install is cached under $TOKENWIRE_AGENT_CLI_DIR, by default the agent-clis/ folder of
# tokenwire's user cache ($TOKENWIRE_CACHE_DIR, else ~/.cache/tokenwire, as engine/user_cache.py),
# in a folder named after the lockfile's sha256: a cached install is reused without the network, and
# changing a pin installs afresh. The folder is built beside its final name and renamed into place
# once both binaries answer `--version`, so an interrupted install is never taken for a complete one;
# a lock file serialises concurrent installs.
#
# Prints the folder holding the `codex` and `claude` commands on stdout. Exits 3 (after one line on
# stderr saying why) where there is no npm or the npm registry cannot be reached, so callers can skip
# (tests/support/agent_clis.py) or go on (scripts/test.sh); any other failure exits non-zero as is.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
spec="$here/agent-clis"
lock_sha="$(sha256sum "$spec/package-lock.json" | cut -c1-16)"
if [ -n "${TOKENWIRE_AGENT_CLI_DIR:-}" ]; then
    root="$TOKENWIRE_AGENT_CLI_DIR"
elif [ -n "${TOKENWIRE_CACHE_DIR:-}" ]; then
    root="$TOKENWIRE_CACHE_DIR/agent-clis"
else
    root="${XDG_CACHE_HOME:-$HOME/.cache}/tokenwire/agent-clis"
fi
dest="$root/$lock_sha"
bin="$dest/node_modules/.bin"

works() {  # both commands run and print the pinned versions
    [ -x "$1/codex" ] && [ -x "$1/claude" ] || return 1
    "$1/codex" --version 2>/dev/null | grep -qx "codex-cli $(pin @openai/codex)" || return 1
    "$1/claude" --version 2>/dev/null | grep -q "^$(pin @anthropic-ai/claude-code) (Claude Code)" || return 1
}
pin() { sed -n "s|^ *\"$1\": \"\\([^\"]*\\)\".*|\\1|p" "$spec/package.json" | head -n1; }

if works "$bin"; then
    echo "$bin"
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "scripts/install-agent-clis.sh: no npm on PATH; install Node.js and npm to run the Codex CLI and" \
         "Claude Code tests" >&2
    exit 3
fi
registry="$(npm config get registry 2>/dev/null || echo https://registry.npmjs.org/)"
if ! timeout 60 npm ping --fetch-retries=0 --fetch-timeout=15000 >/dev/null 2>&1; then
    echo "scripts/install-agent-clis.sh: the npm registry ($registry) cannot be reached; the Codex CLI and" \
         "Claude Code tests need @openai/codex@$(pin @openai/codex) and" \
         "@anthropic-ai/claude-code@$(pin @anthropic-ai/claude-code) from it once (then cached in $root)" >&2
    exit 3
fi
mkdir -p "$root"
# one install at a time (pytest workers may all ask at once); the one that waited finds it done
exec 9>"$root/.install.lock"
flock 9
if works "$bin"; then
    echo "$bin"
    exit 0
fi
tmp="$(mktemp -d "$root/.tmp-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cp "$spec/package.json" "$spec/package-lock.json" "$tmp/"
echo "installing @openai/codex@$(pin @openai/codex) and @anthropic-ai/claude-code@$(pin @anthropic-ai/claude-code)" \
     "from $registry into $dest…" >&2
# --ignore-scripts=false: Claude Code's postinstall puts its platform binary in place of bin/claude.exe.
(cd "$tmp" && npm ci --no-audit --no-fund --loglevel=error --ignore-scripts=false >&2)
if ! works "$tmp/node_modules/.bin"; then
    echo "scripts/install-agent-clis.sh: installed, but codex/claude --version do not print the pinned versions:" >&2
    "$tmp/node_modules/.bin/codex" --version >&2 || true
    "$tmp/node_modules/.bin/claude" --version >&2 || true
    exit 1
fi
# node_modules/.bin holds relative links, so the folder can be renamed into place.
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "$bin"
