//! The CUDA kernels (`engine/runtime/src/cuda/kernels.cu`): they compile with NVRTC
//! for Ampere and Hopper without a warning and define every kernel the backend
//! launches (needs NVRTC, not a GPU); and on a GPU, the ops built on them give
//! the CPU's results — bit for bit where the formulas allow it.
//!
//! Without NVRTC or a GPU the tests say `skipped: …` and pass. With NVRTC in a
//! folder of its own: `VRAMLAB_CUDA_LIBRARY_PATH=/that/folder cargo test -p
//! vramlab-engine --test cuda_kernels_compile -- --nocapture`.

use vramlab_engine::cpu_kernels::{Adam, Sgd};
use vramlab_engine::cuda::{CudaLib, kernels};
use vramlab_engine::device::{Device, DeviceId};
use vramlab_engine::hooks::{Event, EventLog, global};
use vramlab_engine::tensor::{DType, Tensor};

#[test]
fn kernels_compile_with_nvrtc_for_ampere_and_hopper() {
    if let Err(e) = CudaLib::Nvrtc.require() {
        println!("skipped: NVRTC not found ({e})");
        return;
    }
    let wanted = kernels::all_names();
    for arch in ["compute_80", "compute_90"] {
        let (ptx, log) = kernels::compile_with_log(arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert!(log.trim().is_empty(), "{arch}: NVRTC says:\n{log}");
        let ptx = ptx.to_src();
        let entries = kernels::ptx_entries(&ptx);
        let missing: Vec<_> = wanted.iter().filter(|n| !entries.iter().any(|e| e == *n)).collect();
        assert!(missing.is_empty(), "{arch}: launched but not in the PTX: {missing:?}");
        assert_eq!(entries.len(), wanted.len(), "{arch}: kernels nobody launches: {entries:?}");
        // `--fmad=false`: the elementwise kernels and the optimizers fuse nothing.
        for name in ["add_f32", "mul_bf16", "scale_f16", "sgd_step", "adam_step", "mse_backward"] {
            let body = entry_body(&ptx, name);
            assert!(!body.contains("fma."), "{arch}: {name} fuses a multiply-add");
        }
        println!("{arch}: {} kernels, {} bytes of PTX", entries.len(), ptx.len());
    }
}

/// The PTX of one kernel, from its `.entry` to the next.
fn entry_body<'a>(ptx: &'a str, name: &str) -> &'a str {
    let start = ptx.find(&format!(".entry {name}(")).unwrap_or_else(|| panic!("{name} not in the PTX"));
    let rest = &ptx[start + 1..];
    &rest[..rest.find(".entry ").unwrap_or(rest.len())]
}

/// cuda:0, or `None` after saying why there is none.
fn gpu() -> Option<Device> {
    match Device::get(DeviceId::cuda(0)) {
        Ok(d) => Some(d),
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            None
        }
    }
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to(&Device::cpu()).unwrap().to_f64_vec().unwrap()
}

/// Equal values, NaN equal to NaN, -0 unequal to 0.
fn assert_bitwise(what: &str, gpu: &Tensor, cpu: &Tensor) {
    assert_eq!(gpu.shape(), cpu.shape(), "{what}: shape");
    assert_eq!(gpu.dtype(), cpu.dtype(), "{what}: dtype");
    let (g, c) = (values(gpu), values(cpu));
    for (i, (a, b)) in g.iter().zip(&c).enumerate() {
        assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{what}[{i}]: gpu {a} cpu {b}");
    }
}

/// Within `ulps` units in the last place of the dtype (relative), or `abs`.
fn assert_close(what: &str, gpu: &Tensor, cpu: &Tensor, ulps: f64, abs: f64) {
    assert_eq!(gpu.shape(), cpu.shape(), "{what}: shape");
    let eps = match cpu.dtype() {
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        _ => 2f64.powi(-23),
    };
    let (g, c) = (values(gpu), values(cpu));
    for (i, (a, b)) in g.iter().zip(&c).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || (a - b).abs() <= abs.max(ulps * eps * b.abs());
        assert!(ok, "{what}[{i}]: gpu {a} cpu {b}");
    }
}

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

#[test]
fn elementwise_ops_give_the_cpus_bits() {
    let Some(g) = gpu() else { return };
    let cpu = Device::cpu();
    for dtype in FLOATS {
        // Odd sizes, so grid-stride loops end mid-block.
        let a = Tensor::randn(&[37, 6, 7], dtype, 1, &cpu).unwrap();
        let b = Tensor::randn(&[37, 6, 7], dtype, 2, &cpu).unwrap();
        let bias = Tensor::randn(&[6], dtype, 3, &cpu).unwrap();
        let (ga, gb, gbias) = (a.to(&g).unwrap(), b.to(&g).unwrap(), bias.to(&g).unwrap());
        let d = format!("{dtype}");
        assert_bitwise(&format!("add {d}"), &ga.add(&gb).unwrap(), &a.add(&b).unwrap());
        assert_bitwise(&format!("mul {d}"), &ga.mul(&gb).unwrap(), &a.mul(&b).unwrap());
        assert_bitwise(&format!("relu {d}"), &ga.relu().unwrap(), &a.relu().unwrap());
        assert_bitwise(&format!("relu_backward {d}"), &ga.relu_backward(&gb).unwrap(), &a.relu_backward(&b).unwrap());
        assert_bitwise(&format!("scale {d}"), &ga.scale(-0.3).unwrap(), &a.scale(-0.3).unwrap());
        assert_bitwise(&format!("add_bias {d}"), &ga.add_bias(&gbias).unwrap(), &a.add_bias(&bias).unwrap());
        // expf: 2 ulp on the GPU, libm's on the CPU; one storage rounding apart at most.
        assert_close(&format!("gelu {d}"), &ga.gelu().unwrap(), &a.gelu().unwrap(), 4.0, 1e-6);
        let (gg, cg) = (ga.gelu_backward(&gb).unwrap(), a.gelu_backward(&b).unwrap());
        assert_close(&format!("gelu_backward {d}"), &gg, &cg, 4.0, 1e-6);

        let (mut gy, mut cy) = (ga.scale(1.0).unwrap(), a.scale(1.0).unwrap());
        gy.add_(&gb).unwrap();
        cy.add_(&b).unwrap();
        assert_bitwise(&format!("add_ {d}"), &gy, &cy);
        gy.scale_(0.7).unwrap();
        cy.scale_(0.7).unwrap();
        assert_bitwise(&format!("scale_ {d}"), &gy, &cy);
        gy.add_bias_(&gbias).unwrap();
        cy.add_bias_(&bias).unwrap();
        assert_bitwise(&format!("add_bias_ {d}"), &gy, &cy);
        assert!(!gy.unscale_and_check_(0.25).unwrap());
        assert!(!cy.unscale_and_check_(0.25).unwrap());
        assert_bitwise(&format!("unscale {d}"), &gy, &cy);
        gy.fill_(0.1).unwrap();
        cy.fill_(0.1).unwrap();
        assert_bitwise(&format!("fill_ {d}"), &gy, &cy);

        let x = Tensor::randn(&[3, 4, 9, 7], dtype, 4, &cpu).unwrap();
        let gx = x.to(&g).unwrap();
        let (y, idx) = x.max_pool2d(3, 2).unwrap();
        let (gyp, gidx) = gx.max_pool2d(3, 2).unwrap();
        assert_bitwise(&format!("max_pool2d {d}"), &gyp, &y);
        assert_bitwise(&format!("max_pool2d indices {d}"), &gidx, &idx);
        // Overlapping windows: input gradients sum several outputs.
        let back = Tensor::max_pool2d_backward(&idx, &y, x.shape(), 3, 2).unwrap();
        let gback = Tensor::max_pool2d_backward(&gidx, &gyp, x.shape(), 3, 2).unwrap();
        assert_bitwise(&format!("max_pool2d_backward {d}"), &gback, &back);

        assert_bitwise(&format!("argmax {d}"), &ga.argmax().unwrap(), &a.argmax().unwrap());
        for to in [DType::F32, DType::F16, DType::BF16, DType::I64] {
            let scaled = a.scale(1000.0).unwrap();
            let gs = scaled.to(&g).unwrap();
            assert_bitwise(&format!("{d} to {to}"), &gs.to_dtype(to).unwrap(), &scaled.to_dtype(to).unwrap());
        }
    }
    let ints = Tensor::from_slice(&[0i64, -7, 65519, 65520, 1 << 40, i64::MIN, i64::MAX], &[7], &cpu).unwrap();
    let gints = ints.to(&g).unwrap();
    for to in FLOATS {
        let back = gints.to_dtype(to).unwrap();
        assert_bitwise(&format!("int64 to {to}"), &back, &ints.to_dtype(to).unwrap());
        assert_bitwise(
            &format!("{to} to int64"),
            &back.to_dtype(DType::I64).unwrap(),
            &ints.to_dtype(to).unwrap().to_dtype(DType::I64).unwrap(),
        );
    }
}

#[test]
fn special_values_and_nan_rules() {
    let Some(g) = gpu() else { return };
    let cpu = Device::cpu();
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let row = [1.0f32, nan, 3.0, 3.0, -inf, 0.0, -0.0, 1e30, -1e-40, 2.0];
    let x = Tensor::from_slice(&row, &[2, 5], &cpu).unwrap();
    for dtype in FLOATS {
        let xd = x.to_dtype(dtype).unwrap();
        let gx = xd.to(&g).unwrap();
        assert_bitwise(&format!("argmax {dtype}"), &gx.argmax().unwrap(), &xd.argmax().unwrap());
        assert_bitwise(&format!("relu {dtype}"), &gx.relu().unwrap(), &xd.relu().unwrap());
        assert_bitwise(
            &format!("to f32 {dtype}"),
            &gx.to_dtype(DType::F32).unwrap(),
            &xd.to_dtype(DType::F32).unwrap(),
        );
        let mut gy = gx.scale(1.0).unwrap();
        assert!(gy.unscale_and_check_(0.5).unwrap(), "{dtype}: inf and NaN are found");
    }
    // f32 to bf16 and f16: round to nearest even, overflow to inf, NaN kept.
    let edge = [65520.0f32, 65519.0, 3.4e38, 1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, 5.96e-8, 2.9e-8, nan, -nan, -0.0];
    let e = Tensor::from_slice(&edge, &[10], &cpu).unwrap();
    let ge = e.to(&g).unwrap();
    for to in [DType::F16, DType::BF16] {
        assert_bitwise(&format!("f32 edges to {to}"), &ge.to_dtype(to).unwrap(), &e.to_dtype(to).unwrap());
    }
}

#[test]
fn reductions_softmax_and_losses_match_the_cpu() {
    let Some(g) = gpu() else { return };
    let cpu = Device::cpu();
    for dtype in FLOATS {
        let a = Tensor::randn(&[33, 5, 70], dtype, 7, &cpu).unwrap();
        let b = Tensor::randn(&[33, 5, 70], dtype, 8, &cpu).unwrap();
        let (ga, gb) = (a.to(&g).unwrap(), b.to(&g).unwrap());
        let d = format!("{dtype}");
        // Sums in f64 on both sides: equal after rounding to f32, but for ties.
        assert_close(&format!("sum {d}"), &ga.sum().unwrap(), &a.sum().unwrap(), 0.0, 1e-9);
        assert_close(&format!("mean {d}"), &ga.mean().unwrap(), &a.mean().unwrap(), 0.0, 1e-9);
        assert_close(&format!("bias_grad {d}"), &ga.bias_grad().unwrap(), &a.bias_grad().unwrap(), 1.0, 1e-12);
        let wide = Tensor::randn(&[300, 257], dtype, 9, &cpu).unwrap();
        let gw = wide.to(&g).unwrap();
        assert_close(&format!("bias_grad rows {d}"), &gw.bias_grad().unwrap(), &wide.bias_grad().unwrap(), 1.0, 1e-12);
        for log in [false, true] {
            let (y, gyv) = if log {
                (a.log_softmax().unwrap(), ga.log_softmax().unwrap())
            } else {
                (a.softmax().unwrap(), ga.softmax().unwrap())
            };
            assert_close(&format!("softmax log={log} {d}"), &gyv, &y, 8.0, 1e-6);
            // Both backward passes read the CPU's forward output.
            let gy_cpu = y.to(&g).unwrap();
            let (back, gback) = if log {
                (y.log_softmax_backward(&b).unwrap(), gy_cpu.log_softmax_backward(&gb).unwrap())
            } else {
                (y.softmax_backward(&b).unwrap(), gy_cpu.softmax_backward(&gb).unwrap())
            };
            assert_close(&format!("softmax_backward log={log} {d}"), &gback, &back, 64.0, 1e-5);
        }
    }
    let logits = Tensor::randn(&[513, 10], DType::F32, 10, &cpu).unwrap().scale(4.0).unwrap();
    let labels: Vec<i64> = (0..513).map(|i| (i * 7 % 10) as i64).collect();
    let labels = Tensor::from_slice(&labels, &[513], &cpu).unwrap();
    let (gl, glab) = (logits.to(&g).unwrap(), labels.to(&g).unwrap());
    assert_close("cross_entropy", &gl.cross_entropy(&glab).unwrap(), &logits.cross_entropy(&labels).unwrap(), 4.0, 0.0);
    let (gce, ce) =
        (gl.cross_entropy_backward(&glab, 2.0).unwrap(), logits.cross_entropy_backward(&labels, 2.0).unwrap());
    assert_close("cross_entropy_backward", &gce, &ce, 8.0, 1e-8);
    let t = Tensor::randn(&[513, 10], DType::F32, 11, &cpu).unwrap();
    let gt = t.to(&g).unwrap();
    assert_close("mse", &gl.mse(&gt).unwrap(), &logits.mse(&t).unwrap(), 0.0, 1e-9);
    assert_bitwise("mse_backward", &gl.mse_backward(&gt, 0.5).unwrap(), &logits.mse_backward(&t, 0.5).unwrap());
    // A label outside the classes: the CPU refuses it, the GPU answers NaN.
    let bad = Tensor::from_slice(&[0i64, 10], &[2], &cpu).unwrap().to(&g).unwrap();
    let two = Tensor::zeros(&[2, 10], DType::F32, &cpu).unwrap().to(&g).unwrap();
    assert!(two.cross_entropy(&bad).unwrap().item().unwrap().is_nan());
    let grad = values(&two.cross_entropy_backward(&bad, 1.0).unwrap());
    assert!(grad[..10].iter().all(|v| v.is_finite()) && grad[10..].iter().all(|v| v.is_nan()));
    // Deterministic: the same sum twice, bit for bit.
    let big = Tensor::randn(&[3_000_017], DType::F32, 12, &cpu).unwrap().to(&g).unwrap();
    assert_eq!(big.sum().unwrap().item().unwrap().to_bits(), big.sum().unwrap().item().unwrap().to_bits());
}

#[test]
fn optimizers_give_the_cpus_bits() {
    let Some(g) = gpu() else { return };
    let cpu = Device::cpu();
    let p0 = Tensor::randn(&[1001], DType::F32, 1, &cpu).unwrap();
    let grads: Vec<Tensor> = (0..3).map(|s| Tensor::randn(&[1001], DType::F32, 10 + s, &cpu).unwrap()).collect();
    let sgds = [
        Sgd::new(0.1),
        Sgd { lr: 0.05, momentum: 0.9, dampening: 0.1, weight_decay: 1e-2, nesterov: false },
        Sgd { lr: 0.05, momentum: 0.9, dampening: 0.0, weight_decay: 1e-2, nesterov: true },
    ];
    for cfg in sgds {
        let (mut p, mut gp) = (p0.scale(1.0).unwrap(), p0.to(&g).unwrap().scale(1.0).unwrap());
        let mut m = Tensor::zeros(&[1001], DType::F32, &cpu).unwrap();
        let mut gm = m.to(&g).unwrap().scale(1.0).unwrap();
        for (step, grad) in grads.iter().enumerate() {
            let gg = grad.to(&g).unwrap();
            let step = step as u64 + 1;
            if cfg.momentum == 0.0 {
                p.sgd_step_(grad, None, &cfg, step).unwrap();
                gp.sgd_step_(&gg, None, &cfg, step).unwrap();
            } else {
                p.sgd_step_(grad, Some(&mut m), &cfg, step).unwrap();
                gp.sgd_step_(&gg, Some(&mut gm), &cfg, step).unwrap();
            }
        }
        assert_bitwise(&format!("sgd {cfg:?}"), &gp, &p);
        if cfg.momentum != 0.0 {
            assert_bitwise(&format!("sgd momentum {cfg:?}"), &gm, &m);
        }
    }
    for cfg in [
        Adam::new(1e-3),
        Adam { weight_decay: 0.1, ..Adam::new(1e-2) },
        Adam { weight_decay: 0.1, decoupled_weight_decay: true, ..Adam::new(1e-2) },
    ] {
        let (mut p, mut gp) = (p0.scale(1.0).unwrap(), p0.to(&g).unwrap().scale(1.0).unwrap());
        let zeros = Tensor::zeros(&[1001], DType::F32, &cpu).unwrap();
        let (mut m, mut v) = (zeros.scale(1.0).unwrap(), zeros.scale(1.0).unwrap());
        let (mut gm, mut gv) = (zeros.to(&g).unwrap(), zeros.to(&g).unwrap().scale(1.0).unwrap());
        for (step, grad) in grads.iter().enumerate() {
            let gg = grad.to(&g).unwrap();
            p.adam_step_(grad, &mut m, &mut v, &cfg, step as u64 + 1).unwrap();
            gp.adam_step_(&gg, &mut gm, &mut gv, &cfg, step as u64 + 1).unwrap();
        }
        assert_bitwise(&format!("adam {cfg:?}"), &gp, &p);
        assert_bitwise(&format!("adam exp_avg_sq {cfg:?}"), &gv, &v);
    }
}

#[test]
fn gpu_ops_keep_the_rules_and_report_device_time() {
    let Some(g) = gpu() else { return };
    let a = Tensor::randn(&[1 << 20], DType::F32, 1, &Device::cpu()).unwrap().to(&g).unwrap();
    // In place needs the only reference, on a GPU as on the CPU.
    let mut shared = a.clone();
    assert!(shared.scale_(2.0).unwrap_err().to_string().contains("only reference"));
    // The golden rule comes first.
    let host = Tensor::zeros(&[1 << 20], DType::F32, &Device::cpu()).unwrap();
    assert!(a.add(&host).unwrap_err().to_string().contains("different devices"));
    let log = EventLog::new();
    let id = global().subscribe(log.clone());
    let y = a.relu().unwrap();
    g.cuda().expect("a CUDA device has a backend").synchronize().unwrap();
    global().unsubscribe(id);
    drop(y);
    let relu = log
        .events()
        .into_iter()
        .find_map(|e| match e {
            // Other tests run relu too: this one is the 4 MiB tensor's.
            Event::Kernel(k) if k.name == "relu" && k.bytes == 8 << 20 => Some(k),
            _ => None,
        })
        .expect("a kernel event for relu");
    assert_eq!(relu.algorithm, "cuda");
    assert!(relu.duration_ns > 0 && relu.flops == 1 << 20, "{relu:?}");
}
