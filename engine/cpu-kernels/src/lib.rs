//! CPU kernels: pure functions over slices, in f32, f16 and bf16.
//!
//! Everything here works on plain row-major slices and knows nothing about tensors,
//! devices or the allocator: the tensor layer validates its operands, takes the
//! buffers (workspaces included) from the device's caching allocator, and wraps each
//! call in a kernel event whose FLOP and byte counts come from [`KernelCall::cost`].
//!
//! # Conventions
//! - Every kernel returns [`Result`]: a slice whose length does not match the shape
//!   is a [`KernelError`], never a panic.
//! - Outputs are overwritten, never accumulated into (the autograd layer sums
//!   gradients itself).
//! - Kernels generic over [`Element`] compute in f32 and round once on store; f16 and
//!   bf16 values are widened in blocks with `half`'s vectorised slice conversions.
//!   Softmax, losses and reductions accumulate in f32 or f64 whatever the storage type.
//! - Ops with a choice of algorithm (matmul, conv2d) take the algorithm explicitly
//!   and a caller-provided f32 workspace of [`Algorithm::workspace_len`] elements, so
//!   that every scratch byte can come from the caching allocator tagged `workspace`.
//!   (The `gemm` crate's own packing buffers are thread-local and outside that count.)
//! - Large calls run on rayon's global pool. An algorithm is *reproducible* when the
//!   same inputs give bitwise-identical outputs on every run with the same thread
//!   count; see [`Algorithm::is_reproducible`].
//!
//! # Map
//! - [`element`]: the [`Element`] trait (f32, f16, bf16) and [`FloatDType`].
//! - [`matmul`](mod@matmul): (batched) matrix products through the `gemm` crate, three algorithms.
//! - [`conv`]: conv2d NCHW forward / backward-data / backward-weight, five algorithms.
//! - [`elementwise`], [`activation`], [`softmax`](mod@softmax), [`loss`], [`reduce`],
//!   [`cast`](mod@cast), [`pool`], [`optim`]: the rest of a training step.
//! - [`algorithm`]: the [`Algorithm`] trait, an op's algorithms as an autotuner sees them.
//! - [`cost`]: kernel names and FLOP / bytes-moved formulas for kernel events.
//!
//! # Files
//!
//! - `src/lib.rs` — the kernels' conventions, the map and the re-exports.
//! - `src/element.rs` — the `Element` trait (f32, f16, bf16) and `FloatDType`.
//! - `src/algorithm.rs` — the `Algorithm` trait (candidates, applicability, reproducibility, workspace,
//!   heuristic) and `AlgoInfo`.
//! - `src/cost.rs` — `KernelCall`: kernel names and FLOP / bytes-moved formulas for kernel events.
//! - `src/matmul.rs` — (batched) matrix products through the `gemm` crate, three algorithms.
//! - `src/conv.rs` — conv2d forward, backward-data and backward-weight, five algorithms.
//! - `src/elementwise.rs` — binary maps, scaling and the bias broadcast.
//! - `src/activation.rs` — ReLU and GELU with their backward.
//! - `src/softmax.rs` — softmax and log-softmax with their backward.
//! - `src/loss.rs` — cross-entropy and MSE with their backward.
//! - `src/reduce.rs` — sum, mean, the bias gradient and fill.
//! - `src/cast.rs` — casts between the float types.
//! - `src/pool.rs` — 2-D max-pool forward and backward.
//! - `src/optim.rs` — SGD and Adam steps.
//! - `src/error.rs` — `KernelError` and the length and workspace checks.
//! - `src/gemm_call.rs` — the one call into the `gemm` crate.
//! - `src/par.rs` — chunked parallel maps and the f16/bf16 staging.
//! - `tests/cpu_kernels.rs` — every kernel against a float64 reference, every algorithm against the others.
//! - `tests/common/mod.rs` — seeded inputs and error measures (shared with the runtime's GPU tests).
//! - `benches/kernels.rs` — matmul against the `gemm` crate, conv2d algorithms on ResNet-like shapes.

pub mod activation;
pub mod algorithm;
pub mod cast;
pub mod conv;
pub mod cost;
pub mod element;
pub mod elementwise;
mod error;
mod gemm_call;
pub mod loss;
pub mod matmul;
pub mod optim;
mod par;
pub mod pool;
pub mod reduce;
pub mod softmax;

pub use activation::{gelu, gelu_backward, relu, relu_backward};
pub use algorithm::{AlgoInfo, Algorithm};
pub use cast::cast;
pub use conv::{
    Conv2dShape, ConvAlgo, ConvPass, ConvProblem, conv2d_backward_data, conv2d_backward_weight, conv2d_forward,
};
pub use cost::{Cost, ElementwiseOp, KernelCall};
pub use element::{Element, FloatDType};
pub use elementwise::{add, add_bias, mul, mul_backward, scale};
pub use error::{KernelError, Result};
pub use loss::{cross_entropy, cross_entropy_backward, mse, mse_backward};
pub use matmul::{MatmulAlgo, MatmulShape, matmul};
pub use optim::{Adam, Sgd, adam_step, sgd_step};
pub use pool::{MaxPool2dShape, max_pool2d_backward, max_pool2d_forward};
pub use reduce::{bias_grad, fill, mean, sum};
pub use softmax::{log_softmax, log_softmax_backward, softmax, softmax_backward};
