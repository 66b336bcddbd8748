#!/usr/bin/env bash
# vramlab GPU check: runs the engine's tests (the CUDA ones one at a time, with
# their output) and the GPU figures, vramlab's and PyTorch's side by side.
#
# This file is a template: `cargo xtask gpu-check` fills in the @…@ fields and
# writes it as run.sh into the bundle, next to the binaries it runs. The bundle
# needs no Rust toolchain and no network: bash, and python3 with torch for the
# reference figures and the comparison table.
#
# Usage: ./run.sh [RESULTS_DIR] [all|tests|cuda|figures|snapshots|bench]...
#   RESULTS_DIR  where logs and JSON go (default: results/ next to this script)
#   all          every test binary, the figures, the snapshots, the bench (default)
#   tests        every test binary
#   cuda         only the CUDA test binaries
#   figures      only the figures and the comparison
#   snapshots    PyTorch memory snapshots (RESULTS_DIR/torch-snapshots/)
#   bench        `vramlab bench` and its report (RESULTS_DIR/bench/)
# Several steps may be named, e.g. `./run.sh out cuda figures`.
#
# Exit status:
#   0  every test binary passed and (when run) the GPU figures were measured
#   1  a test binary failed, gpu_figures, the snapshots or the bench failed,
#      or a GPU is visible (nvidia-smi) but vramlab did not find it (its CUDA
#      tests skipped)
#   2  bad usage
#   3  no GPU here: the tests passed, the CUDA tests skipped, and gpu_figures
#      found no CUDA device
set -u

VRAMLAB_COMMIT="@COMMIT@"
BUILT_AT="@BUILT_AT@"
TEST_BINARIES=(@TEST_BINARIES@)
CUDA_TEST_BINARIES=(@CUDA_TEST_BINARIES@)
# Seconds each test binary, and each figures program, may run.
TIME_LIMIT_S="${VRAMLAB_GPU_CHECK_TIME_LIMIT_S:-480}"

BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RESULTS="${1:-$BUNDLE/results}"
shift $(($# > 0 ? 1 : 0))
STEPS=("$@")
[ "${#STEPS[@]}" -eq 0 ] && STEPS=(all)
for step in "${STEPS[@]}"; do
    case "$step" in
        all | tests | cuda | figures | snapshots | bench) ;;
        *)
            echo "usage: $0 [RESULTS_DIR] [all|tests|cuda|figures|snapshots|bench]..." >&2
            exit 2
            ;;
    esac
done
# Whether step $1 runs: named, or implied by `all`.
wants() {
    local s
    for s in "${STEPS[@]}"; do
        [ "$s" = "$1" ] || [ "$s" = all ] && return 0
    done
    return 1
}
mkdir -p "$RESULTS/logs" || exit 2
RESULTS="$(cd "$RESULTS" && pwd)"

with_limit() {
    if command -v timeout > /dev/null 2>&1; then
        timeout --kill-after=10 "$TIME_LIMIT_S" "$@"
    else
        "$@"
    fi
}

is_cuda_binary() {
    local b
    for b in "${CUDA_TEST_BINARIES[@]}"; do
        [ "$b" = "$1" ] && return 0
    done
    return 1
}

echo "== vramlab GPU check (commit $VRAMLAB_COMMIT, built $BUILT_AT)"
echo "host:    $(uname -srm), $(nproc 2> /dev/null || echo '?') cores, $(ldd --version 2> /dev/null | head -n 1 | sed 's/^ldd //')"
GPU_VISIBLE=0
if command -v nvidia-smi > /dev/null 2>&1; then
    GPU_LINE="$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2> /dev/null | head -n 1)"
    if [ -n "$GPU_LINE" ]; then
        GPU_VISIBLE=1
        echo "GPU:     $GPU_LINE (nvidia-smi: name, driver, memory, compute capability)"
    else
        echo "GPU:     nvidia-smi found but it lists no GPU"
    fi
else
    echo "GPU:     nvidia-smi not found"
fi
HAVE_PYTHON=0
if command -v python3 > /dev/null 2>&1; then
    HAVE_PYTHON=1
    echo "python3: $(command -v python3), $(python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2> /dev/null || echo 'no torch')"
else
    echo "python3: not found (no PyTorch reference, no comparison table)"
fi
echo "results: $RESULTS"
echo

FAILED=()
SKIPPED_CUDA=0
RAN_CUDA=0

run_test_binary() {
    local name="$1" log="$RESULTS/logs/$1.log" args=() start status summary
    if is_cuda_binary "$name"; then
        args=(--test-threads=1 --nocapture)
    fi
    start=$(date +%s)
    (cd "$RESULTS" && with_limit "$BUNDLE/tests/$name" ${args[@]+"${args[@]}"}) > "$log" 2>&1
    status=$?
    summary="$(grep -E '^test result:' "$log" | tail -n 1)"
    if is_cuda_binary "$name"; then
        RAN_CUDA=1
        local skips
        skips=$(grep -c 'skipped: no CUDA device' "$log")
        SKIPPED_CUDA=$((SKIPPED_CUDA + skips))
        # What the tests printed (their figures, panics) and each verdict; the
        # reason for skipping once.
        grep -vE '^(running [0-9]+ tests?|test result: .*)?$' "$log" \
            | sed -E 's/skipped: no CUDA device \(.*\)$/skipped: no CUDA device/; s/^/    /'
        if [ "$skips" -gt 0 ]; then
            echo "    $skips skipped: $(grep -m 1 -o 'no CUDA device (.*)' "$log")"
        fi
    fi
    if [ "$status" -eq 0 ]; then
        echo "  ok      $name ($(($(date +%s) - start)) s) ${summary#test result: }"
    else
        if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
            echo "  FAILED  $name: ran past ${TIME_LIMIT_S} s (VRAMLAB_GPU_CHECK_TIME_LIMIT_S)"
        else
            echo "  FAILED  $name (exit $status) ${summary#test result: }"
        fi
        if ! is_cuda_binary "$name"; then
            echo "  --- last lines of $log"
            tail -n 40 "$log" | sed 's/^/    /'
            echo "  ---"
        fi
        FAILED+=("$name")
    fi
}

if wants tests || wants cuda; then
    echo "== tests"
    for name in "${TEST_BINARIES[@]}"; do
        if ! wants tests && ! is_cuda_binary "$name"; then
            continue
        fi
        run_test_binary "$name"
    done
    echo
fi

FIGURES_STATUS=-1
if wants figures; then
    echo "== figures"
    with_limit "$BUNDLE/bin/gpu_figures" > "$RESULTS/vramlab_figures.json" 2> "$RESULTS/logs/gpu_figures.log"
    FIGURES_STATUS=$?
    case "$FIGURES_STATUS" in
        0) echo "  vramlab figures: $RESULTS/vramlab_figures.json" ;;
        3) echo "  vramlab figures: no GPU ($(tail -n 1 "$RESULTS/logs/gpu_figures.log"))" ;;
        *)
            echo "  vramlab figures: FAILED (exit $FIGURES_STATUS); last lines of logs/gpu_figures.log:"
            tail -n 20 "$RESULTS/logs/gpu_figures.log" | sed 's/^/    /'
            FAILED+=(gpu_figures)
            ;;
    esac
    TORCH_STATUS=-1
    if [ "$HAVE_PYTHON" = 1 ]; then
        with_limit python3 "$BUNDLE/torch_reference.py" > "$RESULTS/torch_figures.json" 2> "$RESULTS/logs/torch_reference.log"
        TORCH_STATUS=$?
        case "$TORCH_STATUS" in
            0) echo "  torch figures:   $RESULTS/torch_figures.json" ;;
            3) echo "  torch figures:   not measured ($(tail -n 1 "$RESULTS/logs/torch_reference.log"))" ;;
            *)
                echo "  torch figures:   the reference script failed (exit $TORCH_STATUS); last lines:"
                tail -n 20 "$RESULTS/logs/torch_reference.log" | sed 's/^/    /'
                ;;
        esac
    fi
    if [ "$HAVE_PYTHON" = 1 ] && { [ "$FIGURES_STATUS" = 0 ] || [ "$TORCH_STATUS" = 0 ]; }; then
        echo
        python3 "$BUNDLE/compare.py" "$RESULTS/vramlab_figures.json" "$RESULTS/torch_figures.json" \
            --json "$RESULTS/comparison.json" | tee "$RESULTS/comparison.txt"
    fi
    echo
fi

if wants snapshots; then
    echo "== PyTorch memory snapshots"
    if [ "$HAVE_PYTHON" = 1 ]; then
        with_limit python3 "$BUNDLE/record_snapshots.py" "$RESULTS/torch-snapshots" 2> "$RESULTS/logs/record_snapshots.log"
        case $? in
            0) echo "  snapshots: $RESULTS/torch-snapshots ($(ls "$RESULTS/torch-snapshots" | wc -l) files)" ;;
            3) echo "  snapshots: not recorded ($(tail -n 1 "$RESULTS/logs/record_snapshots.log"))" ;;
            *)
                echo "  snapshots: FAILED; last lines of logs/record_snapshots.log:"
                tail -n 20 "$RESULTS/logs/record_snapshots.log" | sed 's/^/    /'
                FAILED+=(snapshots)
                ;;
        esac
    else
        echo "  snapshots: no python3"
    fi
    echo
fi

if wants bench; then
    echo "== vramlab bench"
    start=$(date +%s)
    (cd "$RESULTS" && with_limit "$BUNDLE/bin/vramlab" bench --out "$RESULTS/bench") > "$RESULTS/logs/bench.log" 2>&1
    status=$?
    if [ "$status" -eq 0 ]; then
        echo "  bench: $(($(date +%s) - start)) s; report: $RESULTS/bench/report/index.html"
    else
        echo "  bench: FAILED (exit $status); last lines of logs/bench.log:"
        tail -n 20 "$RESULTS/logs/bench.log" | sed 's/^/    /'
        FAILED+=(bench)
    fi
    echo
fi

if [ "$GPU_VISIBLE" = 1 ] && { [ "$SKIPPED_CUDA" -gt 0 ] || [ "$FIGURES_STATUS" = 3 ]; }; then
    echo "nvidia-smi sees a GPU but vramlab did not find it: see the skip reasons above"
    echo "(set VRAMLAB_CUDA_LIBRARY_PATH to the folders holding libcuda, NVRTC, cuBLAS, cuDNN)"
    FAILED+=("cuda-detection")
fi

if [ "${#FAILED[@]}" -gt 0 ]; then
    echo "GPU check FAILED: ${FAILED[*]} (logs in $RESULTS/logs)"
    exit 1
fi
NO_GPU=0
if { [ "$RAN_CUDA" = 1 ] && [ "$SKIPPED_CUDA" -gt 0 ]; } || [ "$FIGURES_STATUS" = 3 ]; then
    NO_GPU=1
fi
if [ "$NO_GPU" = 1 ]; then
    echo "no GPU here: the tests passed, the CUDA tests skipped and no GPU figures were measured;"
    echo "copy this bundle to a machine with an NVIDIA GPU and run it there"
    exit 3
fi
echo "GPU check passed"
exit 0
