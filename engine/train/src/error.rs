//! `NnError`, why a training operation failed, and the crate's `Result`.

use thiserror::Error;
use vramlab_engine::tensor::{DType, TensorError};

/// Why a training operation failed.
#[derive(Debug, Error)]
pub enum NnError {
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// Backward without a grad-mode forward since the last backward.
    #[error(
        "{module}: backward called without a saved forward — run the forward with grad enabled (not under no_grad) \
         before each backward; a backward consumes what its forward saved"
    )]
    NoSavedForward { module: String },
    #[error("autocast runs in float16 or bfloat16, not {dtype}")]
    AutocastDType { dtype: DType },
    /// A bad argument or shape, named by what received it.
    #[error("{what}: {reason}")]
    Invalid { what: &'static str, reason: String },
    /// Loading (gathering or transforming) a sample failed or panicked.
    #[error(
        "DataLoader: loading sample {sample} failed{}: {reason} — fix the dataset or the transform for that sample",
        worker.map(|w| format!(" in worker {w}")).unwrap_or_default()
    )]
    LoadSample { sample: usize, worker: Option<usize>, reason: String },
    /// A loader worker thread could not start or went away.
    #[error("DataLoader worker {worker}: {reason}")]
    LoaderWorker { worker: usize, reason: String },
}

pub type Result<T> = std::result::Result<T, NnError>;
