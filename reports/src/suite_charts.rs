//! The charts that show each suite's claim, built from its cases' parameters
//! and metrics (the names the suites in `bench-suites/src/suites/` emit):
//! cpu-vs-gpu time by size with the crossover and the speedups; amp time and
//! peak per precision; autotune candidates with the choice marked, tuning cost
//! and break-even; transfer bandwidth by size and the overlap cases; async host
//! clocks against device time; memory's no_grad peaks, batch-size sweep,
//! `empty_cache` and fragmentation; allocator latency cached vs raw and with
//! recording; input-pipeline throughput by workers. A side that did not run
//! here (a GPU case without a GPU) is named with its reason in the chart area.
//! [`for_suite`] returns `None` for a suite it does not know, which then gets
//! the generic charts.

use vramlab_suites::{CaseResult, Outcome, SuiteResult};

use crate::charts::{Bar, BarGroup, Chart, GroupedBars, Line, LineChart, Mark, PointLabel, Scale, Unit};
use crate::plot::Axis;
use crate::units::fmt_bytes;

/// A chart with the name of its files (without the suite's prefix).
pub type Named = (String, Chart<'static>);

/// The claim charts of `suite`, or `None` for a suite without its own.
pub fn for_suite(suite: &SuiteResult) -> Option<Vec<Named>> {
    let charts = match suite.name.as_str() {
        "cpu-vs-gpu" => cpu_vs_gpu(suite),
        "amp" => amp(suite),
        "autotune" => autotune(suite),
        "transfer" => transfer(suite),
        "async" => async_timing(suite),
        "memory" => memory(suite),
        "allocator" => allocator(suite),
        "input-pipeline" => input_pipeline(suite),
        _ => return None,
    };
    Some(charts)
}

fn metric(c: &CaseResult, name: &str) -> Option<f64> {
    c.metrics.get(name).copied().filter(|v| v.is_finite())
}

fn param<'a>(c: &'a CaseResult, name: &str) -> Option<&'a str> {
    c.params.get(name).and_then(|v| v.as_str())
}

fn param_f64(c: &CaseResult, name: &str) -> Option<f64> {
    c.params.get(name).and_then(|v| v.as_f64())
}

fn median(c: &CaseResult) -> Option<f64> {
    c.timing.as_ref().map(|t| t.median_ns).filter(|v| v.is_finite())
}

fn case<'a>(suite: &'a SuiteResult, name: &str) -> Option<&'a CaseResult> {
    suite.cases.iter().find(|c| c.name == name)
}

/// Why a case has no numbers, when it has none.
fn why_not(c: &CaseResult) -> Option<String> {
    match &c.outcome {
        Outcome::Ok => None,
        Outcome::NotAvailable { reason } => Some(format!("not available: {reason}")),
        Outcome::Failed { message } => Some(format!("failed: {message}")),
    }
}

/// The first reason among `cases` that did not run, for a chart's note.
fn first_reason<'a>(cases: impl IntoIterator<Item = &'a CaseResult>) -> Option<String> {
    cases.into_iter().find_map(|c| why_not(c).map(|w| format!("{}: {w}", c.name)))
}

fn unavailable(title: impl Into<String>, reason: String) -> Chart<'static> {
    Chart::Unavailable { title: title.into(), reason }
}

/// Distinct values of a parameter, in the order cases list them.
fn distinct<'a>(cases: impl IntoIterator<Item = &'a CaseResult>, name: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in cases {
        if let Some(v) = param(c, name)
            && !out.iter().any(|o| o == v)
        {
            out.push(v.to_owned());
        }
    }
    out
}

// ---------------------------------------------------------------- cpu-vs-gpu

/// The smallest size from which the GPU is faster at every larger size (the
/// suite's rule): `pairs` are (size, cpu ns, gpu ns) by increasing size.
fn crossover(pairs: &[(f64, f64, f64)]) -> Option<usize> {
    match pairs.iter().rposition(|&(_, cpu, gpu)| gpu >= cpu) {
        None if pairs.is_empty() => None,
        None => Some(0),
        Some(i) if i + 1 < pairs.len() => Some(i + 1),
        Some(_) => None,
    }
}

fn cpu_vs_gpu(suite: &SuiteResult) -> Vec<Named> {
    let mut out = Vec::new();
    let ops = distinct(&suite.cases, "op");
    let side = |op: &str, dev: &str| -> Vec<(f64, f64, String)> {
        let mut v: Vec<(f64, f64, f64, String)> = suite
            .cases
            .iter()
            .filter(|c| param(c, "op") == Some(op) && param(c, "device") == Some(dev) && c.outcome.is_ok())
            .filter_map(|c| {
                let idx = param_f64(c, "size_index").unwrap_or(0.0);
                Some((idx, param_f64(c, "flops")?, median(c)?, param(c, "size").unwrap_or("?").to_owned()))
            })
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v.into_iter().map(|(_, f, t, l)| (f, t, l)).collect()
    };
    let mut speedups = Vec::new();
    let mut missing_gpu = None;
    for op in &ops {
        let title = format!("{op}: CPU vs GPU time by size");
        let (cpu, gpu) = (side(op, "cpu"), side(op, "gpu"));
        let of_op = || suite.cases.iter().filter(move |c| param(c, "op") == Some(op.as_str()));
        if cpu.is_empty() && gpu.is_empty() {
            let reason = first_reason(of_op()).unwrap_or_else(|| "no case of this op produced a time".into());
            out.push((format!("{op}-time-by-size"), unavailable(title, reason)));
            continue;
        }
        let mut notes = Vec::new();
        let mut vlines = Vec::new();
        if gpu.is_empty() {
            let reason = first_reason(of_op().filter(|c| param(c, "device") == Some("gpu")))
                .unwrap_or_else(|| "no GPU case ran".into());
            notes.push(format!("GPU side {reason}; no crossover without it."));
            missing_gpu.get_or_insert(reason);
        } else {
            let pairs: Vec<(f64, f64, f64)> =
                cpu.iter().filter_map(|(f, c, _)| gpu.iter().find(|g| g.0 == *f).map(|g| (*f, *c, g.1))).collect();
            match crossover(&pairs) {
                Some(i) => {
                    let label = cpu.iter().find(|c| c.0 == pairs[i].0).map_or("?", |c| c.2.as_str());
                    let from = if i == 0 { " (every size tried)" } else { "" };
                    vlines.push(Mark { at: pairs[i].0, label: format!("crossover: the GPU wins from {label}{from}") });
                }
                None if !pairs.is_empty() => notes.push("The GPU does not win at the largest size tried.".into()),
                None => notes.push("No size ran on both devices.".into()),
            }
        }
        let gpu_name = if gpu.is_empty() { "GPU (not available)" } else { "GPU" };
        let line = |name: &str, pts: &[(f64, f64, String)], color| Line {
            name: name.into(),
            points: pts.iter().map(|p| (p.0, p.1)).collect(),
            dashed: false,
            color,
        };
        out.push((
            format!("{op}-time-by-size"),
            Chart::Lines(LineChart {
                title,
                x: Axis::new("work per call (FLOP, log)", Unit::Flop, Scale::Log),
                y: Axis::new("median time per call (log)", Unit::Nanoseconds, Scale::Log),
                lines: vec![line("CPU", &cpu, 0), line(gpu_name, &gpu, 1)],
                vlines,
                hlines: vec![],
                points: vec![],
                notes,
            }),
        ));
        let bars: Vec<Bar> = suite
            .cases
            .iter()
            .filter(|c| param(c, "op") == Some(op.as_str()) && param(c, "device") == Some("gpu"))
            .filter_map(|c| Some(Bar::new(param(c, "size")?, metric(c, "speedup_vs_cpu_ratio")?, 0)))
            .collect();
        if !bars.is_empty() {
            speedups.push(BarGroup { name: op.clone(), bars });
        }
    }
    let title = "cpu-vs-gpu: GPU speedup over the CPU (CPU time ÷ GPU time)";
    let speedup = if speedups.is_empty() {
        unavailable(title, missing_gpu.unwrap_or_else(|| "no GPU case produced a speedup".into()))
    } else {
        Chart::Bars(GroupedBars {
            title: title.into(),
            unit: Unit::Ratio,
            series: vec![],
            groups: speedups,
            reference: Some(Mark { at: 1.0, label: "1× (as fast as the CPU)".into() }),
            notes: vec![],
            log: false,
        })
    };
    out.push(("speedup".into(), speedup));
    out
}

// ----------------------------------------------------------------------- amp

const PRECISIONS: [&str; 3] = ["f32", "f16", "bf16"];

fn amp(suite: &SuiteResult) -> Vec<Named> {
    let workloads = distinct(&suite.cases, "workload");
    let per = |value: &dyn Fn(&CaseResult) -> Option<f64>| -> Vec<BarGroup> {
        workloads
            .iter()
            .map(|w| {
                let bars = suite
                    .cases
                    .iter()
                    .filter(|c| param(c, "workload") == Some(w.as_str()) && c.outcome.is_ok())
                    .filter_map(|c| {
                        let p = param(c, "precision")?;
                        let series = PRECISIONS.iter().position(|x| *x == p).unwrap_or(PRECISIONS.len());
                        Some(Bar::new(p, value(c)?, series))
                    })
                    .collect();
                BarGroup { name: w.clone(), bars }
            })
            .collect()
    };
    let notes: Vec<String> = first_reason(&suite.cases).into_iter().collect();
    let chart = |title: &str, unit, groups: Vec<BarGroup>| {
        if groups.iter().all(|g| g.bars.is_empty()) {
            let reason = first_reason(&suite.cases).unwrap_or_else(|| "no case produced this measurement".into());
            return unavailable(title, reason);
        }
        Chart::Bars(GroupedBars {
            log: false,
            title: title.into(),
            unit,
            series: vec!["f32".into(), "f16 autocast + GradScaler".into(), "bf16 autocast".into()],
            groups,
            reference: None,
            notes: notes.clone(),
        })
    };
    vec![
        ("step-time".into(), chart("amp: median training-step time per precision", Unit::Nanoseconds, per(&median))),
        (
            "peak".into(),
            chart(
                "amp: peak allocated per precision",
                Unit::Bytes,
                per(&|c| {
                    metric(c, "peak_allocated_bytes").or(c.memory.as_ref().map(|m| m.peak_allocated_bytes as f64))
                }),
            ),
        ),
    ]
}

// ------------------------------------------------------------------ autotune

const ALGORITHM_NOTE: &str = "algorithm: ";

fn algorithm(c: &CaseResult) -> Option<&str> {
    c.notes.iter().find_map(|n| n.strip_prefix(ALGORITHM_NOTE))
}

fn autotune(suite: &SuiteResult) -> Vec<Named> {
    let mut out = Vec::new();
    let shapes = distinct(&suite.cases, "shape");
    let mode = |shape: &str, m: &str| case(suite, &format!("{shape}/{m}"));
    // Candidates per shape, one chart per kind of op.
    for (kind, is_kind) in [("convolution", true), ("matmul", false)] {
        let title = format!("autotune: benchmark mode's candidates per {kind} shape (time, log scale)");
        let of_kind: Vec<&String> = shapes
            .iter()
            .filter(|s| {
                mode(s, "benchmark").and_then(|c| param(c, "op")).is_some_and(|op| op.starts_with("conv") == is_kind)
            })
            .collect();
        if of_kind.is_empty() {
            continue;
        }
        let mut groups = Vec::new();
        let mut notes = Vec::new();
        for s in of_kind {
            let Some(bench) = mode(s, "benchmark") else { continue };
            if let Some(w) = why_not(bench) {
                notes.push(format!("{s}: {w}"));
                continue;
            }
            let chosen = algorithm(bench);
            let heuristic = mode(s, "off").and_then(algorithm);
            let mut bars: Vec<Bar> = bench
                .metrics
                .iter()
                .filter_map(|(k, v)| {
                    let alg = k.strip_prefix("candidate_")?.strip_suffix("_median_ns")?;
                    let mut mark = Vec::new();
                    if Some(alg) == chosen {
                        mark.push("chosen");
                    }
                    if Some(alg) == heuristic {
                        mark.push("heuristic's pick (off)");
                    }
                    let mut bar = Bar::new(alg, *v, usize::from(Some(alg) == chosen));
                    bar.mark = (Some(alg) == chosen).then(|| mark.join(", "));
                    if bar.mark.is_none() && !mark.is_empty() {
                        bar.label = format!("{alg} ({})", mark.join(", "));
                    }
                    Some(bar)
                })
                .collect();
            bars.sort_by(|a, b| a.value.total_cmp(&b.value));
            groups.push(BarGroup { name: s.clone(), bars });
        }
        let chart = if groups.is_empty() {
            unavailable(title, notes.join("; "))
        } else {
            Chart::Bars(GroupedBars {
                title,
                unit: Unit::Nanoseconds,
                series: vec![],
                groups,
                reference: None,
                notes,
                log: true,
            })
        };
        out.push((format!("{kind}-candidates"), chart));
    }
    // Tuning cost and whether it pays back, per shape.
    let mut cost = Vec::new();
    let mut break_even = Vec::new();
    for s in &shapes {
        let Some(bench) = mode(s, "benchmark").filter(|c| c.outcome.is_ok()) else { continue };
        let Some(tuning) = metric(bench, "tuning_ns") else { continue };
        let payback = metric(bench, "payback_calls_count");
        let label = match payback {
            Some(n) => format!("{s}: pays back after {n:.0} calls"),
            None => format!("{s}: never pays back"),
        };
        cost.push(Bar::new(label, tuning, usize::from(payback.is_some())));
        let off = mode(s, "off").filter(|c| c.outcome.is_ok()).and_then(median);
        if let (Some(n), Some(off), Some(per_call)) = (payback, off, median(bench)) {
            break_even.push((s.clone(), n, tuning, off, per_call));
        }
    }
    if !cost.is_empty() {
        out.push((
            "tuning-cost".into(),
            Chart::Bars(GroupedBars {
                log: false,
                title: "autotune: tuning cost per shape (benchmark mode's first call)".into(),
                unit: Unit::Nanoseconds,
                series: vec!["never pays back here".into(), "pays back".into()],
                groups: vec![BarGroup { name: String::new(), bars: cost }],
                reference: None,
                notes: vec![],
            }),
        ));
    } else if !shapes.is_empty() {
        let reason = first_reason(&suite.cases).unwrap_or_else(|| "no benchmark-mode case recorded its tuning".into());
        out.push(("tuning-cost".into(), unavailable("autotune: tuning cost per shape", reason)));
    }
    for (s, n, tuning, off, per_call) in break_even.into_iter().take(3) {
        let end = (2.0 * n).max(4.0);
        let calls: Vec<f64> = (0..=20).map(|k| end * k as f64 / 20.0).collect();
        out.push((
            format!("{s}-break-even"),
            Chart::Lines(LineChart {
                title: format!("autotune {s}: total time over calls, off vs benchmark"),
                x: Axis::new("calls", Unit::Count, Scale::Linear),
                y: Axis::new("total time (tuning included)", Unit::Nanoseconds, Scale::Linear),
                lines: vec![
                    Line {
                        name: "off (heuristic)".into(),
                        points: calls.iter().map(|&k| (k, k * off)).collect(),
                        dashed: true,
                        color: 0,
                    },
                    Line {
                        name: "benchmark (tuned)".into(),
                        points: calls.iter().map(|&k| (k, tuning + k * per_call)).collect(),
                        dashed: false,
                        color: 1,
                    },
                ],
                vlines: vec![Mark { at: n, label: format!("break-even: {n:.0} calls") }],
                hlines: vec![],
                points: vec![],
                notes: vec![],
            }),
        ));
    }
    out
}

// ------------------------------------------------------------------ transfer

fn transfer(suite: &SuiteResult) -> Vec<Named> {
    let mut lines = Vec::new();
    let mut notes = Vec::new();
    for (d, dir) in ["h2d", "d2h"].into_iter().enumerate() {
        for mem in ["pageable", "pinned"] {
            let of = || {
                suite
                    .cases
                    .iter()
                    .filter(move |c| param(c, "direction") == Some(dir) && param(c, "host_memory") == Some(mem))
            };
            let mut points: Vec<(f64, f64)> = of()
                .filter(|c| c.outcome.is_ok())
                .filter_map(|c| Some((param_f64(c, "size_bytes")?, metric(c, "bandwidth_gbps")?)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            if let Some(r) = first_reason(of()) {
                notes.push(r);
            }
            if !points.is_empty() {
                lines.push(Line { name: format!("{dir} {mem}"), points, dashed: mem == "pageable", color: d });
            }
        }
    }
    let title = "transfer: copy bandwidth by size, pinned vs pageable";
    let bandwidth = if lines.is_empty() {
        unavailable(title, notes.first().cloned().unwrap_or_else(|| "no copy case ran".into()))
    } else {
        notes.truncate(1);
        Chart::Lines(LineChart {
            title: title.into(),
            x: Axis::new("copy size (log)", Unit::Bytes, Scale::Log),
            y: Axis::new("bandwidth (GB/s)", Unit::GigabytesPerSecond, Scale::Linear),
            lines,
            vlines: vec![],
            hlines: vec![],
            points: vec![],
            notes,
        })
    };
    let overlap: Vec<&CaseResult> = suite.cases.iter().filter(|c| c.name.starts_with("overlap/")).collect();
    let mut groups = Vec::new();
    for c in &overlap {
        if !c.outcome.is_ok() {
            continue;
        }
        let mode = c.name.trim_start_matches("overlap/");
        let pct =
            metric(c, "overlap_percent").map(|p| format!(" — {p:.0}% of the shorter one hidden")).unwrap_or_default();
        let bars: Vec<Bar> = [
            ("copy alone", metric(c, "copy_alone_ns")),
            ("compute alone", metric(c, "compute_alone_ns")),
            ("copy + compute, one after the other", metric(c, "copy_plus_compute_ns")),
            ("copy and compute issued together", median(c)),
        ]
        .into_iter()
        .enumerate()
        .filter_map(|(i, (l, v))| Some(Bar::new(l, v?, i)))
        .collect();
        groups.push(BarGroup { name: format!("{mode}{pct}"), bars });
    }
    let mut out = vec![("bandwidth".to_owned(), bandwidth)];
    if !overlap.is_empty() {
        let title = "transfer: copy and compute overlap (blocking, non_blocking, side stream)";
        let chart = if groups.is_empty() {
            unavailable(title, first_reason(overlap.iter().copied()).unwrap_or_default())
        } else {
            Chart::Bars(GroupedBars {
                log: false,
                title: title.into(),
                unit: Unit::Nanoseconds,
                series: vec![],
                groups,
                reference: None,
                notes: first_reason(overlap.iter().copied()).into_iter().collect(),
            })
        };
        out.push(("overlap".into(), chart));
    }
    out
}

// --------------------------------------------------------------------- async

fn async_timing(suite: &SuiteResult) -> Vec<Named> {
    let title = "async: host clock vs device time of one matmul";
    let mut bars = Vec::new();
    let mut notes = Vec::new();
    let rows = [
        ("host_clock/no_sync", "host clock, no synchronize (launch only)", 0),
        ("host_clock/synchronized", "host clock, synchronized", 1),
        ("device_events", "device events (the kernel's time)", 2),
    ];
    for (name, label, series) in rows {
        let Some(c) = case(suite, name) else { continue };
        if let Some(w) = why_not(c) {
            notes.push(format!("{label}: {w}"));
            continue;
        }
        if let Some(v) = median(c) {
            bars.push(Bar::new(label, v, series));
        }
        if let Some(v) = metric(c, "launch_median_ns") {
            bars.push(Bar::new("host time of the launch call", v, 3));
        }
    }
    let shape = suite.cases.iter().find_map(|c| param(c, "shape")).map(|s| format!(" ({s})")).unwrap_or_default();
    let chart = if bars.is_empty() {
        unavailable(title, notes.join("; "))
    } else {
        Chart::Bars(GroupedBars {
            log: false,
            title: format!("{title}{shape}"),
            unit: Unit::Nanoseconds,
            series: vec![],
            groups: vec![BarGroup { name: String::new(), bars }],
            reference: None,
            notes,
        })
    };
    vec![("host-vs-device".into(), chart)]
}

// -------------------------------------------------------------------- memory

/// The sweep's trials from its `trials: …` note: (batch, peak allocated
/// bytes when it fit, None when it ran out of memory).
pub(crate) fn sweep_trials(c: &CaseResult) -> Vec<(f64, Option<f64>)> {
    let Some(list) = c.notes.iter().find_map(|n| n.strip_prefix("trials: ")) else { return vec![] };
    list.split("; ")
        .filter_map(|t| {
            let (batch, rest) = t.split_once(' ')?;
            let batch: f64 = batch.parse().ok()?;
            if rest.starts_with("out of memory") {
                return Some((batch, None));
            }
            let peak = rest.strip_prefix("fits (peak ")?.strip_suffix(')')?;
            Some((batch, Some(parse_size(peak)?)))
        })
        .collect()
}

/// `1.50 MiB`, `512 bytes` (the allocator's `format_size`) back to bytes.
fn parse_size(s: &str) -> Option<f64> {
    let (v, unit) = s.split_once(' ')?;
    let v: f64 = v.parse().ok()?;
    let k = match unit {
        "bytes" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(v * k)
}

fn memory(suite: &SuiteResult) -> Vec<Named> {
    let mut out = Vec::new();
    // Training vs evaluation peaks.
    let modes = [
        ("train_step_peak", "training step"),
        ("eval_without_no_grad_peak", "evaluation, gradients enabled"),
        ("eval_no_grad_peak", "evaluation under no_grad"),
    ];
    let mut groups = Vec::new();
    let mut notes = Vec::new();
    for (name, label) in modes {
        let Some(c) = case(suite, name) else { continue };
        if let Some(w) = why_not(c) {
            notes.push(format!("{label}: {w}"));
            continue;
        }
        let alloc = metric(c, "peak_allocated_bytes").or(c.memory.as_ref().map(|m| m.peak_allocated_bytes as f64));
        let res = metric(c, "peak_reserved_bytes").or(c.memory.as_ref().map(|m| m.peak_reserved_bytes as f64));
        let bars: Vec<Bar> = [("peak allocated", alloc, 0), ("peak reserved", res, 1)]
            .into_iter()
            .filter_map(|(l, v, s)| Some(Bar::new(l, v?, s)))
            .collect();
        groups.push(BarGroup { name: label.into(), bars });
    }
    if !groups.is_empty() || !notes.is_empty() {
        let title = "memory: training step vs evaluation with and without no_grad";
        let chart = if groups.is_empty() {
            unavailable(title, notes.join("; "))
        } else {
            Chart::Bars(GroupedBars {
                log: false,
                title: title.into(),
                unit: Unit::Bytes,
                series: vec!["peak allocated".into(), "peak reserved".into()],
                groups,
                reference: None,
                notes,
            })
        };
        out.push(("no-grad".into(), chart));
    }
    if let Some(c) = case(suite, "batch_size_sweep") {
        out.push(("batch-sweep".into(), sweep_chart(c)));
    }
    if let Some(c) = case(suite, "empty_cache") {
        let title = "memory: allocated and reserved around empty_cache";
        let stages = [
            ("after_step", "after a training step"),
            ("after_step_empty_cache", "then empty_cache, model alive"),
            ("after_second_step", "after a second step"),
            ("after_free", "after freeing model, batch, optimizer"),
            ("after_empty_cache", "then empty_cache"),
        ];
        let chart = match why_not(c) {
            Some(w) => unavailable(title, w),
            None => Chart::Bars(GroupedBars {
                log: false,
                title: title.into(),
                unit: Unit::Bytes,
                series: vec!["allocated".into(), "reserved".into()],
                groups: stages
                    .iter()
                    .map(|(k, label)| BarGroup {
                        name: (*label).into(),
                        bars: [("allocated", 0), ("reserved", 1)]
                            .into_iter()
                            .filter_map(|(m, s)| Some(Bar::new(m, metric(c, &format!("{k}_{m}_bytes"))?, s)))
                            .collect(),
                    })
                    .filter(|g| !g.bars.is_empty())
                    .collect(),
                reference: None,
                notes: metric(c, "released_by_empty_cache_bytes")
                    .map(|r| format!("empty_cache released {} once nothing was allocated", fmt_bytes(r as u64)))
                    .into_iter()
                    .collect(),
            }),
        };
        out.push(("empty-cache".into(), chart));
    }
    let frag: Vec<&CaseResult> = suite.cases.iter().filter(|c| c.name.starts_with("fragmentation/")).collect();
    if !frag.is_empty() {
        out.push(("fragmentation".into(), fragmentation_chart(&frag)));
    }
    out
}

fn sweep_chart(c: &CaseResult) -> Chart<'static> {
    let title = "memory: batch-size sweep, peak allocated until out of memory";
    if let Some(w) = why_not(c) {
        return unavailable(title, w);
    }
    let trials = sweep_trials(c);
    let mut fits: Vec<(f64, f64)> = trials.iter().filter_map(|&(b, p)| Some((b, p?))).collect();
    // The largest fit's exact peak, where the note's rounding would differ.
    if let (Some(b), Some(p)) =
        (metric(c, "largest_fitting_batch_count"), metric(c, "largest_fitting_peak_allocated_bytes"))
    {
        fits.retain(|f| f.0 != b);
        fits.push((b, p));
    }
    fits.sort_by(|a, b| a.0.total_cmp(&b.0));
    let capacity = metric(c, "capacity_bytes").or_else(|| param_f64(c, "capacity_bytes"));
    let mut hlines = Vec::new();
    if let Some(cap) = capacity {
        hlines.push(Mark { at: cap, label: format!("capacity {}", fmt_bytes(cap as u64)) });
    }
    let mut points = Vec::new();
    let mut vlines = Vec::new();
    if let (Some(b), Some(cap)) = (metric(c, "oom_batch_count"), capacity) {
        points.push(PointLabel { x: b, y: cap, label: format!("batch {b:.0}: out of memory") });
    }
    if let Some(b) = metric(c, "largest_fitting_batch_count") {
        vlines.push(Mark { at: b, label: format!("largest batch that fits: {b:.0}") });
    }
    let mut notes = Vec::new();
    if let Some(per) = metric(c, "per_sample_bytes") {
        notes.push(format!("about {} per sample", fmt_bytes(per as u64)));
    }
    if metric(c, "oom_batch_count").is_none() {
        notes.push("no batch tried ran out of memory".into());
    }
    Chart::Lines(LineChart {
        title: title.into(),
        x: Axis::new("batch size (log)", Unit::Count, Scale::Log),
        y: Axis::new("peak allocated", Unit::Bytes, Scale::Linear),
        lines: vec![Line { name: "batches that fit".into(), points: fits, dashed: false, color: 0 }],
        vlines,
        hlines,
        points,
        notes,
    })
}

fn fragmentation_chart(frag: &[&CaseResult]) -> Chart<'static> {
    let title = "memory: fragmentation, a request after freeing every other tensor";
    let mut groups = Vec::new();
    let mut notes = Vec::new();
    let mut capacity = None;
    for c in frag {
        let config = param(c, "allocator_config").unwrap_or(c.name.trim_start_matches("fragmentation/"));
        if let Some(w) = why_not(c) {
            notes.push(format!("{config}: {w}"));
            continue;
        }
        capacity = capacity.or(metric(c, "capacity_bytes"));
        let verdict = match metric(c, "oom_count") {
            Some(n) if n > 0.0 => " — out of memory",
            Some(_) => " — fits",
            None => "",
        };
        let bars = [
            ("reserved before the request", "reserved_before_request_bytes"),
            ("allocated before the request", "allocated_before_request_bytes"),
            ("largest free block", "largest_free_block_bytes"),
            ("the request", "request_bytes"),
        ]
        .into_iter()
        .enumerate()
        .filter_map(|(i, (l, m))| Some(Bar::new(l, metric(c, m)?, i)))
        .collect();
        groups.push(BarGroup { name: format!("{config}{verdict}"), bars });
    }
    if groups.is_empty() {
        return unavailable(title, notes.join("; "));
    }
    Chart::Bars(GroupedBars {
        log: false,
        title: title.into(),
        unit: Unit::Bytes,
        series: vec![],
        groups,
        reference: capacity.map(|c| Mark { at: c, label: format!("capacity {}", fmt_bytes(c as u64)) }),
        notes,
    })
}

// ----------------------------------------------------------------- allocator

fn allocator(suite: &SuiteResult) -> Vec<Named> {
    let mut lines = Vec::new();
    let mut notes = Vec::new();
    for (i, path) in ["cached", "raw"].into_iter().enumerate() {
        let of = || suite.cases.iter().filter(move |c| param(c, "path") == Some(path));
        let mut points: Vec<(f64, f64)> = of()
            .filter(|c| c.outcome.is_ok())
            .filter_map(|c| Some((param_f64(c, "request_bytes")?, median(c)?)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        notes.extend(first_reason(of()));
        if !points.is_empty() {
            let name = if path == "cached" { "cached (from the pool)" } else { "raw device malloc + free" };
            lines.push(Line { name: name.into(), points, dashed: path == "raw", color: i });
        }
    }
    let title = "allocator: alloc + free latency by size, cached vs raw";
    let latency = if lines.is_empty() {
        unavailable(title, notes.first().cloned().unwrap_or_else(|| "no latency case ran".into()))
    } else {
        Chart::Lines(LineChart {
            title: title.into(),
            x: Axis::new("request size (log)", Unit::Bytes, Scale::Log),
            y: Axis::new("median time per alloc + free pair (log)", Unit::Nanoseconds, Scale::Log),
            lines,
            vlines: vec![],
            hlines: vec![],
            points: vec![],
            notes,
        })
    };
    let mut out = vec![("latency".to_owned(), latency)];
    let rec: Vec<&CaseResult> = suite.cases.iter().filter(|c| c.name.starts_with("recording/")).collect();
    if !rec.is_empty() {
        let title = "allocator: cached alloc + free with and without recording";
        let bars: Vec<Bar> = rec
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let who = param(c, "subscriber").unwrap_or("?");
                let label = if who == "none" { "no subscriber".to_owned() } else { format!("recording ({who})") };
                Some(Bar::new(label, median(c)?, i))
            })
            .collect();
        let overhead = rec.iter().find_map(|c| metric(c, "overhead_per_pair_ns"));
        let chart = if bars.is_empty() {
            unavailable(title, first_reason(rec.iter().copied()).unwrap_or_default())
        } else {
            Chart::Bars(GroupedBars {
                log: false,
                title: title.into(),
                unit: Unit::Nanoseconds,
                series: vec![],
                groups: vec![BarGroup { name: String::new(), bars }],
                reference: None,
                notes: overhead
                    .map(|o| format!("recording adds {} per pair", crate::units::fmt_ns(o)))
                    .into_iter()
                    .collect(),
            })
        };
        out.push(("recording".into(), chart));
    }
    out
}

// ------------------------------------------------------------ input-pipeline

fn input_pipeline(suite: &SuiteResult) -> Vec<Named> {
    let mut lines = Vec::new();
    let mut notes = Vec::new();
    for (i, mem) in ["pageable", "pinned"].into_iter().enumerate() {
        let of = || suite.cases.iter().filter(move |c| param(c, "host_memory") == Some(mem));
        let mut points: Vec<(f64, f64)> = of()
            .filter(|c| c.outcome.is_ok())
            .filter_map(|c| Some((param_f64(c, "num_workers")?, metric(c, "samples_per_s")?)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        notes.extend(first_reason(of()));
        if !points.is_empty() {
            lines.push(Line { name: format!("{mem} host memory"), points, dashed: mem == "pageable", color: i });
        }
    }
    let title = "input-pipeline: samples per second by number of DataLoader workers";
    let chart = if lines.is_empty() {
        unavailable(title, notes.first().cloned().unwrap_or_else(|| "no case ran".into()))
    } else {
        Chart::Lines(LineChart {
            title: title.into(),
            x: Axis::new("num_workers", Unit::Count, Scale::Linear),
            y: Axis::new("samples per second", Unit::PerSecond, Scale::Linear),
            lines,
            vlines: vec![],
            hlines: vec![],
            points: vec![],
            notes,
        })
    };
    vec![("throughput".into(), chart)]
}

#[cfg(test)]
pub(crate) mod tests {
    use vramlab_suites::harness::summarize;

    use super::*;

    pub(crate) fn case(name: &str, params: &[(&str, serde_json::Value)], metrics: &[(&str, f64)]) -> CaseResult {
        CaseResult::ok(name)
            .with_params(params.iter().map(|(k, v)| ((*k).to_owned(), v.clone())))
            .with_metrics(metrics.iter().map(|(k, v)| ((*k).to_owned(), *v)))
            .with_duration_ns(1)
    }

    pub(crate) fn timed(mut c: CaseResult, ns: f64) -> CaseResult {
        c.timing = Some(summarize(vec![ns; 5], 1, "host"));
        c
    }

    pub(crate) fn suite(name: &str, cases: Vec<CaseResult>) -> SuiteResult {
        SuiteResult {
            name: name.into(),
            description: "test".into(),
            device: "cpu".into(),
            duration_ns: 1,
            cases,
            findings: vec![],
        }
    }

    fn op_case(dev: &str, i: usize, flops: f64, ns: f64) -> CaseResult {
        let size = format!("s{i}");
        timed(
            case(
                &format!("matmul/{dev}/{size}"),
                &[
                    ("op", "matmul".into()),
                    ("device", dev.into()),
                    ("size", size.into()),
                    ("size_index", i.into()),
                    ("flops", flops.into()),
                ],
                &[],
            ),
            ns,
        )
    }

    /// The `<text>` element showing `label`: its x and y.
    pub(crate) fn text_at(svg: &str, label: &str) -> (f64, f64) {
        let i = svg.find(&format!(">\n{label}\n")).unwrap_or_else(|| panic!("no text {label:?} in the SVG"));
        let open = &svg[svg[..i].rfind("<text").expect("a text element")..i];
        (attr(open, "x"), attr(open, "y"))
    }

    pub(crate) fn attr(tag: &str, name: &str) -> f64 {
        let key = format!(" {name}=\"");
        let i = tag.find(&key).unwrap_or_else(|| panic!("no {name} in {tag}")) + key.len();
        tag[i..].split('"').next().unwrap().parse().unwrap()
    }

    fn chart<'a>(charts: &'a [Named], name: &str) -> &'a Chart<'static> {
        &charts.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no chart {name}")).1
    }

    #[test]
    fn crossover_is_marked_at_the_first_size_from_which_the_gpu_wins() {
        // The GPU loses at s0 and s1 and wins from s2 up (s1 won't do: it loses again at s1).
        let cases = vec![
            op_case("cpu", 0, 1e3, 1_000.0),
            op_case("cpu", 1, 1e5, 10_000.0),
            op_case("cpu", 2, 1e7, 1_000_000.0),
            op_case("cpu", 3, 1e9, 100_000_000.0),
            op_case("gpu", 0, 1e3, 5_000.0),
            op_case("gpu", 1, 1e5, 20_000.0),
            {
                let mut c = op_case("gpu", 2, 1e7, 100_000.0);
                c.metrics.insert("speedup_vs_cpu_ratio".into(), 10.0);
                c
            },
            op_case("gpu", 3, 1e9, 1_000_000.0),
        ];
        let charts = cpu_vs_gpu(&suite("cpu-vs-gpu", cases));
        let Chart::Lines(lines) = chart(&charts, "matmul-time-by-size") else { panic!("a line chart") };
        assert_eq!(lines.vlines.len(), 1);
        assert_eq!(lines.vlines[0].at, 1e7);
        let svg = chart(&charts, "matmul-time-by-size").svg().unwrap();
        let label = "crossover: the GPU wins from s2";
        let (x, _) = text_at(&svg, label);
        let at = f64::from(lines.layout().x.px(1e7).unwrap());
        assert_eq!((x - at).abs(), 5.0, "label at {x}, crossover at {at}");
        // Two lines of four markers each.
        assert_eq!(svg.matches("<circle").count(), 8 + 2, "markers plus the legend's");
        let svg = chart(&charts, "speedup").svg().unwrap();
        assert!(svg.contains("\n10×\n") && svg.contains("\n1× (as fast as the CPU)\n"), "{svg}");
    }

    #[test]
    fn a_gpu_that_never_wins_gets_no_crossover_and_gpu_absence_says_why() {
        let cases = vec![op_case("cpu", 0, 1e3, 1_000.0), op_case("gpu", 0, 1e3, 5_000.0)];
        let charts = cpu_vs_gpu(&suite("cpu-vs-gpu", cases));
        let Chart::Lines(lines) = chart(&charts, "matmul-time-by-size") else { panic!("a line chart") };
        assert!(lines.vlines.is_empty());
        assert!(lines.notes.iter().any(|n| n.contains("does not win")));
        let mut gpu = case("matmul/gpu", &[("op", "matmul".into()), ("device", "gpu".into())], &[]);
        gpu.outcome = Outcome::NotAvailable { reason: "no CUDA driver".into() };
        let charts = cpu_vs_gpu(&suite("cpu-vs-gpu", vec![op_case("cpu", 0, 1e3, 1_000.0), gpu]));
        let Chart::Unavailable { reason, .. } = chart(&charts, "speedup") else { panic!("the speedups need a GPU") };
        assert!(reason.contains("no CUDA driver"), "{reason}");
        let svg = chart(&charts, "matmul-time-by-size").svg().unwrap();
        assert!(svg.contains("GPU side matmul/gpu: not available: no CUDA driver"), "{svg}");
    }

    fn sweep() -> CaseResult {
        let mib = (1u64 << 20) as f64;
        let mut c = case(
            "batch_size_sweep",
            &[("capacity_bytes", (4u64 << 20).into())],
            &[
                ("capacity_bytes", 4.0 * mib),
                ("oom_batch_count", 1024.0),
                ("largest_fitting_batch_count", 768.0),
                ("largest_fitting_peak_allocated_bytes", 3.0 * mib),
            ],
        );
        c.notes.push(
            "trials: 256 fits (peak 1.00 MiB); 512 fits (peak 2.00 MiB); 1024 out of memory in forward (requested \
             4.00 MiB); 768 fits (peak 3.00 MiB)"
                .into(),
        );
        c
    }

    #[test]
    fn sweep_trials_parse_from_the_note() {
        let mib = (1u64 << 20) as f64;
        assert_eq!(
            sweep_trials(&sweep()),
            vec![(256.0, Some(mib)), (512.0, Some(2.0 * mib)), (1024.0, None), (768.0, Some(3.0 * mib))]
        );
        assert_eq!(parse_size("512 bytes"), Some(512.0));
        assert_eq!(parse_size("1.50 KiB"), Some(1536.0));
    }

    #[test]
    fn sweep_chart_puts_the_capacity_line_and_the_oom_point_at_their_values() {
        let chart = sweep_chart(&sweep());
        let Chart::Lines(lines) = &chart else { panic!("a line chart") };
        let l = lines.layout();
        let svg = chart.svg().unwrap();
        let cap_y = f64::from(l.y.px((4u64 << 20) as f64).unwrap());
        let (_, y) = text_at(&svg, "capacity 4.00 MiB");
        assert_eq!(y, cap_y - 3.0, "the capacity label sits on its line");
        let (x, y) = text_at(&svg, "batch 1024: out of memory");
        assert_eq!((x - f64::from(l.x.px(1024.0).unwrap())).abs(), 10.0);
        assert_eq!(y, cap_y - 8.0, "the OOM point sits on the capacity line");
        let (x, _) = text_at(&svg, "largest batch that fits: 768");
        assert_eq!((x - f64::from(l.x.px(768.0).unwrap())).abs(), 5.0);
        // The fits in batch order, the largest at its exact peak.
        let mib = (1u64 << 20) as f64;
        assert_eq!(lines.lines[0].points, vec![(256.0, mib), (512.0, 2.0 * mib), (768.0, 3.0 * mib)]);
        // The capacity is above every fit: the line lies above (smaller y) every marker.
        assert!(lines.lines[0].points.iter().all(|p| f64::from(l.y.px(p.1).unwrap()) > cap_y));
    }

    #[test]
    fn autotune_marks_the_chosen_candidate_and_the_break_even() {
        let shape = |mode: &str, ns: f64, alg: &str, metrics: &[(&str, f64)]| {
            let mut c = timed(
                case(
                    &format!("conv_a/{mode}"),
                    &[("shape", "conv_a".into()), ("op", "conv2d_forward".into()), ("mode", mode.into())],
                    metrics,
                ),
                ns,
            );
            c.notes.push(format!("algorithm: {alg}"));
            c
        };
        let s = suite(
            "autotune",
            vec![
                shape("off", 2_000.0, "direct", &[]),
                shape(
                    "benchmark",
                    1_000.0,
                    "gemm",
                    &[
                        ("candidate_direct_median_ns", 2_000.0),
                        ("candidate_gemm_median_ns", 1_000.0),
                        ("tuning_ns", 50_000.0),
                        ("payback_calls_count", 50.0),
                    ],
                ),
            ],
        );
        let charts = autotune(&s);
        let svg = chart(&charts, "convolution-candidates").svg().unwrap();
        assert!(svg.contains("\n1.00 µs — chosen\n"), "{svg}");
        assert!(svg.contains("\ndirect (heuristic&apos;s pick (off))\n"), "{svg}");
        let c = chart(&charts, "conv_a-break-even");
        let Chart::Lines(lines) = c else { panic!("a line chart") };
        // Off costs 2 µs a call, benchmark 50 µs once plus 1 µs a call: equal at 50 calls.
        assert_eq!(lines.vlines[0].at, 50.0);
        let (x, _) = text_at(&c.svg().unwrap(), "break-even: 50 calls");
        assert_eq!((x - f64::from(lines.layout().x.px(50.0).unwrap())).abs(), 5.0);
        let off = &lines.lines[0].points;
        let bench = &lines.lines[1].points;
        let at50 = |p: &[(f64, f64)]| p.iter().find(|q| q.0 == 50.0).unwrap().1;
        assert_eq!(at50(off), at50(bench));
    }

    #[test]
    fn async_without_device_events_says_why_beside_the_host_clocks() {
        let mut events = case("device_events", &[], &[]);
        events.outcome = Outcome::NotAvailable { reason: "the CPU backend runs synchronously".into() };
        let s = suite(
            "async",
            vec![
                timed(case("host_clock/no_sync", &[("shape", "8x8x8".into())], &[]), 100.0),
                timed(case("host_clock/synchronized", &[], &[]), 900.0),
                events,
            ],
        );
        let svg = chart(&async_timing(&s), "host-vs-device").svg().unwrap();
        assert!(svg.contains("\n100 ns\n") && svg.contains("\n900 ns\n"), "{svg}");
        assert!(svg.contains("device events (the kernel&apos;s time): not available: the CPU backend runs"), "{svg}");
    }

    #[test]
    fn a_suite_that_did_not_run_says_why_in_every_chart() {
        let mut c = case("h2d/pinned/1MiB", &[("direction", "h2d".into()), ("host_memory", "pinned".into())], &[]);
        c.outcome = Outcome::NotAvailable { reason: "no GPU here".into() };
        for (name, chart) in transfer(&suite("transfer", vec![c])) {
            let Chart::Unavailable { reason, .. } = chart else { panic!("{name} drew axes without data") };
            assert!(reason.contains("no GPU here"), "{reason}");
        }
    }
}
