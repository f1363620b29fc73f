#!/usr/bin/env bash
# Install tokenwire and everything it needs into ./.venv (idempotent; fast when already done).
#   scripts/install.sh            base + engine (what `tokenwire serve` needs) + the OpenAI / Anthropic SDKs
#   scripts/install.sh dev        also the test tools
# Once an install succeeds, .venv/.tokenwire-install records a digest of pyproject.toml and these
# scripts: while they are unchanged a later run (every scripts/serve.sh) skips pip and returns at
# once. TOKENWIRE_REINSTALL=1 (or deleting that file) forces a full run.
# Progress: on a terminal pip shows what it collects and downloads, with progress bars; elsewhere
# (CI logs, scripts/test.sh under a runner) pip is quiet and each step is one line with its time.
# TOKENWIRE_INSTALL_PROGRESS=1 or 0 forces either.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="engine-cpu,examples"
[ "${1:-}" = "dev" ] && extras="engine-cpu,examples,dev"

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "tokenwire needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi
stamp=.venv/.tokenwire-install
digest="$("$PY" -c 'import hashlib, sys
h = hashlib.sha256()
for name in sys.argv[1:]:
    with open(name, "rb") as f:
        h.update(name.encode() + b"\0" + f.read() + b"\0")
print(h.hexdigest())' pyproject.toml scripts/install.sh scripts/serve.sh)"
# Up to date when the stamp has this digest and lists every extra asked for (dev includes the rest).
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ -z "${TOKENWIRE_REINSTALL:-}" ]; then
    read -r stamped_digest stamped_extras < "$stamp" || true
    if [ "${stamped_digest:-}" = "$digest" ]; then
        missing=""
        for extra in ${extras//,/ }; do
            case ",${stamped_extras:-}," in *",$extra,"*) ;; *) missing=1 ;; esac
        done
        [ -z "$missing" ] && exit 0
    fi
fi
rm -f "$stamp"
progress="${TOKENWIRE_INSTALL_PROGRESS:-}"
if [ -z "$progress" ]; then
    if [ -t 1 ] || [ -t 2 ]; then progress=1; else progress=0; fi
fi
if [ -x .venv/bin/python ]; then
    echo "updating the dependencies in .venv…" >&2
else
    echo "first install into .venv: torch (CPU), transformers and the rest; the downloads take a few minutes" >&2
    "$PY" -m venv .venv
fi
pip=(.venv/bin/python -m pip --disable-pip-version-check)
[ "$progress" = 1 ] || pip+=(-q)
step() {  # step WHAT COMMAND...: a line before, and one after with the seconds it took
    local what=$1 start=$SECONDS
    shift
    echo "installing $what…" >&2
    "$@"
    echo "installed $what ($((SECONDS - start)) s)" >&2
}

# The CPU build of torch first: a bare `torch` requirement could pull a multi-GB CUDA build.
if ! .venv/bin/python -c 'import importlib.metadata as m, sys; sys.exit(m.version("torch") != "2.13.0+cpu" and m.version("torch") != "2.13.0")' 2>/dev/null; then
    step "torch 2.13.0 (CPU)" "${pip[@]}" install torch==2.13.0
fi
# Without a current stamp, always resolve against pyproject.toml (a few seconds when satisfied), so an
# existing .venv with a stale dependency (e.g. a newer transformers than the pinned one) is corrected.
step "tokenwire[$extras]" "${pip[@]}" install -e ".[$extras]"
# Structured outputs (the local engine): `pip install ".[engine]"` gets xgrammar==0.2.9 from the
# engine extra, with its triton requirement (a ~250 MB GPU kernel compiler the CPU engine never
# loads). Here: the engine-cpu extra above, then xgrammar alone (its other requirements are in it).
if ! .venv/bin/python -c 'import importlib.metadata as m, sys; sys.exit(m.version("xgrammar") != "0.2.9")' 2>/dev/null; then
    step "xgrammar 0.2.9" "${pip[@]}" install --no-deps xgrammar==0.2.9
fi
# The local engine's native kernels, into .venv/share/tokenwire/kernels/ (engine/local/native.py; optional:
# without a compiler the engine runs slower fallbacks and says so; scripts/install-compiler.sh installs one).
.venv/bin/python -m engine.local.native build || echo "installed without the native kernels (see above)" >&2
echo "$digest $extras" > "$stamp"
