//! The pipeline's third step: a verdict for each figure. Outcomes and memory
//! are judged on their own (memory exactly, against its tolerance); times in
//! two passes; simulated-CPU figures against a tolerance, with the functions
//! that grew most (a differential profile); times in two passes — each time's estimate from its runs (the hierarchical bootstrap
//! over runs then samples, or over A/B pairs), then Benjamini–Hochberg over
//! every time that was estimated and the verdicts that depend on it.

use vramlab_display::format::fmt_ns;
use vramlab_suites::Outcome;

use super::config::CheckConfig;
use super::figures::simulated_value;
use super::figures::{Evidence, Figure, SIMULATED_CHOICE, amount_text};
use super::model::{Design, FunctionChange, Kind, KnownNoise, MIN_SAMPLES, Row, Status};
use super::stats::{self, RunsEstimate, Unjudged};
use vramlab_suites::SimulatedCpu;

/// How the times are judged, and whether they are at all.
#[derive(Debug, Clone, Copy)]
pub struct TimeRules<'a> {
    pub design: Design,
    /// False when the machines differ and times were not forced.
    pub compared: bool,
    /// Between-run noise known from the history (`--history`).
    pub known: Option<&'a KnownNoise>,
}

/// Every figure's verdict, in the figures' order.
pub fn judge(figures: &[Figure<'_>], cfg: &CheckConfig, times: TimeRules) -> Vec<Row> {
    let mut rows: Vec<Row> = figures
        .iter()
        .map(|f| match &f.evidence {
            Evidence::Outcome { old, new } => outcome(f, old, new),
            Evidence::Memory { old, new } => memory(f, *old, *new),
            Evidence::Simulated { old, new } => simulated(f, old, new),
            Evidence::Time { old, new } => time(f, old, new, cfg, times),
        })
        .collect();
    adjust_times(&mut rows, cfg, times.design);
    rows
}

fn row(f: &Figure<'_>, kind: Kind, status: Status, detail: String) -> Row {
    Row {
        case: f.case.clone(),
        metric: f.metric.clone(),
        kind,
        status,
        old: None,
        new: None,
        change: None,
        ratio_interval: None,
        p_slower: None,
        q_slower: None,
        detectable_slowdown: None,
        runs: None,
        between_run: None,
        known_between_run: None,
        threshold: 0.0,
        gated: true,
        detail,
        grew_most: Vec::new(),
        gated_by_simulation: false,
        p_faster: None,
        estimate: None,
    }
}

fn outcome(f: &Figure<'_>, old: &Outcome, new: &Outcome) -> Row {
    let (status, detail) = match (old, new) {
        (Outcome::Ok, Outcome::Failed { message }) => (
            if f.rule.ignore { Status::NotCompared } else { Status::Regression },
            format!("passed in the baseline, fails now: {message}"),
        ),
        (Outcome::Failed { message }, Outcome::Ok) => {
            (Status::Improvement, format!("failed in the baseline ({message}), passes now"))
        }
        (Outcome::Failed { .. }, Outcome::Failed { message }) => {
            (Status::NotCompared, format!("fails on both sides: {message}"))
        }
        (Outcome::NotAvailable { reason }, Outcome::NotAvailable { .. }) => {
            (Status::NotCompared, format!("not available on either side: {reason}"))
        }
        (Outcome::NotAvailable { reason }, _) => {
            (Status::NotCompared, format!("not available in the baseline: {reason}"))
        }
        (_, Outcome::NotAvailable { reason }) => (Status::NotCompared, format!("not available in this run: {reason}")),
        (Outcome::Ok, Outcome::Ok) => (Status::NoChange, "passes on both sides".to_owned()),
    };
    row(f, Kind::Outcome, status, detail)
}

fn memory(f: &Figure<'_>, old: Option<f64>, new: Option<f64>) -> Row {
    let (old_v, new_v) = match (old, new) {
        (Some(o), Some(n)) => (o, n),
        (Some(o), None) => {
            let mut r = row(f, Kind::Memory, Status::NotCompared, "in the baseline only".into());
            r.old = Some(o);
            return r;
        }
        (None, n) => {
            let mut r = row(f, Kind::Memory, Status::NotCompared, "not in the baseline".into());
            r.new = n;
            return r;
        }
    };
    let rule = f.rule;
    let diff = new_v - old_v;
    let tol = rule.memory_tolerance_bytes as f64;
    let is_bytes = f.metric.ends_with("_bytes");
    let status = if rule.ignore {
        Status::NotCompared
    } else if diff > tol {
        Status::Regression
    } else if diff < 0.0 {
        Status::Improvement
    } else {
        Status::NoChange
    };
    let detail = if diff == 0.0 {
        format!("{} on both sides", amount_text(new_v, is_bytes))
    } else {
        format!(
            "{} → {} ({}{}{})",
            amount_text(old_v, is_bytes),
            amount_text(new_v, is_bytes),
            if diff > 0.0 { "+" } else { "−" },
            amount_text(diff.abs(), is_bytes),
            if rule.ignore {
                ", ignored by vramlab.toml".to_owned()
            } else if diff > 0.0 && diff <= tol {
                format!(", within the tolerance of {}", amount_text(tol, is_bytes))
            } else {
                String::new()
            }
        )
    };
    let mut r = row(f, Kind::Memory, status, detail);
    (r.old, r.new, r.change, r.threshold) = (Some(old_v), Some(new_v), Some(diff), tol);
    r
}

/// Functions named in a simulated row's detail.
const NAMED_FUNCTIONS: usize = 3;

/// A simulated figure: a change beyond the tolerance (a fraction of the
/// baseline's count) and beyond the figure's floor (a count) is a regression
/// or an improvement; with the functions whose own instructions grew most.
fn simulated(f: &Figure<'_>, old: &SimulatedCpu, new: &SimulatedCpu) -> Row {
    if f.metric == SIMULATED_CHOICE {
        let choice = |s: &SimulatedCpu| s.timed_choice.clone().unwrap_or_default();
        return row(
            f,
            Kind::Simulated,
            Status::NotCompared,
            format!(
                "the counted calls ran different choices made by the clock ({} → {}, as benchmark mode chose in each \
                 timed run): their simulated figures count different code and are not compared; the case's time \
                 gates it",
                choice(old),
                choice(new)
            ),
        );
    }
    let (o, n) = (simulated_value(old, &f.metric), simulated_value(new, &f.metric));
    let tol = f.rule.simulated_tolerance;
    let cycles = f.metric.ends_with("estimated_cycles");
    let floor = if cycles { f.rule.simulated_floor_estimated_cycles } else { f.rule.simulated_floor_instructions };
    let change = if o > 0 {
        n as f64 / o as f64 - 1.0
    } else if n > 0 {
        f64::INFINITY
    } else {
        0.0
    };
    let beyond_floor = n.abs_diff(o) > floor;
    let status = if f.rule.ignore {
        Status::NotCompared
    } else if change > tol && beyond_floor {
        Status::Regression
    } else if change < -tol && beyond_floor {
        Status::Improvement
    } else {
        Status::NoChange
    };
    let what = if cycles { "estimated cycles" } else { "instructions" };
    let mut detail = if o == n {
        format!("{} {what} on both sides (simulated)", group(n))
    } else {
        format!(
            "{} → {} {what} ({:+.2} %, simulated; tolerance ±{} % and ±{} {what}{})",
            group(o),
            group(n),
            change * 100.0,
            tol * 100.0,
            group(floor),
            if f.rule.ignore {
                ", ignored by vramlab.toml"
            } else if change.abs() > tol && !beyond_floor {
                ": within the floor"
            } else {
                ""
            }
        )
    };
    let grew = grew_most(old, new);
    if n > o && !grew.is_empty() {
        let named: Vec<String> =
            grew.iter().take(NAMED_FUNCTIONS).map(|c| format!("{} +{}", c.name, group(c.growth() as u64))).collect();
        detail.push_str(&format!("; grew most: {}", named.join(", ")));
    }
    let mut r = row(f, Kind::Simulated, status, detail);
    (r.old, r.new, r.change, r.threshold) = (Some(o as f64), Some(n as f64), Some(change), tol);
    if n > o {
        r.grew_most = grew;
    }
    r
}

/// The functions whose own instructions grew, most first (a function kept on
/// one side only counts 0 on the other).
pub fn grew_most(old: &SimulatedCpu, new: &SimulatedCpu) -> Vec<FunctionChange> {
    let mut by_name: std::collections::BTreeMap<&str, FunctionChange> = std::collections::BTreeMap::new();
    for f in &old.functions {
        by_name.entry(&f.name).or_insert(FunctionChange { name: f.name.clone(), old: None, new: None }).old =
            Some(f.instructions);
    }
    for f in &new.functions {
        by_name.entry(&f.name).or_insert(FunctionChange { name: f.name.clone(), old: None, new: None }).new =
            Some(f.instructions);
    }
    let mut grew: Vec<FunctionChange> = by_name.into_values().filter(|c| c.growth() > 0).collect();
    grew.sort_by(|a, b| b.growth().cmp(&a.growth()).then_with(|| a.name.cmp(&b.name)));
    grew.truncate(10);
    grew
}

/// A count with thin spaces between thousands: 1 234 567.
fn group(v: u64) -> String {
    let digits = v.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(ch);
    }
    out
}

/// The geometric mean of the runs' medians: a side's time.
fn typical(runs: &[&[f64]]) -> f64 {
    let logs: Vec<f64> = runs.iter().map(|s| stats::median(s)).filter(|m| *m > 0.0).map(f64::ln).collect();
    if logs.is_empty() { 0.0 } else { (logs.iter().sum::<f64>() / logs.len() as f64).exp() }
}

/// The message of a time that one run on each side cannot judge.
pub const NOISE_UNKNOWN: &str = "one run on each side: the noise between runs is unknown, so the time is not judged — make the baseline several runs (`bench --repeat N --save-baseline NAME`, or `--save-baseline NAME --append`)";

/// A time's estimate and provisional verdict (Inconclusive until [`adjust_times`]).
fn time(f: &Figure<'_>, old: &[&[f64]], new: &[&[f64]], cfg: &CheckConfig, times: TimeRules) -> Row {
    let rule = f.rule;
    let mut r = row(f, Kind::Time, Status::Inconclusive, String::new());
    // A CPU case with simulated figures on both sides is gated by them: its
    // time is judged and reported, not gated (unless gate_simulated_times).
    let gated = rule.gate_times && (!f.simulated || rule.gate_simulated_times);
    (r.old, r.new, r.threshold, r.gated) = (Some(typical(old)), Some(typical(new)), rule.time_threshold, gated);
    r.gated_by_simulation = rule.gate_times && !gated;
    r.runs = Some((old.len(), new.len()));
    if rule.ignore {
        r.status = Status::NotCompared;
        r.detail = "ignored by vramlab.toml".into();
        return r;
    }
    if !times.compared {
        r.status = Status::NotCompared;
        r.detail = "times are not compared across machines".into();
        return r;
    }
    let seed = cfg.seed ^ fnv1a(&format!("{}", f.case));
    let (b, conf) = (cfg.bootstrap_resamples, cfg.confidence);
    let estimate = match times.design {
        Design::Runs => stats::hierarchical_ratio(old, new, MIN_SAMPLES, b, conf, seed),
        Design::Pairs => {
            let pairs: Vec<(&[f64], &[f64])> = old.iter().copied().zip(new.iter().copied()).collect();
            stats::paired_ratio(&pairs, MIN_SAMPLES, b, conf, seed)
        }
    };
    // Noise the history knows and these runs did not show (a figure whose
    // process lands in one of two speeds, say) widens the interval.
    let known = times.known.and_then(|k| k.time(&f.case));
    let observed = estimate.as_ref().ok().map(|e| e.between_run);
    let estimate = estimate.map(|e| match known {
        Some((sigma, _)) if sigma > e.between_run => {
            r.known_between_run = Some(sigma);
            stats::with_between_run(&e, sigma, conf)
        }
        _ => e,
    });
    let cap = cfg.max_time_noise_percent / 100.0;
    match estimate {
        Ok(e) if e.between_run > cap => {
            // Too noisy to gate here: an interval this wide would only ever say
            // "inconclusive"; say why instead, and the check warns.
            r.between_run = observed;
            r.change = Some(e.interval.ratio - 1.0);
            r.ratio_interval = Some((e.interval.lower, e.interval.upper));
            r.detail = format!(
                "{UNGATEABLE}: ±{:.1} % between runs{} (max_time_noise_percent = {}); median {} → {}",
                e.between_run * 100.0,
                if r.known_between_run.is_some() { " as the history's runs of one build show" } else { "" },
                cfg.max_time_noise_percent,
                fmt_ns(r.old.unwrap_or(0.0)),
                fmt_ns(r.new.unwrap_or(0.0)),
            );
        }
        Ok(e) => {
            r.change = Some(e.interval.ratio - 1.0);
            r.ratio_interval = Some((e.interval.lower, e.interval.upper));
            r.detectable_slowdown = Some(stats::detectable_ratio_runs(&e, conf, rule.time_threshold) - 1.0);
            r.between_run = observed;
            r.p_slower = Some(e.p_slower);
            r.p_faster = Some(e.p_faster);
            r.estimate = Some(e);
        }
        Err(Unjudged::BetweenRunNoiseUnknown) => {
            r.status = Status::NotCompared;
            r.detail = if times.design == Design::Pairs {
                "one A/B pair: the noise between pairs is unknown, so the time is not judged — run at least 2 pairs"
                    .into()
            } else {
                NOISE_UNKNOWN.into()
            };
        }
        Err(Unjudged::TooFewSamples { fewest }) => {
            r.detail = format!("too few samples to judge (a run has {fewest}; at least {MIN_SAMPLES} each)");
        }
        Err(Unjudged::NoPositiveSamples) => r.detail = "no positive samples to compare".into(),
    }
    r
}

/// Benjamini–Hochberg over every estimated time, then each time's verdict: a
/// regression when its whole interval lies above the threshold and its
/// adjusted p-value is within the false discovery rate.
fn adjust_times(rows: &mut [Row], cfg: &CheckConfig, design: Design) {
    let tested: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].estimate.is_some()).collect();
    let adjusted = |p: fn(&Row) -> Option<f64>| {
        stats::benjamini_hochberg(&tested.iter().map(|&i| p(&rows[i]).unwrap_or(1.0)).collect::<Vec<_>>())
    };
    let q_slower = adjusted(|r| r.p_slower);
    let q_faster = adjusted(|r| r.p_faster);
    for (j, &i) in tested.iter().enumerate() {
        let r = &mut rows[i];
        let Some(e) = r.estimate else { continue };
        r.q_slower = Some(q_slower[j]);
        verdict(r, &e, (q_slower[j], q_faster[j]), cfg, design);
    }
}

fn verdict(r: &mut Row, e: &RunsEstimate, (q_slower, q_faster): (f64, f64), cfg: &CheckConfig, design: Design) {
    let (ci, t) = (e.interval, r.threshold);
    let slower = ci.lower > 1.0 + t && q_slower <= cfg.false_discovery_rate;
    let faster = ci.upper < 1.0 / (1.0 + t) && q_faster <= cfg.false_discovery_rate;
    let within = ci.lower >= 1.0 / (1.0 + t) && ci.upper <= 1.0 + t;
    r.status = if slower && r.gated {
        Status::Regression
    } else if slower {
        Status::Inconclusive
    } else if faster {
        Status::Improvement
    } else if within {
        Status::NoChange
    } else {
        Status::Inconclusive
    };
    let pct = |x: f64| format!("{:+.1} %", (x - 1.0) * 100.0);
    let (direction, p, q) =
        if ci.ratio < 1.0 { ("faster", e.p_faster, q_faster) } else { ("slower", e.p_slower, q_slower) };
    let (k_old, k_new) = e.runs;
    let runs = if design == Design::Pairs {
        format!("{k_old} A/B pairs")
    } else {
        format!("{k_old} baseline run{} and {k_new} of this build", if k_old == 1 { "" } else { "s" })
    };
    let noise = match (r.known_between_run, r.between_run) {
        (Some(known), Some(seen)) => format!(
            "±{:.1} % between runs as the history's runs of one build show (these runs: ±{:.1} %)",
            known * 100.0,
            seen * 100.0
        ),
        _ => format!("±{:.1} % between runs", e.between_run * 100.0),
    };
    r.detail = format!(
        "median {} → {} ({}; {:.0} % interval {} to {}; {runs}, {noise}; p({direction}) = {:.2e}, BH-adjusted {:.2e}){}",
        fmt_ns(r.old.unwrap_or(0.0)),
        fmt_ns(r.new.unwrap_or(0.0)),
        pct(ci.ratio),
        cfg.confidence * 100.0,
        pct(ci.lower),
        pct(ci.upper),
        p,
        q,
        match r.status {
            _ if slower && r.gated_by_simulation => {
                "; slower, but this CPU case is gated by its simulated figures (gate_simulated_times = false)"
                    .to_owned()
            }
            _ if slower && !r.gated => "; slower, but times are not gated here (gate_times = false)".to_owned(),
            Status::Regression | Status::Improvement => String::new(),
            _ => format!(
                "; could detect a slowdown of {:.0} % or more",
                r.detectable_slowdown.unwrap_or(f64::NAN) * 100.0
            ),
        }
    );
}

/// The start of a time row too noisy to judge.
pub const UNGATEABLE: &str = "too noisy to gate on this machine";

/// FNV-1a of a string: a stable per-case seed offset (std's hasher is not
/// stable across releases), so a case's verdict does not depend on the others.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}
