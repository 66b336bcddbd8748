//! What `vramlab estimate` and its `--search` share: the run's set-up
//! (`Setup`: the GPU assumed, the program's settings, the capacity) and a
//! capture made and read under it (`Captured`), the refusal's message and
//! exit status, the capture put under the program's settings, `whatif`'s
//! arguments for it, and the report's head lines.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use vramlab_display::format::fmt_bytes;
use vramlab_engine::alloc::AllocatorConfig;
use vramlab_reports::replay_doc::estimate_lines;
use vramlab_snapshot::{self as snapshot, AllocatorSettings, Estimate, Snapshot};

use crate::capture::{AssumedGpu, CaptureError, CaptureOptions, capture};
use crate::cli::{EstimateArgs, SnapshotWindow, WhatifArgs};
use crate::size::Size;

/// The exit status of a refused program (an op that cannot run without a GPU).
pub const REFUSED: u8 = crate::capture::REFUSED_EXIT as u8;

/// The name of the program's own settings in the tables.
pub(crate) const PROGRAMS: &str = "the program's";

/// What every capture of a run shares: the GPU assumed, the program's
/// settings and the capacity.
pub(crate) struct Setup {
    pub gpu: AssumedGpu,
    /// The program's allocator settings (`--alloc-conf`, else the environment's).
    pub config: AllocatorConfig,
    /// Where the settings came from, in words.
    pub config_from: &'static str,
    pub capacity_bytes: u64,
    /// `--capacity`, else the assumed GPU's memory.
    pub capacity_given: bool,
    captures: std::cell::Cell<u32>,
}

impl Setup {
    pub(crate) fn new(args: &EstimateArgs, gpu: AssumedGpu) -> Setup {
        let env = std::env::var("PYTORCH_CUDA_ALLOC_CONF").ok().filter(|s| !s.trim().is_empty());
        let (config, config_from) = match (&args.alloc_conf, env.as_deref().map(AllocatorConfig::parse)) {
            (Some(c), _) => (c.clone(), "--alloc-conf"),
            (None, Some(Ok(c))) => (c, "PYTORCH_CUDA_ALLOC_CONF"),
            _ => (AllocatorConfig::default(), "no --alloc-conf, none in the environment"),
        };
        let capacity_bytes = args.capacity.as_ref().map_or(gpu.total_memory, |c| c.bytes);
        Setup {
            gpu,
            config,
            config_from,
            capacity_bytes,
            capacity_given: args.capacity.is_some(),
            captures: std::cell::Cell::new(0),
        }
    }

    /// Captures `command` into a temporary folder and reads the capture of
    /// the process with the most requests. `Ok(Err(_))`: the program was refused.
    /// `stacks`: each request with its Python stack (who holds the peak).
    pub(crate) fn capture(&self, command: &[String], stacks: bool) -> anyhow::Result<Result<Captured, CaptureError>> {
        let n = self.captures.get();
        self.captures.set(n + 1);
        let dir = std::env::temp_dir().join(format!("vramlab-estimate-{}-{n}", std::process::id()));
        vramlab_reports::prepare_out_dir(&dir)
            .with_context(|| format!("cannot make the capture's folder {}", dir.display()))?;
        let mut env = Vec::new();
        if !self.config.to_string().is_empty() {
            env.push(("PYTORCH_CUDA_ALLOC_CONF".to_owned(), self.config.to_string()));
        }
        let opts =
            CaptureOptions { command: command.to_vec(), out_dir: dir.clone(), gpu: self.gpu.clone(), stacks, env };
        let result = stdout_to_stderr(|| capture(&opts));
        let read = result.map(|c| read_capture(&c.files, c.wall));
        let _ = vramlab_reports::record::remove_hook_dir(&dir);
        match read {
            Ok(captured) => captured.map(Ok),
            Err(e @ CaptureError::Refused { .. }) => Ok(Err(e)),
            Err(e) => Err(anyhow::Error::new(e).context(format!("cannot capture `{}`", command.join(" ")))),
        }
    }
}

/// Runs `f` with this process's stdout pointing at its stderr, so that the
/// program captured, which inherits them, writes its output to stderr: the
/// estimate's stdout is its report (or `--json`'s document) alone.
#[cfg(not(unix))]
fn stdout_to_stderr<T>(f: impl FnOnce() -> T) -> T {
    f()
}

#[cfg(unix)]
fn stdout_to_stderr<T>(f: impl FnOnce() -> T) -> T {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    // SAFETY: dup and dup2 on the process's own standard descriptors; the
    // saved descriptor is put back and closed before returning.
    let saved = unsafe { libc::dup(libc::STDOUT_FILENO) };
    if saved < 0 || unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) } < 0 {
        return f();
    }
    let out = f();
    // SAFETY: as above.
    unsafe {
        libc::dup2(saved, libc::STDOUT_FILENO);
        libc::close(saved);
    }
    out
}

/// A capture read: the snapshot of the process with the most requests.
pub(crate) struct Captured {
    pub snap: Snapshot,
    /// Processes that used CUDA (one capture file each).
    pub processes: usize,
    pub wall: Duration,
}

fn read_capture(files: &[PathBuf], wall: Duration) -> anyhow::Result<Captured> {
    let mut best: Option<Snapshot> = None;
    for f in files {
        let s = snapshot::read_snapshot_file(f).with_context(|| format!("cannot read the capture {}", f.display()))?;
        let len = |s: &Snapshot| s.device_traces.iter().map(Vec::len).sum::<usize>();
        if best.as_ref().is_none_or(|b| len(&s) > len(b)) {
            best = Some(s);
        }
    }
    let snap = best.context(
        "the program made no CUDA request (torch not imported, or it ran on the CPU only): nothing to estimate",
    )?;
    if snap.estimate.is_none() {
        anyhow::bail!("the capture has no vramlab_estimate marker: it was not written by this vramlab's capture");
    }
    Ok(Captured { snap, processes: files.len(), wall })
}

/// The message of a refusal, on stderr; the exit status.
pub(crate) fn refused(e: &CaptureError) -> u8 {
    crate::output::eprint_line(&format!("error: cannot estimate this program: {e}\nNothing was written."));
    REFUSED
}

/// The capture under the program's settings, marked with them.
pub(crate) fn with_settings(snap: &Snapshot, config: &AllocatorConfig) -> Snapshot {
    let mut s = snap.clone();
    s.allocator_settings = Some(AllocatorSettings::from_config(config));
    s
}

/// `whatif`'s arguments for the capture: the capacity and fraction, the sweep.
pub(crate) fn whatif_args(args: &EstimateArgs, setup: &Setup, sweep: bool) -> WhatifArgs {
    let capacity = Size { bytes: setup.capacity_bytes, text: fmt_bytes(setup.capacity_bytes), rounded_from: None };
    WhatifArgs {
        file: PathBuf::from("capture"),
        more: Vec::new(),
        capacity: Some(capacity),
        fraction: args.fraction,
        sweep,
        alloc_conf: Vec::new(),
        window: SnapshotWindow::default(),
        top: args.top,
        json: false,
        report: None,
    }
}

/// The command as typed.
pub(crate) fn shown(command: &[String]) -> String {
    crate::record_cmd::shell_words(command)
}

/// The lines of the estimate's head: what ran, what it assumed, the capture.
pub(crate) fn head_lines(command: &[String], e: &Estimate, setup: &Setup) -> String {
    let mut s = format!("vramlab estimate of `{}` (ESTIMATED: no GPU ran)\n", shown(command));
    // The first line: what it assumed (the rules are listed apart, below).
    for line in estimate_lines(e).into_iter().take(1) {
        let _ = writeln!(s, "  {line}");
    }
    let conf = setup.config.to_string();
    let conf = if conf.is_empty() { "PyTorch's defaults".to_owned() } else { conf };
    let _ = writeln!(s, "  allocator config   {conf} (from {})", setup.config_from);
    s
}
