//! Why a capture could not be made ([`CaptureError`]): refused, no torch, the
//! program failed, unsupported here, a bad GPU spec, a file that could not be handled.

/// Why a capture could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The program did something that needs real data or real kernels.
    #[error("refused ({kind}): {message}\n  at {file}:{line} ({op})")]
    Refused { kind: String, op: String, file: String, line: u32, message: String },
    /// The program's Python cannot import torch.
    #[error(
        "{python} cannot import torch: run the command with a Python that has torch \
         (the capture runs the user's own torch)"
    )]
    NoTorch { python: String },
    /// The program failed on its own (or on something the capture cannot run).
    #[error("the program exited with status {code}; no capture was kept. Its last words:\n{stderr_tail}")]
    ProgramFailed { code: i32, stderr_tail: String },
    /// The program could not be started.
    #[error("cannot run `{program}`: {source}")]
    Spawn { program: String, source: std::io::Error },
    /// This platform has no fake CUDA runtime.
    #[error("the capture runs on Linux only (it preloads a fake CUDA runtime); this is {os}")]
    Unsupported { os: &'static str },
    /// A bad `--gpu` spec.
    #[error("bad GPU spec `{spec}`: {reason}")]
    BadGpu { spec: String, reason: String },
    /// No command was given.
    #[error("no command to capture: give one after `--` (python train.py …)")]
    NoCommand,
    /// A file of the capture could not be written, read or removed.
    #[error("{what}: {source}")]
    Io { what: String, source: Box<dyn std::error::Error + Send + Sync> },
}

impl CaptureError {
    pub(super) fn io(what: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Io { what: what.into(), source: Box::new(source) }
    }
}
