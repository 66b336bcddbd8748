//! The run history: every run appended to an embedded SQLite database
//! (`target/vramlab/history.sqlite`, rusqlite with its bundled SQLite — no
//! server), keyed by commit, time and environment; trends of a figure read back
//! with change points marked (binary segmentation on the mean: the CUSUM split
//! of largest cost reduction, accepted while it beats a BIC penalty).
//!
//! A database that is corrupt, not SQLite, or of a newer schema is reported and
//! never overwritten.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::Serialize;
use thiserror::Error;
use vramlab_suites::RunResults;

use crate::check::matching;

/// The database's file name inside the results folder.
pub const HISTORY_FILE: &str = "history.sqlite";

/// The schema this build writes (`PRAGMA user_version`).
pub const HISTORY_SCHEMA: i64 = 1;

#[derive(Debug, Error)]
pub enum HistoryError {
    #[error(
        "history {path}: no such file — every `cargo xtask bench` run appends to it (or `cargo xtask history --import results.json`)"
    )]
    Missing { path: PathBuf },
    #[error(
        "history {path}: not a vramlab history database, or corrupt ({reason}); it was left as it is — move it away to start a new history"
    )]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "history {path}: schema version {found}, newer than this build's {HISTORY_SCHEMA}; it was left as it is — update vramlab to read it"
    )]
    Newer { path: PathBuf, found: i64 },
    #[error("history {path}: {source}")]
    Sql {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("history {path}: cannot create its folder: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// An open history database.
#[derive(Debug)]
pub struct History {
    conn: Connection,
    path: PathBuf,
}

/// One run in a trend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    pub run_id: i64,
    pub started_at: String,
    pub git_commit: Option<String>,
    /// CPU model, cores, GPUs and device of the run.
    pub environment: String,
    pub value: f64,
}

/// A figure's noise between runs of one build, learned from the history's A/A
/// runs: runs of the same commit, machine and kind (`--quick` or full), e.g.
/// `bench --repeat N`, a baseline's runs, or CI re-runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoiseFloor {
    /// `suite/case {params} (device) metric`.
    pub name: String,
    /// Builds measured more than once (the groups the noise is pooled over).
    pub builds: usize,
    /// Runs in those builds.
    pub runs: usize,
    /// Standard deviation of ln(value) between runs of one build, pooled: a fraction (0.03: 3 %).
    pub between_run: f64,
    /// The same from the median absolute deviation (1.4826 × the median of
    /// each run's |ln(value) − its build's median|): a run that once took twice
    /// as long barely moves it, a figure that often lands in one of two speeds
    /// does. What `check --history` takes.
    pub robust_between_run: f64,
    /// The change between two runs of one build that is exceeded only 5 % of
    /// the time, exp(1.96·√2·σ) − 1: a figure gates at a threshold T by a
    /// one-run-per-side comparison only when its floor is below T.
    pub floor: f64,
}

/// A figure over runs, oldest first, with its change points.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    /// `suite/case {params} (device) metric`.
    pub name: String,
    pub points: Vec<Point>,
    /// Indices into `points` where a new level starts.
    pub change_points: Vec<usize>,
}

const CREATE: &str = "
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    started_at TEXT NOT NULL,
    git_commit TEXT,
    vramlab_version TEXT NOT NULL,
    environment TEXT NOT NULL,
    quick INTEGER NOT NULL,
    seed INTEGER NOT NULL
);
CREATE TABLE series (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE points (
    series_id INTEGER NOT NULL REFERENCES series(id),
    run_id INTEGER NOT NULL REFERENCES runs(id),
    value REAL NOT NULL,
    PRIMARY KEY (series_id, run_id)
) WITHOUT ROWID;
";

impl History {
    /// Opens `path` for appending, creating it (and its folder) when missing.
    pub fn open_or_create(path: &Path) -> Result<History, HistoryError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| HistoryError::Io { path: path.into(), source })?;
        }
        let conn = Connection::open(path).map_err(|e| corrupt(path, e))?;
        let h = History { conn, path: path.to_path_buf() };
        h.check_schema(true)?;
        Ok(h)
    }

    /// Opens an existing `path` read-only.
    pub fn open_existing(path: &Path) -> Result<History, HistoryError> {
        if !path.is_file() {
            return Err(HistoryError::Missing { path: path.into() });
        }
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(|e| corrupt(path, e))?;
        let h = History { conn, path: path.to_path_buf() };
        h.check_schema(false)?;
        Ok(h)
    }

    fn check_schema(&self, create: bool) -> Result<(), HistoryError> {
        let path = &self.path;
        let version: i64 =
            self.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(|e| corrupt(path, e))?;
        let tables: i64 = self
            .conn
            .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table'", [], |r| r.get(0))
            .map_err(|e| corrupt(path, e))?;
        if version > HISTORY_SCHEMA {
            return Err(HistoryError::Newer { path: path.clone(), found: version });
        }
        if version == 0 && tables == 0 {
            if !create {
                return Err(HistoryError::Corrupt { path: path.clone(), reason: "an empty database".into() });
            }
            self.conn
                .execute_batch(&format!("BEGIN; {CREATE} PRAGMA user_version = {HISTORY_SCHEMA}; COMMIT;"))
                .map_err(|e| self.sql(e))?;
            return Ok(());
        }
        if version != HISTORY_SCHEMA {
            return Err(HistoryError::Corrupt {
                path: path.clone(),
                reason: format!("schema version {version} with {tables} tables: not written by vramlab"),
            });
        }
        for t in ["runs", "series", "points"] {
            let found: Option<String> = self
                .conn
                .query_row("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?1", [t], |r| r.get(0))
                .optional()
                .map_err(|e| corrupt(path, e))?;
            if found.is_none() {
                return Err(HistoryError::Corrupt {
                    path: path.clone(),
                    reason: format!("the table `{t}` is missing"),
                });
            }
        }
        Ok(())
    }

    fn sql(&self, source: rusqlite::Error) -> HistoryError {
        HistoryError::Sql { path: self.path.clone(), source }
    }

    /// Appends a run: its time medians (`time`), memory figures and metrics.
    /// Returns the run's id.
    pub fn append(&mut self, run: &RunResults) -> Result<i64, HistoryError> {
        let path = self.path.clone();
        let sql = |source| HistoryError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction().map_err(sql)?;
        tx.execute(
            "INSERT INTO runs (started_at, git_commit, vramlab_version, environment, quick, seed) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                run.started_at,
                run.environment.git_commit,
                run.vramlab_version,
                environment_label(run),
                run.options.quick,
                run.options.seed as i64
            ],
        )
        .map_err(sql)?;
        let run_id = tx.last_insert_rowid();
        {
            let mut ids: HashMap<String, i64> = HashMap::new();
            let mut all = tx.prepare("SELECT name, id FROM series").map_err(sql)?;
            for row in all.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))).map_err(sql)? {
                let (name, id) = row.map_err(sql)?;
                ids.insert(name, id);
            }
            let mut new_series = tx.prepare("INSERT INTO series (name) VALUES (?1)").map_err(sql)?;
            let mut point =
                tx.prepare("INSERT INTO points (series_id, run_id, value) VALUES (?1, ?2, ?3)").map_err(sql)?;
            for (name, value) in figures(run) {
                let id = match ids.get(&name) {
                    Some(&id) => id,
                    None => {
                        new_series.execute([&name]).map_err(sql)?;
                        let id = tx.last_insert_rowid();
                        ids.insert(name, id);
                        id
                    }
                };
                point.execute(params![id, run_id, value]).map_err(sql)?;
            }
        }
        tx.commit().map_err(sql)?;
        Ok(run_id)
    }

    /// How many runs are stored.
    pub fn runs(&self) -> Result<i64, HistoryError> {
        self.conn.query_row("SELECT count(*) FROM runs", [], |r| r.get(0)).map_err(|e| self.sql(e))
    }

    /// Every series whose name matches `pattern` (a glob, `*` and `?`;
    /// None: all), over its last `last` runs, with change points.
    pub fn trends(&self, pattern: Option<&str>, last: usize) -> Result<Vec<Series>, HistoryError> {
        let matcher = match pattern {
            Some(p) => Some(
                globset::GlobBuilder::new(p)
                    .literal_separator(false)
                    .case_insensitive(true)
                    .build()
                    .map_err(|e| HistoryError::Corrupt {
                        path: self.path.clone(),
                        reason: format!("the pattern '{p}' is not valid: {e}"),
                    })?
                    .compile_matcher(),
            ),
            None => None,
        };
        self.series_where(last, |name| matcher.as_ref().is_none_or(|m| m.is_match(name)))
    }

    /// The series named exactly `names` (those the history holds), in the
    /// order of `names`, over their last `last` runs, with change points.
    pub fn series_named(&self, names: &[String], last: usize) -> Result<Vec<Series>, HistoryError> {
        let mut found = self.series_where(last, |name| names.iter().any(|n| n == name))?;
        found.sort_by_key(|s| names.iter().position(|n| *n == s.name));
        Ok(found)
    }

    /// The series whose names `keep`, over the last `last` runs.
    fn series_where(&self, last: usize, keep: impl Fn(&str) -> bool) -> Result<Vec<Series>, HistoryError> {
        let mut names = self.conn.prepare("SELECT id, name FROM series ORDER BY name").map_err(|e| self.sql(e))?;
        let series: Vec<(i64, String)> = names
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.sql(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.sql(e))?;
        let mut runs = self
            .conn
            .prepare("SELECT id, started_at, git_commit, environment FROM runs ORDER BY id DESC LIMIT ?1")
            .map_err(|e| self.sql(e))?;
        let recent: Vec<(i64, String, Option<String>, String)> = runs
            .query_map([last as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .map_err(|e| self.sql(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.sql(e))?;
        let Some(oldest) = recent.last().map(|r| r.0) else { return Ok(Vec::new()) };
        let run_info: HashMap<i64, &(i64, String, Option<String>, String)> = recent.iter().map(|r| (r.0, r)).collect();
        let mut values = self
            .conn
            .prepare("SELECT run_id, value FROM points WHERE series_id = ?1 AND run_id >= ?2 ORDER BY run_id")
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for (id, name) in series {
            if !keep(&name) {
                continue;
            }
            let mut points = Vec::new();
            let rows = values
                .query_map(params![id, oldest], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, f64>(1)?)))
                .map_err(|e| self.sql(e))?;
            for row in rows {
                let (run_id, value) = row.map_err(|e| self.sql(e))?;
                if let Some(info) = run_info.get(&run_id) {
                    points.push(Point {
                        run_id,
                        started_at: info.1.clone(),
                        git_commit: info.2.clone(),
                        environment: info.3.clone(),
                        value,
                    });
                }
            }
            if points.is_empty() {
                continue;
            }
            let v: Vec<f64> = points.iter().map(|p| p.value).collect();
            out.push(Series { name, change_points: change_points(&v), points });
        }
        Ok(out)
    }
}

impl History {
    /// The noise floor of every figure whose name ends with `suffix` (e.g.
    /// `" time"`) that some build measured twice or more, over the last `last`
    /// runs, noisiest first.
    pub fn noise_floors(&self, suffix: &str, last: usize) -> Result<Vec<NoiseFloor>, HistoryError> {
        self.noise_floors_without(suffix, last, &[], None)
    }

    /// [`noise_floors`](Self::noise_floors) leaving out the runs of the
    /// builds in `exclude` (the two builds a check compares: their own runs
    /// must not teach the noise their difference is judged against) and, with
    /// `machine` (an [`environment_label`]), every other machine's runs: a
    /// figure's noise is a property of the testbed it ran on.
    pub fn noise_floors_without(
        &self,
        suffix: &str,
        last: usize,
        exclude: &[&str],
        machine: Option<&str>,
    ) -> Result<Vec<NoiseFloor>, HistoryError> {
        let mut q = self
            .conn
            .prepare(
                "SELECT s.name, r.git_commit, r.environment, r.quick, p.value FROM points p \
                 JOIN series s ON s.id = p.series_id JOIN runs r ON r.id = p.run_id \
                 WHERE r.git_commit IS NOT NULL AND r.id > (SELECT coalesce(max(id), 0) FROM runs) - ?1 \
                 ORDER BY s.name",
            )
            .map_err(|e| self.sql(e))?;
        let rows = q
            .query_map([last as i64], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, bool>(3)?,
                    r.get::<_, f64>(4)?,
                ))
            })
            .map_err(|e| self.sql(e))?;
        // name → build (commit, machine, quick) → ln(values)
        let mut by_name: std::collections::BTreeMap<String, HashMap<Build, Vec<f64>>> =
            std::collections::BTreeMap::new();
        for row in rows {
            let (name, commit, env, quick, value) = row.map_err(|e| self.sql(e))?;
            let on_machine = machine.is_none_or(|m| m == env);
            if name.ends_with(suffix) && value > 0.0 && !exclude.contains(&commit.as_str()) && on_machine {
                by_name.entry(name).or_default().entry((commit, env, quick)).or_default().push(value.ln());
            }
        }
        let mut out: Vec<NoiseFloor> = by_name
            .into_iter()
            .filter_map(|(name, builds)| noise_floor(name, builds.values().map(Vec::as_slice)))
            .collect();
        out.sort_by(|a, b| b.floor.total_cmp(&a.floor).then_with(|| a.name.cmp(&b.name)));
        Ok(out)
    }
}

/// A build in the history: commit, machine, `--quick`.
type Build = (String, String, bool);

/// The pooled noise of one figure over builds, each a list of ln(values);
/// None when no build has two runs.
pub fn noise_floor<'a>(name: String, builds: impl Iterator<Item = &'a [f64]>) -> Option<NoiseFloor> {
    let (mut ss, mut df, mut n_builds, mut runs) = (0.0, 0usize, 0usize, 0usize);
    let mut deviations = Vec::new();
    for logs in builds.filter(|b| b.len() >= 2) {
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        ss += logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>();
        df += logs.len() - 1;
        n_builds += 1;
        runs += logs.len();
        let median = crate::check::stats::median(logs);
        deviations.extend(logs.iter().map(|l| (l - median).abs()));
    }
    if df == 0 {
        return None;
    }
    let sigma = (ss / df as f64).sqrt();
    Some(NoiseFloor {
        name,
        builds: n_builds,
        runs,
        between_run: sigma,
        robust_between_run: 1.4826 * crate::check::stats::median(&deviations),
        floor: (1.959_964 * std::f64::consts::SQRT_2 * sigma).exp() - 1.0,
    })
}

fn corrupt(path: &Path, e: rusqlite::Error) -> HistoryError {
    HistoryError::Corrupt { path: path.to_path_buf(), reason: e.to_string() }
}

/// The machine in one line: CPU model and cores, GPUs, device.
pub fn environment_label(run: &RunResults) -> String {
    let e = &run.environment;
    let gpus: Vec<&str> = e.gpus.iter().map(|g| g.name.as_str()).collect();
    format!(
        "{} ×{}; GPUs: {}; device {}",
        e.cpu_model,
        e.cpu_cores,
        if gpus.is_empty() { "none".to_owned() } else { gpus.join(", ") },
        e.device
    )
}

/// A run's figures by series name: each ok case's time median (`time`), its
/// memory figures and its other metrics.
pub fn figures(run: &RunResults) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for (key, c) in matching::index(run) {
        if !c.outcome.is_ok() {
            continue;
        }
        if let Some(t) = &c.timing {
            out.push((format!("{key} time"), t.median_ns));
        }
        if let Some(s) = &c.simulated {
            out.push((format!("{key} simulated.instructions"), s.instructions as f64));
            out.push((format!("{key} simulated.estimated_cycles"), s.estimated_cycles as f64));
        }
        let mem = matching::memory_figures(c);
        for (name, v) in &mem {
            out.push((format!("{key} {name}"), *v));
        }
        for (name, v) in &c.metrics {
            if !mem.contains_key(name) && v.is_finite() {
                out.push((format!("{key} {name}"), *v));
            }
        }
    }
    out
}

/// Where the mean of `values` steps: binary segmentation with the L2 cost.
/// A split is kept when it lowers the cost by more than a BIC penalty, 2·σ²·ln n,
/// with σ estimated robustly from the median absolute first difference; a
/// series with no noise at all (exact memory figures) changes wherever it
/// changes. Returns the indices where new levels start, ascending.
pub fn change_points(values: &[f64]) -> Vec<usize> {
    let n = values.len();
    if n < 2 || values.iter().all(|&v| v == values[0]) {
        return Vec::new();
    }
    let mut diffs: Vec<f64> = values.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
    let mad = crate::check::stats::median_in_place(&mut diffs);
    // |difference of two N(0, σ²)| has median 0.6745·√2·σ.
    let sigma = mad / (0.6745 * std::f64::consts::SQRT_2);
    // Centred, so the sums of squares below do not cancel catastrophically.
    let mean = values.iter().sum::<f64>() / n as f64;
    let mut s1 = vec![0.0; n + 1];
    let mut s2 = vec![0.0; n + 1];
    for (i, v) in values.iter().enumerate() {
        let c = v - mean;
        s1[i + 1] = s1[i] + c;
        s2[i + 1] = s2[i] + c * c;
    }
    let cost = |a: usize, b: usize| {
        let (k, s) = ((b - a) as f64, s1[b] - s1[a]);
        (s2[b] - s2[a] - s * s / k).max(0.0)
    };
    // With no noise at all, any real step counts, but not rounding error.
    let penalty = (2.0 * sigma * sigma * (n as f64).ln()).max(1e-9 * cost(0, n));
    let min_len = if sigma > 0.0 { 2 } else { 1 };
    let mut found = Vec::new();
    let mut stack = vec![(0usize, n)];
    while let Some((a, b)) = stack.pop() {
        if b - a < 2 * min_len {
            continue;
        }
        let whole = cost(a, b);
        let best = (a + min_len..=b - min_len).map(|t| (t, cost(a, t) + cost(t, b))).min_by(|x, y| x.1.total_cmp(&y.1));
        if let Some((t, c)) = best
            && whole - c > penalty
        {
            found.push(t);
            stack.push((a, t));
            stack.push((t, b));
        }
    }
    found.sort_unstable();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_points_known_answers() {
        assert!(change_points(&[5.0; 50]).is_empty(), "flat");
        assert!(change_points(&[42.4123456789; 1000]).is_empty(), "flat, where sums of squares would round");
        let mut late = vec![41.8; 999];
        late.push(41.9);
        assert_eq!(change_points(&late), vec![999], "an exact series steps wherever it changes");
        // An exact memory series that steps once by 2 MiB.
        let mut mem = vec![1048576.0; 10];
        mem.extend([3145728.0; 5]);
        assert_eq!(change_points(&mem), vec![10]);
        // Noisy times that step by 30 % at 40, deterministic noise.
        let noise = |i: usize| ((i * 7919 % 101) as f64 / 101.0 - 0.5) * 0.1;
        let t: Vec<f64> = (0..80).map(|i| (if i < 40 { 1.0 } else { 1.3 }) + noise(i)).collect();
        assert_eq!(change_points(&t), vec![40]);
        // Noise alone: no change.
        let flat: Vec<f64> = (0..80).map(|i| 1.0 + noise(i)).collect();
        assert!(change_points(&flat).is_empty(), "{:?}", change_points(&flat));
    }

    fn temp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("vramlab-history-{}-{tag}.sqlite", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    /// A one-case run whose segment is `segment_bytes` and whose samples sit at `time_ns`.
    fn run(commit: &str, segment_bytes: u64, time_ns: f64) -> RunResults {
        serde_json::from_value(serde_json::json!({
            "schema_version": 1, "vramlab_version": "0.1.0", "started_at": "2026-11-24T00:00:00Z",
            "options": {"suites": [], "device": "cpu", "quick": true, "samples": null, "seed": 42, "capacity_bytes": 1},
            "environment": {"cpu_model": "Test CPU", "cpu_cores": 2, "host_memory_bytes": 1, "gpus": [],
                "gpu_unavailable_reason": null, "device": "cpu", "os": "linux", "rustc": null, "git_commit": commit},
            "suites": [{"name": "memory", "description": "", "device": "cpu", "duration_ns": 1, "findings": [],
                "cases": [{"name": "frag", "params": {"n": 1}, "outcome": {"status": "ok"}, "memory": null,
                    "notes": [], "duration_ns": 1, "metrics": {"segment_bytes": segment_bytes, "bandwidth_gbps": 2.0},
                    "timing": {"clock": "host", "iterations_per_sample": 1, "median_ns": time_ns, "p25_ns": time_ns,
                        "p75_ns": time_ns, "iqr_ns": 0.0, "min_ns": time_ns, "max_ns": time_ns, "mean_ns": time_ns,
                        "samples_ns": [time_ns]}}]}]
        }))
        .unwrap()
    }

    #[test]
    fn runs_round_trip_and_a_memory_step_is_marked() {
        let p = temp("roundtrip");
        let mut h = History::open_or_create(&p).unwrap();
        for i in 0..12u64 {
            let seg = if i < 8 { 20 << 20 } else { 22 << 20 };
            assert_eq!(h.append(&run(&format!("c{i}"), seg, 1000.0 + (i % 3) as f64)).unwrap(), i as i64 + 1);
        }
        drop(h);
        let h = History::open_existing(&p).unwrap();
        assert_eq!(h.runs().unwrap(), 12);
        let all = h.trends(None, 100).unwrap();
        let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "memory/frag {\"n\":1} (cpu) bandwidth_gbps",
                "memory/frag {\"n\":1} (cpu) segment_bytes",
                "memory/frag {\"n\":1} (cpu) time"
            ]
        );
        let seg = h.trends(Some("*SEGMENT_bytes"), 100).unwrap();
        assert_eq!(seg.len(), 1, "patterns are case-insensitive");
        assert_eq!(seg[0].points.len(), 12);
        assert_eq!(seg[0].change_points, vec![8], "the step from 20 to 22 MiB at the 9th run");
        assert_eq!(seg[0].points[8].git_commit.as_deref(), Some("c8"));
        assert_eq!(seg[0].points[8].environment, "Test CPU ×2; GPUs: none; device cpu");
        let last = h.trends(Some("*segment_bytes"), 3).unwrap();
        assert_eq!(last[0].points.iter().map(|p| p.run_id).collect::<Vec<_>>(), [10, 11, 12]);
        assert!(last[0].change_points.is_empty());
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn noise_floors_come_from_runs_of_one_build() {
        let p = temp("noise");
        let mut h = History::open_or_create(&p).unwrap();
        // Commit a twice at 1000 and 1100 ns, commit b three times at 2000 ns, commit c once.
        for (commit, t) in [("a", 1000.0), ("a", 1100.0), ("b", 2000.0), ("b", 2000.0), ("b", 2000.0), ("c", 5000.0)] {
            h.append(&run(commit, 1 << 20, t)).unwrap();
        }
        let floors = h.noise_floors(" time", 100).unwrap();
        assert_eq!(floors.len(), 1, "{floors:?}");
        let f = &floors[0];
        assert_eq!((f.builds, f.runs), (2, 5));
        // ln(1.1)/√2 within a, 0 within b; pooled over 1 + 2 degrees of freedom.
        let sigma = (1.1f64.ln().powi(2) / 2.0 / 3.0).sqrt();
        assert!((f.between_run - sigma).abs() < 1e-12, "{f:?}");
        assert!((f.floor - ((1.959_964 * 2f64.sqrt() * sigma).exp() - 1.0)).abs() < 1e-12);
        assert!(noise_floor("x".into(), [[1.0].as_slice()].into_iter()).is_none(), "no build twice");
        // Without commit a's runs, only b's (σ 0) teach the noise.
        let without = h.noise_floors_without(" time", 100, &["a"], None).unwrap();
        // Keyed by machine: another testbed's runs teach nothing here.
        assert!(h.noise_floors_without(" time", 100, &[], Some("another machine")).unwrap().is_empty());
        let here = environment_label(&run("a", 1 << 20, 1000.0));
        assert!(!h.noise_floors_without(" time", 100, &[], Some(&here)).unwrap().is_empty());
        assert_eq!((without[0].builds, without[0].runs), (1, 3), "{without:?}");
        assert!(without[0].between_run < 1e-12 && without[0].robust_between_run < 1e-12, "{without:?}");
        // One run in six that took twice as long moves σ, not its robust twin;
        // a figure that lands in one of two speeds moves both.
        let ln = |v: &[f64]| v.iter().map(|x: &f64| x.ln()).collect::<Vec<_>>();
        let outlier = ln(&[1.01, 0.958, 1.86, 0.952, 0.947, 0.954]);
        let f = noise_floor("o".into(), [outlier.as_slice()].into_iter()).unwrap();
        assert!(f.between_run > 0.25 && f.robust_between_run < 0.02, "{f:?}");
        let two_speeds = ln(&[0.80, 1.11, 0.89, 1.10, 0.74, 0.81]);
        let f = noise_floor("t".into(), [two_speeds.as_slice()].into_iter()).unwrap();
        assert!(f.robust_between_run > 0.12, "{f:?}");
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn corrupt_and_newer_databases_are_reported_and_kept() {
        let p = temp("corrupt");
        std::fs::write(&p, b"this is not sqlite at all, but it is long enough to look like a header......").unwrap();
        let before = std::fs::read(&p).unwrap();
        let e = History::open_or_create(&p).unwrap_err().to_string();
        assert!(e.contains(&p.display().to_string()) && e.contains("corrupt"), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), before, "never overwritten");
        let _ = std::fs::remove_file(&p);

        let p = temp("newer");
        let c = Connection::open(&p).unwrap();
        c.execute_batch("CREATE TABLE x (a); PRAGMA user_version = 7;").unwrap();
        drop(c);
        let e = History::open_or_create(&p).unwrap_err().to_string();
        assert!(e.contains("schema version 7"), "{e}");
        let e = History::open_existing(&p).unwrap_err().to_string();
        assert!(e.contains("schema version 7"), "{e}");
        let _ = std::fs::remove_file(&p);

        let e = History::open_existing(&temp("missing")).unwrap_err().to_string();
        assert!(e.contains("no such file"), "{e}");
    }
}
