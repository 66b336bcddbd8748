//! vramlab's training layer, on the runtime (`vramlab-engine`): layers, backward, losses, optimizers, `no_grad`,
//! autocast and `GradScaler`, data loading, and the training loop — the
//! guides' complete GPU-aware loop, running on the engine's tensors so every
//! byte and every kernel is observed.
//!
//! ```no_run
//! use vramlab_engine::device::Device;
//! use vramlab_train::{self as nn, DataLoader, Dataset, LoaderConfig, Module, Optimizer};
//!
//! # fn main() -> Result<(), nn::NnError> {
//! let device = Device::cpu();
//! let mut model = nn::mlp(&[784, 1024, 1024, 10], 0, &Device::cpu())?;
//! model.to(&device)?; // the model moves once
//! let mut opt = nn::Sgd::with_momentum(0.05, 0.9); // built after the move
//! let data = Dataset::images(2048, [1, 28, 28], 10, 0.5, 0)?;
//! let loader = DataLoader::new(&data, LoaderConfig::new(64))?;
//! for batch in loader.epoch(0, &device) {
//!     let batch = batch?; // each batch is copied to the device
//!     opt.zero_grad(&mut model, true)?;
//!     let logits = model.forward(&batch.x)?;
//!     let loss = nn::cross_entropy(&logits, &batch.y)?;
//!     loss.backward(&mut model)?;
//!     opt.step(&mut model)?;
//! }
//! let _eval = nn::no_grad(); // evaluation saves nothing for backward
//! # Ok(()) }
//! ```
//!
//! # Backward: explicit, per module
//!
//! There is no general tape of tensor ops. Each [`Module`] writes its own
//! backward and keeps what that backward needs in its own fields between the
//! forward and the backward; [`Sequential`] runs the backwards in reverse; a
//! [`Loss`] starts the chain. In effect the tape is the model's layer list,
//! recorded once when the model is built. Why:
//!
//! - **What is saved is exactly what backward needs**, written down per layer
//!   (table in [`layers`]), and it is visible in one place, which is the point
//!   of a memory profiler's training loop. `Linear` saves its input, not its
//!   output; `ReLU` saves its output, which is the next `Linear`'s saved input
//!   (one storage, shared); `MaxPool2d` saves its i64 indices. These are
//!   PyTorch's choices too, so the memory pictures match.
//! - **No per-op bookkeeping**: a tape allocates a node per op and walks a graph;
//!   here a training step is the kernels plus a few hundred nanoseconds of
//!   Rust, which keeps the framework's share of a step small (see the
//!   `train_step` bench).
//! - **Deterministic freeing**: backward `take`s each layer's saved tensors and
//!   drops them as soon as the layer's gradients are computed, and every
//!   intermediate gradient is dropped as soon as the previous layer has
//!   consumed it, so the allocator sees PyTorch's order of frees.
//!
//! The cost is generality: models are trees of modules (any `Module` can be
//! nested in a `Sequential`), not arbitrary tensor expressions, and a module
//! holds one pending forward at a time (a second grad-mode forward replaces
//! the first's saved tensors, where PyTorch would keep both graphs).
//!
//! # Grad mode and memory
//!
//! With grad mode on (the default), a forward saves what backward needs, so
//! the activations stay allocated until [`Loss::backward`] consumes them.
//! Under [`no_grad`] nothing is saved: `Sequential` drops each intermediate
//! as soon as the next layer returned, so an evaluation forward holds at most
//! a layer's input and output at once. The difference shows in
//! `max_memory_allocated` (see `tests/training.rs`).
//!
//! # Tags
//!
//! Every allocation is tagged for the profiler: parameters `parameter`
//! (layer constructors, `model.to`), gradients `gradient` (the first
//! backward after `zero_grad(set_to_none=true)`; later backwards add into
//! them in place), tensors saved for backward `activation`, optimizer state
//! `optimizer_state`, batches `input` (the [`DataLoader`]), everything else —
//! outputs nobody saves, activation gradients, casts, loss values —
//! `temporary`; kernel workspaces are `workspace` (the tensor layer). See
//! [`Module`] and [`Sequential::forward`] for how an output's tag is decided.
//!
//! # Mixed precision (autocast)
//!
//! [`autocast`]`(dtype)` (float16 or bfloat16) changes what the layers and
//! losses compute in, as PyTorch's autocast does; raw [`Tensor`](vramlab_engine::tensor::Tensor) ops always
//! run in their operands' dtype. The op lists, as PyTorch documents its own:
//!
//! | runs in the autocast dtype (inputs cast down) | runs in float32 (inputs cast up) | runs in the input's dtype |
//! |---|---|---|
//! | `Linear` (matmul `x·Wᵀ`, bias add) | [`cross_entropy`] (log-softmax inside) | `ReLU`, `GELU` |
//! | `Conv2d` (conv2d, bias add) | [`mse`] | `MaxPool2d` |
//! | | [`functional::softmax`], [`functional::log_softmax`] | `Flatten` |
//! | | [`functional::sum`], [`functional::mean`] (reductions) | |
//!
//! Master weights stay float32: a `Linear`/`Conv2d` casts its f32 weight and
//! bias to the autocast dtype at each forward. **Casted weights are not cached
//! across forwards**; within a step the casted weight is kept (tagged
//! `temporary`, PyTorch's autocast weight cache) only as long as backward
//! needs it — saved with the layer's input under grad mode, freed right after
//! the op under `no_grad`. The casted input is what the layer saves, so saved
//! activations are half the size of float32 ones. Backward follows the
//! forward's dtypes: gradients flow in the autocast dtype through the
//! autocast layers, a loss's input gradient is cast back to the logits'
//! dtype, and a parameter's gradient is computed in the autocast dtype and
//! cast to float32 into `.grad` (autograd's cast backward). Optimizers
//! update the float32 masters.
//!
//! [`GradScaler`] keeps float16 gradients from underflowing, with PyTorch's
//! defaults and update rule; its [`ScalerState`] (scale, growth tracker,
//! steps skipped and taken) is observable. bfloat16 has float32's range and
//! needs no scaler.
//!
//! # Map
//! - [`layers`]: `Linear`, `Conv2d`, `ReLU`, `GELU`, `MaxPool2d`, `Flatten`;
//!   [`Sequential`] and the [`Module`] trait; [`mlp`] and [`cnn`].
//! - [`Loss`]: [`cross_entropy`], [`mse`]; [`functional`]: autocast-aware
//!   softmax and reductions, accuracy.
//! - [`Optimizer`]: [`Sgd`], [`Adam`].
//! - [`no_grad`], [`autocast`], [`GradScaler`].
//! - [`Dataset`] (in-memory; synthetic regression, classification, images),
//!   [`DataLoader`] with worker threads ([`workers`]) and per-sample
//!   transforms ([`transform`]: [`Augment`]).
//! - [`Trainer`]: the loop, with per-step loss, accuracy and timings.
//!
//! # Files
//!
//! - `src/lib.rs` — the map and the design of backward.
//! - `src/error.rs` — `NnError` and `Result`.
//! - `src/module.rs` — `Module` and `Sequential`.
//! - `src/layers.rs` — `Linear`, `Conv2d`, `MaxPool2d`, `Flatten` and the `Activation` module (`ReLU`,
//!   `GELU`).
//! - `src/parameter.rs` — `Parameter`: a tensor and its gradient, each under its tag.
//! - `src/models.rs` — `mlp` and `cnn`.
//! - `src/loss.rs` — `Loss`: cross-entropy and MSE.
//! - `src/functional.rs` — autocast-aware softmax, reductions and accuracy.
//! - `src/optim.rs` — `Optimizer`: SGD and Adam.
//! - `src/mode.rs` — `no_grad` and `autocast`.
//! - `src/scaler.rs` — `GradScaler`.
//! - `src/dataset.rs` — `Dataset`, `Targets` and the synthetic sets.
//! - `src/data.rs` — the `DataLoader`: its epoch iterator, pinned staging pool and `data_wait` phases.
//! - `src/workers.rs` — the loader's worker threads.
//! - `src/transform.rs` — `SampleTransform` and `Augment`.
//! - `src/train.rs` — `Trainer`.
//! - `tests/training.rs` — accuracy, mixed precision, the scaler, memory, tags and gradient checks.
//! - `tests/loader.rs` — the loader's workers, errors, shutdown, `data_wait` events and memory.
//! - `tests/cuda_training.rs` — training on a GPU against the CPU (skips without one).
//! - `benches/train_step.rs` — a training step and its share outside kernels.
//! - `benches/input_pipeline.rs` — loader overhead, workers on an input-bound epoch.
//! - `examples/train.rs` — a small model trained end to end, with `--device`.

pub mod data;
mod dataset;
mod error;
pub mod functional;
pub mod layers;
mod loss;
mod mode;
mod models;
mod module;
mod optim;
mod parameter;
mod scaler;
mod train;
pub mod transform;
pub mod workers;

pub use data::{Batch, Batches, DataLoader, Dataset, LoaderConfig, LoaderMemory, Targets};
pub use error::{NnError, Result};
pub use layers::{Conv2d, Flatten, GELU, Linear, MaxPool2d, ReLU};
pub use loss::{Loss, LossFn, cross_entropy, mse};
pub use mode::{
    AutocastGuard, GradModeGuard, autocast, autocast_dtype, enable_grad, is_grad_enabled, no_grad, set_autocast,
    set_grad_enabled,
};
pub use models::{CnnConfig, cnn, mlp};
pub use module::{Module, Sequential};
pub use optim::{Adam, AdamConfig, Optimizer, Sgd, SgdConfig};
pub use parameter::Parameter;
pub use scaler::{GradScaler, GradScalerConfig, ScalerState};
pub use train::{EpochReport, EvalReport, KernelClock, KernelTimer, StepRecord, Trainer};
pub use transform::{Augment, SampleTransform};
pub use workers::LiveWorkers;
