//! The memory gate of a PyTorch program: two sets of snapshot figures
//! ([`MemoryFigures`]: a baseline saved by `record --save-baseline`, a
//! snapshot, a `record` folder) compared per rank and device. Each figure goes
//! through the bench gate's own steps — its rule from `vramlab.toml`
//! ([`CheckConfig::resolve`], suite `snapshot`, case `rank R` or `process`), the
//! exact memory judgement ([`judge::judge`]) — and the result is a
//! [`Comparison`], rendered by the same writers (terminal, `regressions.md`,
//! GitHub annotations, JSON) with the call paths whose bytes at the allocated
//! peak moved most ([`PathMove`]). A figure either side cannot know (a trace
//! that does not start at the first allocation) is not compared, and says why.

use std::collections::{BTreeMap, HashMap};

use vramlab_snapshot::{FIGURES, MemoryFigures, RankFigures};

use super::config::CheckConfig;
use super::figures::{Evidence, Figure};
use super::judge::{self, TimeRules};
use super::matching::CaseKey;
use super::model::{Comparison, Design, Kind, Labels, Method, PathMove, Status};

/// The suite name snapshot figures are judged under (`[suite.snapshot]`,
/// `[case."snapshot/rank 0"]` in vramlab.toml), apart from the bench's `memory` suite.
pub const SUITE: &str = "snapshot";

/// Call paths listed per comparison.
pub const PATHS_LISTED: usize = 10;

/// Each rank's key: `rank R` (or `process` for a snapshot without a rank in
/// its name; `#2`… for more of them, in file order) and `cuda:D`.
fn keyed(figures: &MemoryFigures) -> Vec<(CaseKey, &RankFigures)> {
    let mut seen: BTreeMap<(String, usize), usize> = BTreeMap::new();
    figures
        .ranks
        .iter()
        .map(|r| {
            let mut case = r.rank.as_ref().map_or_else(|| "process".to_owned(), |k| format!("rank {k}"));
            let n = seen.entry((case.clone(), r.device)).or_insert(0);
            *n += 1;
            if *n > 1 {
                case = format!("{case}#{n}");
            }
            let key = CaseKey { suite: SUITE.into(), case, params: "{}".into(), device: format!("cuda:{}", r.device) };
            (key, r)
        })
        .collect()
}

/// Compares `current` with `baseline`, rank by rank and device by device.
pub fn compare_memory(
    baseline: &MemoryFigures,
    current: &MemoryFigures,
    cfg: &CheckConfig,
    labels: Labels,
) -> Comparison {
    let (old, new) = (keyed(baseline), keyed(current));
    let old_by_key: HashMap<&CaseKey, &RankFigures> = old.iter().map(|(k, r)| (k, *r)).collect();
    let mut figures = Vec::new();
    let mut unknown: Vec<Option<String>> = Vec::new();
    let mut call_paths = Vec::new();
    let mut notes = Vec::new();
    for (key, n) in &new {
        let Some(o) = old_by_key.get(key) else { continue };
        for (name, _) in FIGURES {
            let why = |r: &RankFigures| r.figures.iter().find(|f| f.name == name).and_then(|f| f.not_known.clone());
            unknown.push(
                why(o)
                    .map(|w| format!("not known in the baseline: {w}"))
                    .or_else(|| why(n).map(|w| format!("not known here: {w}"))),
            );
            figures.push(Figure {
                case: key.clone(),
                metric: name.to_owned(),
                rule: cfg.resolve(&key.suite, &key.case, name),
                evidence: Evidence::Memory {
                    old: o.value(name).map(|v| v as f64),
                    new: n.value(name).map(|v| v as f64),
                },
                simulated: false,
            });
        }
        call_paths.extend(path_moves(key, o, n));
        for (side, r) in [("the baseline's", o), ("this", n)] {
            if let Some(e) = &r.estimate {
                notes.push(format!("{key}: {side} snapshot {} is {e}: its figures are not a recording's", r.file));
            }
            if r.fidelity_agrees == Some(false) {
                notes.push(format!(
                    "{key}: {side} replay of {} disagrees with its recording: its figures are the model's, not PyTorch's (`vramlab replay` says where)",
                    r.file
                ));
            }
        }
    }
    let times = TimeRules { design: Design::Runs, compared: false, known: None };
    let mut rows = judge::judge(&figures, cfg, times);
    for (row, why) in rows.iter_mut().zip(unknown) {
        if let Some(why) = why {
            row.status = Status::NotCompared;
            row.detail = why;
        }
    }
    rows.sort_by(|a, b| {
        let rel = |r: &super::Row| r.change.unwrap_or(0.0) / r.old.unwrap_or(0.0).max(1.0);
        a.status.cmp(&b.status).then_with(|| rel(b).abs().total_cmp(&rel(a).abs())).then_with(|| a.case.cmp(&b.case))
    });
    call_paths.sort_by(|a: &PathMove, b| {
        b.change_bytes.unsigned_abs().cmp(&a.change_bytes.unsigned_abs()).then_with(|| a.label.cmp(&b.label))
    });
    call_paths.truncate(PATHS_LISTED);
    let only = |a: &[(CaseKey, &RankFigures)], b: &[(CaseKey, &RankFigures)]| -> Vec<CaseKey> {
        a.iter().filter(|(k, _)| !b.iter().any(|(j, _)| j == k)).map(|(k, _)| k.clone()).collect()
    };
    let pytorch = new.iter().chain(&old).any(|(_, r)| r.figures.iter().any(|f| f.from_pytorch));
    if pytorch {
        notes.push(
            "figures PyTorch's memory_stats() holds are PyTorch's own, read at the dump (NAME.stats.json beside the snapshot)"
                .into(),
        );
    }
    Comparison {
        baseline: labels.baseline,
        current: labels.current,
        baseline_commit: None,
        current_commit: None,
        only_in_baseline: only(&old, &new),
        only_in_current: only(&new, &old),
        rows,
        environment_differences: Vec::new(),
        times_compared: false,
        notes,
        warnings: Vec::new(),
        method: Method::new(cfg, Design::Runs, 0, 0, (1, 1)),
        call_paths,
    }
}

/// The call paths of one rank whose bytes at the allocated peak changed. A
/// path is matched by its label and frames; one left over on each side whose
/// frames differ only in line numbers (an edit above them moved the lines) is
/// then matched to the other side's with the same functions nearest in bytes,
/// and shown under its new lines.
fn path_moves(key: &CaseKey, old: &RankFigures, new: &RankFigures) -> Vec<PathMove> {
    type Path<'a> = (&'a str, &'a [String]);
    let mut before: BTreeMap<Path, u64> = BTreeMap::new();
    let mut after: BTreeMap<Path, u64> = BTreeMap::new();
    for p in &old.paths {
        *before.entry((&p.label, &p.user_frames)).or_default() += p.bytes;
    }
    for p in &new.paths {
        *after.entry((&p.label, &p.user_frames)).or_default() += p.bytes;
    }
    let mut pairs: Vec<(Path, u64, u64)> = Vec::new();
    let mut unmatched_old: Vec<(Path, u64)> = Vec::new();
    for (path, b) in before {
        match after.remove(&path) {
            Some(a) => pairs.push((path, b, a)),
            None => unmatched_old.push((path, b)),
        }
    }
    let mut unmatched_new: Vec<(Path, u64)> = after.into_iter().collect();
    for (path, b) in unmatched_old {
        let functions = without_lines(path);
        let nearest = unmatched_new
            .iter()
            .enumerate()
            .filter(|(_, (p, _))| without_lines(*p) == functions)
            .min_by_key(|(_, (_, a))| a.abs_diff(b))
            .map(|(i, _)| i);
        match nearest {
            Some(i) => {
                let (p, a) = unmatched_new.remove(i);
                pairs.push((p, b, a));
            }
            None => pairs.push((path, b, 0)),
        }
    }
    pairs.extend(unmatched_new.into_iter().map(|(p, a)| (p, 0, a)));
    pairs
        .into_iter()
        .filter(|(_, b, a)| a != b)
        .map(|((label, frames), before, after)| PathMove {
            case: key.clone(),
            label: label.to_owned(),
            user_frames: frames.to_vec(),
            before_bytes: before,
            after_bytes: after,
            change_bytes: (after as i128 - before as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64,
        })
        .collect()
}

/// A path's label and frames without line numbers (`train.py:42:forward` →
/// `train.py:forward`).
fn without_lines((label, frames): (&str, &[String])) -> Vec<String> {
    let strip = |f: &str| -> String {
        let parts: Vec<&str> = f.rsplitn(3, ':').collect();
        match parts.as_slice() {
            [function, line, file] if line.chars().all(|c| c.is_ascii_digit()) => format!("{file}:{function}"),
            _ => f.to_owned(),
        }
    };
    std::iter::once(label).chain(frames.iter().map(String::as_str)).map(strip).collect()
}

/// Whether a row is one of the memory gate's (for the writers' wording).
pub fn is_memory_gate(c: &Comparison) -> bool {
    c.rows.iter().all(|r| r.kind == Kind::Memory && r.case.suite == SUITE) && c.method.time_tests == 0
}

#[cfg(test)]
mod tests {
    use vramlab_snapshot::{GateFigure, PathBytes};

    use super::*;

    fn rank(peak: u64, paths: &[(&str, u64)]) -> RankFigures {
        let figures = FIGURES
            .iter()
            .map(|(name, _)| GateFigure {
                name: (*name).to_owned(),
                value: Some(if *name == "peak_allocated_bytes" { peak } else { 7 }),
                not_known: None,
                from_pytorch: false,
            })
            .collect();
        let paths = paths
            .iter()
            .map(|(l, b)| PathBytes { label: (*l).into(), user_frames: vec![(*l).into()], bytes: *b, blocks: 1 })
            .collect();
        RankFigures {
            file: "x.pickle".into(),
            rank: Some("0".into()),
            device: 0,
            figures,
            fidelity_agrees: Some(true),
            paths,
            estimate: None,
        }
    }

    fn figures(ranks: Vec<RankFigures>) -> MemoryFigures {
        MemoryFigures::new("t".into(), ranks)
    }

    #[test]
    fn the_same_figures_are_no_regression() {
        let a = figures(vec![rank(100, &[("a.py:1:f", 60)])]);
        let c = compare_memory(&a, &a, &CheckConfig::default(), Labels::default());
        assert_eq!((c.exit_code(), c.count(Status::Regression)), (0, 0));
        assert_eq!(c.count(Status::NoChange), FIGURES.len());
        assert!(c.call_paths.is_empty() && is_memory_gate(&c));
    }

    #[test]
    fn a_grown_peak_is_a_regression_and_its_path_comes_first() {
        let a = figures(vec![rank(100, &[("a.py:1:f", 60), ("b.py:2:g", 40)])]);
        let b = figures(vec![rank(164, &[("a.py:1:f", 59), ("b.py:2:g", 104)])]);
        let c = compare_memory(&a, &b, &CheckConfig::default(), Labels::default());
        assert_eq!(c.exit_code(), 1);
        assert_eq!(c.rows[0].metric, "peak_allocated_bytes");
        assert_eq!(c.rows[0].case.to_string(), "snapshot/rank 0 (cuda:0)");
        assert_eq!((c.call_paths[0].label.as_str(), c.call_paths[0].change_bytes), ("b.py:2:g", 64));
        assert_eq!(c.call_paths[1].change_bytes, -1);
        // A tolerance from vramlab.toml lets it through.
        let cfg = CheckConfig::parse("[suite.snapshot]\nmemory_tolerance_bytes = 64\n").unwrap();
        assert_eq!(compare_memory(&a, &b, &cfg, Labels::default()).exit_code(), 0);
    }

    #[test]
    fn a_path_whose_lines_moved_is_matched_by_its_functions_nearest_in_bytes() {
        let a = figures(vec![rank(100, &[("t.py:9:main", 48), ("t.py:3:init", 16)])]);
        let b = figures(vec![rank(124, &[("t.py:8:main", 48), ("t.py:6:main", 24), ("t.py:3:init", 16)])]);
        let c = compare_memory(&a, &b, &CheckConfig::default(), Labels::default());
        let moved: Vec<(&str, i64)> = c.call_paths.iter().map(|p| (p.label.as_str(), p.change_bytes)).collect();
        assert_eq!(moved, [("t.py:6:main", 24)]);
    }

    #[test]
    fn an_unknown_figure_is_not_compared_and_says_why() {
        let a = figures(vec![rank(100, &[])]);
        let mut b = a.clone();
        b.ranks[0].figures[0] = GateFigure {
            name: "peak_allocated_bytes".into(),
            value: None,
            not_known: Some("cut".into()),
            from_pytorch: false,
        };
        let c = compare_memory(&a, &b, &CheckConfig::default(), Labels::default());
        let row = c.rows.iter().find(|r| r.metric == "peak_allocated_bytes").unwrap();
        assert_eq!((row.status, row.detail.as_str()), (Status::NotCompared, "not known here: cut"));
    }

    #[test]
    fn an_estimated_side_is_said_in_the_notes() {
        let a = figures(vec![rank(100, &[])]);
        let mut b = a.clone();
        b.ranks[0].estimate = Some("estimated (no GPU ran): assumed NVIDIA H100, torch 2.11.0".into());
        let c = compare_memory(&a, &b, &CheckConfig::default(), Labels::default());
        let note = c.notes.iter().find(|n| n.contains("estimated")).expect("a note");
        assert!(note.contains("this snapshot x.pickle is estimated (no GPU ran)"), "{note}");
        assert!(!c.notes.iter().any(|n| n.contains("the baseline's snapshot")), "{:?}", c.notes);
    }
}
