//! The CPU backend: the kernels of `vramlab-cpu-kernels` on host slices of
//! the operands' storage, outputs and workspaces from the device's allocator,
//! the autotuner's choice where there is one, and one kernel event per
//! kernel call (algorithm `cpu`, `cpu_inplace` for in-place updates).

use half::{bf16, f16};

use super::{Backend, ChannelLayout, KernelTiming, Rows};
use crate::autotune;
use crate::cpu_kernels::{
    self as k, Algorithm, Conv2dShape, ConvAlgo, ConvPass, ConvProblem, Element, ElementwiseOp, KernelCall, MatmulAlgo,
    MatmulShape, MaxPool2dShape,
};
use crate::device::Device;
use crate::dtype::{DType, with_float};
use crate::error::{Result, TensorError};
use crate::hooks::{Event, KernelEvent, Tag, now_ns};
use crate::storage::{Pod, Storage, current_tag};

/// The host's backend (every host device shares it; it holds nothing).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CpuBackend;

/// Sends a kernel event to the device's hub when anybody listens.
fn emit_kernel(device: &Device, name: &'static str, algorithm: &'static str, start_ns: u64, call: KernelCall) {
    let hooks = device.allocator().hooks();
    if hooks.is_active() {
        let duration_ns = now_ns().saturating_sub(start_ns);
        let cost = call.cost();
        hooks.emit(&Event::Kernel(KernelEvent {
            name,
            algorithm,
            device: device.id().event_index(),
            stream: 0,
            start_ns,
            duration_ns,
            launch_ns: duration_ns,
            flops: cost.flops,
            bytes: cost.bytes,
        }));
    }
}

/// The elements of host storage as `T`, with the tensor layer's error when
/// the dtype differs.
fn slice<'a, T: Pod>(op: &'static str, s: &'a Storage) -> Result<&'a [T]> {
    if T::DTYPE != s.dtype {
        return Err(TensorError::DTypeMismatch { op, lhs: s.dtype, rhs: T::DTYPE });
    }
    Ok(s.slice::<T>())
}

fn slice_mut<'a, T: Pod>(op: &'static str, s: &'a mut Storage) -> Result<&'a mut [T]> {
    if T::DTYPE != s.dtype {
        return Err(TensorError::DTypeMismatch { op, lhs: s.dtype, rhs: T::DTYPE });
    }
    Ok(s.slice_mut::<T>())
}

/// A scratch buffer of f32 from the device's allocator, tagged `workspace`.
fn workspace(device: &Device, len: usize) -> Result<Storage> {
    Storage::new(device, len, DType::F32, Some(Tag::Workspace))
}

/// New storage of `len` `T`s on `device` (the current tag) that `fill` writes.
fn output<T: Pod>(
    device: &Device,
    len: usize,
    fill: impl FnOnce(&mut [T]) -> std::result::Result<(), k::KernelError>,
) -> Result<Storage> {
    let mut s = Storage::new(device, len, T::DTYPE, current_tag())?;
    fill(s.slice_mut::<T>())?;
    Ok(s)
}

/// One value as new storage.
fn scalar<T: Pod>(device: &Device, value: T) -> Result<Storage> {
    output::<T>(device, 1, |s| {
        s[0] = value;
        Ok(())
    })
}

/// Runs an elementwise kernel producing one output like `like`.
fn elementwise<T: Pod + Element>(
    kind: ElementwiseOp,
    like: &Storage,
    f: impl FnOnce(&mut [T]) -> std::result::Result<(), k::KernelError>,
) -> Result<Storage> {
    let start = now_ns();
    let out = output::<T>(&like.device, like.len, f)?;
    let dtype = like.dtype.float().expect("float op");
    let call = KernelCall::Elementwise { op: kind, len: like.len, channels: 0, dtype };
    emit_kernel(&like.device, kind.name(), "cpu", start, call);
    Ok(out)
}

/// Reports an in-place elementwise update of `len` elements.
fn emit_inplace(
    device: &Device,
    name: &'static str,
    kind: ElementwiseOp,
    len: usize,
    channels: usize,
    d: DType,
    start: u64,
) {
    let call = KernelCall::Elementwise { op: kind, len, channels, dtype: d.float().expect("float") };
    emit_kernel(device, name, "cpu_inplace", start, call);
}

impl Backend for CpuBackend {
    fn binary(&self, op: &'static str, kind: ElementwiseOp, a: &Storage, b: &Storage) -> Result<Storage> {
        with_float!(a.dtype, op, |T| {
            let (x, y) = (slice::<T>(op, a)?, slice::<T>(op, b)?);
            elementwise::<T>(kind, a, |out| match kind {
                ElementwiseOp::Add => k::add(x, y, out),
                ElementwiseOp::Mul => k::mul(x, y, out),
                ElementwiseOp::ReluBackward => k::relu_backward(x, y, out),
                _ => k::gelu_backward(x, y, out),
            })
        })
    }

    fn unary(&self, op: &'static str, kind: ElementwiseOp, x: &Storage, alpha: f32) -> Result<Storage> {
        with_float!(x.dtype, op, |T| {
            let v = slice::<T>(op, x)?;
            elementwise::<T>(kind, x, |y| match kind {
                ElementwiseOp::Scale => k::scale(v, alpha, y),
                ElementwiseOp::Relu => k::relu(v, y),
                _ => k::gelu(v, y),
            })
        })
    }

    fn add_inplace(&self, op: &'static str, y: &mut Storage, x: &Storage) -> Result<()> {
        let (len, device, dtype) = (y.len, y.device.clone(), y.dtype);
        with_float!(dtype, op, |T| {
            let start = now_ns();
            zip_inplace(slice_mut::<T>(op, y)?, slice::<T>(op, x)?, |a, b| a + b);
            emit_inplace(&device, "add", ElementwiseOp::Add, len, 0, dtype, start);
            Ok(())
        })
    }

    fn scale_inplace(&self, op: &'static str, y: &mut Storage, alpha: f32) -> Result<()> {
        let (len, device, dtype) = (y.len, y.device.clone(), y.dtype);
        with_float!(dtype, op, |T| {
            let start = now_ns();
            map_inplace(slice_mut::<T>(op, y)?, |v| alpha * v);
            emit_inplace(&device, "scale", ElementwiseOp::Scale, len, 0, dtype, start);
            Ok(())
        })
    }

    fn fill(&self, op: &'static str, y: &mut Storage, value: f64) -> Result<()> {
        let (len, device, dtype) = (y.len, y.device.clone(), y.dtype);
        with_float!(dtype, op, |T| {
            let start = now_ns();
            let v = <T as Element>::from_f64(value);
            let y = slice_mut::<T>(op, y)?;
            if y.len() >= INPLACE_PAR_THRESHOLD {
                use rayon::prelude::*;
                y.par_chunks_mut(INPLACE_CHUNK).for_each(|c| c.fill(v));
            } else {
                y.fill(v);
            }
            emit_inplace(&device, "fill", ElementwiseOp::Fill, len, 0, dtype, start);
            Ok(())
        })
    }

    fn unscale(&self, op: &'static str, y: &mut Storage, inv_scale: f32) -> Result<bool> {
        let (len, device, dtype) = (y.len, y.device.clone(), y.dtype);
        with_float!(dtype, op, |T| {
            let start = now_ns();
            let y = slice_mut::<T>(op, y)?;
            let chunk = |c: &mut [T]| -> bool {
                let mut found = false;
                match T::as_f32_mut(c) {
                    Some(cf) => cf.iter_mut().for_each(|v| {
                        found |= !v.is_finite();
                        *v *= inv_scale;
                    }),
                    None => c.iter_mut().for_each(|v| {
                        let f = v.to_f32();
                        found |= !f.is_finite();
                        *v = T::from_f32(f * inv_scale);
                    }),
                }
                found
            };
            let found = if y.len() >= INPLACE_PAR_THRESHOLD {
                use rayon::prelude::*;
                y.par_chunks_mut(INPLACE_CHUNK).map(chunk).reduce(|| false, |a, b| a || b)
            } else {
                chunk(y)
            };
            emit_inplace(&device, op, ElementwiseOp::Scale, len, 0, dtype, start);
            Ok(found)
        })
    }

    fn add_bias(&self, op: &'static str, x: &Storage, bias: &Storage, layout: ChannelLayout) -> Result<Storage> {
        let (outer, channels, inner) = layout;
        with_float!(x.dtype, op, |T| {
            let (v, b) = (slice::<T>(op, x)?, slice::<T>(op, bias)?);
            let start = now_ns();
            let out = output::<T>(&x.device, x.len, |y| k::add_bias(v, b, outer, channels, inner, y))?;
            let dtype = x.dtype.float().expect("float");
            let call = KernelCall::Elementwise { op: ElementwiseOp::AddBias, len: x.len, channels, dtype };
            emit_kernel(&x.device, op, "cpu", start, call);
            Ok(out)
        })
    }

    fn add_bias_inplace(
        &self,
        op: &'static str,
        y: &mut Storage,
        bias: &Storage,
        (_, channels, inner): ChannelLayout,
    ) -> Result<()> {
        let (len, device, dtype) = (y.len, y.device.clone(), y.dtype);
        with_float!(dtype, op, |T| {
            let start = now_ns();
            let b = slice::<T>(op, bias)?;
            add_bias_inplace(slice_mut::<T>(op, y)?, b, channels, inner);
            emit_inplace(&device, "add_bias", ElementwiseOp::AddBias, len, channels, dtype, start);
            Ok(())
        })
    }

    fn bias_grad(&self, op: &'static str, gy: &Storage, (outer, channels, inner): ChannelLayout) -> Result<Storage> {
        let dtype = gy.dtype;
        with_float!(dtype, op, |T| {
            let start = now_ns();
            let g = slice::<T>(op, gy)?;
            let out = output::<T>(&gy.device, channels, |gb| k::bias_grad(g, outer, channels, inner, gb))?;
            let call = KernelCall::BiasGrad { outer, channels, inner, dtype: dtype.float().expect("float") };
            emit_kernel(&gy.device, op, "cpu", start, call);
            Ok(out)
        })
    }

    fn reduce(&self, op: &'static str, x: &Storage, mean: bool) -> Result<Storage> {
        let dtype = x.dtype;
        let start = now_ns();
        let value = with_float!(dtype, op, |T| {
            let v = slice::<T>(op, x)?;
            if mean { k::mean(v) } else { k::sum(v) }
        });
        let d = dtype.float().expect("float");
        let call =
            if mean { KernelCall::Mean { len: x.len, dtype: d } } else { KernelCall::Sum { len: x.len, dtype: d } };
        emit_kernel(&x.device, op, "cpu", start, call);
        scalar::<f32>(&x.device, value)
    }

    fn argmax(&self, op: &'static str, x: &Storage, (rows, cols): Rows) -> Result<Storage> {
        let dtype = x.dtype;
        with_float!(dtype, op, |T| {
            let start = now_ns();
            let v = slice::<T>(op, x)?;
            let out = output::<i64>(&x.device, rows, |o| {
                for (o, row) in o.iter_mut().zip(v.chunks(cols)) {
                    let mut best = (0usize, row[0].to_f32());
                    for (j, v) in row.iter().enumerate().skip(1) {
                        let v = v.to_f32();
                        if best.1.is_nan() {
                            break;
                        }
                        if v > best.1 || v.is_nan() {
                            best = (j, v);
                        }
                    }
                    *o = best.0 as i64;
                }
                Ok(())
            })?;
            // One read of every element: the cost of a sum.
            let call = KernelCall::Sum { len: rows * cols, dtype: dtype.float().expect("float") };
            emit_kernel(&x.device, op, "cpu", start, call);
            Ok(out)
        })
    }

    fn softmax(&self, op: &'static str, x: &Storage, (rows, cols): Rows, log: bool) -> Result<Storage> {
        let dtype = x.dtype;
        with_float!(dtype, op, |T| {
            let start = now_ns();
            let v = slice::<T>(op, x)?;
            let out = output::<T>(&x.device, x.len, |y| {
                if log { k::log_softmax(v, rows, cols, y) } else { k::softmax(v, rows, cols, y) }
            })?;
            let call = KernelCall::Softmax { log, backward: false, rows, cols, dtype: dtype.float().expect("float") };
            emit_kernel(&x.device, op, "cpu", start, call);
            Ok(out)
        })
    }

    fn softmax_backward(
        &self,
        op: &'static str,
        y: &Storage,
        gy: &Storage,
        (rows, cols): Rows,
        log: bool,
    ) -> Result<Storage> {
        let dtype = y.dtype;
        with_float!(dtype, op, |T| {
            let start = now_ns();
            let (yv, g) = (slice::<T>(op, y)?, slice::<T>(op, gy)?);
            let out = output::<T>(&y.device, y.len, |gx| {
                if log {
                    k::log_softmax_backward(yv, g, rows, cols, gx)
                } else {
                    k::softmax_backward(yv, g, rows, cols, gx)
                }
            })?;
            let call = KernelCall::Softmax { log, backward: true, rows, cols, dtype: dtype.float().expect("float") };
            emit_kernel(&y.device, op, "cpu", start, call);
            Ok(out)
        })
    }

    fn mse(&self, op: &'static str, p: &Storage, t: &Storage) -> Result<Storage> {
        let start = now_ns();
        let loss = k::mse(slice::<f32>(op, p)?, slice::<f32>(op, t)?)?;
        emit_kernel(&p.device, op, "cpu", start, KernelCall::Mse { backward: false, len: p.len });
        scalar::<f32>(&p.device, loss)
    }

    fn mse_backward(&self, op: &'static str, p: &Storage, t: &Storage, grad_out: f32) -> Result<Storage> {
        let start = now_ns();
        let (pv, tv) = (slice::<f32>(op, p)?, slice::<f32>(op, t)?);
        let out = output::<f32>(&p.device, p.len, |g| k::mse_backward(pv, tv, grad_out, g))?;
        emit_kernel(&p.device, op, "cpu", start, KernelCall::Mse { backward: true, len: p.len });
        Ok(out)
    }

    fn cross_entropy(
        &self,
        op: &'static str,
        logits: &Storage,
        labels: &Storage,
        (rows, classes): Rows,
    ) -> Result<Storage> {
        let start = now_ns();
        let loss = k::cross_entropy(slice::<f32>(op, logits)?, slice::<i64>(op, labels)?, rows, classes)?;
        emit_kernel(&logits.device, op, "cpu", start, KernelCall::CrossEntropy { backward: false, rows, classes });
        scalar::<f32>(&logits.device, loss)
    }

    fn cross_entropy_backward(
        &self,
        op: &'static str,
        logits: &Storage,
        labels: &Storage,
        (rows, classes): Rows,
        grad_out: f32,
    ) -> Result<Storage> {
        let start = now_ns();
        let (x, l) = (slice::<f32>(op, logits)?, slice::<i64>(op, labels)?);
        let out =
            output::<f32>(&logits.device, logits.len, |g| k::cross_entropy_backward(x, l, rows, classes, grad_out, g))?;
        emit_kernel(&logits.device, op, "cpu", start, KernelCall::CrossEntropy { backward: true, rows, classes });
        Ok(out)
    }

    fn max_pool2d(&self, op: &'static str, x: &Storage, shape: MaxPool2dShape) -> Result<(Storage, Storage)> {
        let dtype = x.dtype;
        with_float!(dtype, op, |T| {
            let start = now_ns();
            let v = slice::<T>(op, x)?;
            let mut indices = output::<i64>(&x.device, shape.y_len(), |i| {
                i.fill(0);
                Ok(())
            })?;
            let idx = indices.slice_mut::<i64>();
            let y = output::<T>(&x.device, shape.y_len(), |y| k::max_pool2d_forward(shape, v, y, idx))?;
            let call = KernelCall::MaxPool2d { backward: false, shape, dtype: dtype.float().expect("float") };
            emit_kernel(&x.device, op, "cpu", start, call);
            Ok((y, indices))
        })
    }

    fn max_pool2d_backward(
        &self,
        op: &'static str,
        indices: &Storage,
        gy: &Storage,
        shape: MaxPool2dShape,
    ) -> Result<Storage> {
        let dtype = gy.dtype;
        with_float!(dtype, op, |T| {
            let start = now_ns();
            let (i, g) = (slice::<i64>(op, indices)?, slice::<T>(op, gy)?);
            let out = output::<T>(&gy.device, shape.x_len(), |gx| k::max_pool2d_backward(shape, i, g, gx))?;
            let call = KernelCall::MaxPool2d { backward: true, shape, dtype: dtype.float().expect("float") };
            emit_kernel(&gy.device, op, "cpu", start, call);
            Ok(out)
        })
    }

    fn cast(&self, op: &'static str, x: &Storage, dtype: DType) -> Result<Storage> {
        let (Some(from), Some(to)) = (x.dtype.float(), dtype.float()) else {
            return cast_int(x, dtype);
        };
        let start = now_ns();
        let out = with_float!(x.dtype, op, |S| {
            let src = slice::<S>(op, x)?;
            match dtype {
                DType::F32 => output::<f32>(&x.device, x.len, |d| k::cast(src, d))?,
                DType::F16 => output::<f16>(&x.device, x.len, |d| k::cast(src, d))?,
                DType::BF16 => output::<bf16>(&x.device, x.len, |d| k::cast(src, d))?,
                DType::I64 => unreachable!("handled by cast_int"),
            }
        });
        emit_kernel(&x.device, "cast", "cpu", start, KernelCall::Cast { len: x.len, from, to });
        Ok(out)
    }

    fn sgd_step(
        &self,
        op: &'static str,
        param: &mut Storage,
        grad: &Storage,
        momentum: Option<&mut Storage>,
        cfg: &k::Sgd,
        step: u64,
    ) -> Result<()> {
        let start = now_ns();
        let g = slice::<f32>(op, grad)?;
        let m = match momentum {
            Some(m) => slice_mut::<f32>(op, m)?,
            None => &mut [],
        };
        let (len, device) = (param.len, param.device.clone());
        k::sgd_step(cfg, step, slice_mut::<f32>(op, param)?, g, m)?;
        let call = KernelCall::Sgd {
            len,
            momentum: cfg.momentum != 0.0,
            weight_decay: cfg.weight_decay != 0.0,
            nesterov: cfg.nesterov,
        };
        emit_kernel(&device, op, "cpu", start, call);
        Ok(())
    }

    fn adam_step(
        &self,
        op: &'static str,
        param: &mut Storage,
        grad: &Storage,
        [exp_avg, exp_avg_sq]: [&mut Storage; 2],
        cfg: &k::Adam,
        step: u64,
    ) -> Result<()> {
        let start = now_ns();
        let g = slice::<f32>(op, grad)?;
        let (m, v) = (slice_mut::<f32>(op, exp_avg)?, slice_mut::<f32>(op, exp_avg_sq)?);
        let (len, device) = (param.len, param.device.clone());
        k::adam_step(cfg, step, slice_mut::<f32>(op, param)?, g, m, v)?;
        let call = KernelCall::Adam { len, weight_decay: cfg.weight_decay != 0.0 };
        emit_kernel(&device, op, "cpu", start, call);
        Ok(())
    }

    fn matmul(&self, a: &Storage, b: &Storage, shape: MatmulShape, _timed: bool) -> Result<(Storage, KernelTiming)> {
        const OP: &str = "matmul";
        let dtype = a.dtype.float().ok_or(TensorError::UnsupportedDType {
            op: OP,
            dtype: a.dtype,
            reason: "matmul needs a float dtype",
        })?;
        let device = &a.device;
        let out_len = shape.batch * shape.m * shape.n;
        with_float!(a.dtype, OP, |T| {
            let (av, bv) = (slice::<T>(OP, a)?, slice::<T>(OP, b)?);
            let run = |algo: MatmulAlgo, c: &mut [T]| -> Result<u64> {
                let mut ws = workspace(device, algo.workspace_len(&shape, dtype))?;
                let start = now_ns();
                k::matmul(algo, shape, av, bv, c, ws.slice_mut::<f32>())?;
                let took = now_ns().saturating_sub(start);
                emit_kernel(device, OP, algo.name(), start, KernelCall::Matmul { shape, dtype });
                Ok(took)
            };
            let algo = autotune::global().choose(device, &shape, dtype, |algo| {
                let mut scratch = tuning_scratch::<T>(device, out_len)?;
                run(algo, scratch.slice_mut::<T>())
            })?;
            let mut out = Storage::new(device, out_len, a.dtype, current_tag())?;
            let took = run(algo, out.slice_mut::<T>())?;
            Ok((out, KernelTiming { algorithm: algo.name(), duration_ns: took }))
        })
    }

    fn conv2d(
        &self,
        pass: ConvPass,
        shape: Conv2dShape,
        a: &Storage,
        b: &Storage,
        _timed: bool,
    ) -> Result<(Storage, KernelTiming)> {
        let op = pass.kernel_name();
        let dtype = a.dtype.float().ok_or(TensorError::UnsupportedDType {
            op,
            dtype: a.dtype,
            reason: "conv2d needs a float dtype",
        })?;
        let out_len = conv_out_len(pass, &shape);
        let device = &a.device;
        let problem = ConvProblem { pass, shape };
        with_float!(a.dtype, op, |T| {
            let (xa, xb) = (slice::<T>(op, a)?, slice::<T>(op, b)?);
            let run = |algo: ConvAlgo, out: &mut [T]| -> Result<u64> {
                let mut ws = workspace(device, algo.workspace_len(&problem, dtype))?;
                let w = ws.slice_mut::<f32>();
                let start = now_ns();
                match pass {
                    ConvPass::Forward => k::conv2d_forward(algo, shape, xa, xb, out, w)?,
                    ConvPass::BackwardData => k::conv2d_backward_data(algo, shape, xa, xb, out, w)?,
                    ConvPass::BackwardWeight => k::conv2d_backward_weight(algo, shape, xa, xb, out, w)?,
                }
                let took = now_ns().saturating_sub(start);
                emit_kernel(device, op, algo.name(), start, KernelCall::Conv2d { pass, shape, dtype });
                Ok(took)
            };
            let algo = autotune::global().choose(device, &problem, dtype, |algo| {
                let mut scratch = tuning_scratch::<T>(device, out_len)?;
                run(algo, scratch.slice_mut::<T>())
            })?;
            let mut out = Storage::new(device, out_len, a.dtype, current_tag())?;
            let took = run(algo, out.slice_mut::<T>())?;
            Ok((out, KernelTiming { algorithm: algo.name(), duration_ns: took }))
        })
    }
}

/// Elements of a conv pass's output: y forward, x backward-data, w backward-weight.
pub(crate) fn conv_out_len(pass: ConvPass, shape: &Conv2dShape) -> usize {
    match pass {
        ConvPass::Forward => shape.y_len(),
        ConvPass::BackwardData => shape.x_len(),
        ConvPass::BackwardWeight => shape.w_len(),
    }
}

/// `len` zeros, the scratch output of an autotuning run, tagged `workspace`
/// whatever the caller's tag: tuning happens once per shape in the process, so
/// counting its scratch as activations (the forward pass's tag) would make a
/// case's activation bytes depend on which case met the shape first.
fn tuning_scratch<T: Pod>(device: &Device, len: usize) -> Result<Storage> {
    let mut s = Storage::new(device, len, T::DTYPE, Some(Tag::Workspace))?;
    s.slice_mut::<T>().fill(T::default());
    Ok(s)
}

/// Casts to or from i64 (through f64, truncating toward zero like PyTorch).
fn cast_int(x: &Storage, dtype: DType) -> Result<Storage> {
    let values = x.to_f64_vec();
    let device = &x.device;
    fn from<T: Pod>(device: &Device, v: Vec<T>) -> Result<Storage> {
        output::<T>(device, v.len(), |s| {
            s.copy_from_slice(&v);
            Ok(())
        })
    }
    match dtype {
        DType::I64 => from(device, values.iter().map(|&v| v as i64).collect()),
        DType::F32 => from(device, values.iter().map(|&v| v as f32).collect()),
        // One rounding (`Element::from_f64`), as the CUDA kernels round.
        DType::F16 => from(device, values.iter().map(|&v| <f16 as Element>::from_f64(v)).collect()),
        DType::BF16 => from(device, values.iter().map(|&v| <bf16 as Element>::from_f64(v)).collect()),
    }
}

/// Elements per parallel task of the in-place loops below, and the length from
/// which they go parallel (the kernels' own thresholds).
const INPLACE_CHUNK: usize = 1 << 14;
const INPLACE_PAR_THRESHOLD: usize = 1 << 16;

/// `y[i] = f(y[i])` in place, computed in f32.
fn map_inplace<T: Element>(y: &mut [T], f: impl Fn(f32) -> f32 + Sync) {
    let serial = |c: &mut [T]| match T::as_f32_mut(c) {
        Some(cf) => cf.iter_mut().for_each(|v| *v = f(*v)),
        None => c.iter_mut().for_each(|v| *v = T::from_f32(f(v.to_f32()))),
    };
    if y.len() >= INPLACE_PAR_THRESHOLD {
        use rayon::prelude::*;
        y.par_chunks_mut(INPLACE_CHUNK).for_each(serial);
    } else {
        serial(y);
    }
}

/// `y[i] = f(y[i], x[i])` in place, computed in f32. Lengths already match.
fn zip_inplace<T: Element>(y: &mut [T], x: &[T], f: impl Fn(f32, f32) -> f32 + Sync) {
    let serial = |(c, xc): (&mut [T], &[T])| match (T::as_f32_mut(c), T::as_f32(xc)) {
        (Some(cf), Some(xf)) => cf.iter_mut().zip(xf).for_each(|(v, &w)| *v = f(*v, w)),
        _ => c.iter_mut().zip(xc).for_each(|(v, w)| *v = T::from_f32(f(v.to_f32(), w.to_f32()))),
    };
    if y.len() >= INPLACE_PAR_THRESHOLD {
        use rayon::prelude::*;
        y.par_chunks_mut(INPLACE_CHUNK).zip(x.par_chunks(INPLACE_CHUNK)).for_each(serial);
    } else {
        serial((y, x));
    }
}

/// `y[o, c, i] += bias[c]` in place over `[outer, channels, inner]`.
fn add_bias_inplace<T: Element>(y: &mut [T], bias: &[T], channels: usize, inner: usize) {
    if y.is_empty() || channels == 0 || inner == 0 {
        return;
    }
    let b: Vec<f32> = bias.iter().map(|v| v.to_f32()).collect();
    // Whole rows (inner = 1) or whole planes per task, so each task knows its channels.
    let unit = if inner == 1 { channels } else { inner };
    let units_per_task = (INPLACE_CHUNK / unit).max(1);
    let task = |(t, c): (usize, &mut [T])| {
        for (u, part) in c.chunks_mut(unit).enumerate() {
            if inner == 1 {
                match T::as_f32_mut(part) {
                    Some(pf) => pf.iter_mut().zip(&b).for_each(|(v, &bv)| *v += bv),
                    None => part.iter_mut().zip(&b).for_each(|(v, &bv)| *v = T::from_f32(v.to_f32() + bv)),
                }
            } else {
                let bv = b[(t * units_per_task + u) % channels];
                match T::as_f32_mut(part) {
                    Some(pf) => pf.iter_mut().for_each(|v| *v += bv),
                    None => part.iter_mut().for_each(|v| *v = T::from_f32(v.to_f32() + bv)),
                }
            }
        }
    };
    if y.len() >= INPLACE_PAR_THRESHOLD {
        use rayon::prelude::*;
        y.par_chunks_mut(units_per_task * unit).enumerate().for_each(task);
    } else {
        y.chunks_mut(units_per_task * unit).enumerate().for_each(task);
    }
}
