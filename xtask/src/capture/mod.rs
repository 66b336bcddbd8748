//! `vramlab estimate`'s capture: runs a user's unmodified `python train.py …` with
//! no GPU and writes every request PyTorch's CUDA caching allocator would receive,
//! one raw capture pickle per process that used CUDA (a PyTorch snapshot with an
//! empty `segments`, the request stream as `device_traces[0]`, and a
//! `vramlab_estimate` record: torch, the assumed GPU, the modelled rules, timings).
//!
//! The child runs with two things on its paths, both written to a temporary folder
//! and removed after: `hook.py` as `sitecustomize.py` (it puts the program under
//! torch's FakeTensorMode, so CUDA tensors hold no data, and records the stream),
//! and the fake CUDA runtime (`fakecuda/fakecuda.rs`, built by `build.rs`) as
//! `LD_PRELOAD` and as `libcuda.so.1` on `LD_LIBRARY_PATH`. A program that needs
//! data the capture does not have (`.item()` on CUDA data, `nonzero`, CUDA graphs,
//! `torch.compile`) is refused: the hook writes `refused.json`, no capture, exit 2.
//!
//! - `gpu.rs` — [`AssumedGpu`]: presets and `PRESET,key=value` specs.
//! - `error.rs` — [`CaptureError`]: why a capture could not be made.

mod error;
mod gpu;

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

pub use error::CaptureError;
pub use gpu::AssumedGpu;

/// The Python hook, written as `sitecustomize.py` on the child's `PYTHONPATH`.
pub const HOOK: &str = concat!(include_str!("../sitecustomize_chain.py"), include_str!("hook.py"));

/// The fake CUDA runtime and driver, built by `build.rs` (Linux only).
#[cfg(vramlab_fakecuda)]
const FAKECUDA: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libvramlab_fakecuda.so"));

/// The exit status of a refused program (the hook's, and `vramlab estimate`'s).
pub const REFUSED_EXIT: i32 = 2;

/// What to capture and how.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// The program and its arguments (`python train.py --batch 64`).
    pub command: Vec<String>,
    /// Where the capture files (`capture-<pid>.pickle`) and `refused.json` go.
    pub out_dir: PathBuf,
    /// The GPU the fake runtime reports and the rules assume.
    pub gpu: AssumedGpu,
    /// Whether each request carries its Python stack (slower).
    pub stacks: bool,
    /// Extra environment for the child (`PYTORCH_CUDA_ALLOC_CONF`, …); a
    /// `PYTHONPATH`, `LD_PRELOAD` or `LD_LIBRARY_PATH` given here comes after the
    /// capture's own entry.
    pub env: Vec<(String, String)>,
}

/// A finished capture.
#[derive(Debug, Clone)]
pub struct Capture {
    /// One raw capture pickle per process that used CUDA, in creation order.
    pub files: Vec<PathBuf>,
    /// The program's exit status (0: a failed program is an error).
    pub exit_code: i32,
    /// Wall time of the whole run.
    pub wall: Duration,
}

/// How much of the program's stderr a failure keeps.
const STDERR_TAIL: usize = 4000;

/// Runs `opts.command` under the capture; waits for it. Its stdout and stderr
/// pass through (stderr's tail is kept for [`CaptureError::ProgramFailed`]).
pub fn capture(opts: &CaptureOptions) -> Result<Capture, CaptureError> {
    let lib = fakecuda()?;
    let program = opts.command.first().ok_or(CaptureError::NoCommand)?;
    vramlab_reports::prepare_out_dir(&opts.out_dir)
        .map_err(|e| CaptureError::io(format!("cannot write into {}", opts.out_dir.display()), e))?;
    let out = opts
        .out_dir
        .canonicalize()
        .map_err(|e| CaptureError::io(format!("cannot resolve {}", opts.out_dir.display()), e))?;
    let refused = out.join("refused.json");
    remove(&refused)?;
    let before = captures(&out);
    let tmp = hook_dir();
    let written = write_files(&tmp, lib);
    let started = Instant::now();
    let run = written.and_then(|()| run_child(opts, program, &out, &tmp));
    let _ = vramlab_reports::record::remove_hook_dir(&tmp);
    let (exit_code, stderr_tail) = run?;
    let wall = started.elapsed();
    let no_torch = vramlab_reports::record::take_no_torch_notes(&out);
    let files: Vec<PathBuf> = captures(&out).into_iter().filter(|p| !before.contains(p)).collect();
    if refused.exists() {
        for f in &files {
            remove(f)?;
        }
        return Err(read_refusal(&refused)?);
    }
    if (exit_code != 0 || files.is_empty())
        && let Some(python) = no_torch.into_iter().next()
    {
        return Err(CaptureError::NoTorch { python });
    }
    if exit_code != 0 {
        for f in &files {
            remove(f)?;
        }
        return Err(CaptureError::ProgramFailed { code: exit_code, stderr_tail });
    }
    Ok(Capture { files, exit_code, wall })
}

#[cfg(vramlab_fakecuda)]
fn fakecuda() -> Result<&'static [u8], CaptureError> {
    Ok(FAKECUDA)
}

#[cfg(not(vramlab_fakecuda))]
fn fakecuda() -> Result<&'static [u8], CaptureError> {
    Err(CaptureError::Unsupported { os: std::env::consts::OS })
}

fn remove(path: &Path) -> Result<(), CaptureError> {
    vramlab_reports::record::remove_if_present(path)
        .map_err(|e| CaptureError::io(format!("cannot remove {}", path.display()), e))
}

/// A temporary folder of its own for this capture's hook and library.
fn hook_dir() -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("vramlab-capture-{}-{n}", std::process::id()))
}

fn write_files(dir: &Path, lib: &[u8]) -> Result<(), CaptureError> {
    let err = |e| CaptureError::io(format!("cannot write the capture's hook into {}", dir.display()), e);
    vramlab_reports::record::write_hook(dir, "sitecustomize.py", HOOK).map_err(err)?;
    vramlab_reports::record::write_hook_bytes(dir, "libvramlab_fakecuda.so", lib).map_err(err)?;
    vramlab_reports::record::write_hook_bytes(dir, "libcuda.so.1", lib).map_err(err)?;
    Ok(())
}

/// The capture files in `dir` (`capture-<pid>.pickle`).
fn captures(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<(SystemTime, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("capture-") && n.ends_with(".pickle"))
        })
        .map(|p| (p.metadata().and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH), p))
        .collect();
    files.sort();
    files.into_iter().map(|(_, p)| p).collect()
}

/// `path` first, then what `var` already holds (the value `opts.env` gives it, or
/// this process's).
fn prepend(opts: &CaptureOptions, var: &str, path: &Path, sep: &str) -> String {
    let old = opts.env.iter().rev().find(|(k, _)| k == var).map(|(_, v)| v.clone()).or_else(|| std::env::var(var).ok());
    match old {
        Some(old) if !old.is_empty() => format!("{}{sep}{old}", path.display()),
        _ => path.display().to_string(),
    }
}

/// Runs the program; returns its exit status (128 + N for signal N) and the tail
/// of its stderr, which is passed through as it comes.
fn run_child(opts: &CaptureOptions, program: &str, out: &Path, tmp: &Path) -> Result<(i32, String), CaptureError> {
    let t0 = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs_f64();
    let mut cmd = Command::new(program);
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    cmd.args(&opts.command[1..])
        .env("PYTHONPATH", prepend(opts, "PYTHONPATH", tmp, ":"))
        .env("LD_PRELOAD", prepend(opts, "LD_PRELOAD", &tmp.join("libvramlab_fakecuda.so"), " "))
        .env("LD_LIBRARY_PATH", prepend(opts, "LD_LIBRARY_PATH", tmp, ":"))
        .env("VRAMLAB_CAPTURE_OUT", out)
        .env("VRAMLAB_CAPTURE_T0", format!("{t0:.6}"))
        .env("VRAMLAB_CAPTURE_STACKS", if opts.stacks { "1" } else { "0" })
        .env("VRAMLAB_FAKECUDA_GPU", opts.gpu.env_value())
        .env_remove("CUDA_VISIBLE_DEVICES")
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|source| CaptureError::Spawn { program: program.to_owned(), source })?;
    let mut tail = String::new();
    if let Some(stderr) = child.stderr.take() {
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
            let _ = std::io::stderr().write_all(&line);
            tail.push_str(&String::from_utf8_lossy(&line));
            if tail.len() > 2 * STDERR_TAIL {
                let cut = tail.len() - STDERR_TAIL;
                let cut = (cut..tail.len()).find(|&i| tail.is_char_boundary(i)).unwrap_or(cut);
                tail.drain(..cut);
            }
            line.clear();
        }
    }
    let status = child.wait().map_err(|e| CaptureError::io(format!("waiting for `{program}`"), e))?;
    let code = status.code().unwrap_or_else(|| signal_status(&status));
    if tail.len() > STDERR_TAIL {
        let cut = tail.len() - STDERR_TAIL;
        let cut = (cut..tail.len()).find(|&i| tail.is_char_boundary(i)).unwrap_or(cut);
        tail.drain(..cut);
    }
    Ok((code, tail.trim_end().to_owned()))
}

/// The hook's `refused.json` as [`CaptureError::Refused`].
fn read_refusal(path: &Path) -> Result<CaptureError, CaptureError> {
    #[derive(serde::Deserialize)]
    struct Refusal {
        kind: String,
        op: String,
        file: String,
        line: u32,
        message: String,
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| CaptureError::io(format!("cannot read {}", path.display()), e))?;
    let r: Refusal =
        serde_json::from_str(&text).map_err(|e| CaptureError::io(format!("cannot read {}", path.display()), e))?;
    Ok(CaptureError::Refused { kind: r.kind, op: r.op, file: r.file, line: r.line, message: r.message })
}

/// 128 + N for a program killed by signal N, as a shell gives it.
#[cfg(unix)]
fn signal_status(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    128 + status.signal().unwrap_or(0)
}

#[cfg(not(unix))]
fn signal_status(_: &std::process::ExitStatus) -> i32 {
    128
}
