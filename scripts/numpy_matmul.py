#!/usr/bin/env python3
"""numpy's f32 matmul on this machine: the reference for the engine's matmul bench.

Times `a @ b` for two n×n float32 matrices (1024 by default): warm-up runs, then the
median of `--runs` timed runs (each into a preallocated output, `np.matmul(a, b,
out=c)`, so allocation is not timed; `--no-out` times plain `a @ b`). Prints the
median in ms, GFLOP/s (2·n³ per product), and numpy's BLAS: name, version, the
OpenBLAS build line, the kernel OpenBLAS chose at run time (DYNAMIC_ARCH) and its
thread count. OpenBLAS uses every core by default; set OPENBLAS_NUM_THREADS to change
that. An OPENBLAS_CORETYPE in the environment overrides OpenBLAS's CPU detection (e.g.
`Haswell` forces AVX2 kernels on an AVX-512 machine); the script prints it. numpy from
PyPI bundles scipy-openblas (`pip install numpy` if missing).

Compare with `cargo bench -p vramlab-engine --bench tensor -- matmul`.

Usage: python3 scripts/numpy_matmul.py [--n 1024] [--runs 20] [--warmup 3] [--no-out]
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import statistics
import sys
import time

try:
    import numpy as np
except ImportError:  # pragma: no cover - a message, not a traceback
    sys.exit("numpy is not installed: pip install numpy")


def blas_summary() -> dict[str, str]:
    """numpy's BLAS as `np.show_config()` reports it, as flat strings."""
    out: dict[str, str] = {}
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        out["name"] = str(blas.get("name", "?"))
        out["version"] = str(blas.get("version", "?"))
        out["configuration"] = str(blas.get("openblas configuration", "?"))
    except (TypeError, AttributeError):  # numpy < 1.26 has no mode="dicts"
        out["name"] = "unknown (numpy too old for show_config(mode='dicts'))"
    return out


def openblas_runtime() -> dict[str, str]:
    """Thread count and run-time core type from the OpenBLAS numpy bundles, if found."""
    libs = sorted(glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "*openblas*")))
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        info: dict[str, str] = {"library": os.path.basename(path)}
        for prefix, suffix in (("scipy_openblas_", "64_"), ("scipy_openblas_", ""), ("openblas_", "")):
            try:
                threads = getattr(lib, f"{prefix}get_num_threads{suffix}")
                core = getattr(lib, f"{prefix}get_corename{suffix}")
            except AttributeError:
                continue
            threads.restype = ctypes.c_int
            core.restype = ctypes.c_char_p
            info["threads"] = str(threads())
            info["core"] = core().decode()
            return info
        return info
    return {}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--no-out", action="store_true", help="time `a @ b` (allocating the result) instead")
    args = p.parse_args()

    n = args.n
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)

    def once() -> float:
        t0 = time.perf_counter_ns()
        if args.no_out:
            r = a @ b
        else:
            r = np.matmul(a, b, out=c)
        t1 = time.perf_counter_ns()
        assert r.dtype == np.float32
        return (t1 - t0) / 1e6

    for _ in range(args.warmup):
        once()
    times_ms = [once() for _ in range(args.runs)]
    med = statistics.median(times_ms)
    gflops = 2.0 * n**3 / (med * 1e-3) / 1e9

    blas = blas_summary()
    rt = openblas_runtime()
    print(f"numpy {np.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} logical CPUs")
    print(f"BLAS: {blas.get('name')} {blas.get('version', '')} | {blas.get('configuration', '')}")
    if rt:
        print(
            f"OpenBLAS at run time: core {rt.get('core', '?')}, {rt.get('threads', '?')} threads, {rt['library']}"
        )
    env = {v: os.environ.get(v, "unset") for v in ("OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OMP_NUM_THREADS")}
    print("environment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    if os.environ.get("OPENBLAS_CORETYPE"):
        print("  (OPENBLAS_CORETYPE overrides OpenBLAS's CPU detection; unset it to let DYNAMIC_ARCH choose)")
    what = "a @ b" if args.no_out else "np.matmul(a, b, out=c)"
    print(f"{what}, float32 {n}x{n}: {args.warmup} warm-up, {args.runs} runs")
    print(
        f"min {min(times_ms):.3f} ms | median {med:.3f} ms | max {max(times_ms):.3f} ms | "
        f"median {gflops:.1f} GFLOP/s"
    )


if __name__ == "__main__":
    main()
