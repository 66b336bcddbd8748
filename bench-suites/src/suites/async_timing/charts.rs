//! The async suite's chart: one matmul timed by the host clock without and
//! with a synchronize, by device events, and the launch call alone; a way of
//! timing that is not available here is named with its reason.

use vramlab_display::chart::{BarGroupSpec, BarSpec, BarsSpec, ChartSpec, Unit};

use crate::charts::{case, median, metric, param, why_not};
use crate::schema::SuiteResult;

pub(super) fn charts(suite: &SuiteResult) -> Vec<ChartSpec> {
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
            bars.push(BarSpec::new(label, v, series));
        }
        if let Some(v) = metric(c, "launch_median_ns") {
            bars.push(BarSpec::new("host time of the launch call", v, 3));
        }
    }
    let shape = suite.cases.iter().find_map(|c| param(c, "shape")).map(|s| format!(" ({s})")).unwrap_or_default();
    let chart = if bars.is_empty() {
        ChartSpec::unavailable("host-vs-device", title, notes.join("; "))
    } else {
        let mut spec = BarsSpec::new(Unit::Nanoseconds, vec![BarGroupSpec { name: String::new(), bars }]);
        spec.notes = notes;
        ChartSpec::bars("host-vs-device", format!("{title}{shape}"), spec)
    };
    vec![chart]
}

#[cfg(test)]
mod tests {
    use vramlab_display::chart::ChartKind;

    use super::*;
    use crate::testing::async_without_device_events;

    #[test]
    fn without_device_events_the_host_clocks_are_drawn_and_the_reason_noted() {
        let s = async_without_device_events();
        let charts = charts(&s);
        assert_eq!(charts[0].title, "async: host clock vs device time of one matmul (8x8x8)");
        let ChartKind::Bars(bars) = &charts[0].kind else { panic!("bars") };
        let values: Vec<f64> = bars.groups[0].bars.iter().map(|b| b.value).collect();
        assert_eq!(values, [100.0, 900.0]);
        assert_eq!(
            bars.notes,
            ["device events (the kernel's time): not available: the CPU backend runs synchronously"]
        );
    }
}
