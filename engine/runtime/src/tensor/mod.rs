//! Tensors: a shape, a dtype, a device, and storage that comes from the
//! device's caching allocator (and goes back to it when the last reference
//! drops).
//!
//! Tensors are immutable values shared by reference counting, like candle's:
//! an op reads its operands and allocates its result. The guides' rules are the
//! API: every operand of an op must live on one device ([`TensorError::DeviceMismatch`]
//! otherwise — never a silent copy), `to(device)` moves, and reading values needs
//! host memory ([`Tensor::to_vec`] on a GPU tensor says to move it first).
//!
//! Every allocation carries a [`Tag`](crate::hooks::Tag): an op's output takes the innermost
//! [`tag_scope`] of the calling thread (untagged outside any scope), so the
//! profiler can tell parameters, gradients, activations and optimizer state apart.

mod host;
mod ops;
mod value;

pub use host::HostBuffer;
pub use ops::Conv2dOptions;
pub use value::{Tensor, same_values};

pub use crate::backend::KernelTiming;
pub use crate::dtype::DType;
pub use crate::error::{Result, TensorError};
pub use crate::storage::{Pod, TagScope, current_tag, tag_scope};
