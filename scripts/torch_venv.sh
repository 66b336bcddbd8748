#!/usr/bin/env bash
# Makes the Python the capture tests run (`vramlab estimate`, xtask/tests/capture*.rs and
# estimate_cli.rs): a venv at <target>/torch-venv (target/ or $CARGO_TARGET_DIR) with
# torch==2.11.0, the version that recorded tests/data/torch-snapshots, and numpy. It is PyPI's
# Linux wheel, the CUDA build (the capture runs torch's own CUDA code over vramlab's stand-in
# for the CUDA runtime, so a CPU-only build will not do): about 3 GB to download, 5 GB on disk.
# Idempotent: does nothing when the venv already imports that torch and numpy. The tests use
# $VRAMLAB_TORCH_PYTHON instead when it is set. Used by .ci/run; needs python3 with venv, and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${TORCH_VERSION:-2.11.0}"
venv="${CARGO_TARGET_DIR:-target}/torch-venv"
python="$venv/bin/python"
has() {
    "$python" -c "import sys, numpy, torch; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null
}
if [ -n "${VRAMLAB_TORCH_PYTHON:-}" ]; then
    python="$VRAMLAB_TORCH_PYTHON"
    if has; then
        echo "VRAMLAB_TORCH_PYTHON ($python) has torch $version and numpy: the tests use it"
        exit 0
    fi
    echo "error: VRAMLAB_TORCH_PYTHON=$python cannot import torch $version and numpy; unset it" \
        "to install into $venv" >&2
    exit 1
fi
if [ -x "$python" ] && has; then
    echo "$venv already has torch $version and numpy"
    exit 0
fi
echo "installing torch==$version and numpy into $venv (about 3 GB to download)"
python3 -m venv "$venv"
"$python" -m pip install --quiet --disable-pip-version-check "torch==$version" numpy
has || { echo "error: $python cannot import torch $version and numpy after the install" >&2; exit 1; }
echo "wrote $venv (torch $version)"
