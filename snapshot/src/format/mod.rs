//! The snapshot FORMAT: the typed model of a PyTorch memory snapshot, the
//! streaming pickle reader and the import from its values, and the writers.
//! Nothing here knows of the replay or the analyses; they build on it.

pub(crate) mod error;
pub(crate) mod estimate;
mod estimate_import;
pub(crate) mod export;
pub(crate) mod fields;
pub(crate) mod heap;
pub(crate) mod import;
pub(crate) mod model;
pub mod pickle;
pub(crate) mod stream;
pub(crate) mod value;
