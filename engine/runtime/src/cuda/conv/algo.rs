//! Choosing a convolution algorithm on CUDA: the candidates (cuDNN's ranked
//! algorithms and im2col + cuBLAS) for a pass, dtype and mode, the cached
//! rankings, the workspace `Find` gets, and the order of fallbacks.

use super::cudnn::{AlgoPerf, DETERMINISTIC, Descriptors, Dnn, STATUS_SUCCESS, algo_names, run_math};
use super::im2col::IM2COL_CUBLAS;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::cpu_kernels::{self, ConvPass, ConvProblem};
use crate::cuda::error::CudaResult;
use crate::cuda::gpu::Gpu;

/// How one candidate computes the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Method {
    /// A cuDNN algorithm (its enum value) and the math type it runs with.
    Cudnn {
        algo: u32,
        math: u32,
    },
    Im2colCublas,
}

/// One algorithm the autotuner may pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Candidate {
    pub(super) method: Method,
    pub(super) name: &'static str,
    pub(super) reproducible: bool,
    /// Workspace cuDNN ranked it with (0 for im2col: sized separately).
    pub(super) workspace_bytes: usize,
}

/// The candidates for a pass: cuDNN's usable algorithms in its ranking's order
/// (each once, with the math type of its best-ranked entry), then im2col +
/// cuBLAS when `im2col` (its libraries are there). Without cuDNN (an empty
/// ranking) only im2col + cuBLAS. The heuristic's choice is the first.
pub(super) fn candidates(
    pass: ConvPass,
    ranking: &[AlgoPerf],
    dtype: cpu_kernels::FloatDType,
    tf32: bool,
    im2col: bool,
) -> Vec<Candidate> {
    let names = algo_names(pass);
    let mut out: Vec<Candidate> = Vec::new();
    for p in ranking {
        let Some(&name) = names.get(p.algo as usize) else { continue };
        if p.status != STATUS_SUCCESS || out.iter().any(|c| c.name == name) {
            continue;
        }
        out.push(Candidate {
            method: Method::Cudnn { algo: p.algo, math: run_math(dtype, tf32, p.math_type) },
            name,
            reproducible: p.determinism == DETERMINISTIC,
            workspace_bytes: p.memory,
        });
    }
    if im2col {
        out.push(Candidate {
            method: Method::Im2colCublas,
            name: IM2COL_CUBLAS,
            reproducible: true,
            workspace_bytes: 0,
        });
    }
    out
}

/// cuDNN's rankings, per device ordinal, problem, dtype and TF32 switch (what
/// PyTorch's algorithm cache holds in off mode): a ranking is asked for once.
pub(super) fn cached_ranking(
    gpu: &Gpu,
    dnn: &Dnn,
    problem: ConvProblem,
    dtype: cpu_kernels::FloatDType,
    tf32: bool,
    descs: &Descriptors,
) -> CudaResult<Vec<AlgoPerf>> {
    type Key = (u32, ConvProblem, cpu_kernels::FloatDType, bool);
    static RANKINGS: OnceLock<Mutex<HashMap<Key, Vec<AlgoPerf>>>> = OnceLock::new();
    let rankings = RANKINGS.get_or_init(Default::default);
    let key = (gpu.info().ordinal, problem, dtype, tf32);
    if let Some(r) = rankings.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(r.clone());
    }
    let ranking = dnn.ranking(problem.pass, descs)?;
    rankings.lock().unwrap_or_else(|e| e.into_inner()).insert(key, ranking.clone());
    Ok(ranking)
}

/// The workspace `cudnnFind*AlgorithmEx` gets (PyTorch's `getMaxWorkspaceSize`):
/// the largest that a candidate needs and that is no larger than the largest
/// block the device could hand out (`max_block`: free device memory, or the
/// largest cached free block if larger).
pub(super) fn find_workspace_bytes(candidates: &[Candidate], max_block: u64) -> usize {
    candidates
        .iter()
        .filter(|c| matches!(c.method, Method::Cudnn { .. }))
        .map(|c| c.workspace_bytes)
        .filter(|&b| b > 0 && b as u64 <= max_block)
        .max()
        .unwrap_or(0)
}

/// cuDNN's measured time of each candidate, from a `Find` result: the fastest
/// successful entry of the candidate's algorithm with its math type, else with
/// any math type. In candidates' order; no entry: an empty run list.
pub(super) fn found_runs(candidates: &[Candidate], found: &[AlgoPerf]) -> Vec<Vec<u64>> {
    let ok = |p: &&AlgoPerf| p.status == STATUS_SUCCESS && p.time_ms >= 0.0;
    candidates
        .iter()
        .map(|c| match c.method {
            Method::Cudnn { algo, math } => found
                .iter()
                .filter(ok)
                .find(|p| p.algo == algo && p.math_type == math)
                .or_else(|| found.iter().filter(ok).find(|p| p.algo == algo))
                .map(|p| vec![(f64::from(p.time_ms) * 1e6) as u64])
                .unwrap_or_default(),
            Method::Im2colCublas => Vec::new(),
        })
        .collect()
}

/// The order in which candidates are tried when a workspace does not fit: the
/// choice first, then the others in cuDNN's order (reproducible ones only in
/// deterministic mode).
pub(super) fn fallback_order(candidates: &[Candidate], chosen: usize, deterministic: bool) -> Vec<usize> {
    std::iter::once(chosen)
        .chain((0..candidates.len()).filter(|&i| i != chosen && (!deterministic || candidates[i].reproducible)))
        .collect()
}
