//! vramlab's runtime: devices, tensors, the CUDA backend and the autotuner.
//!
//! A [`device::Device`] pairs a backend (the host, or a CUDA GPU found at run
//! time) with a caching allocator from `vramlab-allocator`; a [`tensor::Tensor`]
//! holds storage allocated from it; tensor ops check their operands and call
//! their device's backend (one trait over storage, `backend::Backend`), which
//! takes outputs from the allocator and runs the CPU kernels of
//! `vramlab-cpu-kernels` or the GPU's, reporting each kernel through the
//! allocator's [`hooks`].
//!
//! The allocator model and the CPU kernels are re-exported under the paths
//! users of the engine know ([`alloc`], [`hooks`], [`cpu_kernels`]);
//! training lives on top, in `vramlab-train`.
//!
//! # Files
//!
//! - `src/lib.rs` — the crate's map and the re-exports.
//! - `src/device.rs` — `Device` (identity, properties, its caching allocator), the registry and
//!   `cuda_probe`.
//! - `src/device_id.rs` — `DeviceKind`, `DeviceId` (parsed and printed as PyTorch writes them), `DeviceError`.
//! - `src/backend/mod.rs` — the `Backend` trait tensor ops dispatch through (one method per op over storage)
//!   and `KernelTiming`.
//! - `src/backend/cpu.rs` — `CpuBackend`: the CPU kernels on host slices.
//! - `src/backend/select.rs` — `Device::backend`: which backend a device's ops dispatch to.
//! - `src/storage.rs` — `Storage`, `Pod` and the calling thread's allocation tag.
//! - `src/dtype.rs` — `DType` and the `with_float!` dispatch.
//! - `src/error.rs` — `TensorError`.
//! - `src/transfer.rs` — copying storage between devices.
//! - `src/autotune.rs` — the autotuner: off, benchmark and deterministic modes, keys, the persisted cache,
//!   records.
//! - `src/cuda/mod.rs` — the CUDA backend's map and re-exports.
//! - `src/cuda/library.rs` — `CudaLib`: the libraries the backend loads, by name.
//! - `src/cuda/libs.rs` — finding and gating each library.
//! - `src/cuda/error.rs` — `CudaError`.
//! - `src/cuda/gpu.rs` — `Gpu`: one device's context, streams, compiled kernels and kernel timing; `probe`.
//! - `src/cuda/backend.rs` — `CudaBackend`: a `Gpu` with its cuBLAS and cuDNN handles.
//! - `src/cuda/memory.rs` — the `RawAllocator` on `cuMemAlloc`, with expandable segments and cross-stream
//!   events.
//! - `src/cuda/streams.rs` — numbered streams (0 default, 1 copies).
//! - `src/cuda/copy.rs` — queued copies and their stream events.
//! - `src/cuda/kernels.rs` — the kernel names of the CUDA C source and its NVRTC compilation.
//! - `src/cuda/ops.rs` — each op as a plan of launches; `Backend` for the GPU.
//! - `src/cuda/blas.rs` — the cuBLAS handle, its workspace and the row-major GEMM mapping.
//! - `src/cuda/matmul.rs` — the matmul op on cuBLAS and `clear_cublas_workspace`.
//! - `src/cuda/conv/mod.rs` — conv2d on CUDA: the pass (choose, measure, run, fall back).
//! - `src/cuda/conv/problem.rs` — the cuDNN TF32 switch and the problem's 32-bit sizes.
//! - `src/cuda/conv/im2col.rs` — im2col + cuBLAS: its kernels' source, chunking and step plans.
//! - `src/cuda/conv/cudnn.rs` — the cuDNN wrapper: handle, descriptors, algorithm and math enums, rank, find
//!   and run.
//! - `src/cuda/conv/algo.rs` — the candidates, cached rankings, `Find`'s workspace and the fallback order.
//! - `src/tensor/mod.rs` — the tensor module's map and the re-exports users name.
//! - `src/tensor/value.rs` — `Tensor`: shape, storage, constructors, accessors, moves between devices.
//! - `src/tensor/host.rs` — pageable and pinned `HostBuffer`s and their copies to and from tensors.
//! - `src/tensor/ops/mod.rs` — what the ops share: operand checks, in-place storage, `Conv2dOptions`.
//! - `src/tensor/ops/elementwise.rs` — binary and unary maps, the bias broadcast and its gradient, in-place
//!   updates.
//! - `src/tensor/ops/matmul.rs` — matmul.
//! - `src/tensor/ops/conv.rs` — conv2d.
//! - `src/tensor/ops/softmax.rs` — softmax and log-softmax.
//! - `src/tensor/ops/loss.rs` — cross-entropy and MSE.
//! - `src/tensor/ops/reduce.rs` — sum, mean, `item`, argmax.
//! - `src/tensor/ops/pool.rs` — max-pool.
//! - `src/tensor/ops/optim.rs` — `sgd_step_` and `adam_step_`.
//! - `src/tensor/ops/cast.rs` — `to_dtype`.
//! - `tests/tensor.rs` — ops, the golden rule, tags and events on host devices.
//! - `tests/cuda.rs` — every op on a GPU against the CPU backend (skips without one).
//! - `tests/cuda_kernels_compile.rs` — NVRTC compiles the kernels where found; every launch plan against the
//!   source.
//! - `tests/gpu/mod.rs` — the GPU tests' shared helpers.
//! - `benches/tensor.rs` — matmul and conv through tensors against the kernels and the `gemm` crate.
//! - `examples/devices.rs` — the guides' device snippet.
//! - `examples/golden_rule.rs` — the guides' golden-rule snippet.
//! - `examples/memory.rs` — the guides' memory snippet.
//! - `examples/gpu_figures.rs` — the GPU check's figures.
//! - `examples/common/mod.rs` — the examples' `--device` argument.

pub use vramlab_allocator as alloc;
pub use vramlab_allocator::hooks;
pub use vramlab_cpu_kernels as cpu_kernels;

pub mod autotune;
mod backend;
pub mod cuda;
pub mod device;
mod device_id;
mod dtype;
mod error;
mod storage;
pub mod tensor;
mod transfer;
