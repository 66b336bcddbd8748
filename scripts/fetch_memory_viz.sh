#!/usr/bin/env bash
# Fetches PyTorch's own snapshot viewer, torch/cuda/_memory_viz.py (pure Python: it needs
# neither torch nor a GPU), into target/memory_viz/_memory_viz.py, where the interop tests
# (xtask/tests/common/mod.rs) look for it by default; VRAMLAB_MEMORY_VIZ overrides that path.
# It takes the file from the smallest torch wheel (macOS arm64, about 80 MB, the same
# pure-Python file as every other wheel's) with `pip download`, and does nothing when the
# file is already there. Used by .ci/run; needs python3 with pip, and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${TORCH_VERSION:-2.11.0}"
dest=target/memory_viz/_memory_viz.py
if [ -s "$dest" ]; then
    echo "$dest is already there"
    exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet "torch==$version" --no-deps --only-binary=:all: \
    --platform macosx_11_0_arm64 --python-version 3.11 -d "$tmp"
wheel="$(ls "$tmp"/torch-*.whl)"
mkdir -p "$(dirname "$dest")"
python3 - "$wheel" "$dest.part" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("torch/cuda/_memory_viz.py"))
PY
mv "$dest.part" "$dest"
echo "wrote $dest (torch $version)"
