#!/bin/sh
# Build the stand-in engine's wheel (pure Python, stdlib only) into OUTDIR.
# Usage: tests/standin_engine/build_wheel.sh OUTDIR
# Install it anywhere with: pip install --no-index OUTDIR/onecat_standin_vllm-*.whl
set -eu
if [ $# -ne 1 ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
outdir=$1
mkdir -p "$outdir"
python=${PYTHON:-python3}
# Build in a scratch copy so no build/ or *.egg-info lands in the source tree.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r "$here/pyproject.toml" "$here/README.md" "$here/standin_vllm" "$scratch/"
find "$scratch" -name __pycache__ -prune -exec rm -rf {} +
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$outdir" "$scratch"
ls "$outdir"/onecat_standin_vllm-*.whl
