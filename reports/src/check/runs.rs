//! The runs a comparison reads: a results file (one run) or a run set (several
//! runs of one build on one machine: a multi-run baseline, `bench --repeat N`'s
//! `runs.json`). Loading names the file and what is wrong with it; appending
//! refuses a run of another build or machine, because the runs of a set are
//! what the gate learns the noise between runs from; and how two machines
//! differ ([`environment_differences`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;
use vramlab_suites::{Environment, RunResults};

/// The newest results schema the check reads: this build's, and version 2
/// (which adds memory timelines) even before this build writes it. Fields it
/// does not know are ignored.
pub const MAX_SCHEMA_READ: u32 = if vramlab_suites::SCHEMA_VERSION > 2 { vramlab_suites::SCHEMA_VERSION } else { 2 };

/// The run-set file's format version (its first key, `vramlab_run_set`).
pub const RUN_SET_VERSION: u32 = 1;

/// The file `bench --repeat N` writes beside `results.json`: every run of the invocation.
pub const RUNS_JSON: &str = "runs.json";

/// Why a comparison could not be made (exit 2).
#[derive(Debug, Error)]
pub enum CheckError {
    #[error("{role} {path}: no such file — {}", missing_hint(role))]
    Missing { role: &'static str, path: PathBuf },
    #[error("{role} {path}: cannot be read: {source}")]
    Unreadable {
        role: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{role} {path}: not vramlab results, or corrupt or truncated ({reason}) — save the baseline again")]
    Corrupt { role: &'static str, path: PathBuf, reason: String },
    #[error("{role} {path}: incompatible: {reason}")]
    Incompatible { role: &'static str, path: PathBuf, reason: String },
}

fn missing_hint(role: &str) -> &'static str {
    if role == "baseline" {
        "save one with `cargo xtask bench --save-baseline NAME`, or name an existing results file"
    } else {
        "run `cargo xtask bench` first, or name an existing results file"
    }
}

/// Why a run cannot join a run set.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum AppendError {
    #[error(
        "the baseline's runs are of commit {had}, this run of commit {now}: a baseline's runs must be one build (they measure the noise between runs) — save a new baseline instead of appending"
    )]
    OtherCommit { had: String, now: String },
    #[error("the baseline's runs come from another machine ({0}) — save a new baseline instead of appending")]
    OtherMachine(String),
    #[error("the baseline's runs are {had} runs, this one is {now}: append runs of the same kind")]
    OtherKind { had: &'static str, now: &'static str },
}

/// Several runs of one build, oldest first (never empty).
#[derive(Debug, Clone, PartialEq)]
pub struct RunSet {
    runs: Vec<RunResults>,
}

/// The run-set file.
#[derive(Serialize, Deserialize)]
struct RunSetFile {
    /// First, so a reader tells a run set from a results file by its first key.
    vramlab_run_set: u32,
    runs: Vec<RunResults>,
}

impl RunSet {
    /// One run.
    pub fn one(run: RunResults) -> RunSet {
        RunSet { runs: vec![run] }
    }

    /// Several runs; None when `runs` is empty.
    pub fn new(runs: Vec<RunResults>) -> Option<RunSet> {
        (!runs.is_empty()).then_some(RunSet { runs })
    }

    pub fn runs(&self) -> &[RunResults] {
        &self.runs
    }

    /// The first run: its environment, options and memory figures stand for the set's.
    pub fn first(&self) -> &RunResults {
        &self.runs[0]
    }

    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Adds `run` when it is of the same build (commit), machine and kind
    /// (`--quick` or full) as the runs already here.
    pub fn append(&mut self, run: RunResults) -> Result<(), AppendError> {
        let first = self.first();
        if let (Some(had), Some(now)) = (&first.environment.git_commit, &run.environment.git_commit)
            && had != now
        {
            return Err(AppendError::OtherCommit { had: had.clone(), now: now.clone() });
        }
        let diff = environment_differences(&first.environment, &run.environment);
        if !diff.is_empty() {
            return Err(AppendError::OtherMachine(diff.join("; ")));
        }
        let kind = |quick: bool| if quick { "--quick" } else { "full" };
        if first.options.quick != run.options.quick {
            return Err(AppendError::OtherKind { had: kind(first.options.quick), now: kind(run.options.quick) });
        }
        self.runs.push(run);
        Ok(())
    }

    /// The set as a file: a results file for one run (so one-run baselines stay
    /// what they were), else the run-set format. Runs after the first leave out
    /// their memory timelines, category stacks and kernel slices (the check
    /// reads none of them; the first run keeps them for the report).
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        if self.runs.len() == 1 {
            return serde_json::to_vec_pretty(&self.runs[0]);
        }
        let mut runs = self.runs.clone();
        for r in runs.iter_mut().skip(1) {
            for s in &mut r.suites {
                for c in &mut s.cases {
                    c.timeline = None;
                    c.categories = None;
                    c.kernels.clear();
                }
            }
        }
        serde_json::to_vec_pretty(&RunSetFile { vramlab_run_set: RUN_SET_VERSION, runs })
    }
}

/// Reads a results file for comparison (`role`: "baseline" or "results", for
/// messages). Unknown fields are ignored, so a later schema that only adds
/// fields still compares.
pub fn load_results(path: &Path, role: &'static str) -> Result<RunResults, CheckError> {
    let set = load_runs(path, role)?;
    if set.len() > 1 {
        return Err(CheckError::Incompatible {
            role,
            path: path.into(),
            reason: format!("a run set of {} runs where one run was expected", set.len()),
        });
    }
    Ok(set.runs.into_iter().next().expect("a run set is never empty"))
}

/// Reads a results file (one run) or a run set (several).
pub fn load_runs(path: &Path, role: &'static str) -> Result<RunSet, CheckError> {
    let bytes = std::fs::read(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            CheckError::Missing { role, path: path.to_path_buf() }
        } else {
            CheckError::Unreadable { role, path: path.to_path_buf(), source }
        }
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(CheckError::Corrupt { role, path: path.into(), reason: "the file is empty".into() });
    }
    let corrupt = |e: serde_json::Error| CheckError::Corrupt { role, path: path.into(), reason: e.to_string() };
    let runs = if is_run_set(&bytes) {
        let file: RunSetFile = serde_json::from_slice(&bytes).map_err(corrupt)?;
        if file.vramlab_run_set == 0 || file.vramlab_run_set > RUN_SET_VERSION {
            return Err(CheckError::Incompatible {
                role,
                path: path.into(),
                reason: format!(
                    "run-set format version {}; this build reads version {RUN_SET_VERSION} — update vramlab",
                    file.vramlab_run_set
                ),
            });
        }
        if file.runs.is_empty() {
            return Err(CheckError::Corrupt { role, path: path.into(), reason: "a run set with no runs".into() });
        }
        file.runs
    } else {
        vec![serde_json::from_slice::<RunResults>(&bytes).map_err(corrupt)?]
    };
    for (i, run) in runs.iter().enumerate() {
        if run.schema_version == 0 || run.schema_version > MAX_SCHEMA_READ {
            return Err(CheckError::Incompatible {
                role,
                path: path.into(),
                reason: format!(
                    "{}results schema version {}; this build compares versions 1 to {MAX_SCHEMA_READ} — update vramlab, or save the baseline again with this build",
                    if runs.len() > 1 { format!("run {}: ", i + 1) } else { String::new() },
                    run.schema_version
                ),
            });
        }
    }
    Ok(RunSet { runs })
}

/// Does the JSON object start with the run-set key?
fn is_run_set(bytes: &[u8]) -> bool {
    let head: Vec<u8> = bytes.iter().take(256).copied().filter(|b| !b.is_ascii_whitespace()).collect();
    head.starts_with(b"{\"vramlab_run_set\"")
}

/// How two machines differ in what makes times incomparable: processor model,
/// core count, GPUs, the device the suites ran on, the operating system.
pub fn environment_differences(old: &Environment, new: &Environment) -> Vec<String> {
    let mut d = Vec::new();
    let mut diff = |what: &str, a: String, b: String| {
        if a != b {
            d.push(format!("{what}: {a} (baseline) vs {b} (this run)"));
        }
    };
    diff("CPU model", old.cpu_model.clone(), new.cpu_model.clone());
    diff("CPU cores", old.cpu_cores.to_string(), new.cpu_cores.to_string());
    let gpus = |e: &Environment| {
        if e.gpus.is_empty() {
            "none".to_owned()
        } else {
            e.gpus.iter().map(|g| g.name.as_str()).collect::<Vec<_>>().join(", ")
        }
    };
    diff("GPUs", gpus(old), gpus(new));
    diff("device", old.device.clone(), new.device.clone());
    diff("OS", old.os.clone(), new.os.clone());
    d
}
