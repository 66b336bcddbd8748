//! `vramlab estimate --search 'NAME=LO..HI' -- CMD …NAME…`: the largest value
//! of NAME that fits the capacity under each setting, found by bisection over
//! real captures (one per value tried, shared by every setting), each answer
//! confirmed by the captures at the value and at one above it. Progress on
//! stderr; the answer as text or `--json`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use vramlab_display::format::fmt_bytes;
use vramlab_snapshot::{Estimate, SnapshotReplayOptions, what_if};

use crate::cli::{EstimateArgs, Search};
use crate::estimate_setup::{Setup, head_lines, refused, whatif_args, with_settings};
use crate::output::write_stdout;

/// One value's capture under every setting.
#[derive(Debug, Clone, Serialize)]
struct Trial {
    value: u64,
    /// Per setting, in the settings' order.
    settings: Vec<Outcome>,
    capture_s: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Outcome {
    /// No out-of-memory under the capacity.
    fits: bool,
    /// Under the capacity (up to the out-of-memory where it does not fit).
    peak_reserved_bytes: u64,
    /// On an unlimited device (where nothing makes the allocator release its cache).
    unlimited_peak_reserved_bytes: u64,
    unlimited_peak_allocated_bytes: u64,
}

/// The answer for one setting.
#[derive(Debug, Clone, Serialize)]
struct Answer {
    alloc_conf: String,
    /// The largest value that fits; `None` when LO does not.
    largest: Option<u64>,
    peak_reserved_bytes: Option<u64>,
    headroom_bytes: Option<u64>,
    /// The value above it (`None` when the largest is HI), captured and out
    /// of memory: what it reserves on an unlimited device.
    next: Option<u64>,
    next_unlimited_peak_reserved_bytes: Option<u64>,
    /// The largest value fits and the one above it does not, both captured.
    confirmed: bool,
}

/// `word` with every NAME in it replaced by `value`.
fn substitute(words: &[String], name: &str, value: u64) -> Vec<String> {
    words.iter().map(|w| w.replace(name, &value.to_string())).collect()
}

pub fn run(args: &EstimateArgs, setup: &Setup, search: &Search) -> anyhow::Result<u8> {
    if !args.command.iter().any(|w| w.contains(&search.name)) {
        crate::output::eprint_line(&format!(
            "error: --search {}: no argument of the command holds {}; write it where the value goes \
             (e.g. --batch {})",
            search.name, search.name, search.name
        ));
        return Ok(2);
    }
    if args.out.is_some() {
        crate::output::eprint_line("note: --out is not written under --search (several captures are made)");
    }
    let wargs = whatif_args(args, setup, args.sweep);
    let configs = crate::whatif_cmd::configs(&wargs)?;
    let base = crate::whatif_cmd::base_options(&wargs, None);
    let started = Instant::now();
    let mut trials: BTreeMap<u64, Trial> = BTreeMap::new();
    let mut marker: Option<Estimate> = None;
    let mut names: Vec<String> = Vec::new();
    // One capture per value, replayed under every setting.
    let mut trial = |value: u64| -> anyhow::Result<Result<Trial, u8>> {
        if let Some(t) = trials.get(&value) {
            return Ok(Ok(t.clone()));
        }
        let command = substitute(&args.command, &search.name, value);
        let began = Instant::now();
        // Without stacks: a search needs the peaks only, and a capture is quicker without.
        let captured = match setup.capture(&command, false)? {
            Ok(c) => c,
            Err(refusal) => {
                crate::output::eprint_line(&format!("{}={value}:", search.name));
                return Ok(Err(refused(&refusal)));
            }
        };
        let snap = with_settings(&captured.snap, &setup.config);
        let replay = |opts: &SnapshotReplayOptions| {
            what_if(&snap, opts, &configs)
                .with_context(|| format!("cannot replay the capture at {}={value}", search.name))
        };
        let results = replay(&base)?;
        let unlimited =
            replay(&SnapshotReplayOptions { capacity_bytes: None, no_capacity_inference: true, ..base.clone() })?;
        if names.is_empty() {
            names =
                results.iter().map(|w| crate::whatif_cmd::setting_name(w, crate::estimate_setup::PROGRAMS)).collect();
        }
        let t = Trial {
            value,
            settings: results
                .iter()
                .zip(&unlimited)
                .map(|(w, u)| Outcome {
                    fits: w.fits(),
                    peak_reserved_bytes: w.replay.peak_reserved_bytes,
                    unlimited_peak_reserved_bytes: u.replay.peak_reserved_bytes,
                    unlimited_peak_allocated_bytes: u.replay.peak_allocated_bytes,
                })
                .collect(),
            capture_s: began.elapsed().as_secs_f64(),
        };
        let fit = t.settings.iter().filter(|o| o.fits).count();
        crate::output::eprint_line(&format!(
            "  {}={value}: reserves {} on an unlimited device; {} setting(s) of {} fit; {:.1} s",
            search.name,
            fmt_bytes(t.settings[0].unlimited_peak_reserved_bytes),
            fit,
            t.settings.len(),
            t.capture_s
        ));
        if marker.is_none() {
            marker = captured.snap.estimate.clone();
        }
        trials.insert(value, t.clone());
        Ok(Ok(t))
    };
    crate::output::eprint_line(&format!(
        "searching {}={}..{} under {} setting(s), capacity {} (a capture per value tried):",
        search.name,
        search.lo,
        search.hi,
        configs.len(),
        fmt_bytes(setup.capacity_bytes)
    ));
    let mut answers = Vec::new();
    for i in 0..configs.len() {
        match bisect(search, i, &mut trial)? {
            Ok(a) => answers.push(a),
            Err(code) => return Ok(code),
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let e = marker.context("no capture was made")?;
    let limit = match args.fraction {
        Some(f) => (setup.capacity_bytes as f64 * f) as u64,
        None => setup.capacity_bytes,
    };
    let answers: Vec<Answer> = answers
        .into_iter()
        .enumerate()
        .map(|(i, (largest, next))| {
            let at = |v: Option<u64>| v.and_then(|v| trials.get(&v)).map(|t| &t.settings[i]);
            Answer {
                alloc_conf: names.get(i).cloned().unwrap_or_default(),
                largest,
                peak_reserved_bytes: at(largest).map(|o| o.peak_reserved_bytes),
                headroom_bytes: at(largest).map(|o| limit.saturating_sub(o.peak_reserved_bytes)),
                next,
                next_unlimited_peak_reserved_bytes: at(next).map(|o| o.unlimited_peak_reserved_bytes),
                confirmed: largest.is_some_and(|l| trials.get(&l).is_some_and(|t| t.settings[i].fits))
                    && next.is_none_or(|n| trials.get(&n).is_some_and(|t| !t.settings[i].fits)),
            }
        })
        .collect();
    let out = if args.json {
        let doc = SearchJson {
            schema_version: 1,
            command: &args.command,
            name: &search.name,
            lo: search.lo,
            hi: search.hi,
            estimate: &e,
            capacity_bytes: setup.capacity_bytes,
            limit_bytes: limit,
            answers: &answers,
            trials: trials.values().collect(),
            wall_s: wall,
        };
        let mut v = serde_json::to_vec_pretty(&doc).context("cannot serialize")?;
        v.push(b'\n');
        v
    } else {
        let mut s = head_lines(&args.command, &e, setup);
        let _ = writeln!(
            s,
            "  search             {}={}..{}: {} captures in {wall:.1} s; limit {}",
            search.name,
            search.lo,
            search.hi,
            trials.len(),
            fmt_bytes(limit)
        );
        s += &answers_text(&search.name, &answers);
        s.into_bytes()
    };
    write_stdout(&out).map(|()| 0)
}

/// The largest value of `search`'s range whose capture fits under setting
/// `i`, and the value above it (captured too, and not fitting), by bisection:
/// `Err` carries the exit status of a refused capture.
#[allow(clippy::type_complexity)]
fn bisect(
    search: &Search,
    i: usize,
    trial: &mut impl FnMut(u64) -> anyhow::Result<Result<Trial, u8>>,
) -> anyhow::Result<Result<(Option<u64>, Option<u64>), u8>> {
    let mut fits = |v: u64| -> anyhow::Result<Result<bool, u8>> { Ok(trial(v)?.map(|t| t.settings[i].fits)) };
    match fits(search.lo)? {
        Err(code) => return Ok(Err(code)),
        Ok(false) => return Ok(Ok((None, Some(search.lo)))),
        Ok(true) => {}
    }
    match fits(search.hi)? {
        Err(code) => return Ok(Err(code)),
        Ok(true) => return Ok(Ok((Some(search.hi), None))),
        Ok(false) => {}
    }
    // lo fits, hi does not.
    let (mut lo, mut hi) = (search.lo, search.hi);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match fits(mid)? {
            Err(code) => return Ok(Err(code)),
            Ok(true) => lo = mid,
            Ok(false) => hi = mid,
        }
    }
    Ok(Ok((Some(lo), Some(hi))))
}

fn answers_text(name: &str, answers: &[Answer]) -> String {
    let width = answers.iter().map(|a| a.alloc_conf.len()).max().unwrap_or(7).max(7);
    let mut s = format!(
        "\n  {:width$}  {:>10}  {:>13}  {:>10}  confirmed by its capture and the next\n",
        "setting",
        format!("largest {name}"),
        "peak reserved",
        "headroom"
    );
    for a in answers {
        let opt = |b: Option<u64>| b.map_or_else(|| "-".to_owned(), fmt_bytes);
        let confirm = match (a.largest, a.next) {
            (None, Some(n)) => {
                format!("none fits: {name}={n} reserves {} unlimited", opt(a.next_unlimited_peak_reserved_bytes))
            }
            (Some(_), None) => "the top of the range fits".to_owned(),
            (Some(l), Some(n)) => format!(
                "{}: {name}={l} fits, {name}={n} runs out (reserves {} unlimited)",
                if a.confirmed { "yes" } else { "NO" },
                opt(a.next_unlimited_peak_reserved_bytes)
            ),
            (None, None) => "-".to_owned(),
        };
        let _ = writeln!(
            s,
            "  {:width$}  {:>10}  {:>13}  {:>10}  {confirm}",
            a.alloc_conf,
            a.largest.map_or_else(|| "none".to_owned(), |v| v.to_string()),
            opt(a.peak_reserved_bytes),
            opt(a.headroom_bytes),
        );
    }
    s
}

#[derive(Serialize)]
struct SearchJson<'a> {
    schema_version: u32,
    command: &'a [String],
    name: &'a str,
    lo: u64,
    hi: u64,
    estimate: &'a Estimate,
    capacity_bytes: u64,
    limit_bytes: u64,
    answers: &'a [Answer],
    trials: Vec<&'a Trial>,
    wall_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_is_replaced_alone_and_inside_a_word() {
        let words: Vec<String> = ["python", "t.py", "--batch", "BATCH", "--x=BATCH"].map(String::from).to_vec();
        assert_eq!(substitute(&words, "BATCH", 64), ["python", "t.py", "--batch", "64", "--x=64"]);
    }

    #[test]
    fn bisection_finds_the_largest_that_fits_and_captures_the_next() {
        let search = Search { name: "B".into(), lo: 1, hi: 1024 };
        let tried = std::cell::RefCell::new(Vec::new());
        let mut trial = |v: u64| -> anyhow::Result<Result<Trial, u8>> {
            tried.borrow_mut().push(v);
            let o = Outcome {
                fits: v <= 93,
                peak_reserved_bytes: v,
                unlimited_peak_reserved_bytes: v,
                unlimited_peak_allocated_bytes: v,
            };
            Ok(Ok(Trial { value: v, settings: vec![o], capture_s: 0.0 }))
        };
        assert_eq!(bisect(&search, 0, &mut trial).unwrap().unwrap(), (Some(93), Some(94)));
        assert!(tried.borrow().contains(&93) && tried.borrow().contains(&94));
        let all = Search { name: "B".into(), lo: 1, hi: 50 };
        assert_eq!(bisect(&all, 0, &mut trial).unwrap().unwrap(), (Some(50), None));
        let none = Search { name: "B".into(), lo: 100, hi: 200 };
        assert_eq!(bisect(&none, 0, &mut trial).unwrap().unwrap(), (None, Some(100)));
    }
}
