//! Tensors end to end: creation, the golden rule, moves, tags, memory through
//! the device's allocator, kernel events, the autotuner, host buffers.

use std::sync::Arc;

use vramlab_engine::alloc::AllocatorConfig;
use vramlab_engine::alloc::consts::MIB;
use vramlab_engine::autotune::{self, TuneMode};
use vramlab_engine::device::{Device, DeviceId, DeviceKind};
use vramlab_engine::hooks::{Event, EventLog, Hooks, Tag};
use vramlab_engine::tensor::{Conv2dOptions, DType, HostBuffer, Tensor, TensorError, tag_scope};

/// A private device so tests do not see each other's memory.
fn device(index: u32) -> (Device, Arc<Hooks>) {
    let hooks = Hooks::new();
    let id = DeviceId { kind: DeviceKind::Cpu, index };
    (Device::host(id, 256 * MIB, AllocatorConfig::default(), &hooks).unwrap(), hooks)
}

fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(g.is_finite() && (g - w).abs() <= tol * w.abs().max(1.0), "element {i}: {g} vs {w}");
    }
}

#[test]
fn creation_and_reading() {
    let (d, _) = device(10);
    let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &d).unwrap();
    assert_eq!(t.shape(), &[2, 3]);
    assert_eq!(t.dtype(), DType::F32);
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let z = Tensor::zeros(&[4], DType::BF16, &d).unwrap();
    assert_eq!(z.to_f64_vec().unwrap(), vec![0.0; 4]);
    let f = Tensor::full(&[3], 2.5, DType::F16, &d).unwrap();
    assert_eq!(f.to_f64_vec().unwrap(), vec![2.5; 3]);
    let a = Tensor::randn(&[1000], DType::F32, 7, &d).unwrap();
    let b = Tensor::randn(&[1000], DType::F32, 7, &d).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap(), "seeded");
    let v = a.to_f64_vec().unwrap();
    let mean = v.iter().sum::<f64>() / 1000.0;
    assert!(mean.abs() < 0.15, "standard normal mean {mean}");
    let u = Tensor::rand(&[1000], DType::F32, 3, &d).unwrap().to_f64_vec().unwrap();
    assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
    assert!(matches!(
        Tensor::from_slice(&[1.0f32], &[2], &d),
        Err(TensorError::DataLength { expected: 2, len: 1, .. })
    ));
    assert!(matches!(t.to_vec::<i64>(), Err(TensorError::DTypeMismatch { .. })));
}

#[test]
fn every_byte_comes_from_the_device_allocator_and_returns() {
    let (d, _) = device(11);
    assert_eq!(d.memory_allocated(), 0);
    let t = Tensor::zeros(&[1000], DType::F32, &d).unwrap();
    assert_eq!(d.memory_allocated(), 4096, "4000 bytes round to 4096");
    assert_eq!(t.allocated_bytes(), 4096);
    let view = t.reshape(&[10, 100]).unwrap();
    drop(t);
    assert_eq!(d.memory_allocated(), 4096, "a reshape shares the storage");
    drop(view);
    assert_eq!(d.memory_allocated(), 0);
    assert_eq!(d.memory_reserved(), 2 * MIB, "the segment stays cached");
    d.empty_cache();
    assert_eq!(d.memory_reserved(), 0);
}

#[test]
fn golden_rule_mismatch_is_an_error_naming_both_devices() {
    let (a_dev, _) = device(12);
    let (b_dev, _) = device(13);
    let a = ones(&a_dev);
    let b = ones(&b_dev);
    let before = b_dev.memory_allocated();
    let err = a.add(&b).unwrap_err();
    match &err {
        TensorError::DeviceMismatch { op, lhs, rhs } => {
            assert_eq!(*op, "add");
            assert_eq!(lhs.to_string(), "cpu:12");
            assert_eq!(rhs.to_string(), "cpu:13");
        }
        other => panic!("expected a device mismatch, got {other}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("move one of them with .to(&device)") && msg.contains("never copies silently"), "{msg}");
    assert_eq!(b_dev.memory_allocated(), before, "no silent copy happened");
    for result in [a.matmul(&b).map(|_| ()), a.mul(&b).map(|_| ()), a.mse(&b).map(|_| ())] {
        assert!(matches!(result, Err(TensorError::DeviceMismatch { .. })));
    }
    // The fix: move one operand.
    let b_here = b.to(&a_dev).unwrap();
    assert_eq!(b_here.device(), &a_dev);
    let sum = a.add(&b_here).unwrap();
    assert_eq!(sum.to_vec::<f32>().unwrap(), vec![2.0; 4]);
}

fn ones(d: &Device) -> Tensor {
    Tensor::full(&[2, 2], 1.0, DType::F32, d).unwrap()
}

#[test]
fn to_same_device_is_free_and_to_dtype_converts() {
    let (d, _) = device(14);
    let t = Tensor::from_slice(&[1.5f32, -2.25, 3.0], &[3], &d).unwrap();
    let allocated = d.memory_allocated();
    let same = t.to(&d).unwrap();
    assert_eq!(d.memory_allocated(), allocated, "no copy for the same device");
    assert_eq!(same.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
    for dtype in [DType::F16, DType::BF16] {
        let h = t.to_dtype(dtype).unwrap();
        assert_eq!(h.dtype(), dtype);
        assert_eq!(h.to_f64_vec().unwrap(), vec![1.5, -2.25, 3.0], "exactly representable");
        assert_eq!(h.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(), vec![1.5, -2.25, 3.0]);
    }
    let i = t.to_dtype(DType::I64).unwrap();
    assert_eq!(i.to_vec::<i64>().unwrap(), vec![1, -2, 3], "truncates toward zero");
}

#[test]
fn tags_follow_the_scope_into_allocator_events() {
    let (d, hooks) = device(15);
    let log = EventLog::new();
    hooks.subscribe(log.clone());
    let w = {
        let _p = tag_scope(Tag::Parameter);
        Tensor::randn(&[64, 64], DType::F32, 1, &d).unwrap()
    };
    assert_eq!(w.tag(), Some(Tag::Parameter));
    let x = {
        let _i = tag_scope(Tag::Input);
        Tensor::randn(&[8, 64], DType::F32, 2, &d).unwrap()
    };
    let y = {
        let _a = tag_scope(Tag::Activation);
        x.matmul(&w).unwrap()
    };
    assert_eq!(y.tag(), Some(Tag::Activation));
    let untagged = Tensor::zeros(&[1], DType::F32, &d).unwrap();
    assert_eq!(untagged.tag(), None);
    let tags: Vec<_> = log
        .allocator_events()
        .iter()
        .filter(|e| e.action == vramlab_engine::hooks::AllocatorAction::Alloc)
        .map(|e| e.tag)
        .collect();
    assert!(tags.contains(&Some(Tag::Parameter)) && tags.contains(&Some(Tag::Input)));
    assert!(tags.contains(&Some(Tag::Activation)));
}

#[test]
fn ops_compute_known_answers() {
    let (d, _) = device(16);
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], &d).unwrap();
    let b = Tensor::from_slice(&[5.0f32, 6.0, 7.0, 8.0], &[2, 2], &d).unwrap();
    assert_eq!(a.matmul(&b).unwrap().to_vec::<f32>().unwrap(), vec![19.0, 22.0, 43.0, 50.0]);
    assert_eq!(a.add(&b).unwrap().to_vec::<f32>().unwrap(), vec![6.0, 8.0, 10.0, 12.0]);
    assert_eq!(a.mul(&b).unwrap().to_vec::<f32>().unwrap(), vec![5.0, 12.0, 21.0, 32.0]);
    assert_eq!(a.scale(0.5).unwrap().to_vec::<f32>().unwrap(), vec![0.5, 1.0, 1.5, 2.0]);
    let n = Tensor::from_slice(&[-1.0f32, 0.5, -0.25, 2.0], &[2, 2], &d).unwrap();
    assert_eq!(n.relu().unwrap().to_vec::<f32>().unwrap(), vec![0.0, 0.5, 0.0, 2.0]);
    assert_eq!(a.sum().unwrap().item().unwrap(), 10.0);
    assert_eq!(a.mean().unwrap().item().unwrap(), 2.5);
    let sm = a.softmax().unwrap().to_f64_vec().unwrap();
    let e = 1f64.exp();
    assert_close(&sm, &[1.0 / (1.0 + e), e / (1.0 + e), 1.0 / (1.0 + e), e / (1.0 + e)], 1e-6);
    let labels = Tensor::from_slice(&[1i64, 0], &[2], &d).unwrap();
    let ce = a.cross_entropy(&labels).unwrap().item().unwrap();
    let want = ((1.0 + e).ln() - 1.0 + (1.0 + e).ln()) / 2.0;
    assert!((ce - want).abs() < 1e-6, "{ce} vs {want}");
    let mse = a.mse(&b).unwrap().item().unwrap();
    assert_eq!(mse, 16.0);
    // Batched matmul.
    let x = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 2.0], &[2, 2, 2], &d).unwrap();
    let y = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0], &[2, 2, 2], &d).unwrap();
    assert_eq!(x.matmul(&y).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 2.0, 4.0, 6.0, 8.0]);
    // Shape errors name the op and the shapes.
    let c = Tensor::zeros(&[3, 2], DType::F32, &d).unwrap();
    let err = a.matmul(&c).unwrap_err().to_string();
    assert!(err.contains("matmul") && err.contains("[2, 2]") && err.contains("[3, 2]"), "{err}");
    assert!(matches!(a.add(&c), Err(TensorError::ShapeMismatch { .. })));
    let h = a.to_dtype(DType::F16).unwrap();
    assert!(matches!(a.add(&h), Err(TensorError::DTypeMismatch { .. })));
}

#[test]
fn conv_and_pool_with_backward_shapes() {
    let (d, _) = device(17);
    let x = Tensor::randn(&[2, 3, 8, 8], DType::F32, 5, &d).unwrap();
    let w = Tensor::randn(&[4, 3, 3, 3], DType::F32, 6, &d).unwrap();
    let opts = Conv2dOptions::new(1, 1);
    let y = x.conv2d(&w, opts).unwrap();
    assert_eq!(y.shape(), &[2, 4, 8, 8]);
    let gx = Tensor::conv2d_backward_data(&w, &y, x.shape(), opts).unwrap();
    assert_eq!(gx.shape(), x.shape());
    let gw = Tensor::conv2d_backward_weight(&x, &y, w.shape(), opts).unwrap();
    assert_eq!(gw.shape(), w.shape());
    // <conv(x, w), y> = <x, conv_backward_data(w, y)>: the adjoint identity.
    let lhs: f64 = y.to_f64_vec().unwrap().iter().map(|v| v * v).sum();
    let rhs: f64 = x.to_f64_vec().unwrap().iter().zip(gx.to_f64_vec().unwrap()).map(|(a, b)| a * b).sum();
    assert!((lhs - rhs).abs() <= 1e-3 * lhs.abs(), "{lhs} vs {rhs}");
    let (p, idx) = y.max_pool2d(2, 2).unwrap();
    assert_eq!(p.shape(), &[2, 4, 4, 4]);
    assert_eq!(idx.dtype(), DType::I64);
    let gp = Tensor::max_pool2d_backward(&idx, &p, y.shape(), 2, 2).unwrap();
    assert_eq!(gp.shape(), y.shape());
    let bad = Tensor::zeros(&[2, 5, 8, 8], DType::F32, &d).unwrap();
    assert!(matches!(bad.conv2d(&w, opts), Err(TensorError::ShapeMismatch { .. })));
}

#[test]
fn kernel_events_report_name_algorithm_and_cost() {
    let (d, hooks) = device(18);
    let log = EventLog::new();
    let a = Tensor::randn(&[16, 32], DType::F32, 1, &d).unwrap();
    let b = Tensor::randn(&[32, 8], DType::F32, 2, &d).unwrap();
    hooks.subscribe(log.clone());
    let _ = a.matmul(&b).unwrap();
    let kernels: Vec<_> = log
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Kernel(k) => Some(k),
            _ => None,
        })
        .collect();
    let mm = kernels.iter().find(|k| k.name == "matmul").expect("a matmul kernel event");
    assert_eq!(mm.flops, 2 * 16 * 32 * 8);
    assert!(!mm.algorithm.is_empty());
    assert_eq!(mm.device, 18);
}

#[test]
fn autotuner_modes_choose_real_algorithms() {
    let (d, _) = device(19);
    let x = Tensor::randn(&[1, 4, 10, 10], DType::F32, 1, &d).unwrap();
    let w = Tensor::randn(&[4, 4, 3, 3], DType::F32, 2, &d).unwrap();
    let opts = Conv2dOptions::new(1, 1);
    let tuner = autotune::global();
    let (y_off, t_off) = x.conv2d_timed(&w, opts).unwrap();
    tuner.set_mode(TuneMode::Benchmark);
    let (y_bench, t_bench) = x.conv2d_timed(&w, opts).unwrap();
    let rec = tuner.records().into_iter().find(|r| r.op == "conv2d" && r.key.device.contains("cpu:19")).expect("tuned");
    assert!(rec.candidates.len() >= 3, "direct, im2col, winograd at least: {rec:?}");
    assert_eq!(rec.choice, t_bench.algorithm);
    tuner.set_mode(TuneMode::Deterministic);
    let (_, t_det) = x.conv2d_timed(&w, opts).unwrap();
    tuner.set_mode(TuneMode::Off);
    let same = y_off.to_f64_vec().unwrap();
    assert_close(&y_bench.to_f64_vec().unwrap(), &same, 1e-4);
    assert!(!t_off.algorithm.is_empty() && !t_det.algorithm.is_empty());
}

#[test]
fn host_buffers_round_trip() {
    let (d, hooks) = device(20);
    let log = EventLog::new();
    hooks.subscribe(log.clone());
    for pinned in [false, true] {
        let mut buf = if pinned { HostBuffer::pinned(64) } else { HostBuffer::pageable(64) };
        assert_eq!(buf.is_pinned(), pinned);
        buf.write(&[1.0f32, 2.0, 3.0]).unwrap();
        let t = Tensor::from_host(&buf, &[3], DType::F32, &d, pinned).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
        let mut back = HostBuffer::pageable(12);
        t.copy_to_host(&mut back, false).unwrap();
        assert_eq!(back.read::<f32>(3).unwrap(), vec![1.0, 2.0, 3.0]);
        assert!(Tensor::from_host(&buf, &[100], DType::F32, &d, false).is_err());
    }
    let copies = log.events().into_iter().filter(|e| matches!(e, Event::Copy(_))).count();
    assert_eq!(copies, 4);
}

#[test]
fn out_of_memory_is_a_typed_error() {
    let hooks = Hooks::new();
    let id = DeviceId { kind: DeviceKind::Cpu, index: 21 };
    let d = Device::host(id, 8 * MIB, AllocatorConfig::default(), &hooks).unwrap();
    let err = Tensor::zeros(&[4 * 1024 * 1024], DType::F32, &d).unwrap_err();
    match err {
        TensorError::Alloc(e) => assert!(e.as_oom().is_some(), "{e}"),
        other => panic!("expected an allocator OOM, got {other}"),
    }
}
