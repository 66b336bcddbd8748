//! The CUDA backend against the CPU backend, on a real GPU.
//!
//! Every test but the first needs a CUDA device: without one it prints
//! `skipped: no CUDA device (<reason>)` and passes. A machine whose driver
//! reports a device but where `cuda:0` does not open fails instead: that is a
//! broken backend, not a missing GPU. Run these on a GPU through
//! `cargo xtask gpu-check` (one test at a time: the autotuner's mode and the
//! TF32 switches are process-wide; tests that touch them also hold a lock).
//!
//! Inputs are seeded random values rounded to the dtype once, on the CPU, then
//! copied to the GPU, so both backends see the same bits. Each GPU result is
//! compared with the CPU backend's result of the same op, with the CPU kernel
//! tests' error measures and tolerances (`engine/cpu-kernels/tests/cpu_kernels.rs`): f32 ≤ 1e-5,
//! f16/bf16 ≤ 1e-2;
//! - *elementwise* (`max |g − c| / max(|c|, tiny)`) for ops one rounding away
//!   from exact (add, mul, scale, softmax, bias add, …), where both backends
//!   round the same value;
//! - *norm-wise* (`‖g − c‖ / ‖c‖`) for sums of products and ops with zeros
//!   (matmul, conv, reductions, gradients, GELU, log-softmax, optimizer steps),
//!   with 2× the tolerance: both sides are approximations (the CPU tests allow
//!   the same between two algorithms);
//! - *exact* for ops with one right answer (relu, casts, max-pool values and
//!   indices, argmax).
//!
//! A NaN or an infinity never passes a tolerance check. Set `VRAMLAB_TEST_SEED`
//! to draw other inputs.

#[path = "../../cpu-kernels/tests/common/mod.rs"]
mod common;
mod gpu;

use gpu::{Tf32, TunerMode, cpu, gpu, settings};

use common::{Rng, elem_rel_err, norm_rel_err, rng_for_test};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use vramlab_engine::alloc::consts::{GIB, MIB};
use vramlab_engine::alloc::{
    AllocError, Allocation, AllocatorConfig, CachingAllocator, MemInfo, RawAllocator, RawError,
};
use vramlab_engine::autotune::{self, TuneMode};
use vramlab_engine::cpu_kernels::{Adam, Sgd};
use vramlab_engine::device::{Device, DeviceError, DeviceId, DeviceKind, cuda_probe};
use vramlab_engine::hooks::Tag;
use vramlab_engine::hooks::{CopyKind, Event, EventLog, Hooks};
use vramlab_replay::{self as replay, ReplayOptions, TraceOp, write_trace};

#[path = "../../replay/tests/support/synthetic.rs"]
mod synthetic;
use synthetic::SyntheticTrace;
use vramlab_engine::tensor::{Conv2dOptions, DType, HostBuffer, Tensor, TensorError};

// ---------------------------------------------------------------------------------
// The device, settings, inputs.

/// A private device on GPU 0 with its own allocator and hooks.
fn private_gpu(config: AllocatorConfig) -> (Device, Arc<Hooks>) {
    let hooks = Hooks::new();
    let d = Device::cuda_with(0, config, &hooks).unwrap_or_else(|e| panic!("a private device on cuda:0: {e}"));
    (d, hooks)
}

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// The same values on the CPU and on `gpu`, rounded to `dtype` once, on the CPU.
fn pair(values: &[f32], shape: &[usize], dtype: DType, gpu: &Device) -> (Tensor, Tensor) {
    let c = Tensor::from_slice(values, shape, &cpu()).unwrap().to_dtype(dtype).unwrap();
    let g = c.to(gpu).unwrap();
    (c, g)
}

/// Seeded normal values of `shape` (times `scale`) on both devices.
fn random_pair(rng: &mut Rng, shape: &[usize], scale: f64, dtype: DType, gpu: &Device) -> (Tensor, Tensor) {
    let n = shape.iter().product();
    pair(&rng.normals(n, scale), shape, dtype, gpu)
}

/// A fresh, unshared copy on `gpu` of a CPU tensor (for in-place ops).
fn fresh(c: &Tensor, gpu: &Device) -> Tensor {
    c.to(gpu).unwrap()
}

/// A tensor's values, read on the host (copied there from a GPU).
fn host(t: &Tensor) -> Vec<f64> {
    t.to(&cpu()).unwrap().to_f64_vec().unwrap()
}

fn tol(dtype: DType) -> f64 {
    if dtype == DType::F32 { 1e-5 } else { 1e-2 }
}

/// The smallest normal number of `dtype`.
fn tiny(dtype: DType) -> f64 {
    if dtype == DType::F16 { 2f64.powi(-14) } else { f64::from(f32::MIN_POSITIVE) }
}

/// The GPU result lives on `gpu` and has the CPU result's shape and dtype.
#[track_caller]
fn check_meta(what: &str, g: &Tensor, c: &Tensor, gpu: &Device) {
    assert_eq!(g.device(), gpu, "{what}: the result is on {}, not on the GPU", g.device());
    assert_eq!(g.shape(), c.shape(), "{what}: shape");
    assert_eq!(g.dtype(), c.dtype(), "{what}: dtype");
}

#[track_caller]
fn check_norm(what: &str, g: &Tensor, c: &Tensor, gpu: &Device) {
    check_meta(what, g, c, gpu);
    let t = 2.0 * tol(c.dtype());
    let e = norm_rel_err(&host(g), &host(c));
    assert!(e <= t, "{what}: norm-wise relative difference GPU vs CPU {e:.3e} > {t:.0e}");
}

#[track_caller]
fn check_elem(what: &str, g: &Tensor, c: &Tensor, gpu: &Device) {
    check_meta(what, g, c, gpu);
    let t = tol(c.dtype());
    let e = elem_rel_err(&host(g), &host(c), tiny(c.dtype()));
    assert!(e <= t, "{what}: elementwise relative difference GPU vs CPU {e:.3e} > {t:.0e}");
}

/// Equal values (NaN equals NaN; zeros must agree in sign).
#[track_caller]
fn check_exact(what: &str, g: &Tensor, c: &Tensor, gpu: &Device) {
    check_meta(what, g, c, gpu);
    let (gv, cv) = (host(g), host(c));
    for (i, (a, b)) in gv.iter().zip(&cv).enumerate() {
        let same = (a.is_nan() && b.is_nan()) || (a == b && a.is_sign_negative() == b.is_sign_negative());
        assert!(same, "{what}: element {i} is {a} on the GPU and {b} on the CPU");
    }
}

#[test]
fn checks_reject_nan_and_differences() {
    assert!(norm_rel_err(&[1.0, f64::NAN], &[1.0, 2.0]).is_infinite());
    assert!(elem_rel_err(&[f64::INFINITY], &[1.0], 1e-30).is_infinite());
    assert!(norm_rel_err(&[1.0, 2.0], &[1.0, 2.0]) == 0.0);
    assert!(elem_rel_err(&[1.1], &[1.0], 1e-30) > 0.09);
}

// ---------------------------------------------------------------------------------
// Without a GPU: the absence path (runs everywhere).

#[test]
fn cuda_absence_is_a_typed_error_with_the_reason_and_auto_falls_back() {
    match cuda_probe() {
        Err(reason) => {
            assert!(!reason.is_empty());
            for spec in ["cuda", "cuda:0", "cuda:3", "gpu"] {
                match Device::parse(spec) {
                    Err(DeviceError::CudaUnavailable { reason: r }) => assert_eq!(r, reason, "{spec}"),
                    Err(e) => panic!("{spec}: expected CudaUnavailable, got {e}"),
                    Ok(d) => panic!("{spec}: opened {d} although the probe failed: {reason}"),
                }
            }
            let err = Device::parse("cuda").unwrap_err();
            let msg = err.to_string();
            assert_eq!(msg, format!("CUDA unavailable: {reason}"));
            if reason.contains("libcuda") {
                // No driver library at all: the library search's words.
                assert!(msg.starts_with("CUDA unavailable: libcuda (the NVIDIA driver) not found"), "{msg}");
            }
            assert!(matches!(
                Device::cuda_with(0, AllocatorConfig::default(), &Hooks::new()),
                Err(DeviceError::CudaUnavailable { .. })
            ));
            let (auto, why) = Device::auto();
            assert!(auto.is_cpu(), "auto picked {auto} without CUDA");
            assert_eq!(why.as_deref(), Some(msg.as_str()));
            // A host buffer asked for as pinned is still usable without a GPU.
            let mut buf = HostBuffer::pinned(64);
            assert!(buf.is_pinned() && !buf.is_device_pinned());
            buf.write(&[1.0f32, 2.0]).unwrap();
            assert_eq!(buf.read::<f32>(2).unwrap(), [1.0, 2.0]);
            println!("no CUDA here, as expected by this test's other branch: {reason}");
        }
        Ok(n) => {
            assert!(n >= 1);
            let d = Device::parse("cuda").unwrap();
            assert_eq!(d.id(), DeviceId::cuda(0));
            assert_eq!(d.kind(), DeviceKind::Cuda);
            assert!(d.properties().memory_capacity_bytes > 0 && d.properties().compute_units > 0);
            let (auto, why) = Device::auto();
            assert_eq!((auto.id(), why), (DeviceId::cuda(0), None));
            match Device::parse(&format!("cuda:{n}")) {
                Err(DeviceError::NoSuchCudaDevice { requested, present }) => {
                    assert_eq!((requested, present), (DeviceId::cuda(n), n));
                }
                other => panic!("cuda:{n} with {n} device(s): {other:?}"),
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Elementwise ops, activations, in-place updates.

#[test]
fn elementwise_activations_and_their_backward_match_cpu() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng_for_test("cuda_elementwise");
    for dtype in FLOATS {
        for n in [1000, 70_001] {
            let what = |op: &str| format!("{op} {dtype} n={n}");
            let (a, ga) = random_pair(&mut rng, &[n], 2.0, dtype, &gpu);
            let (b, gb) = random_pair(&mut rng, &[n], 2.0, dtype, &gpu);
            let (g, gg) = random_pair(&mut rng, &[n], 1.0, dtype, &gpu);
            check_elem(&what("add"), &ga.add(&gb).unwrap(), &a.add(&b).unwrap(), &gpu);
            check_elem(&what("mul"), &ga.mul(&gb).unwrap(), &a.mul(&b).unwrap(), &gpu);
            check_elem(&what("scale"), &ga.scale(-0.37).unwrap(), &a.scale(-0.37).unwrap(), &gpu);
            check_exact(&what("relu"), &ga.relu().unwrap(), &a.relu().unwrap(), &gpu);
            check_exact(&what("relu_backward"), &ga.relu_backward(&gg).unwrap(), &a.relu_backward(&g).unwrap(), &gpu);
            check_norm(&what("gelu"), &ga.gelu().unwrap(), &a.gelu().unwrap(), &gpu);
            check_norm(&what("gelu_backward"), &ga.gelu_backward(&gg).unwrap(), &a.gelu_backward(&g).unwrap(), &gpu);

            let mut gi = fresh(&a, &gpu);
            gi.add_(&gb).unwrap();
            check_elem(&what("add_"), &gi, &a.add(&b).unwrap(), &gpu);
            let mut gi = fresh(&a, &gpu);
            gi.scale_(0.25).unwrap();
            check_elem(&what("scale_"), &gi, &a.scale(0.25).unwrap(), &gpu);
            let mut gi = fresh(&a, &gpu);
            gi.fill_(-1.5).unwrap();
            check_exact(&what("fill_"), &gi, &Tensor::full(&[n], -1.5, dtype, &cpu()).unwrap(), &gpu);
        }
    }
}

#[test]
fn in_place_ops_need_the_only_reference_on_the_gpu_too() {
    let Some(gpu) = gpu() else { return };
    let mut t = Tensor::full(&[8], 1.0, DType::F32, &gpu).unwrap();
    let shared = t.clone();
    assert!(t.scale_(2.0).is_err(), "scale_ of a shared tensor");
    drop(shared);
    t.scale_(2.0).unwrap();
    assert_eq!(host(&t), vec![2.0; 8]);
}

#[test]
fn bias_add_and_gradient_match_cpu() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng_for_test("cuda_bias");
    for dtype in FLOATS {
        // [rows, >= 128 channels] takes the chunked row kernels: one chunk,
        // two (the second partial), and a tall batch of 32.
        for shape in [
            vec![7, 5],
            vec![3, 4, 9],
            vec![2, 3, 12_000],
            vec![4, 16, 7, 9],
            vec![3, 200],
            vec![300, 130],
            vec![8192, 256],
        ] {
            let what = |op: &str| format!("{op} {dtype} {shape:?}");
            let (x, gx) = random_pair(&mut rng, &shape, 1.0, dtype, &gpu);
            let (b, gb) = random_pair(&mut rng, &[shape[1]], 1.0, dtype, &gpu);
            let want = x.add_bias(&b).unwrap();
            check_elem(&what("add_bias"), &gx.add_bias(&gb).unwrap(), &want, &gpu);
            let mut gi = fresh(&x, &gpu);
            gi.add_bias_(&gb).unwrap();
            check_elem(&what("add_bias_"), &gi, &want, &gpu);
            check_norm(&what("bias_grad"), &gx.bias_grad().unwrap(), &x.bias_grad().unwrap(), &gpu);
        }
    }
}

#[test]
fn unscale_and_check_finds_non_finite_values_like_cpu() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng_for_test("cuda_unscale");
    let n = 70_001;
    for dtype in FLOATS {
        for poison in [None, Some((n - 1, f32::INFINITY)), Some((0, f32::NAN)), Some((n / 2, f32::NEG_INFINITY))] {
            let mut values = rng.normals(n, 1000.0);
            if let Some((i, v)) = poison {
                values[i] = v;
            }
            let (mut c, mut g) = pair(&values, &[n], dtype, &gpu);
            let inv_scale = 1.0 / 65536.0;
            let found_cpu = c.unscale_and_check_(inv_scale).unwrap();
            let found_gpu = g.unscale_and_check_(inv_scale).unwrap();
            assert_eq!(found_cpu, poison.is_some(), "{dtype} {poison:?}: the CPU's verdict");
            assert_eq!(found_gpu, found_cpu, "{dtype} {poison:?}: found non-finite values");
            if poison.is_none() {
                check_elem(&format!("unscale {dtype}"), &g, &c, &gpu);
            } else {
                check_exact(&format!("unscale {dtype} {poison:?}"), &g, &c, &gpu);
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Softmax, losses, reductions, argmax, casts.

#[test]
fn softmax_and_log_softmax_with_backward_match_cpu() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng_for_test("cuda_softmax");
    for dtype in FLOATS {
        for (rows, cols) in [(6, 11), (70, 1000), (3, 5000), (2, 1)] {
            let what = |op: &str| format!("{op} {dtype} [{rows}, {cols}]");
            let mut values = rng.normals(rows * cols, 3.0);
            values[0] += 80.0; // a large logit: the max subtraction must keep this finite
            let (x, gx) = pair(&values, &[rows, cols], dtype, &gpu);
            let (gy, ggy) = random_pair(&mut rng, &[rows, cols], 1.0, dtype, &gpu);
            let (y, gy_out) = (x.softmax().unwrap(), gx.softmax().unwrap());
            if dtype == DType::F16 {
                // Probabilities below f16's range flush to zero: norm-wise only (as on the CPU).
                check_norm(&what("softmax"), &gy_out, &y, &gpu);
            } else {
                check_elem(&what("softmax"), &gy_out, &y, &gpu);
            }
            let (ly, gly) = (x.log_softmax().unwrap(), gx.log_softmax().unwrap());
            check_norm(&what("log_softmax"), &gly, &ly, &gpu);
            // The backward from the same forward output on both sides.
            let (y_on_gpu, ly_on_gpu) = (fresh(&y, &gpu), fresh(&ly, &gpu));
            check_norm(
                &what("softmax_backward"),
                &y_on_gpu.softmax_backward(&ggy).unwrap(),
                &y.softmax_backward(&gy).unwrap(),
                &gpu,
            );
            check_norm(
                &what("log_softmax_backward"),
                &ly_on_gpu.log_softmax_backward(&ggy).unwrap(),
                &ly.log_softmax_backward(&gy).unwrap(),
                &gpu,
            );
        }
    }
}

#[test]
fn losses_and_their_backward_match_cpu() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng_for_test("cuda_losses");
    for (rows, classes) in [(5, 7), (300, 300), (1024, 10)] {
        let what = |op: &str| format!("{op} [{rows}, {classes}]");
        let (x, gx) = random_pair(&mut rng, &[rows, classes], 3.0, DType::F32, &gpu);
        let labels: Vec<i64> = (0..rows).map(|_| rng.below(classes) as i64).collect();
        let l = Tensor::from_slice(&labels, &[rows], &cpu()).unwrap();
        let gl = l.to(&gpu).unwrap();
        let (loss, gloss) = (x.cross_entropy(&l).unwrap(), gx.cross_entropy(&gl).unwrap());
        assert_eq!(gloss.shape(), &[] as &[usize]);
        check_elem(&what("cross_entropy"), &gloss, &loss, &gpu);
        check_norm(
            &what("cross_entropy_backward"),
            &gx.cross_entropy_backward(&gl, 0.5).unwrap(),
            &x.cross_entropy_backward(&l, 0.5).unwrap(),
            &gpu,
        );
    }
    for n in [17, 70_001] {
        let (p, gp) = random_pair(&mut rng, &[n], 1.0, DType::F32, &gpu);
        let (t, gt) = random_pair(&mut rng, &[n], 1.0, DType::F32, &gpu);
        check_elem(&format!("mse n={n}"), &gp.mse(&gt).unwrap(), &p.mse(&t).unwrap(), &gpu);
        check_elem(
            &format!("mse_backward n={n}"),
            &gp.mse_backward(&gt, 2.0).unwrap(),
            &p.mse_backward(&t, 2.0).unwrap(),
            &gpu,
        );
    }
}

#[test]
fn sum_mean_item_and_argmax_match_cpu() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng_for_test("cuda_reduce");
    for dtype in FLOATS {
        for n in [1, 999, 200_003, 1 << 22] {
            let (x, gx) = random_pair(&mut rng, &[n], 1.0, dtype, &gpu);
            let abs: f64 = host(&x).iter().map(|v| v.abs()).sum();
            let (s, gs) = (x.sum().unwrap(), gx.sum().unwrap());
            let (m, gm) = (x.mean().unwrap(), gx.mean().unwrap());
            check_meta(&format!("sum {dtype} n={n}"), &gs, &s, &gpu);
            check_meta(&format!("mean {dtype} n={n}"), &gm, &m, &gpu);
            // Relative to Σ|x|: a sum of signed values is ill-conditioned.
            let t = 2.0 * tol(dtype);
            let (sv, gsv) = (s.item().unwrap(), gs.item().unwrap());
            assert!((gsv - sv).abs() <= t * abs, "sum {dtype} n={n}: GPU {gsv} vs CPU {sv}");
            let (mv, gmv) = (m.item().unwrap(), gm.item().unwrap());
            assert!((gmv - mv).abs() <= t * abs / n as f64, "mean {dtype} n={n}: GPU {gmv} vs CPU {mv}");
            assert_eq!(gsv, host(&gs)[0], "item() reads the value the copy reads");
        }
        for shape in [vec![64, 1000], vec![5, 3, 7], vec![1, 100_000], vec![4096, 2]] {
            let (x, gx) = random_pair(&mut rng, &shape, 1.0, dtype, &gpu);
            check_exact(&format!("argmax {dtype} {shape:?}"), &gx.argmax().unwrap(), &x.argmax().unwrap(), &gpu);
        }
        // The first maximum wins; NaN counts as the maximum.
        let (x, gx) = pair(&[1.0, 3.0, 3.0, 0.0, 2.0, f32::NAN, 5.0, f32::NAN], &[2, 4], dtype, &gpu);
        let (want, got) = (x.argmax().unwrap(), gx.argmax().unwrap());
        assert_eq!(want.to_vec::<i64>().unwrap(), [1, 1]);
        check_exact(&format!("argmax ties and NaN {dtype}"), &got, &want, &gpu);
    }
}

#[test]
fn float_casts_round_like_cpu() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng_for_test("cuda_cast");
    let mut values = rng.normals(70_001, 100.0);
    values.extend([0.0, -0.0, 65504.0, 65520.0, 1e-8, -3e38, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 6e-8]);
    let n = values.len();
    for from in FLOATS {
        let (c, g) = pair(&values, &[n], from, &gpu);
        for to in FLOATS {
            check_exact(&format!("cast {from} to {to}"), &g.to_dtype(to).unwrap(), &c.to_dtype(to).unwrap(), &gpu);
        }
    }
}

#[test]
fn int64_casts_match_cpu() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng_for_test("cuda_cast_i64");
    // Finite values within f16's range: casting an infinity or a NaN to an
    // integer has no one right answer.
    let values: Vec<f32> =
        rng.normals(10_001, 1e4).into_iter().chain([0.0, -0.0, -2.5, 2.5, 65504.0, -65504.0]).collect();
    let n = values.len();
    for from in FLOATS {
        let (c, g) = pair(&values, &[n], from, &gpu);
        check_exact(
            &format!("cast {from} to int64"),
            &g.to_dtype(DType::I64).unwrap(),
            &c.to_dtype(DType::I64).unwrap(),
            &gpu,
        );
    }
    let ints: Vec<i64> = (0..n as i64).map(|i| (i - 5000) * 977).collect();
    let c = Tensor::from_slice(&ints, &[n], &cpu()).unwrap();
    let g = c.to(&gpu).unwrap();
    for to in FLOATS {
        check_exact(&format!("cast int64 to {to}"), &g.to_dtype(to).unwrap(), &c.to_dtype(to).unwrap(), &gpu);
    }
}

// ---------------------------------------------------------------------------------
// Max pooling.

#[test]
fn max_pool_and_its_backward_match_cpu() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng_for_test("cuda_pool");
    for dtype in FLOATS {
        for (shape, kernel, stride) in
            [([2, 3, 8, 7], 2, 2), ([1, 2, 9, 9], 3, 2), ([2, 40, 32, 30], 3, 1), ([8, 16, 56, 56], 2, 2)]
        {
            let what = |op: &str| format!("{op} {dtype} {shape:?} k{kernel} s{stride}");
            let (x, gx) = random_pair(&mut rng, &shape, 1.0, dtype, &gpu);
            let (y, idx) = x.max_pool2d(kernel, stride).unwrap();
            let (gy_out, gidx) = gx.max_pool2d(kernel, stride).unwrap();
            check_exact(&what("max_pool2d"), &gy_out, &y, &gpu);
            check_exact(&what("max_pool2d indices"), &gidx, &idx, &gpu);
            let (gy, ggy) = random_pair(&mut rng, y.shape(), 1.0, dtype, &gpu);
            check_norm(
                &what("max_pool2d_backward"),
                &Tensor::max_pool2d_backward(&gidx, &ggy, &shape, kernel, stride).unwrap(),
                &Tensor::max_pool2d_backward(&idx, &gy, &shape, kernel, stride).unwrap(),
                &gpu,
            );
        }
        // NaN propagates and its index is kept.
        let (x, gx) = pair(&[1.0, f32::NAN, 5.0, 2.0], &[1, 1, 2, 2], dtype, &gpu);
        let ((y, idx), (gy, gidx)) = (x.max_pool2d(2, 2).unwrap(), gx.max_pool2d(2, 2).unwrap());
        check_exact(&format!("max_pool2d NaN {dtype}"), &gy, &y, &gpu);
        check_exact(&format!("max_pool2d NaN index {dtype}"), &gidx, &idx, &gpu);
    }
}

// ---------------------------------------------------------------------------------
// Optimizers.

#[test]
fn sgd_and_adam_steps_match_cpu() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng_for_test("cuda_optim");
    let n = 70_001;
    let sgds = [
        Sgd::new(0.1),
        Sgd { lr: 0.05, momentum: 0.9, dampening: 0.0, weight_decay: 1e-2, nesterov: false },
        Sgd { lr: 0.05, momentum: 0.9, dampening: 0.1, weight_decay: 0.0, nesterov: false },
        Sgd { lr: 0.05, momentum: 0.8, dampening: 0.0, weight_decay: 5e-3, nesterov: true },
    ];
    for cfg in sgds {
        let (mut p, _) = random_pair(&mut rng, &[n], 1.0, DType::F32, &gpu);
        let mut gp = fresh(&p, &gpu);
        let (mut m, mut gm) =
            (Tensor::zeros(&[n], DType::F32, &cpu()).unwrap(), Tensor::zeros(&[n], DType::F32, &gpu).unwrap());
        for step in 1..=4u64 {
            let (g, gg) = random_pair(&mut rng, &[n], 1.0, DType::F32, &gpu);
            if cfg.momentum == 0.0 {
                p.sgd_step_(&g, None, &cfg, step).unwrap();
                gp.sgd_step_(&gg, None, &cfg, step).unwrap();
            } else {
                p.sgd_step_(&g, Some(&mut m), &cfg, step).unwrap();
                gp.sgd_step_(&gg, Some(&mut gm), &cfg, step).unwrap();
            }
        }
        check_norm(&format!("sgd {cfg:?}"), &gp, &p, &gpu);
        if cfg.momentum != 0.0 {
            check_norm(&format!("sgd momentum buffer {cfg:?}"), &gm, &m, &gpu);
        }
    }
    let adams = [
        Adam::new(1e-3),
        Adam { weight_decay: 1e-2, ..Adam::new(1e-2) },
        Adam { weight_decay: 1e-2, decoupled_weight_decay: true, beta1: 0.8, beta2: 0.99, ..Adam::new(1e-2) },
    ];
    for cfg in adams {
        let (mut p, _) = random_pair(&mut rng, &[n], 1.0, DType::F32, &gpu);
        let mut gp = fresh(&p, &gpu);
        let zeros = |d: &Device| Tensor::zeros(&[n], DType::F32, d).unwrap();
        let (mut m, mut v, mut gm, mut gv) = (zeros(&cpu()), zeros(&cpu()), zeros(&gpu), zeros(&gpu));
        for step in 1..=5u64 {
            let (g, gg) = random_pair(&mut rng, &[n], 0.1, DType::F32, &gpu);
            p.adam_step_(&g, &mut m, &mut v, &cfg, step).unwrap();
            gp.adam_step_(&gg, &mut gm, &mut gv, &cfg, step).unwrap();
        }
        check_norm(&format!("adam {cfg:?}"), &gp, &p, &gpu);
        check_norm(&format!("adam exp_avg {cfg:?}"), &gm, &m, &gpu);
        check_norm(&format!("adam exp_avg_sq {cfg:?}"), &gv, &v, &gpu);
    }
}

// ---------------------------------------------------------------------------------
// Matrix products.

#[test]
fn matmul_plain_transposed_and_batched_match_cpu() {
    let Some(gpu) = gpu() else { return };
    let _lock = settings();
    let _tf32 = Tf32::set(false, false);
    let _mode = TunerMode::set(TuneMode::Off);
    let mut rng = rng_for_test("cuda_matmul");
    // (batch, m, n, k); batch 0 means plain 2-d operands.
    let shapes = [(0, 7, 5, 3), (3, 17, 33, 65), (0, 40, 24, 300), (0, 129, 67, 253), (4, 256, 512, 384), (0, 1, 1, 1)];
    for dtype in FLOATS {
        for (batch, m, n, k) in shapes {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let dims = |rows: usize, cols: usize, t: bool| {
                    let (r, c) = if t { (cols, rows) } else { (rows, cols) };
                    if batch == 0 { vec![r, c] } else { vec![batch, r, c] }
                };
                let what = format!("matmul {dtype} batch={batch} m={m} n={n} k={k} trans_a={ta} trans_b={tb}");
                let (a, ga) = random_pair(&mut rng, &dims(m, k, ta), 1.0, dtype, &gpu);
                let (b, gb) = random_pair(&mut rng, &dims(k, n, tb), 1.0, dtype, &gpu);
                let want = a.matmul_transposed(&b, ta, tb).unwrap();
                let (got, timing) = ga.matmul_transposed_timed(&gb, ta, tb).unwrap();
                check_norm(&what, &got, &want, &gpu);
                assert_eq!(timing.algorithm, "cublas", "{what}: TF32 is off");
                if !ta && !tb {
                    check_norm(&format!("{what} (matmul)"), &ga.matmul(&gb).unwrap(), &want, &gpu);
                }
            }
        }
    }
}

#[test]
fn tf32_switch_changes_f32_products_within_tf32_precision() {
    let Some(gpu) = gpu() else { return };
    let _lock = settings();
    let mut rng = rng_for_test("cuda_tf32");
    let (a, ga) = random_pair(&mut rng, &[256, 512], 1.0, DType::F32, &gpu);
    let (b, gb) = random_pair(&mut rng, &[512, 128], 1.0, DType::F32, &gpu);
    let want = host(&a.matmul(&b).unwrap());
    let full = {
        let _tf32 = Tf32::set(false, false);
        ga.matmul_timed(&gb).unwrap()
    };
    let fast = {
        let _tf32 = Tf32::set(true, false);
        ga.matmul_timed(&gb).unwrap()
    };
    assert_eq!((full.1.algorithm, fast.1.algorithm), ("cublas", "cublas_tf32"));
    let (e_full, e_fast) = (norm_rel_err(&host(&full.0), &want), norm_rel_err(&host(&fast.0), &want));
    println!("matmul f32 vs CPU: TF32 off {e_full:.2e}, TF32 on {e_fast:.2e}");
    assert!(e_full <= 2e-5, "TF32 off: {e_full:.3e}");
    // TF32 keeps 10 mantissa bits (unit roundoff 2⁻¹¹ ≈ 4.9e-4).
    assert!(e_fast <= 5e-3, "TF32 on: {e_fast:.3e}");
    assert!(e_fast > e_full, "TF32 on should lose precision: {e_fast:.3e} vs {e_full:.3e}");
}

// ---------------------------------------------------------------------------------
// Convolutions.

/// (x dims, k, r, s, stride, padding) — the CPU kernel tests' shapes and a
/// typical network layer.
type ConvCase = ([usize; 4], usize, usize, usize, (usize, usize), (usize, usize));

fn conv_cases() -> Vec<ConvCase> {
    vec![
        ([2, 3, 7, 6], 4, 3, 3, (1, 1), (1, 1)),
        ([1, 2, 5, 5], 3, 3, 3, (1, 1), (0, 0)),
        ([3, 2, 6, 5], 2, 3, 3, (1, 1), (2, 2)),
        ([2, 3, 9, 8], 5, 3, 3, (2, 2), (1, 1)),
        ([2, 3, 7, 7], 2, 5, 3, (2, 1), (2, 1)),
        ([2, 4, 6, 5], 3, 1, 1, (1, 1), (0, 0)),
        ([1, 8, 5, 5], 6, 1, 1, (2, 2), (0, 0)),
        ([3, 5, 4, 4], 3, 3, 3, (1, 1), (3, 3)),
        ([8, 16, 32, 32], 32, 3, 3, (1, 1), (1, 1)),
    ]
}

#[test]
fn conv2d_forward_and_backward_match_cpu_in_every_autotune_mode() {
    let Some(gpu) = gpu() else { return };
    let _lock = settings();
    let _tf32 = Tf32::set(false, false);
    let mut rng = rng_for_test("cuda_conv");
    for dtype in FLOATS {
        for (xd, k, r, s, stride, padding) in conv_cases() {
            let opts = Conv2dOptions { stride, padding };
            let (x, gx) = random_pair(&mut rng, &xd, 1.0, dtype, &gpu);
            let (w, gw) = random_pair(&mut rng, &[k, xd[1], r, s], 1.0, dtype, &gpu);
            let (y, gy, gx_ref, gw_ref) = {
                let _mode = TunerMode::set(TuneMode::Off);
                let y = x.conv2d(&w, opts).unwrap();
                let (gy, _) = random_pair(&mut rng, y.shape(), 1.0, dtype, &gpu);
                let gx_ref = Tensor::conv2d_backward_data(&w, &gy, &xd, opts).unwrap();
                let gw_ref = Tensor::conv2d_backward_weight(&x, &gy, w.shape(), opts).unwrap();
                (y, gy, gx_ref, gw_ref)
            };
            let ggy = fresh(&gy, &gpu);
            for mode in [TuneMode::Off, TuneMode::Benchmark, TuneMode::Deterministic] {
                let _mode = TunerMode::set(mode);
                let what =
                    |pass: &str| format!("{pass} {dtype} x={xd:?} w=[{k}, {}, {r}, {s}] {opts:?} {mode:?}", xd[1]);
                let (fwd, timing) = gx.conv2d_timed(&gw, opts).unwrap();
                check_norm(&what("conv2d"), &fwd, &y, &gpu);
                assert!(!timing.algorithm.is_empty());
                let bwd_data = Tensor::conv2d_backward_data(&gw, &ggy, &xd, opts).unwrap();
                check_norm(&what("conv2d_backward_data"), &bwd_data, &gx_ref, &gpu);
                let bwd_weight = Tensor::conv2d_backward_weight(&gx, &ggy, gw.shape(), opts).unwrap();
                check_norm(&what("conv2d_backward_weight"), &bwd_weight, &gw_ref, &gpu);
                if mode == TuneMode::Deterministic {
                    // Reproducible algorithms only: bitwise the same on a second run.
                    assert_eq!(host(&gx.conv2d(&gw, opts).unwrap()), host(&fwd), "{}", what("conv2d again"));
                    let again = Tensor::conv2d_backward_data(&gw, &ggy, &xd, opts).unwrap();
                    assert_eq!(host(&again), host(&bwd_data), "{}", what("conv2d_backward_data again"));
                    let again = Tensor::conv2d_backward_weight(&gx, &ggy, gw.shape(), opts).unwrap();
                    assert_eq!(host(&again), host(&bwd_weight), "{}", what("conv2d_backward_weight again"));
                }
            }
        }
    }
}

#[test]
fn conv2d_benchmark_mode_tunes_on_the_gpu_and_keeps_its_choice() {
    let Some(gpu) = gpu() else { return };
    let _lock = settings();
    let _tf32 = Tf32::set(false, false);
    let _mode = TunerMode::set(TuneMode::Benchmark);
    let mut rng = rng_for_test("cuda_conv_tune");
    let tuner = autotune::global();
    // A shape no other test uses, so the tuning is fresh.
    let opts = Conv2dOptions::new(1, 1);
    let (_, x) = random_pair(&mut rng, &[4, 24, 20, 20], 1.0, DType::F32, &gpu);
    let (_, w) = random_pair(&mut rng, &[40, 24, 3, 3], 1.0, DType::F32, &gpu);
    let before = tuner.records().len();
    let (_, first) = x.conv2d_timed(&w, opts).unwrap();
    let new: Vec<_> = tuner.records().into_iter().skip(before).filter(|r| r.key.device.contains("cuda:0")).collect();
    assert!(!new.is_empty(), "benchmark mode recorded no tuning for cuda:0");
    let record = new.iter().find(|r| r.choice == first.algorithm).unwrap_or_else(|| {
        panic!("no tuning chose {}, the algorithm that ran: {new:#?}", first.algorithm);
    });
    assert!(record.candidates.len() >= 2, "one candidate is no tuning: {record:#?}");
    println!("conv2d on the GPU: {} candidates, chose {}", record.candidates.len(), record.choice);
    let (_, second) = x.conv2d_timed(&w, opts).unwrap();
    assert_eq!(second.algorithm, first.algorithm, "the cached choice");
    let after: Vec<_> = tuner.records().into_iter().skip(before).filter(|r| r.key.device.contains("cuda:0")).collect();
    assert_eq!(after.len(), new.len(), "a second call must not tune again");
}

// ---------------------------------------------------------------------------------
// The golden rule.

#[test]
fn mixing_cpu_and_gpu_operands_is_a_device_mismatch_and_copies_nothing() {
    let Some(_) = gpu() else { return };
    let host_hooks = Hooks::new();
    let host_dev =
        Device::host(DeviceId { kind: DeviceKind::Cpu, index: 60 }, 64 * MIB, AllocatorConfig::default(), &host_hooks)
            .unwrap();
    let (gpu, _) = private_gpu(AllocatorConfig::default());
    let a = Tensor::full(&[2, 2], 1.0, DType::F32, &host_dev).unwrap();
    let b = Tensor::full(&[2, 2], 1.0, DType::F32, &gpu).unwrap();
    let before = (host_dev.memory_allocated(), gpu.memory_allocated());
    let cases: Vec<(&str, Result<Tensor, TensorError>)> = vec![
        ("add", a.add(&b)),
        ("mul", a.mul(&b)),
        ("matmul", a.matmul(&b)),
        ("mse", a.mse(&b)),
        ("relu_backward", a.relu_backward(&b)),
    ];
    for (op, result) in cases {
        match result {
            Err(TensorError::DeviceMismatch { op: got, lhs, rhs }) => {
                assert_eq!((got, lhs, rhs), (op, host_dev.id(), DeviceId::cuda(0)));
            }
            Err(e) => panic!("{op}: expected a device mismatch, got {e}"),
            Ok(t) => panic!("{op}: mixing devices computed {t:?}"),
        }
    }
    let err = b.add(&a).unwrap_err();
    assert!(
        matches!(err, TensorError::DeviceMismatch { op: "add", lhs, rhs } if lhs == DeviceId::cuda(0) && rhs == host_dev.id())
    );
    let msg = err.to_string();
    assert!(msg.contains("cuda:0") && msg.contains("cpu:60") && msg.contains("never copies silently"), "{msg}");
    let x = Tensor::zeros(&[1, 2, 4, 4], DType::F32, &host_dev).unwrap();
    let w = Tensor::zeros(&[2, 2, 3, 3], DType::F32, &gpu).unwrap();
    assert!(matches!(x.conv2d(&w, Conv2dOptions::new(1, 1)), Err(TensorError::DeviceMismatch { .. })));
    drop((x, w));
    assert_eq!((host_dev.memory_allocated(), gpu.memory_allocated()), before, "no silent copy happened");
    // Reading GPU values needs a move to the host first.
    assert!(matches!(b.to_vec::<f32>(), Err(TensorError::NotOnHost { device, .. }) if device == DeviceId::cuda(0)));
    // The fix: move one operand.
    let sum = a.to(&gpu).unwrap().add(&b).unwrap();
    assert_eq!(sum.device(), &gpu);
    assert_eq!(host(&sum), vec![2.0; 4]);
}

// ---------------------------------------------------------------------------------
// Transfers.

#[test]
fn pinned_and_pageable_host_to_device_copies_arrive_intact() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng_for_test("cuda_copies");
    let n = 16 << 20; // 64 MiB of f32: long enough for a copy to be in flight
    let values = rng.normals(n, 1.0);
    let zeros = vec![0.0f32; n];
    for pinned in [false, true] {
        let mut buf = if pinned { HostBuffer::pinned(n * 4) } else { HostBuffer::pageable(n * 4) };
        assert_eq!(buf.is_pinned(), pinned);
        if pinned {
            assert!(buf.is_device_pinned() && buf.is_page_locked(), "with a GPU, pinned memory comes from the driver");
        }
        for non_blocking in [false, true] {
            let what = format!("pinned={pinned} non_blocking={non_blocking}");
            // Host to device, then synchronize.
            buf.write(&values).unwrap();
            let t = Tensor::from_host(&buf, &[n], DType::F32, &gpu, non_blocking).unwrap();
            gpu.synchronize().unwrap();
            assert_eq!(t.to(&cpu()).unwrap().to_vec::<f32>().unwrap(), values, "{what}: host to device");
            // Host to device, then overwrite the buffer at once: a copy still in
            // flight must not see the new bytes (the buffer waits for it).
            let t = Tensor::from_host(&buf, &[n], DType::F32, &gpu, non_blocking).unwrap();
            buf.write(&zeros).unwrap();
            assert_eq!(t.to(&cpu()).unwrap().to_vec::<f32>().unwrap(), values, "{what}: buffer reused at once");
            // Device to host into the buffer; reading it waits for the copy.
            t.copy_to_host(&mut buf, non_blocking).unwrap();
            assert_eq!(buf.read::<f32>(n).unwrap(), values, "{what}: device to host");
            // And the values compute: 2t on the GPU.
            let doubled = t.add(&t).unwrap();
            let want: Vec<f32> = values.iter().map(|v| v + v).collect();
            assert_eq!(doubled.to(&cpu()).unwrap().to_vec::<f32>().unwrap(), want, "{what}: t + t");
        }
    }
}

#[test]
fn side_stream_copies_and_device_to_device_copies_arrive_intact() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng_for_test("cuda_streams");
    let n = 4 << 20;
    let values = rng.normals(n, 1.0);
    let mut buf = HostBuffer::pinned(n * 4);
    buf.write(&values).unwrap();
    let stream = gpu.create_stream().unwrap();
    let t = Tensor::from_host_on_stream(&buf, &[n], DType::F32, &gpu, stream).unwrap();
    gpu.wait_stream(0, stream).unwrap();
    t.record_stream(0);
    let scaled = t.scale(2.0).unwrap();
    let want: Vec<f32> = values.iter().map(|v| 2.0 * v).collect();
    assert_eq!(scaled.to(&cpu()).unwrap().to_vec::<f32>().unwrap(), want, "side-stream copy, then compute");
    // Device to device: a second device on the same GPU.
    let (other, _) = private_gpu(AllocatorConfig::default());
    let moved = t.to(&other).unwrap();
    assert_eq!(moved.device(), &other);
    assert_eq!(moved.to(&cpu()).unwrap().to_vec::<f32>().unwrap(), values, "device to device");
    // `to` the same device is the tensor itself: nothing allocated.
    let allocated = gpu.memory_allocated();
    let same = t.to(&gpu).unwrap();
    assert_eq!(gpu.memory_allocated(), allocated);
    drop(same);
}

#[test]
fn copies_report_copy_events_with_their_kind_and_bytes() {
    let Some(_) = gpu() else { return };
    let (gpu, hooks) = private_gpu(AllocatorConfig::default());
    let log = EventLog::new();
    hooks.subscribe(log.clone());
    let n = 1 << 20;
    let mut buf = HostBuffer::pinned(n * 4);
    buf.write(&vec![1.0f32; n]).unwrap();
    let t = Tensor::from_host(&buf, &[n], DType::F32, &gpu, true).unwrap();
    t.copy_to_host(&mut buf, false).unwrap();
    gpu.synchronize().unwrap();
    let copies: Vec<_> = log
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Copy(c) => Some(c),
            _ => None,
        })
        .collect();
    let h2d = copies.iter().find(|c| c.kind == CopyKind::HostToDevice).expect("a host-to-device copy event");
    assert_eq!((h2d.bytes, h2d.pinned, h2d.non_blocking), (n as u64 * 4, true, true), "{h2d:?}");
    let d2h = copies.iter().find(|c| c.kind == CopyKind::DeviceToHost).expect("a device-to-host copy event");
    assert_eq!((d2h.bytes, d2h.non_blocking), (n as u64 * 4, false), "{d2h:?}");
    assert!(copies.iter().all(|c| c.device == DeviceId::cuda(0).event_index()), "{copies:?}");
}

#[test]
fn timed_ops_emit_their_kernel_event_before_they_return() {
    let Some(_) = gpu() else { return };
    let _mode = TunerMode::set(TuneMode::Off);
    let (gpu, hooks) = private_gpu(AllocatorConfig::default());
    let a = Tensor::randn(&[64, 64], DType::F32, 1, &gpu).unwrap();
    let x = Tensor::randn(&[2, 3, 8, 8], DType::F32, 2, &gpu).unwrap();
    let w = Tensor::randn(&[4, 3, 3, 3], DType::F32, 3, &gpu).unwrap();
    gpu.synchronize().unwrap();
    let log = EventLog::new();
    hooks.subscribe(log.clone());
    // No synchronize: a timed call waits for its work, so its event is out.
    let (_, mm) = a.matmul_timed(&a).unwrap();
    let (_, conv) = x.conv2d_timed(&w, Conv2dOptions::new(1, 1)).unwrap();
    let kernels: Vec<_> = log
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Kernel(k) => Some((k.name, k.algorithm)),
            _ => None,
        })
        .collect();
    assert!(kernels.contains(&("matmul", mm.algorithm)), "{kernels:?}");
    assert!(kernels.contains(&("conv2d_forward", conv.algorithm)), "{kernels:?}");
}

// ---------------------------------------------------------------------------------
// The allocator on the GPU.

/// Raw memory that hands out, in order, the segments the GPU's allocator got
/// from the driver: the model then sees the GPU's addresses, so the two
/// allocators must make every choice alike.
#[derive(Debug)]
struct Mirror {
    segments: Mutex<VecDeque<(u64, u64)>>,
    total: u64,
}

impl RawAllocator for Mirror {
    fn name(&self) -> &str {
        "cuda:0"
    }

    fn malloc(&self, size: u64) -> Result<u64, RawError> {
        let next = self.segments.lock().unwrap().pop_front();
        match next {
            Some((addr, s)) if s == size => Ok(addr),
            Some((addr, s)) => Err(RawError::Device {
                device: "mirror".into(),
                message: format!(
                    "the GPU's allocator got a segment of {s} bytes at {addr:#x} here, the model asks for {size}"
                ),
            }),
            None => Err(RawError::Device {
                device: "mirror".into(),
                message: format!("the GPU's allocator got no more segments, the model asks for {size} bytes"),
            }),
        }
    }

    fn free(&self, _: u64, _: u64) {}

    fn mem_info(&self) -> MemInfo {
        MemInfo { free_bytes: self.total, total_bytes: self.total }
    }
}

fn segment_addrs(a: &CachingAllocator) -> HashSet<u64> {
    a.snapshot().iter().map(|s| s.address).collect()
}

/// Applies one trace op to an allocator holding `live`.
fn apply(
    a: &CachingAllocator,
    live: &mut HashMap<u64, Allocation>,
    op: TraceOp,
) -> Result<Option<(u64, u64)>, AllocError> {
    match op {
        TraceOp::Alloc { id, size, stream, tag } => {
            let alloc = a.malloc(size, stream, tag)?;
            let seen = (alloc.addr(), alloc.size());
            assert!(live.insert(id, alloc).is_none(), "the trace reuses live id {id}");
            return Ok(Some(seen));
        }
        TraceOp::Free { id } => a.free(live.remove(&id).expect("the trace frees live ids"))?,
        TraceOp::EmptyCache => a.empty_cache(),
        TraceOp::ResetPeak => a.reset_peak_stats(),
    }
    Ok(None)
}

#[test]
fn gpu_allocator_stats_equal_the_models_on_a_synthetic_trace() {
    let Some(_) = gpu() else { return };
    for conf in ["", "max_split_size_mb:64,roundup_power2_divisions:4"] {
        let config = if conf.is_empty() { AllocatorConfig::default() } else { AllocatorConfig::parse(conf).unwrap() };
        let (d, _) = private_gpu(config.clone());
        let free = d.allocator().mem_info().free_bytes;
        // Long enough to pass an empty_cache (op 4999), small enough to fit.
        let mut events = 6000;
        loop {
            let trace = synthetic::synthetic_trace(events, 11);
            let opts = ReplayOptions { config: config.clone(), ..ReplayOptions::default() };
            let peak = replay::replay(trace.as_bytes(), &opts).unwrap().peak_reserved_bytes;
            if peak <= free / 2 || events <= 500 {
                println!("trace of {events} ops, peak reserved {} MiB, {} MiB free on the GPU", peak >> 20, free >> 20);
                assert!(peak <= free / 2, "even {events} ops need {peak} bytes");
                break;
            }
            events /= 2;
        }
        let ops: Vec<TraceOp> = SyntheticTrace::new(events, 11).collect();

        // The GPU: record the stats after every op and the segments the driver gave.
        let mut gpu_stats = Vec::with_capacity(ops.len());
        let mut gpu_allocs = Vec::new();
        let mut segments = VecDeque::new();
        let mut known = HashSet::new();
        let mut live = HashMap::new();
        for (i, &op) in ops.iter().enumerate() {
            let before = d.memory_stats();
            let seen = apply(d.allocator(), &mut live, op).unwrap_or_else(|e| panic!("op {i} {op:?} on the GPU: {e}"));
            gpu_allocs.extend(seen);
            let after = d.memory_stats();
            if after.num_device_alloc != before.num_device_alloc || after.num_device_free != before.num_device_free {
                let now = segment_addrs(d.allocator());
                let mut new: Vec<u64> = now.difference(&known).copied().collect();
                assert_eq!(new.len() as i64, after.num_device_alloc - before.num_device_alloc, "op {i} {op:?}");
                new.sort_unstable();
                for addr in new {
                    let seg = d.allocator().snapshot().into_iter().find(|s| s.address == addr).unwrap();
                    segments.push_back((addr, seg.total_size));
                }
                known = now;
            }
            gpu_stats.push(after.flatten());
        }
        let gpu_summary = d.memory_summary(false);
        for (_, a) in live.drain() {
            d.allocator().free(a).unwrap();
        }
        d.empty_cache();
        assert_eq!(d.memory_reserved(), 0);

        // The model over the same segments.
        let total = d.properties().memory_capacity_bytes;
        let model = CachingAllocator::new(Arc::new(Mirror { segments: Mutex::new(segments), total }), config).unwrap();
        let mut model_allocs = Vec::new();
        for (i, &op) in ops.iter().enumerate() {
            let seen = apply(&model, &mut live, op).unwrap_or_else(|e| panic!("op {i} {op:?} in the model: {e}"));
            model_allocs.extend(seen);
            let stats = model.stats().flatten();
            if stats != gpu_stats[i] {
                let diff: Vec<String> = stats
                    .iter()
                    .filter(|(k, v)| gpu_stats[i].get(*k) != Some(v))
                    .map(|(k, v)| format!("{k}: GPU {:?} model {v}", gpu_stats[i].get(k)))
                    .collect();
                panic!("config '{conf}': the stats differ after op {i} ({op:?}): {diff:#?}");
            }
        }
        assert_eq!(model_allocs, gpu_allocs, "config '{conf}': every block at the same address and size");
        assert_eq!(model.memory_summary(false), gpu_summary, "config '{conf}': memory_summary");
        println!("config '{conf}': {} ops, {} allocations, stats equal after every op", ops.len(), gpu_allocs.len());
    }
}

#[test]
fn gpu_allocator_stats_equal_a_host_devices_for_the_same_tensors() {
    let Some(_) = gpu() else { return };
    for conf in ["", "expandable_segments:True"] {
        let config = if conf.is_empty() { AllocatorConfig::default() } else { AllocatorConfig::parse(conf).unwrap() };
        let (g, _) = private_gpu(config.clone());
        let host_id = DeviceId { kind: DeviceKind::Cpu, index: 61 };
        let h = Device::host(host_id, 4 * GIB, config, &Hooks::new()).unwrap();
        let mut held: [Vec<Tensor>; 2] = [Vec::new(), Vec::new()];
        let mut step = 0;
        let mut check = |held: &[Vec<Tensor>; 2], what: &str| {
            step += 1;
            let (gs, hs) = (g.memory_stats().flatten(), h.memory_stats().flatten());
            let diff: Vec<String> = gs
                .iter()
                .filter(|(k, v)| hs.get(*k) != Some(v))
                .map(|(k, v)| format!("{k}: GPU {v} host {:?}", hs.get(k)))
                .collect();
            assert!(diff.is_empty(), "config '{conf}', step {step} ({what}): {diff:#?}");
            assert_eq!(held[0].len(), held[1].len());
        };
        // Stack order (last in, first out), sizes across both pools, the
        // 1 MiB and 10 MiB thresholds, an empty tensor.
        let sizes: [usize; 12] =
            [1, 100, 1000, 4096, 70_001, 262_144, 262_145, 1_000_000, 2_621_440, 3_000_000, 0, 9_000_000];
        for round in 0..3 {
            for (i, &n) in sizes.iter().enumerate() {
                let dtype = if (i + round) % 3 == 0 { DType::BF16 } else { DType::F32 };
                for (k, d) in [&g, &h].into_iter().enumerate() {
                    held[k].push(Tensor::zeros(&[n], dtype, d).unwrap());
                }
                check(&held, &format!("round {round}: alloc {n} {dtype}"));
                if i % 3 == 2 {
                    for list in held.iter_mut() {
                        list.pop();
                    }
                    check(&held, &format!("round {round}: free after {n}"));
                }
            }
            for _ in 0..held[0].len() / 2 {
                for list in held.iter_mut() {
                    list.pop();
                }
                check(&held, &format!("round {round}: free half"));
            }
            if round == 1 {
                g.empty_cache();
                h.empty_cache();
                check(&held, "empty_cache");
                g.allocator().reset_peak_stats();
                h.allocator().reset_peak_stats();
                check(&held, "reset_peak_stats");
            }
        }
        held.iter_mut().for_each(Vec::clear);
        check(&held, "free everything");
        g.empty_cache();
        h.empty_cache();
        check(&held, "empty_cache at the end");
        assert_eq!((g.memory_allocated(), g.memory_reserved()), (0, 0), "config '{conf}'");
        println!("config '{conf}': stats equal after each of {step} steps");
    }
}

/// Allocates `chunk`s until the GPU runs out; returns what it holds and the error.
fn fill_gpu(d: &Device, chunk: u64) -> (Vec<Allocation>, AllocError) {
    let total = d.properties().memory_capacity_bytes;
    let mut held = Vec::new();
    loop {
        match d.allocator().malloc(chunk, 0, None) {
            Ok(a) => held.push(a),
            Err(e) => return (held, e),
        }
        assert!(held.len() as u64 * chunk <= total, "allocated more than the GPU's {total} bytes");
    }
}

#[test]
fn a_real_out_of_memory_carries_pytorchs_numbers_and_empty_cache_gives_it_all_back() {
    let Some(shared) = gpu() else { return };
    // The shared device's cache would hold memory the test wants to run out of.
    shared.empty_cache();
    for conf in ["", "expandable_segments:True"] {
        let config = if conf.is_empty() { AllocatorConfig::default() } else { AllocatorConfig::parse(conf).unwrap() };
        let (d, _) = private_gpu(config);
        let total = d.properties().memory_capacity_bytes;
        let free_before = d.allocator().mem_info().free_bytes;
        let chunk = GIB;
        let (held, err) = fill_gpu(&d, chunk);
        let held_bytes = held.len() as u64 * chunk;
        println!("config '{conf}': {} GiB allocated of {} GiB before the OOM: {err}", held.len(), total >> 30);
        let oom = err.as_oom().unwrap_or_else(|| panic!("config '{conf}': expected an out-of-memory, got {err}"));
        assert!(
            held_bytes + chunk > free_before.saturating_sub(GIB),
            "stopped early: {held_bytes} of {free_before} free"
        );
        assert_eq!(oom.device, "cuda:0");
        assert_eq!((oom.requested_bytes, oom.rounded_bytes), (chunk, chunk));
        assert_eq!(oom.total_bytes, total);
        assert!(oom.free_bytes < chunk, "the driver reported {} free for a {chunk}-byte request", oom.free_bytes);
        assert_eq!(oom.allocated_bytes, held_bytes);
        assert_eq!(oom.allowed_bytes, None);
        if conf.is_empty() {
            assert_eq!(oom.segment_bytes, chunk, "a request of 10 MiB or more gets a segment of its size");
            assert_eq!(oom.reserved_unallocated_bytes, 0, "nothing was cached");
        }
        let msg = err.to_string();
        assert!(msg.starts_with("vramlab: cuda:0 out of memory. Tried to allocate "), "{msg}");
        assert!(msg.contains("is reserved by vramlab but unallocated"), "{msg}");
        let stats = d.memory_stats();
        assert_eq!(stats.num_ooms, 1);
        assert_eq!(d.memory_allocated(), held_bytes);

        // A tensor that does not fit is the same error, through the tensor API.
        let big = Tensor::zeros(&[(chunk / 4) as usize], DType::F32, &d).unwrap_err();
        match big {
            TensorError::Alloc(e) => assert!(e.as_oom().is_some(), "{e}"),
            other => panic!("expected an allocator out-of-memory, got {other}"),
        }
        assert_eq!(d.memory_stats().num_ooms, 2);
        // What is left still works.
        if oom.free_bytes >= 64 * MIB {
            let small = Tensor::full(&[1 << 20], 3.0, DType::F32, &d).unwrap();
            assert_eq!(host(&small.sum().unwrap())[0], 3.0 * (1 << 20) as f64);
        }

        for a in held {
            d.allocator().free(a).unwrap();
        }
        assert_eq!(d.memory_allocated(), 0);
        assert!(d.memory_reserved() >= held_bytes, "freed blocks stay cached until empty_cache");
        d.empty_cache();
        assert_eq!(d.memory_reserved(), 0, "config '{conf}': empty_cache gives every segment back");
        let free_after = d.allocator().mem_info().free_bytes;
        assert!(
            free_after + 256 * MIB >= free_before,
            "config '{conf}': the driver has {free_after} bytes free after empty_cache, {free_before} before"
        );
    }
}
