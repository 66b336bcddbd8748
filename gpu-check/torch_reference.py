#!/usr/bin/env python3
"""PyTorch's side of vramlab's GPU figures, for a side-by-side comparison.

Measures what `gpu_figures` (engine/runtime/examples/gpu_figures.rs) measures, with the
same sizes, the same method and the same JSON keys, and prints one JSON object
on stdout (progress on stderr):

- matmul of two 8192 x 8192 matrices in float32 (TF32 off), float32 with TF32,
  and bfloat16, as TFLOP/s (2 n^3 floating-point operations per product);
- device-to-device copy of 256 MiB (`clone`), in GB/s counting the bytes read
  plus the bytes written (2 x 256 MiB per copy);
- host-to-device copy of 256 MiB from pinned and from pageable memory
  (`.to("cuda")`, blocking), in GB/s (GB = 1e9 bytes);
- cuDNN convolution forward, N=64 C=64 H=W=56 K=64 3x3 stride 1 padding 1, in
  float32 with TF32 off (`f32`) and on (`tf32`: `torch.backends.cudnn.allow_tf32`,
  PyTorch's default) and bfloat16, with `torch.backends.cudnn.benchmark` on and
  off: time per call in nanoseconds;
- one allocation and free of 1 MiB through the caching allocator
  (`torch.cuda.caching_allocator_alloc` / `caching_allocator_delete`, what
  vramlab's pair measures), and `torch.empty` / `del` of a 1 MiB tensor (the
  Python-level cost, PyTorch only): host time per pair in nanoseconds, the
  median of 7 loops of 20 000 pairs;
- `alloc_sequence_stats`: ALLOC_SEQUENCE (gpu_figures.rs's, the same list) run
  first, and `torch.cuda.memory_stats()` read with its survivors live and after
  freeing them and `empty_cache`.

Method (the same in gpu_figures): 3 warm-up calls; one timed call sizes the
loop to about 0.2 s (at least 3 and at most 1000 calls); 7 repetitions of the
loop, each timed on the device (torch.cuda.Event before and after the loop,
then synchronize); the figure is the median repetition's time per call. Every
call allocates its output from the caching allocator, as vramlab's ops do.

Exit status: 0 with the figures; 3 when torch or a CUDA device is missing
(the reason on stderr); 1 on any other failure. Needs only python3 and torch.
"""

import json
import math
import statistics
import sys

WARMUP = 3
REPS = 7
TARGET_REP_S = 0.2
MIN_ITERS = 3
MAX_ITERS = 1000

MATMUL_N = 8192
COPY_BYTES = 256 << 20
CONV = dict(n=64, c=64, h=56, w=56, k=64, r=3, s=3, stride=1, pad=1)
CONV_NAME = "conv2d_fwd_{dtype}_n64_c64_56x56_k64_3x3_{mode}_ns"
MIB = 1 << 20
ALLOC_PAIRS = 20_000
# gpu_figures.rs's ALLOC_SEQUENCE: ("alloc", bytes) appends an allocation,
# ("free", i) frees the i-th.
ALLOC_SEQUENCE = [
    ("alloc", 1),
    ("alloc", 512),
    ("alloc", 513),
    ("alloc", MIB - 1),
    ("alloc", MIB),
    ("alloc", MIB + 1),
    ("alloc", 10 * MIB),
    ("alloc", 10 * MIB + 1),
    ("alloc", 25 * MIB),
    ("free", 1),
    ("free", 3),
    ("free", 6),
    ("alloc", 3 * MIB),
    ("alloc", 200 << 10),
    ("free", 8),
    ("alloc", 24 * MIB),
    ("alloc", 50 * MIB),
    ("free", 0),
]


def log(msg):
    print(f"torch_reference: {msg}", file=sys.stderr, flush=True)


def per_call_seconds(torch, fn):
    """Median time per call of `fn` over REPS device-timed loops."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    single = max(start.elapsed_time(end) / 1e3, 1e-9)
    iters = min(MAX_ITERS, max(MIN_ITERS, math.ceil(TARGET_REP_S / single)))
    per_call = []
    for _ in range(REPS):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / 1e3 / iters)
    return statistics.median(per_call)


def alloc_sequence_stats(torch):
    live = []
    for op, arg in ALLOC_SEQUENCE:
        if op == "alloc":
            live.append(torch.cuda.caching_allocator_alloc(arg))
        else:
            torch.cuda.caching_allocator_delete(live[arg])
            live[arg] = None
    with_live = dict(torch.cuda.memory_stats())
    for ptr in live:
        if ptr is not None:
            torch.cuda.caching_allocator_delete(ptr)
    torch.cuda.empty_cache()
    after = dict(torch.cuda.memory_stats())
    return {"ops": [list(op) for op in ALLOC_SEQUENCE], "live": with_live, "after_empty_cache": after}


def host_ns_per_pair(pair):
    import time

    for _ in range(WARMUP):
        pair()
    per_pair = []
    for _ in range(REPS):
        t = time.perf_counter()
        for _ in range(ALLOC_PAIRS):
            pair()
        per_pair.append((time.perf_counter() - t) * 1e9 / ALLOC_PAIRS)
    return statistics.median(per_pair)


def alloc_free_pair_ns(torch):
    alloc, delete = torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete
    return host_ns_per_pair(lambda: delete(alloc(MIB)))


def empty_del_ns(torch):
    def pair():
        t = torch.empty(MIB, dtype=torch.uint8, device="cuda")
        del t

    return host_ns_per_pair(pair)


def set_tf32(torch, matmul, conv):
    """TF32 for float32 matmuls and cuDNN convolutions. Newer PyTorch has
    `fp32_precision` ("ieee" or "tf32") and refuses a mix of it with the legacy
    `allow_tf32` flags, so only one of the two is ever used."""
    m, c = torch.backends.cuda.matmul, torch.backends.cudnn
    if hasattr(m, "fp32_precision") and hasattr(getattr(c, "conv", None), "fp32_precision"):
        m.fp32_precision = "tf32" if matmul else "ieee"
        c.conv.fp32_precision = "tf32" if conv else "ieee"
    else:
        m.allow_tf32 = matmul
        c.allow_tf32 = conv


def matmul_tflops(torch, dtype, tf32):
    set_tf32(torch, tf32, tf32)
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(MATMUL_N, MATMUL_N, device="cuda", generator=g).to(dtype)
    b = torch.randn(MATMUL_N, MATMUL_N, device="cuda", generator=g).to(dtype)
    s = per_call_seconds(torch, lambda: torch.matmul(a, b))
    return 2.0 * MATMUL_N**3 / s / 1e12


def copy_d2d_gbps(torch):
    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device="cuda").fill_(1.0)
    s = per_call_seconds(torch, lambda: src.clone())
    return 2 * COPY_BYTES / s / 1e9


def copy_h2d_gbps(torch, pinned):
    src = torch.ones(COPY_BYTES // 4, dtype=torch.float32)
    if pinned:
        src = src.pin_memory()
    s = per_call_seconds(torch, lambda: src.to("cuda", non_blocking=False))
    return COPY_BYTES / s / 1e9


def conv_ns(torch, dtype, tf32, benchmark):
    import torch.nn.functional as F

    torch.backends.cudnn.benchmark = benchmark
    set_tf32(torch, tf32, tf32)
    c = CONV
    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(c["n"], c["c"], c["h"], c["w"], device="cuda", generator=g).to(dtype)
    w = torch.randn(c["k"], c["c"], c["r"], c["s"], device="cuda", generator=g).to(dtype)
    s = per_call_seconds(torch, lambda: F.conv2d(x, w, stride=c["stride"], padding=c["pad"]))
    torch.backends.cudnn.benchmark = False
    return s * 1e9


def main():
    try:
        import torch
    except ImportError as e:
        log(f"no PyTorch ({e})")
        return 3
    if not torch.cuda.is_available():
        log(f"no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda})")
        return 3
    torch.cuda.init()
    props = torch.cuda.get_device_properties(0)
    out = {
        "engine": f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()})",
        "device_name": props.name,
        "device_memory_bytes": props.total_memory,
        "method": (
            f"{WARMUP} warm-up calls, then the median of {REPS} device-timed loops of "
            f"{MIN_ITERS}..{MAX_ITERS} calls (about {TARGET_REP_S} s each), per call"
        ),
    }
    errors = []
    # First, while nothing else has touched the GPU's memory.
    log("running the allocation sequence")
    try:
        out["alloc_sequence_stats"] = alloc_sequence_stats(torch)
    except Exception as e:  # noqa: BLE001
        errors.append(f"alloc_sequence_stats: {type(e).__name__}: {e}")
    figures = [
        ("matmul_f32_8192_tflops", lambda: matmul_tflops(torch, torch.float32, False)),
        ("matmul_tf32_8192_tflops", lambda: matmul_tflops(torch, torch.float32, True)),
        ("matmul_bf16_8192_tflops", lambda: matmul_tflops(torch, torch.bfloat16, False)),
        ("copy_d2d_256mib_read_plus_write_gbps", lambda: copy_d2d_gbps(torch)),
        ("copy_h2d_pinned_256mib_gbps", lambda: copy_h2d_gbps(torch, True)),
        ("copy_h2d_pageable_256mib_gbps", lambda: copy_h2d_gbps(torch, False)),
        ("alloc_free_pair_1mib_ns", lambda: alloc_free_pair_ns(torch)),
        ("torch_empty_del_1mib_ns", lambda: empty_del_ns(torch)),
    ]
    convs = (("f32", torch.float32, False), ("tf32", torch.float32, True), ("bf16", torch.bfloat16, False))
    for dtype_name, dtype, tf32 in convs:
        for mode, benchmark in (("benchmark", True), ("off", False)):
            key = CONV_NAME.format(dtype=dtype_name, mode=mode)
            figures.append((key, lambda d=dtype, t=tf32, b=benchmark: conv_ns(torch, d, t, b)))
    for key, measure in figures:
        log(f"measuring {key}")
        try:
            out[key] = measure()
        except Exception as e:  # noqa: BLE001 - every failure is reported, the rest still measured
            errors.append(f"{key}: {type(e).__name__}: {e}")
            log(f"{key} failed: {e}")
        torch.cuda.empty_cache()
    if errors:
        out["errors"] = errors
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
