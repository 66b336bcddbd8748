//! The kernels' error type.

/// Why a kernel refused to run. Carries the kernel's name and what was wrong, so the
/// tensor layer can pass it on unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// An operand's length does not match the shape the kernel was given.
    #[error("{op}: operand `{operand}` has {actual} elements but the shape needs {expected}")]
    LengthMismatch { op: &'static str, operand: &'static str, expected: usize, actual: usize },
    /// The shape itself is invalid (a zero kernel, an output smaller than one element, …).
    #[error("{op}: invalid shape: {reason}")]
    InvalidShape { op: &'static str, reason: String },
    /// The algorithm cannot compute this problem (Winograd on a 5×5 kernel, …).
    #[error("{op}: algorithm `{algo}` is not applicable: {reason}")]
    NotApplicable { op: &'static str, algo: &'static str, reason: String },
    /// The caller's workspace is smaller than [`crate::Algorithm::workspace_len`].
    #[error("{op}: algorithm `{algo}` needs a workspace of {required} f32 elements, got {actual}")]
    WorkspaceTooSmall { op: &'static str, algo: &'static str, required: usize, actual: usize },
    /// A hyper-parameter or step count the kernel cannot use (negative learning rate, step 0, …).
    #[error("{op}: invalid argument: {reason}")]
    InvalidArgument { op: &'static str, reason: String },
    /// A class label outside `0..classes`.
    #[error("{op}: label {label} of row {row} is outside 0..{classes}")]
    LabelOutOfRange { op: &'static str, row: usize, label: i64, classes: usize },
}

/// The kernels' result type.
pub type Result<T> = std::result::Result<T, KernelError>;

/// Checks that `operand` has exactly `expected` elements.
pub(crate) fn check_len(op: &'static str, operand: &'static str, actual: usize, expected: usize) -> Result<()> {
    if actual == expected { Ok(()) } else { Err(KernelError::LengthMismatch { op, operand, expected, actual }) }
}

/// Checks that a workspace is large enough.
pub(crate) fn check_workspace(op: &'static str, algo: &'static str, actual: usize, required: usize) -> Result<()> {
    if actual >= required { Ok(()) } else { Err(KernelError::WorkspaceTooSmall { op, algo, required, actual }) }
}

/// `a * b`, or an [`KernelError::InvalidShape`] when it overflows `usize`.
pub(crate) fn checked_product(op: &'static str, dims: &[usize]) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).ok_or_else(|| KernelError::InvalidShape {
        op,
        reason: format!("the element count of {dims:?} overflows usize"),
    })
}
