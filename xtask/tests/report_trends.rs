//! `cargo xtask report --history DB`: the Trends section charts the run's
//! headline figures over the history's runs, the change point marked; without
//! a history the page says why there are no trends.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod terminal;

fn temp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vramlab-report-trends-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn xtask(dir: &Path, args: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_xtask")).current_dir(dir).args(args).output().expect("xtask runs");
    let o = terminal::fits(o);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

/// A one-case run whose median time is `median_ns`.
fn results(median_ns: f64) -> String {
    format!(
        r#"{{"schema_version":2,"vramlab_version":"0.1.0","started_at":"2026-11-25T00:00:00Z",
  "options":{{"suites":[],"device":"cpu","quick":true,"samples":null,"seed":1,"capacity_bytes":1}},
  "environment":{{"cpu_model":"x","cpu_cores":1,"host_memory_bytes":1,"gpus":[],"gpu_unavailable_reason":null,
  "device":"cpu","os":"linux","rustc":null,"git_commit":null}},
  "suites":[{{"name":"alloc","description":"d","device":"cpu","duration_ns":1,"findings":[],
  "cases":[{{"name":"pair","params":{{}},"outcome":{{"status":"ok"}},"metrics":{{}},"memory":null,"notes":[],"duration_ns":1,
  "timing":{{"clock":"host","iterations_per_sample":1,"median_ns":{m},"p25_ns":{m},"p75_ns":{m},"iqr_ns":0.0,
  "min_ns":{m},"max_ns":{m},"mean_ns":{m},"samples_ns":[{m}]}}}}]}}]}}"#,
        m = median_ns
    )
}

#[test]
fn the_report_charts_trends_from_a_history_or_says_why_not() {
    let dir = temp("with");
    let db = dir.join("runs.sqlite");
    for (i, median) in [1000.0, 1000.0, 1000.0, 5000.0, 5000.0, 5000.0].into_iter().enumerate() {
        let f = dir.join(format!("run{i}.json"));
        std::fs::write(&f, results(median)).unwrap();
        xtask(&dir, &["history", "--db", db.to_str().unwrap(), "--import", f.to_str().unwrap()]);
    }
    xtask(&dir, &["report", "--from", "run5.json", "--out", "report", "--history", db.to_str().unwrap()]);
    let html = std::fs::read_to_string(dir.join("report/index.html")).unwrap();
    assert!(html.contains("<h2>Trends</h2>") && !html.contains("No trends"), "trends shown");
    assert!(html.contains("alloc: median time — pair"), "the chart's title");
    assert!(html.contains("step at run 4: 5.00 µs"), "the step from 1 µs to 5 µs at the 4th run is marked");
    assert!(dir.join("report/charts/trend-0.svg").is_file() && dir.join("report/charts/trend-0.png").is_file());

    // No --history and none beside the file or under target/vramlab: the page says why.
    let bare = temp("without");
    std::fs::write(bare.join("results.json"), results(1000.0)).unwrap();
    xtask(&bare, &["report", "--from", "results.json", "--out", "report"]);
    let html = std::fs::read_to_string(bare.join("report/index.html")).unwrap();
    assert!(html.contains("No trends: no run history was given"), "the reason is on the page");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&bare);
}
