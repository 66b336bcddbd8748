//! What `check`, `check --ab` and `bench --baseline` share: the baselines
//! (a name or a file, saved or appended to), the thresholds, and the
//! comparison with every output it writes and prints (terminal table,
//! `regressions.md`, GitHub annotations, JSON, exports). Exit status 2 when it
//! cannot be made ([`impossible`]).

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::Result;
use vramlab_reports::check::{
    self, CheckConfig, CompareOptions, Comparison, Design, KnownNoise, Labels, RunSet, export, output,
};
use vramlab_reports::history::{History, environment_label};

use crate::cli::{CheckOptions, ExportFormat};

/// NAME → DIR/NAME.json; anything that looks like a path (a separator or a
/// `.json` ending) is used as it is.
pub fn resolve_baseline(arg: &str, dir: &Path) -> PathBuf {
    if arg.ends_with(".json") || arg.contains('/') || arg.contains(std::path::MAIN_SEPARATOR) {
        PathBuf::from(arg)
    } else {
        dir.join(format!("{arg}.json"))
    }
}

/// Stores `runs` as baseline `name` in `dir` — replacing it, or with
/// `append` adding them to its runs (same commit, machine and kind); returns
/// its path and how many runs it holds. Errors are messages for exit 2.
pub fn save_baseline(runs: &RunSet, name: &str, dir: &Path, append: bool) -> Result<(PathBuf, usize), String> {
    let path = dir.join(format!("{name}.json"));
    let set = if append && path.is_file() {
        let mut set = check::load_runs(&path, "baseline").map_err(|e| e.to_string())?;
        for r in runs.runs() {
            set.append(r.clone()).map_err(|e| format!("baseline {}: cannot append: {e}", path.display()))?;
        }
        set
    } else {
        runs.clone()
    };
    let json = set.to_json().map_err(|e| format!("serializing the baseline: {e}"))?;
    vramlab_reports::write_atomic(&path, &json).map_err(|e| e.to_string())?;
    Ok((path, set.len()))
}

/// The thresholds and how the two sides' runs relate.
#[derive(Debug, Clone)]
pub struct Settings {
    pub config: CheckConfig,
    pub design: Design,
}

/// Loads the settings: --config FILE, else ./vramlab.toml when present; independent runs.
pub fn load_config(path: Option<&Path>) -> Result<Settings, check::ConfigError> {
    let config = match path {
        Some(p) => CheckConfig::load(p),
        None => CheckConfig::discover(Path::new(".")),
    }?;
    Ok(Settings { config, design: Design::Runs })
}

/// The history's between-run noise of every time some build other than the
/// compared ones (`exclude`: their build keys) ran twice or more, on this
/// check's machine (`machine`: the current runs' testbed).
fn known_noise(path: &Path, exclude: &[&str], machine: &str) -> Result<KnownNoise, String> {
    let history = History::open_existing(path).map_err(|e| e.to_string())?;
    let floors =
        history.noise_floors_without(" time", HISTORY_RUNS, exclude, Some(machine)).map_err(|e| e.to_string())?;
    let builds = floors.iter().map(|f| f.builds).max().unwrap_or(0);
    crate::output::eprint_line(&format!(
        "the history {}\n  knows the between-run noise of {} time figure(s), from up to {builds} other build(s) run more than once",
        path.display(),
        floors.len()
    ));
    Ok(KnownNoise::new(&floors))
}

/// How many of the history's latest runs teach the noise.
const HISTORY_RUNS: usize = 500;

/// Prints why the comparison could not be made; exit status 2.
pub fn impossible(message: &str) -> u8 {
    crate::output::eprint_line(&format!("error: the comparison could not be made: {message}"));
    2
}

/// Compares and writes every output; returns the exit status (0 or 1).
pub fn report(
    baseline: &RunSet,
    baseline_path: &Path,
    current: &RunSet,
    current_path: &Path,
    cfg: &Settings,
    opts: &CheckOptions,
    out_dir: &Path,
) -> Result<u8> {
    let labels = Labels { baseline: baseline_path.display().to_string(), current: current_path.display().to_string() };
    // The compared builds' own runs in the history must not teach the noise.
    let commits: Vec<&str> = [baseline, current]
        .iter()
        .flat_map(|set| set.runs().iter().filter_map(|r| r.environment.git_commit.as_deref()))
        .collect();
    let known_noise = match &opts.history {
        None => None,
        Some(path) => match known_noise(path, &commits, &environment_label(current.first())) {
            Ok(k) => Some(k),
            Err(message) => return Ok(impossible(&message)),
        },
    };
    let options = CompareOptions { force_times: opts.force_times, design: cfg.design, known_noise };
    let comparison = check::compare_runs(baseline, current, &cfg.config, options, labels);
    let mut written = Vec::new();
    for f in &opts.export {
        let format = match f {
            ExportFormat::Bmf => export::Format::Bmf,
            ExportFormat::Gab => export::Format::Gab,
        };
        let path = out_dir.join(format.file_name());
        let last = current.runs().last().unwrap_or(current.first());
        vramlab_reports::write_atomic(&path, export::render(format, last).as_bytes())?;
        written.push(path);
    }
    emit(&comparison, opts, out_dir, written, false)
}

/// Writes `regressions.md` into `out_dir`, prints GitHub annotations (under
/// GitHub Actions), the table or JSON on stdout (`on_stderr`: on stderr, where
/// stdout is another program's) and what was written (with `written`, files
/// already written) on stderr; returns the exit status.
pub fn emit(
    comparison: &Comparison,
    opts: &CheckOptions,
    out_dir: &Path,
    mut written: Vec<PathBuf>,
    on_stderr: bool,
) -> Result<u8> {
    written.insert(0, output::write_markdown(out_dir, comparison)?);
    let mut out: Box<dyn std::io::Write> =
        if on_stderr { Box::new(std::io::stderr().lock()) } else { Box::new(std::io::stdout().lock()) };
    if std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true") {
        // The runner reads workflow commands from both streams; with --json,
        // stdout carries only the JSON.
        let annotations = output::annotations(comparison);
        if opts.json && !on_stderr {
            eprint!("{annotations}");
        } else {
            write!(out, "{annotations}")?;
        }
    }
    if opts.json {
        writeln!(out, "{}", output::json(comparison)?)?;
    } else {
        let tty = if on_stderr { std::io::stderr().is_terminal() } else { std::io::stdout().is_terminal() };
        let colour = tty && std::env::var_os("NO_COLOR").is_none();
        write!(out, "{}", crate::output::fit_lines(&output::terminal(comparison, opts.all, colour)))?;
    }
    drop(out);
    for p in written {
        crate::output::eprint_line(&format!("wrote {}", p.display()));
    }
    Ok(comparison.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baseline_paths() {
        assert_eq!(resolve_baseline("main", Path::new("b")), PathBuf::from("b/main.json"));
        assert_eq!(resolve_baseline("old/results.json", Path::new("b")), PathBuf::from("old/results.json"));
        assert_eq!(resolve_baseline("x.json", Path::new("b")), PathBuf::from("x.json"));
    }
}
