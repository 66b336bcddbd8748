//! vramlab's GPU figures, for a side-by-side comparison with PyTorch's
//! (`gpu-check/torch_reference.py` measures the same things the same way and
//! writes the same JSON keys): one JSON object on stdout, progress on stderr.
//!
//! - matmul of two 8192 × 8192 matrices in float32 (TF32 off), float32 with
//!   TF32 (`vramlab_engine::cuda::set_matmul_allow_tf32`, PyTorch's
//!   `torch.backends.cuda.matmul.allow_tf32`) and bfloat16, as TFLOP/s (2·n³
//!   floating-point operations per product);
//! - device-to-device copy of 256 MiB (`tensor.to(other device on the same
//!   GPU)`), in GB/s counting the bytes read plus the bytes written;
//! - host-to-device copy of 256 MiB from pinned and from pageable memory
//!   (`Tensor::from_host`, blocking), in GB/s (GB = 10⁹ bytes);
//! - convolution forward, N=64 C=64 H=W=56 K=64 3×3 stride 1 padding 1, in
//!   float32 with TF32 off (`f32`) and on (`tf32`, PyTorch's default for
//!   convolutions: `torch.backends.cudnn.allow_tf32`) and bfloat16, with the
//!   autotuner in `benchmark` mode (`cudnn.benchmark = True`) and `off`: time
//!   per call in nanoseconds, and the algorithm each mode chose;
//! - one allocation and free of 1 MiB through the device's caching allocator
//!   (PyTorch: `torch.cuda.caching_allocator_alloc` / `_delete`), host time per
//!   pair in nanoseconds: the median of 7 loops of 20 000 pairs;
//! - `alloc_sequence_stats`: the same sequence of allocations and frees
//!   ([`ALLOC_SEQUENCE`], the first thing either program does) on a fresh
//!   allocator, and `torch.cuda.memory_stats()`'s keys read twice: with the
//!   sequence's survivors live, and after freeing them and `empty_cache`.
//!   PyTorch's numbers should be identical, key for key.
//!
//! Method: 3 warm-up calls; one timed call sizes the loop to about 0.2 s (at
//! least 3, at most 1000 calls); 7 repetitions of the loop, each between two
//! device synchronizations; the figure is the median repetition's time per
//! call. Every call allocates its output from the caching allocator, as
//! PyTorch's ops do.
//!
//! Exit status: 0 with every figure; 1 when a figure failed (the others are
//! still written, the failures listed under `errors`); 3 when there is no CUDA
//! device (the reason on stderr).
//!
//! `cargo build --release --example gpu_figures -p vramlab-engine`, then run
//! `target/release/examples/gpu_figures` (the GPU check bundle carries it).

use std::process::ExitCode;
use std::time::Instant;

use serde_json::{Map, Value, json};
use vramlab_engine::alloc::AllocatorConfig;
use vramlab_engine::alloc::consts::MIB;
use vramlab_engine::autotune::{self, TuneMode};
use vramlab_engine::cuda;
use vramlab_engine::device::{Device, cuda_probe};
use vramlab_engine::hooks::Hooks;
use vramlab_engine::tensor::{Conv2dOptions, DType, HostBuffer, Tensor};

const WARMUP: usize = 3;
const REPS: usize = 7;
const TARGET_REP_S: f64 = 0.2;
const MIN_ITERS: usize = 3;
const MAX_ITERS: usize = 1000;

const MATMUL_N: usize = 8192;
const COPY_BYTES: usize = 256 << 20;
/// N, C, H, W, K, R (= S); stride 1, padding 1.
const CONV: [usize; 6] = [64, 64, 56, 56, 64, 3];

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// One step of [`ALLOC_SEQUENCE`].
#[derive(Clone, Copy)]
enum SeqOp {
    /// Allocate this many bytes (the next allocation's index is the count so far).
    Alloc(u64),
    /// Free the allocation with this index.
    Free(usize),
}

/// The allocations whose statistics are compared with PyTorch's, exercising
/// the small and large pools, 512-byte rounding, splitting, best-fit reuse and
/// segment sizes. `torch_reference.py`'s `ALLOC_SEQUENCE` is the same list;
/// both programs print it and `compare.py` checks that they agree.
const ALLOC_SEQUENCE: &[SeqOp] = {
    use SeqOp::{Alloc, Free};
    &[
        Alloc(1),
        Alloc(512),
        Alloc(513),
        Alloc(MIB - 1),
        Alloc(MIB),
        Alloc(MIB + 1),
        Alloc(10 * MIB),
        Alloc(10 * MIB + 1),
        Alloc(25 * MIB),
        Free(1),
        Free(3),
        Free(6),
        Alloc(3 * MIB),
        Alloc(200 << 10),
        Free(8),
        Alloc(24 * MIB),
        Alloc(50 * MIB),
        Free(0),
    ]
};
/// Pairs per timed loop of the allocation figure.
const ALLOC_PAIRS: usize = 20_000;

fn log(msg: &str) {
    eprintln!("gpu_figures: {msg}");
}

/// Median time per call of `f` in seconds, timed between synchronizations of
/// the devices `f` queues work on.
fn per_call_seconds<T>(devices: &[&Device], mut f: impl FnMut() -> Res<T>) -> Res<f64> {
    let sync = || -> Res<()> {
        for d in devices {
            d.synchronize()?;
        }
        Ok(())
    };
    for _ in 0..WARMUP {
        drop(f()?);
    }
    sync()?;
    let t = Instant::now();
    drop(f()?);
    sync()?;
    let single = t.elapsed().as_secs_f64().max(1e-9);
    let iters = ((TARGET_REP_S / single).ceil() as usize).clamp(MIN_ITERS, MAX_ITERS);
    let mut per_call = Vec::with_capacity(REPS);
    for _ in 0..REPS {
        let t = Instant::now();
        for _ in 0..iters {
            drop(f()?);
        }
        sync()?;
        per_call.push(t.elapsed().as_secs_f64() / iters as f64);
    }
    per_call.sort_by(f64::total_cmp);
    Ok(per_call[REPS / 2])
}

/// [`ALLOC_SEQUENCE`] on a fresh allocator of GPU `index`: the sequence, and
/// the statistics with its survivors live and after freeing them and
/// `empty_cache`, keyed as `torch.cuda.memory_stats()` keys them.
fn alloc_sequence_stats(index: u32) -> Res<Value> {
    let device = Device::cuda_with(index, AllocatorConfig::default(), &Hooks::new())?;
    let allocator = device.allocator();
    let mut live = Vec::new();
    let mut ops = Vec::new();
    for op in ALLOC_SEQUENCE {
        match *op {
            SeqOp::Alloc(bytes) => {
                live.push(Some(allocator.malloc(bytes, 0, None)?));
                ops.push(json!(["alloc", bytes]));
            }
            SeqOp::Free(i) => {
                let block = live.get_mut(i).and_then(Option::take).ok_or("the sequence frees an allocation twice")?;
                allocator.free(block)?;
                ops.push(json!(["free", i]));
            }
        }
    }
    let with_live = allocator.stats().flatten();
    for block in live.into_iter().flatten() {
        allocator.free(block)?;
    }
    device.empty_cache();
    let after = allocator.stats().flatten();
    Ok(json!({ "ops": ops, "live": with_live, "after_empty_cache": after }))
}

/// Host time of one 1 MiB allocation and free through the caching allocator:
/// the median of [`REPS`] loops of [`ALLOC_PAIRS`] pairs, after warm-up.
fn alloc_free_pair_ns(gpu: &Device) -> Res<f64> {
    let allocator = gpu.allocator();
    let pair = || -> Res<()> { Ok(allocator.free(allocator.malloc(MIB, 0, None)?)?) };
    for _ in 0..WARMUP {
        pair()?;
    }
    let mut per_pair = Vec::with_capacity(REPS);
    for _ in 0..REPS {
        let t = Instant::now();
        for _ in 0..ALLOC_PAIRS {
            pair()?;
        }
        per_pair.push(t.elapsed().as_secs_f64() * 1e9 / ALLOC_PAIRS as f64);
    }
    per_pair.sort_by(f64::total_cmp);
    Ok(per_pair[REPS / 2])
}

/// Sets both TF32 switches until dropped.
struct Tf32(bool, bool);

impl Tf32 {
    fn set(matmul: bool, cudnn: bool) -> Tf32 {
        let previous = Tf32(cuda::matmul_allow_tf32(), cuda::cudnn_allow_tf32());
        cuda::set_matmul_allow_tf32(matmul);
        cuda::set_cudnn_allow_tf32(cudnn);
        previous
    }
}

impl Drop for Tf32 {
    fn drop(&mut self) {
        cuda::set_matmul_allow_tf32(self.0);
        cuda::set_cudnn_allow_tf32(self.1);
    }
}

fn matmul_tflops(gpu: &Device, dtype: DType, tf32: bool) -> Res<f64> {
    let _tf32 = Tf32::set(tf32, tf32);
    let n = MATMUL_N;
    let a = Tensor::randn(&[n, n], dtype, 1, gpu)?;
    let b = Tensor::randn(&[n, n], dtype, 2, gpu)?;
    let (_, timing) = a.matmul_timed(&b)?;
    let expected = if tf32 && dtype == DType::F32 { "cublas_tf32" } else { "cublas" };
    if timing.algorithm != expected {
        return Err(format!("the product ran {}, not {expected}", timing.algorithm).into());
    }
    let s = per_call_seconds(&[gpu], || Ok(a.matmul(&b)?))?;
    Ok(2.0 * (n as f64).powi(3) / s / 1e12)
}

fn copy_d2d_gbps(gpu: &Device) -> Res<f64> {
    // A second device on the same GPU (its own allocator): `to` copies device
    // to device, where `to` the same device would return the tensor itself.
    let other = Device::cuda_with(gpu.id().index, AllocatorConfig::default(), &Hooks::new())?;
    let src = Tensor::full(&[COPY_BYTES / 4], 1.0, DType::F32, gpu)?;
    gpu.synchronize()?;
    // The copies run on `other`'s stream: the timing waits for both devices.
    let s = per_call_seconds(&[gpu, &other], || Ok(src.to(&other)?))?;
    Ok(2.0 * COPY_BYTES as f64 / s / 1e9)
}

fn copy_h2d_gbps(gpu: &Device, pinned: bool) -> Res<f64> {
    let mut buf = if pinned { HostBuffer::pinned(COPY_BYTES) } else { HostBuffer::pageable(COPY_BYTES) };
    if pinned && !buf.is_device_pinned() {
        return Err("the CUDA driver did not allocate the pinned buffer".into());
    }
    buf.write(&vec![1.0f32; COPY_BYTES / 4])?;
    let s = per_call_seconds(&[gpu], || Ok(Tensor::from_host(&buf, &[COPY_BYTES / 4], DType::F32, gpu, false)?))?;
    Ok(COPY_BYTES as f64 / s / 1e9)
}

/// Time per call in ns, the algorithm chosen, and in benchmark mode each
/// candidate's measured median (ns) as the tuner saw it.
fn conv_ns(gpu: &Device, dtype: DType, tf32: bool, mode: TuneMode) -> Res<(f64, String, Value)> {
    let _tf32 = Tf32::set(tf32, tf32);
    let [n, c, h, w, k, r] = CONV;
    let x = Tensor::randn(&[n, c, h, w], dtype, 3, gpu)?;
    let wt = Tensor::randn(&[k, c, r, r], dtype, 4, gpu)?;
    let opts = Conv2dOptions::new(1, 1);
    let tuner = autotune::global();
    // A fresh tuning for each setting (PyTorch's benchmark cache is keyed by
    // the TF32 switch too).
    tuner.clear();
    let previous = tuner.mode();
    tuner.set_mode(mode);
    let measured = (|| -> Res<(f64, String, Value)> {
        // The first call tunes (benchmark mode); the timing's warm-up covers it too.
        let (_, timing) = x.conv2d_timed(&wt, opts)?;
        let s = per_call_seconds(&[gpu], || Ok(x.conv2d(&wt, opts)?))?;
        let candidates: Map<String, Value> = tuner
            .records()
            .iter()
            .filter(|r| r.op == "conv2d")
            .flat_map(|r| &r.candidates)
            .map(|c| (c.algorithm.clone(), json!(c.median_ns)))
            .collect();
        Ok((s * 1e9, timing.algorithm.to_owned(), Value::Object(candidates)))
    })();
    tuner.set_mode(previous);
    measured
}

fn main() -> ExitCode {
    let gpu = match cuda_probe() {
        Err(reason) => {
            log(&format!("no CUDA device ({reason})"));
            return ExitCode::from(3);
        }
        Ok(_) => match Device::parse("cuda:0") {
            Ok(d) => d,
            Err(e) => {
                log(&format!("cannot open cuda:0: {e}"));
                return ExitCode::from(1);
            }
        },
    };
    let props = gpu.properties();
    let mut out = Map::new();
    out.insert("engine".into(), json!(format!("vramlab {}", env!("CARGO_PKG_VERSION"))));
    out.insert("device_name".into(), json!(props.name));
    out.insert("device_memory_bytes".into(), json!(props.memory_capacity_bytes));
    out.insert(
        "method".into(),
        json!(format!(
            "{WARMUP} warm-up calls, then the median of {REPS} device-timed loops of \
             {MIN_ITERS}..{MAX_ITERS} calls (about {TARGET_REP_S} s each), per call"
        )),
    );
    let mut errors = Vec::new();
    let mut record = |key: &str, value: Res<Value>| match value {
        Ok(v) => {
            out.insert(key.to_owned(), v);
        }
        Err(e) => {
            log(&format!("{key} failed: {e}"));
            errors.push(format!("{key}: {e}"));
        }
    };

    // First, while nothing else has touched the GPU's memory (PyTorch's side
    // runs it first too).
    log("running the allocation sequence");
    record("alloc_sequence_stats", alloc_sequence_stats(gpu.id().index));

    let figures: [(&str, &dyn Fn() -> Res<f64>); 7] = [
        ("matmul_f32_8192_tflops", &|| matmul_tflops(&gpu, DType::F32, false)),
        ("matmul_tf32_8192_tflops", &|| matmul_tflops(&gpu, DType::F32, true)),
        ("matmul_bf16_8192_tflops", &|| matmul_tflops(&gpu, DType::BF16, false)),
        ("copy_d2d_256mib_read_plus_write_gbps", &|| copy_d2d_gbps(&gpu)),
        ("copy_h2d_pinned_256mib_gbps", &|| copy_h2d_gbps(&gpu, true)),
        ("copy_h2d_pageable_256mib_gbps", &|| copy_h2d_gbps(&gpu, false)),
        ("alloc_free_pair_1mib_ns", &|| alloc_free_pair_ns(&gpu)),
    ];
    for (key, measure) in figures {
        log(&format!("measuring {key}"));
        record(key, measure().map(|v| json!(v)));
        gpu.empty_cache();
    }
    for (dtype_name, dtype, tf32) in
        [("f32", DType::F32, false), ("tf32", DType::F32, true), ("bf16", DType::BF16, false)]
    {
        for (mode_name, mode) in [("benchmark", TuneMode::Benchmark), ("off", TuneMode::Off)] {
            let key = format!("conv2d_fwd_{dtype_name}_n64_c64_56x56_k64_3x3_{mode_name}");
            log(&format!("measuring {key}"));
            match conv_ns(&gpu, dtype, tf32, mode) {
                Ok((ns, algorithm, candidates)) => {
                    record(&format!("{key}_ns"), Ok(json!(ns)));
                    record(&format!("{key}_algorithm"), Ok(json!(algorithm)));
                    if mode == TuneMode::Benchmark {
                        record(&format!("{key}_candidates_median_ns"), Ok(candidates));
                    }
                }
                Err(e) => record(&format!("{key}_ns"), Err(e)),
            }
            gpu.empty_cache();
        }
    }
    let failed = !errors.is_empty();
    if failed {
        out.insert("errors".into(), json!(errors));
    }
    println!("{}", serde_json::to_string_pretty(&Value::Object(out)).expect("JSON values serialize"));
    if failed { ExitCode::from(1) } else { ExitCode::SUCCESS }
}
