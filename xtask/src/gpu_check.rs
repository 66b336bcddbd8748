//! `cargo xtask gpu-check`: builds the engine's test binaries, the
//! `gpu_figures` example and the `vramlab` command in release into a
//! self-contained bundle folder — the binaries, `run.sh` (generated from
//! `gpu-check/run.sh`), the PyTorch reference script, the snapshot recorder and
//! the comparison script — that runs on a GPU machine without a Rust
//! toolchain, and (unless `--bundle-only`) runs it here.
//!
//! The bundle is built with `debug = 0` and `strip = "debuginfo"` (symbols kept
//! for backtraces) in its own target folder, `target/gpu-check/build`, so that
//! it stays small enough to carry and does not invalidate `target/release`.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::Value;
use vramlab_display::format::fmt_bytes;

use crate::cli::GpuCheckArgs;

/// Exit status of `run.sh`, and of `cargo xtask gpu-check`, when there is no
/// GPU on the machine: the tests passed, the CUDA tests skipped, and no GPU
/// figures were measured.
pub const NO_GPU_EXIT: u8 = 3;

/// The engine's packages, whose tests make up the bundle.
const ENGINE_PACKAGES: &[&str] = &["vramlab-allocator", "vramlab-cpu-kernels", "vramlab-engine", "vramlab-train"];
/// The package of the figures example.
const RUNTIME_PACKAGE: &str = "vramlab-engine";
/// Test targets that need a GPU: run one test at a time, with their output
/// (`engine/runtime/tests/cuda.rs`, `engine/train/tests/cuda_training.rs`).
const CUDA_TEST_TARGETS: &[&str] = &["cuda", "cuda_training"];
const FIGURES_EXAMPLE: &str = "gpu_figures";
/// The command-line binary (`xtask`'s `vramlab`), for `run.sh bench`.
const CLI_PACKAGE: &str = "xtask";
const CLI_BIN: &str = "vramlab";
/// Written into every bundle folder: only such a folder is ever replaced.
const MARKER: &str = ".vramlab-gpu-check-bundle";
/// The bundle files copied from `gpu-check/` as they are.
const SCRIPTS: &[&str] = &["torch_reference.py", "record_snapshots.py", "compare.py"];
/// What a device machine may be sent in one go.
const TRANSFER_LIMIT_BYTES: u64 = 64 << 20;

pub fn run(args: &GpuCheckArgs) -> Result<u8> {
    let root = workspace_root();
    let bundle = args.out.clone().unwrap_or_else(|| root.join("target/gpu-check/bundle"));
    let build_dir = root.join("target/gpu-check/build");
    let started = Instant::now();

    eprintln!("vramlab gpu-check: building the bundle in {}", bundle.display());
    let target_dir = build_dir.to_string_lossy().into_owned();
    let mut test_args = vec!["test", "--release", "--no-run"];
    for package in ENGINE_PACKAGES {
        test_args.extend(["-p", package]);
    }
    test_args.extend(["--target-dir", &target_dir]);
    let tests = cargo_artifacts(&root, "test binaries", &test_args)?;
    let examples = cargo_artifacts(
        &root,
        "gpu_figures example",
        &["build", "--release", "--example", FIGURES_EXAMPLE, "-p", RUNTIME_PACKAGE, "--target-dir", &target_dir],
    )?;
    let cli = cargo_artifacts(
        &root,
        "vramlab command",
        &["build", "--release", "-p", CLI_PACKAGE, "--bin", CLI_BIN, "--target-dir", &target_dir],
    )?;
    let binaries = select_binaries(&tests, &examples, &cli)?;

    prepare_bundle_dir(&bundle)?;
    let manifest = assemble(&root, &bundle, &binaries)?;
    let size = dir_size(&bundle)?;
    eprintln!(
        "  bundle: {} test binaries ({}), {}, {} and the scripts — {} in all, built in {:.0} s",
        binaries.tests.len(),
        binaries.tests.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", "),
        FIGURES_EXAMPLE,
        CLI_BIN,
        fmt_bytes(size),
        started.elapsed().as_secs_f64(),
    );
    if size > TRANSFER_LIMIT_BYTES {
        eprintln!("  note: the bundle is larger than {}", fmt_bytes(TRANSFER_LIMIT_BYTES));
    }
    eprintln!("  commit {}; to run it elsewhere: copy the folder, then {}/run.sh", manifest.commit, bundle.display());
    if args.bundle_only {
        return Ok(0);
    }

    let results = bundle.join("results");
    eprintln!("\nvramlab gpu-check: running the bundle here (results in {})\n", results.display());
    let status = Command::new(bundle.join("run.sh"))
        .arg(&results)
        .status()
        .with_context(|| format!("cannot run {}", bundle.join("run.sh").display()))?;
    match status.code() {
        Some(0) => {
            eprintln!("\nvramlab gpu-check: passed on this machine's GPU");
            Ok(0)
        }
        Some(code) if code == i32::from(NO_GPU_EXIT) => {
            eprintln!(
                "\nvramlab gpu-check: no GPU found on this machine — the tests passed, the CUDA tests skipped and no \
                 GPU figures were measured (exit status {NO_GPU_EXIT}). Copy {} to a machine with an NVIDIA GPU and \
                 run its run.sh there.",
                bundle.display()
            );
            Ok(NO_GPU_EXIT)
        }
        _ => bail!("the GPU check failed ({status}); logs in {}", results.join("logs").display()),
    }
}

/// The workspace's root folder (xtask lives one level below it).
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// One executable cargo built.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Artifact {
    /// The target's name (`cuda`, `tensor`, `vramlab_engine` for the lib's tests).
    target: String,
    /// The target's kind (`lib`, `test`, `example`).
    kind: String,
    /// Whether it was built as a test harness.
    test: bool,
    path: PathBuf,
}

/// The executables among cargo's JSON messages (`--message-format=json`).
fn parse_artifacts(stdout: &str) -> Result<Vec<Artifact>> {
    let mut out = Vec::new();
    for line in stdout.lines().filter(|l| l.starts_with('{')) {
        let v: Value = serde_json::from_str(line).with_context(|| format!("cargo printed a bad JSON line: {line}"))?;
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(path) = v["executable"].as_str() else { continue };
        let target = v["target"]["name"].as_str().unwrap_or_default().to_owned();
        let kind = v["target"]["kind"][0].as_str().unwrap_or_default().to_owned();
        let test = v["profile"]["test"].as_bool().unwrap_or(false);
        out.push(Artifact { target, kind, test, path: PathBuf::from(path) });
    }
    Ok(out)
}

/// Runs `cargo ARGS --message-format=json-render-diagnostics` in `root` with the
/// bundle's profile settings, a spinner showing what is being compiled, and
/// returns the executables it built. On failure the error holds cargo's
/// diagnostics.
fn cargo_artifacts(root: &Path, what: &str, args: &[&str]) -> Result<Vec<Artifact>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(&cargo)
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .current_dir(root)
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", cargo.to_string_lossy()))?;
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });

    let style = ProgressStyle::with_template("{prefix:>12} {spinner} {pos} compiled {elapsed:>4} {msg}")
        .expect("a valid template");
    let bar = ProgressBar::new_spinner().with_style(style).with_prefix("build");
    bar.enable_steady_tick(Duration::from_millis(200));
    bar.set_message(format!("{what} (release)"));
    let mut stdout_text = String::new();
    for line in BufReader::new(child.stdout.take().expect("stdout is piped")).lines() {
        let line = line.context("reading cargo's output")?;
        if let Ok(v) = serde_json::from_str::<Value>(&line)
            && v["reason"] == "compiler-artifact"
        {
            bar.inc(1);
            bar.set_message(format!("{what} (release): {}", v["target"]["name"].as_str().unwrap_or("?")));
        }
        stdout_text.push_str(&line);
        stdout_text.push('\n');
    }
    let status = child.wait().context("waiting for cargo")?;
    let stderr_text = stderr_reader.join().unwrap_or_default();
    bar.finish_and_clear();
    if !status.success() {
        let tail: Vec<&str> = stderr_text.lines().rev().take(60).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!("building the {what} failed (cargo {}: {status}):\n{}", args.join(" "), tail.join("\n"));
    }
    eprintln!("  built the {what} (release)");
    parse_artifacts(&stdout_text)
}

/// A test binary of the bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TestBinary {
    /// Its name in the bundle (`tests/NAME`): the test target's name.
    name: String,
    kind: String,
    source: PathBuf,
}

#[derive(Debug)]
struct Binaries {
    tests: Vec<TestBinary>,
    figures: PathBuf,
    cli: PathBuf,
}

/// The test harnesses (the lib's tests and every integration test), the
/// figures example and the `vramlab` command; the CUDA tests, the example and
/// the command must be there.
fn select_binaries(tests: &[Artifact], examples: &[Artifact], cli: &[Artifact]) -> Result<Binaries> {
    let mut selected: Vec<TestBinary> = tests
        .iter()
        .filter(|a| a.test && (a.kind == "lib" || a.kind == "test"))
        .map(|a| TestBinary { name: a.target.clone(), kind: a.kind.clone(), source: a.path.clone() })
        .collect();
    // The CUDA tests first: they are what the bundle is for.
    selected.sort_by_key(|t| (!CUDA_TEST_TARGETS.contains(&t.name.as_str()), t.kind != "lib", t.name.clone()));
    selected.dedup_by(|a, b| a.name == b.name);
    for cuda in CUDA_TEST_TARGETS {
        if !selected.iter().any(|t| t.name == *cuda) {
            bail!("cargo built no '{cuda}' test binary for the engine's packages ({})", ENGINE_PACKAGES.join(", "));
        }
    }
    for t in &selected {
        if !is_plain_name(&t.name) {
            bail!("test target name '{}' is not a plain file name", t.name);
        }
    }
    let figures = examples
        .iter()
        .find(|a| a.kind == "example" && a.target == FIGURES_EXAMPLE)
        .map(|a| a.path.clone())
        .with_context(|| format!("cargo built no {FIGURES_EXAMPLE} example"))?;
    let cli = cli
        .iter()
        .find(|a| a.kind == "bin" && a.target == CLI_BIN)
        .map(|a| a.path.clone())
        .with_context(|| format!("cargo built no {CLI_BIN} binary"))?;
    Ok(Binaries { tests: selected, figures, cli })
}

/// Letters, digits, `_` and `-`: safe as a file name and as a bash word.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Makes `dir` an empty bundle folder: creates it, or empties a folder that is
/// empty or holds an earlier bundle. Any other folder is left alone.
fn prepare_bundle_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        if !dir.is_dir() {
            bail!("{} exists and is not a folder", dir.display());
        }
        let empty = std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?.next().is_none();
        if !empty && !dir.join(MARKER).exists() {
            bail!(
                "{} is not empty and holds no GPU check bundle (no {MARKER}); choose another --out, or remove it",
                dir.display()
            );
        }
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear the old bundle {}", dir.display()))?;
    }
    for sub in ["tests", "bin"] {
        std::fs::create_dir_all(dir.join(sub)).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(dir.join(MARKER), "a vramlab GPU check bundle: cargo xtask gpu-check replaces this folder\n")
        .with_context(|| format!("cannot write into {}", dir.display()))?;
    Ok(())
}

/// `manifest.json` of a bundle.
#[derive(Debug, Serialize)]
struct Manifest {
    commit: String,
    built_at: String,
    rustc: Option<String>,
    test_binaries: Vec<ManifestBinary>,
    figures: ManifestBinary,
    cli: ManifestBinary,
}

#[derive(Debug, Serialize)]
struct ManifestBinary {
    path: String,
    kind: String,
    size_bytes: u64,
}

/// Copies the binaries and scripts into `bundle`, writes `run.sh` and
/// `manifest.json`.
fn assemble(root: &Path, bundle: &Path, binaries: &Binaries) -> Result<Manifest> {
    let copy = |from: &Path, to: &str| -> Result<ManifestBinary> {
        let dest = bundle.join(to);
        std::fs::copy(from, &dest).with_context(|| format!("cannot copy {} to {}", from.display(), dest.display()))?;
        let size_bytes = std::fs::metadata(&dest)?.len();
        Ok(ManifestBinary { path: to.to_owned(), kind: String::new(), size_bytes })
    };
    let mut test_binaries = Vec::new();
    for t in &binaries.tests {
        let mut entry = copy(&t.source, &format!("tests/{}", t.name))?;
        entry.kind = if t.kind == "lib" { "lib tests".into() } else { "integration tests".into() };
        test_binaries.push(entry);
    }
    let mut figures = copy(&binaries.figures, &format!("bin/{FIGURES_EXAMPLE}"))?;
    figures.kind = "example".into();
    let mut cli = copy(&binaries.cli, &format!("bin/{CLI_BIN}"))?;
    cli.kind = "command".into();
    let scripts = root.join("gpu-check");
    for s in SCRIPTS {
        copy(&scripts.join(s), s)?;
    }

    let commit = git_commit(root);
    let built_at = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let template_path = scripts.join("run.sh");
    let template = std::fs::read_to_string(&template_path)
        .with_context(|| format!("cannot read the template {}", template_path.display()))?;
    let names: Vec<&str> = binaries.tests.iter().map(|t| t.name.as_str()).collect();
    let cuda: Vec<&str> = names.iter().copied().filter(|n| CUDA_TEST_TARGETS.contains(n)).collect();
    let script = render_run_sh(&template, &commit, &built_at, &names, &cuda)?;
    let run_sh = bundle.join("run.sh");
    std::fs::write(&run_sh, script).with_context(|| format!("cannot write {}", run_sh.display()))?;
    set_executable(&run_sh)?;

    let manifest =
        Manifest { commit, built_at, rustc: command_output("rustc", &["--version"]), test_binaries, figures, cli };
    let text = serde_json::to_string_pretty(&manifest).expect("the manifest serializes");
    std::fs::write(bundle.join("manifest.json"), text + "\n").context("cannot write manifest.json")?;
    Ok(manifest)
}

/// `run.sh` from its template: the commit, the build time and the test
/// binaries filled in. Every `@…@` field must be filled.
fn render_run_sh(template: &str, commit: &str, built_at: &str, tests: &[&str], cuda: &[&str]) -> Result<String> {
    let quote = |s: &str| s.replace(['"', '$', '`', '\\'], "_");
    let fields = [
        ("@COMMIT@", quote(commit)),
        ("@BUILT_AT@", quote(built_at)),
        ("@TEST_BINARIES@", tests.join(" ")),
        ("@CUDA_TEST_BINARIES@", cuda.join(" ")),
    ];
    let mut out = template.to_owned();
    for (field, value) in &fields {
        if !out.contains(field) {
            bail!("the run.sh template has no {field} field");
        }
        out = out.replace(field, value);
    }
    if let Some(left) = unfilled_field(&out) {
        bail!("the run.sh template has a field nobody fills: {left}");
    }
    Ok(out)
}

/// The first `@NAME@` (capitals and `_`) left in `text`.
fn unfilled_field(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(start) = text[i..].find('@').map(|p| p + i) {
        let end = text[start + 1..].find('@').map(|p| p + start + 1)?;
        let inner = &bytes[start + 1..end];
        if !inner.is_empty() && inner.iter().all(|b| b.is_ascii_uppercase() || *b == b'_') {
            return Some(&text[start..=end]);
        }
        i = start + 1;
    }
    None
}

#[cfg(unix)]
fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))
}

#[cfg(not(unix))]
fn set_executable(_: &Path) -> Result<()> {
    Ok(())
}

/// `git rev-parse --short=12 HEAD`, with `-dirty` when the tree has changes.
fn git_commit(root: &Path) -> String {
    let in_root = |args: &[&str]| {
        let out = Command::new("git").args(args).current_dir(root).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    match in_root(&["rev-parse", "--short=12", "HEAD"]) {
        Some(commit) if !commit.is_empty() => {
            let dirty = in_root(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
            if dirty { format!("{commit}-dirty") } else { commit }
        }
        _ => "unknown".to_owned(),
    }
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned()).filter(|s| !s.is_empty())
}

/// Bytes of the files under `dir`.
fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() { dir_size(&entry.path())? } else { meta.len() };
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages as cargo 1.8x prints them (abridged to the fields read).
    const CARGO_JSON: &str = r#"{"reason":"compiler-artifact","package_id":"registry+https://github.com/rust-lang/crates.io-index#half@2.6.0","target":{"kind":["lib"],"name":"half"},"profile":{"test":false},"executable":null,"fresh":true}
{"reason":"compiler-artifact","package_id":"path+file:///w/engine#vramlab-engine@0.1.0","target":{"kind":["lib"],"name":"vramlab_engine"},"profile":{"test":true},"executable":"/w/target/release/deps/vramlab_engine-1a2b","fresh":false}
{"reason":"compiler-artifact","package_id":"path+file:///w/engine#vramlab-engine@0.1.0","target":{"kind":["test"],"name":"tensor"},"profile":{"test":true},"executable":"/w/target/release/deps/tensor-3c4d","fresh":false}
{"reason":"compiler-artifact","package_id":"path+file:///w/engine#vramlab-engine@0.1.0","target":{"kind":["test"],"name":"cuda"},"profile":{"test":true},"executable":"/w/target/release/deps/cuda-5e6f","fresh":false}
{"reason":"compiler-artifact","package_id":"path+file:///w/engine/train#vramlab-train@0.1.0","target":{"kind":["test"],"name":"cuda_training"},"profile":{"test":true},"executable":"/w/target/release/deps/cuda_training-7a8b","fresh":false}
{"reason":"compiler-artifact","package_id":"path+file:///w/engine#vramlab-engine@0.1.0","target":{"kind":["example"],"name":"devices"},"profile":{"test":false},"executable":"/w/target/release/examples/devices","fresh":false}
{"reason":"build-finished","success":true}"#;

    const EXAMPLE_JSON: &str = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/engine#vramlab-engine@0.1.0","target":{"kind":["example"],"name":"gpu_figures"},"profile":{"test":false},"executable":"/w/target/release/examples/gpu_figures","fresh":false}"#;
    const CLI_JSON: &str = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/xtask#0.1.0","target":{"kind":["lib"],"name":"xtask"},"profile":{"test":false},"executable":null,"fresh":true}
{"reason":"compiler-artifact","package_id":"path+file:///w/xtask#0.1.0","target":{"kind":["bin"],"name":"vramlab"},"profile":{"test":false},"executable":"/w/target/release/vramlab","fresh":false}"#;

    #[test]
    fn executables_are_read_from_cargo_messages() {
        let all = parse_artifacts(CARGO_JSON).unwrap();
        let names: Vec<_> = all.iter().map(|a| (a.target.as_str(), a.kind.as_str(), a.test)).collect();
        assert_eq!(
            names,
            [
                ("vramlab_engine", "lib", true),
                ("tensor", "test", true),
                ("cuda", "test", true),
                ("cuda_training", "test", true),
                ("devices", "example", false)
            ],
            "libraries without an executable are skipped"
        );
        assert!(parse_artifacts("{not json").is_err());
        assert!(parse_artifacts("   Compiling half v2.6.0\n").unwrap().is_empty(), "text lines are ignored");
    }

    #[test]
    fn the_bundle_takes_test_harnesses_cuda_first_and_the_figures() {
        let tests = parse_artifacts(CARGO_JSON).unwrap();
        let examples = parse_artifacts(EXAMPLE_JSON).unwrap();
        let cli = parse_artifacts(CLI_JSON).unwrap();
        let b = select_binaries(&tests, &examples, &cli).unwrap();
        let names: Vec<_> = b.tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["cuda", "cuda_training", "vramlab_engine", "tensor"]);
        assert_eq!(b.figures, PathBuf::from("/w/target/release/examples/gpu_figures"));
        assert_eq!(b.cli, PathBuf::from("/w/target/release/vramlab"));

        let without_cuda: Vec<_> = tests.iter().filter(|a| a.target != "cuda").cloned().collect();
        let err = select_binaries(&without_cuda, &examples, &cli).unwrap_err().to_string();
        assert!(err.contains("no 'cuda' test binary"), "{err}");
        let err = select_binaries(&tests, &[], &cli).unwrap_err().to_string();
        assert!(err.contains("no gpu_figures example"), "{err}");
        let err = select_binaries(&tests, &examples, &[]).unwrap_err().to_string();
        assert!(err.contains("no vramlab binary"), "{err}");
    }

    #[test]
    fn run_sh_is_the_template_with_every_field_filled() {
        let template = std::fs::read_to_string(workspace_root().join("gpu-check/run.sh")).unwrap();
        let script =
            render_run_sh(&template, "abc123-dirty", "2025-01-01T00:00:00Z", &["cuda", "tensor"], &["cuda"]).unwrap();
        assert!(script.contains("VRAMLAB_COMMIT=\"abc123-dirty\""), "{script}");
        assert!(script.contains("TEST_BINARIES=(cuda tensor)"));
        assert!(script.contains("CUDA_TEST_BINARIES=(cuda)"));
        assert_eq!(unfilled_field(&script), None);
        assert!(script.starts_with("#!/usr/bin/env bash"));

        let err = render_run_sh("no fields", "c", "t", &[], &[]).unwrap_err().to_string();
        assert!(err.contains("no @COMMIT@ field"), "{err}");
        let extra = "@COMMIT@ @BUILT_AT@ @TEST_BINARIES@ @CUDA_TEST_BINARIES@ @NEW_FIELD@ user@host";
        let err = render_run_sh(extra, "c", "t", &[], &[]).unwrap_err().to_string();
        assert!(err.contains("@NEW_FIELD@"), "{err}");
        assert_eq!(unfilled_field("mail user@example.com or @lower@ and @"), None);
    }

    #[test]
    fn only_empty_folders_and_old_bundles_are_replaced() {
        let base = std::env::temp_dir().join(format!("vramlab-gpu-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let fresh = base.join("fresh");
        prepare_bundle_dir(&fresh).unwrap();
        assert!(fresh.join(MARKER).exists() && fresh.join("tests").is_dir() && fresh.join("bin").is_dir());
        std::fs::write(fresh.join("tests/old"), "x").unwrap();
        prepare_bundle_dir(&fresh).unwrap();
        assert!(!fresh.join("tests/old").exists(), "an old bundle is replaced");

        let precious = base.join("precious");
        std::fs::create_dir_all(&precious).unwrap();
        std::fs::write(precious.join("notes.txt"), "keep me").unwrap();
        let err = prepare_bundle_dir(&precious).unwrap_err().to_string();
        assert!(err.contains("holds no GPU check bundle"), "{err}");
        assert_eq!(std::fs::read_to_string(precious.join("notes.txt")).unwrap(), "keep me");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn plain_names() {
        assert!(is_plain_name("cpu_kernels") && is_plain_name("a-b1"));
        assert!(!is_plain_name("") && !is_plain_name("a b") && !is_plain_name("x;rm") && !is_plain_name("../x"));
    }
}
