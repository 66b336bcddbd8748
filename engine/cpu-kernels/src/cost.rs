//! What a kernel call costs.
//!
//! [`KernelCall`] names every kernel in this module tree and gives its FLOP and
//! bytes-moved counts for one call, the numbers a kernel event reports.
//!
//! FLOP counts are *nominal*: a matmul or convolution counts `2·MACs` of the direct
//! algorithm whatever algorithm ran (Winograd does fewer multiplications), as cuDNN
//! and every TFLOPS figure do, so algorithms are compared on the same work. Byte
//! counts are the compulsory traffic: each operand read once and each result
//! written once, workspaces excluded (they are reported by the allocator).

use serde::{Deserialize, Serialize};

use super::conv::{Conv2dShape, ConvPass};
use super::element::FloatDType;
use super::matmul::MatmulShape;
use super::pool::MaxPool2dShape;

/// Work and traffic of one kernel call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Cost {
    /// Floating-point operations (nominal, see the module docs).
    pub flops: u64,
    /// Bytes read plus bytes written, each operand once.
    pub bytes: u64,
}

/// The element-by-element kernels, for [`KernelCall::Elementwise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ElementwiseOp {
    Add,
    Mul,
    /// Both operand gradients of a product.
    MulBackward,
    Scale,
    /// Per-channel bias broadcast over `[outer, channels, inner]`.
    AddBias,
    Relu,
    ReluBackward,
    Gelu,
    GeluBackward,
    Fill,
}

impl ElementwiseOp {
    /// The kernel's name.
    pub const fn name(self) -> &'static str {
        match self {
            ElementwiseOp::Add => "add",
            ElementwiseOp::Mul => "mul",
            ElementwiseOp::MulBackward => "mul_backward",
            ElementwiseOp::Scale => "scale",
            ElementwiseOp::AddBias => "add_bias",
            ElementwiseOp::Relu => "relu",
            ElementwiseOp::ReluBackward => "relu_backward",
            ElementwiseOp::Gelu => "gelu",
            ElementwiseOp::GeluBackward => "gelu_backward",
            ElementwiseOp::Fill => "fill",
        }
    }

    /// (FLOPs, operands read, results written) per element.
    const fn per_element(self) -> (u64, u64, u64) {
        match self {
            ElementwiseOp::Add | ElementwiseOp::Mul => (1, 2, 1),
            ElementwiseOp::MulBackward => (2, 3, 2),
            ElementwiseOp::Scale | ElementwiseOp::Relu => (1, 1, 1),
            ElementwiseOp::AddBias => (1, 1, 1),
            ElementwiseOp::ReluBackward => (1, 2, 1),
            // x³ (2), polynomial (2), exp, 1 + e, x / (1 + e), scaling: ~9 with exp as 1.
            ElementwiseOp::Gelu => (9, 1, 1),
            ElementwiseOp::GeluBackward => (18, 2, 1),
            ElementwiseOp::Fill => (0, 0, 1),
        }
    }
}

/// One call of one kernel, with what its cost depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kernel")]
#[non_exhaustive]
pub enum KernelCall {
    Matmul {
        shape: MatmulShape,
        dtype: FloatDType,
    },
    Conv2d {
        pass: ConvPass,
        shape: Conv2dShape,
        dtype: FloatDType,
    },
    MaxPool2d {
        backward: bool,
        shape: MaxPool2dShape,
        dtype: FloatDType,
    },
    /// `channels` matters only for [`ElementwiseOp::AddBias`] (the bias read).
    Elementwise {
        op: ElementwiseOp,
        len: usize,
        channels: usize,
        dtype: FloatDType,
    },
    Softmax {
        log: bool,
        backward: bool,
        rows: usize,
        cols: usize,
        dtype: FloatDType,
    },
    CrossEntropy {
        backward: bool,
        rows: usize,
        classes: usize,
    },
    Mse {
        backward: bool,
        len: usize,
    },
    Sum {
        len: usize,
        dtype: FloatDType,
    },
    Mean {
        len: usize,
        dtype: FloatDType,
    },
    BiasGrad {
        outer: usize,
        channels: usize,
        inner: usize,
        dtype: FloatDType,
    },
    Cast {
        from: FloatDType,
        to: FloatDType,
        len: usize,
    },
    Sgd {
        len: usize,
        momentum: bool,
        weight_decay: bool,
        nesterov: bool,
    },
    Adam {
        len: usize,
        weight_decay: bool,
    },
}

fn mul(xs: &[usize]) -> u64 {
    xs.iter().fold(1u64, |acc, &x| acc.saturating_mul(x as u64))
}

impl KernelCall {
    /// The kernel's name as kernel events spell it.
    pub const fn name(&self) -> &'static str {
        match self {
            KernelCall::Matmul { .. } => "matmul",
            KernelCall::Conv2d { pass, .. } => pass.kernel_name(),
            KernelCall::MaxPool2d { backward: false, .. } => "max_pool2d_forward",
            KernelCall::MaxPool2d { backward: true, .. } => "max_pool2d_backward",
            KernelCall::Elementwise { op, .. } => op.name(),
            KernelCall::Softmax { log: false, backward: false, .. } => "softmax",
            KernelCall::Softmax { log: false, backward: true, .. } => "softmax_backward",
            KernelCall::Softmax { log: true, backward: false, .. } => "log_softmax",
            KernelCall::Softmax { log: true, backward: true, .. } => "log_softmax_backward",
            KernelCall::CrossEntropy { backward: false, .. } => "cross_entropy",
            KernelCall::CrossEntropy { backward: true, .. } => "cross_entropy_backward",
            KernelCall::Mse { backward: false, .. } => "mse",
            KernelCall::Mse { backward: true, .. } => "mse_backward",
            KernelCall::Sum { .. } => "sum",
            KernelCall::Mean { .. } => "mean",
            KernelCall::BiasGrad { .. } => "bias_grad",
            KernelCall::Cast { .. } => "cast",
            KernelCall::Sgd { .. } => "sgd_step",
            KernelCall::Adam { .. } => "adam_step",
        }
    }

    /// FLOPs and bytes moved by this call.
    pub fn cost(&self) -> Cost {
        match *self {
            KernelCall::Matmul { shape: s, dtype } => Cost {
                flops: 2 * mul(&[s.batch, s.m, s.n, s.k]),
                bytes: (mul(&[s.m, s.k]) + mul(&[s.k, s.n]) + mul(&[s.m, s.n]))
                    .saturating_mul(mul(&[s.batch, dtype.size_bytes()])),
            },
            KernelCall::Conv2d { shape: s, dtype, .. } => {
                let macs = mul(&[s.n, s.k, s.c, s.r, s.s, s.out_h(), s.out_w()]);
                let elems = mul(&[s.x_len()]) + mul(&[s.w_len()]) + mul(&[s.y_len()]);
                Cost { flops: 2 * macs, bytes: elems.saturating_mul(dtype.size_bytes() as u64) }
            }
            KernelCall::MaxPool2d { backward, shape: s, dtype } => {
                let e = dtype.size_bytes() as u64;
                let (x, y) = (mul(&[s.x_len()]), mul(&[s.y_len()]));
                if backward {
                    Cost { flops: y, bytes: y * (e + 8) + x * e }
                } else {
                    Cost { flops: y * mul(&[s.kernel.0, s.kernel.1]), bytes: x * e + y * (e + 8) }
                }
            }
            KernelCall::Elementwise { op, len, channels, dtype } => {
                let (f, r, w) = op.per_element();
                let bias = if op == ElementwiseOp::AddBias { channels as u64 } else { 0 };
                Cost { flops: f * len as u64, bytes: ((r + w) * len as u64 + bias) * dtype.size_bytes() as u64 }
            }
            KernelCall::Softmax { log, backward, rows, cols, dtype } => {
                let n = mul(&[rows, cols]);
                let e = dtype.size_bytes() as u64;
                match (log, backward) {
                    (_, false) => Cost { flops: 5 * n, bytes: 2 * n * e },
                    (false, true) => Cost { flops: 4 * n, bytes: 3 * n * e },
                    (true, true) => Cost { flops: 4 * n, bytes: 3 * n * e },
                }
            }
            KernelCall::CrossEntropy { backward, rows, classes } => {
                let n = mul(&[rows, classes]);
                if backward {
                    Cost { flops: 6 * n, bytes: 8 * n + 8 * rows as u64 }
                } else {
                    Cost { flops: 4 * n, bytes: 4 * n + 8 * rows as u64 + 4 }
                }
            }
            KernelCall::Mse { backward, len } => {
                let n = len as u64;
                if backward { Cost { flops: 3 * n, bytes: 12 * n } } else { Cost { flops: 3 * n, bytes: 8 * n + 4 } }
            }
            KernelCall::Sum { len, dtype } | KernelCall::Mean { len, dtype } => {
                Cost { flops: len as u64, bytes: len as u64 * dtype.size_bytes() as u64 + 4 }
            }
            KernelCall::BiasGrad { outer, channels, inner, dtype } => {
                let n = mul(&[outer, channels, inner]);
                Cost { flops: n, bytes: n * dtype.size_bytes() as u64 + 4 * channels as u64 }
            }
            KernelCall::Cast { from, to, len } => {
                Cost { flops: 0, bytes: len as u64 * (from.size_bytes() + to.size_bytes()) as u64 }
            }
            KernelCall::Sgd { len, momentum, weight_decay, nesterov } => {
                let n = len as u64;
                let flops = 2 + 2 * u64::from(weight_decay) + 3 * u64::from(momentum) + 2 * u64::from(nesterov);
                // param read+write, grad read, momentum buffer read+write
                let bytes = 12 + 8 * u64::from(momentum);
                Cost { flops: flops * n, bytes: bytes * n }
            }
            KernelCall::Adam { len, weight_decay } => {
                let n = len as u64;
                // param r/w, grad r, exp_avg r/w, exp_avg_sq r/w
                Cost { flops: (16 + 2 * u64::from(weight_decay)) * n, bytes: 28 * n }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_and_conv_costs() {
        let c = KernelCall::Matmul { shape: MatmulShape::new(2, 3, 4), dtype: FloatDType::F32 }.cost();
        assert_eq!(c, Cost { flops: 48, bytes: (8 + 12 + 6) * 4 });
        let s = Conv2dShape::new(1, 2, 5, 5, 3, 3, 3).with_padding(1, 1);
        let c = KernelCall::Conv2d { pass: ConvPass::Forward, shape: s, dtype: FloatDType::F16 }.cost();
        assert_eq!(c.flops, 2 * 3 * 2 * 9 * 25);
        assert_eq!(c.bytes, (50 + 54 + 75) * 2);
        assert_eq!(
            KernelCall::Conv2d { pass: ConvPass::BackwardWeight, shape: s, dtype: FloatDType::F16 }.name(),
            "conv2d_backward_weight"
        );
        assert_eq!(
            KernelCall::Cast { from: FloatDType::F32, to: FloatDType::BF16, len: 10 }.cost(),
            Cost { flops: 0, bytes: 60 }
        );
    }
}
