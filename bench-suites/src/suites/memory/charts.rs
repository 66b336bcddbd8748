//! The memory suite's charts: the peaks of a training step and of evaluation
//! with and without no_grad; the batch-size sweep (peak allocated of each
//! batch that fits, the capacity, the batch that ran out of memory); memory
//! around `empty_cache`; and the fragmentation cases' largest free block
//! against the request.

use vramlab_display::chart::{
    AxisSpec, BarGroupSpec, BarSpec, BarsSpec, ChartSpec, LabelledPoint, LineSeries, LinesSpec, Marker, Scale, Unit,
};
use vramlab_display::format::fmt_bytes;

use crate::charts::{case, metric, param, param_f64, why_not};
use crate::schema::{CaseResult, SuiteResult};

/// The sweep's trials from its `trials: …` note: (batch, peak allocated
/// bytes when it fit, None when it ran out of memory).
fn sweep_trials(c: &CaseResult) -> Vec<(f64, Option<f64>)> {
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

pub(super) fn charts(suite: &SuiteResult) -> Vec<ChartSpec> {
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
        let bars: Vec<BarSpec> = [("peak allocated", alloc, 0), ("peak reserved", res, 1)]
            .into_iter()
            .filter_map(|(l, v, s)| Some(BarSpec::new(l, v?, s)))
            .collect();
        groups.push(BarGroupSpec { name: label.into(), bars });
    }
    if !groups.is_empty() || !notes.is_empty() {
        let title = "memory: training step vs evaluation with and without no_grad";
        let chart = if groups.is_empty() {
            ChartSpec::unavailable("no-grad", title, notes.join("; "))
        } else {
            let mut bars = BarsSpec::new(Unit::Bytes, groups);
            bars.series = vec!["peak allocated".into(), "peak reserved".into()];
            bars.notes = notes;
            ChartSpec::bars("no-grad", title, bars)
        };
        out.push(chart);
    }
    if let Some(c) = case(suite, "batch_size_sweep") {
        out.push(sweep_chart(c));
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
            Some(w) => ChartSpec::unavailable("empty-cache", title, w),
            None => {
                let groups = stages
                    .iter()
                    .map(|(k, label)| BarGroupSpec {
                        name: (*label).into(),
                        bars: [("allocated", 0), ("reserved", 1)]
                            .into_iter()
                            .filter_map(|(m, s)| Some(BarSpec::new(m, metric(c, &format!("{k}_{m}_bytes"))?, s)))
                            .collect(),
                    })
                    .filter(|g| !g.bars.is_empty())
                    .collect();
                let mut bars = BarsSpec::new(Unit::Bytes, groups);
                bars.series = vec!["allocated".into(), "reserved".into()];
                bars.notes = metric(c, "released_by_empty_cache_bytes")
                    .map(|r| format!("empty_cache released {} once nothing was allocated", fmt_bytes(r as u64)))
                    .into_iter()
                    .collect();
                ChartSpec::bars("empty-cache", title, bars)
            }
        };
        out.push(chart);
    }
    let frag: Vec<&CaseResult> = suite.cases.iter().filter(|c| c.name.starts_with("fragmentation/")).collect();
    if !frag.is_empty() {
        out.push(fragmentation_chart(&frag));
    }
    out
}

fn sweep_chart(c: &CaseResult) -> ChartSpec {
    let (name, title) = ("batch-sweep", "memory: batch-size sweep, peak allocated until out of memory");
    if let Some(w) = why_not(c) {
        return ChartSpec::unavailable(name, title, w);
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
    let mut lines = LinesSpec::new(
        AxisSpec::new("batch size (log)", Unit::Count, Scale::Log),
        AxisSpec::new("peak allocated", Unit::Bytes, Scale::Linear),
        vec![LineSeries { name: "batches that fit".into(), points: fits, dashed: false, color: 0, steps: false }],
    );
    let capacity = metric(c, "capacity_bytes").or_else(|| param_f64(c, "capacity_bytes"));
    if let Some(cap) = capacity {
        lines.y_marks.push(Marker::new(cap, format!("capacity {}", fmt_bytes(cap as u64))));
    }
    if let (Some(b), Some(cap)) = (metric(c, "oom_batch_count"), capacity) {
        lines.points.push(LabelledPoint { x: b, y: cap, label: format!("batch {b:.0}: out of memory"), color: None });
    }
    if let Some(b) = metric(c, "largest_fitting_batch_count") {
        lines.x_marks.push(Marker::new(b, format!("largest batch that fits: {b:.0}")));
    }
    if let Some(per) = metric(c, "per_sample_bytes") {
        lines.notes.push(format!("about {} per sample", fmt_bytes(per as u64)));
    }
    if metric(c, "oom_batch_count").is_none() {
        lines.notes.push("no batch tried ran out of memory".into());
    }
    ChartSpec::lines(name, title, lines)
}

fn fragmentation_chart(frag: &[&CaseResult]) -> ChartSpec {
    let (name, title) = ("fragmentation", "memory: fragmentation, a request after freeing every other tensor");
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
        .filter_map(|(i, (l, m))| Some(BarSpec::new(l, metric(c, m)?, i)))
        .collect();
        groups.push(BarGroupSpec { name: format!("{config}{verdict}"), bars });
    }
    if groups.is_empty() {
        return ChartSpec::unavailable(name, title, notes.join("; "));
    }
    let mut bars = BarsSpec::new(Unit::Bytes, groups);
    bars.reference = capacity.map(|c| Marker::new(c, format!("capacity {}", fmt_bytes(c as u64))));
    bars.notes = notes;
    ChartSpec::bars(name, title, bars)
}

#[cfg(test)]
mod tests {
    use vramlab_display::chart::ChartKind;

    use super::*;
    use crate::testing::{chart, memory_sweep as sweep, suite};

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
    fn the_sweep_declares_the_capacity_the_oom_point_and_the_largest_fit() {
        let charts = charts(&suite("memory", vec![sweep()]));
        let ChartKind::Lines(lines) = chart(&charts, "batch-sweep") else { panic!("a line chart") };
        let mib = (1u64 << 20) as f64;
        assert_eq!(lines.y_marks, vec![Marker::new(4.0 * mib, "capacity 4.00 MiB")]);
        assert_eq!(
            lines.points,
            vec![LabelledPoint { x: 1024.0, y: 4.0 * mib, label: "batch 1024: out of memory".into(), color: None }]
        );
        assert_eq!(lines.x_marks, vec![Marker::new(768.0, "largest batch that fits: 768")]);
        // The fits in batch order, the largest at its exact peak.
        assert_eq!(lines.series[0].points, vec![(256.0, mib), (512.0, 2.0 * mib), (768.0, 3.0 * mib)]);
    }
}
