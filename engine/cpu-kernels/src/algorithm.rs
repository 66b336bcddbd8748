//! What an algorithm choice looks like to an autotuner.
//!
//! [`Algorithm`] is implemented by [`MatmulAlgo`](super::MatmulAlgo) and
//! [`ConvAlgo`](super::ConvAlgo), the two ops with
//! a choice: it lists the candidates and says, per problem, which apply, which are
//! reproducible, how much workspace each needs and what a fixed heuristic would pick.

use std::fmt::Debug;
use std::hash::Hash;

use serde::Serialize;

use super::element::FloatDType;

/// One algorithm as an autotuner reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct AlgoInfo {
    /// Stable name (`im2col_gemm`, `winograd_f2x3`, `gemm_rayon`, …).
    pub name: &'static str,
    /// Bitwise-identical results on every run with the same inputs and thread count.
    pub reproducible: bool,
    /// Workspace the caller must provide, in bytes.
    pub workspace_bytes: usize,
}

/// The algorithms of one op, for an autotuner (`cudnn.benchmark`-style) to choose from.
pub trait Algorithm: Copy + Eq + Hash + Debug + Send + Sync + 'static {
    /// What the choice depends on (shape and, for conv, the pass).
    type Problem: Debug;
    /// The op's name as kernel events spell it.
    const OP: &'static str;

    /// Every algorithm, in a stable order.
    fn all() -> &'static [Self];
    /// Stable name, used in kernel events and in the autotuner's cache.
    fn name(self) -> &'static str;
    /// Whether it can compute this problem at all.
    fn is_applicable(self, problem: &Self::Problem) -> bool;
    /// Whether the same inputs always give bitwise-identical outputs (same thread
    /// count). What `deterministic` mode filters on.
    fn is_reproducible(self, problem: &Self::Problem) -> bool;
    /// f32 elements of workspace the call needs for `dtype` operands. Algorithms that
    /// split work per thread size it for the current rayon pool.
    fn workspace_len(self, problem: &Self::Problem, dtype: FloatDType) -> usize;
    /// A fixed per-shape choice, what the autotuner's `off` mode uses. Always applicable.
    fn heuristic(problem: &Self::Problem) -> Self;

    /// Parses [`Algorithm::name`].
    fn from_name(name: &str) -> Option<Self> {
        Self::all().iter().copied().find(|a| a.name() == name)
    }
    /// The applicable algorithms, in [`Algorithm::all`]'s order.
    fn candidates(problem: &Self::Problem) -> Vec<Self> {
        Self::all().iter().copied().filter(|a| a.is_applicable(problem)).collect()
    }
    /// Name, reproducibility and workspace for this problem.
    fn info(self, problem: &Self::Problem, dtype: FloatDType) -> AlgoInfo {
        AlgoInfo {
            name: self.name(),
            reproducible: self.is_reproducible(problem),
            workspace_bytes: self.workspace_len(problem, dtype).saturating_mul(4),
        }
    }
}
