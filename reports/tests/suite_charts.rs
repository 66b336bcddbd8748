//! The claim charts of a real results file (`tests/data/full-cpu-results.json`:
//! a full `cargo xtask bench --device cpu` run on a machine without a GPU, its
//! timelines and most timing samples left out): every suite gets the charts
//! its claim needs, each draws as a PNG that decodes at its declared size and
//! as a well-formed SVG, and the GPU sides say why they are missing.

use std::path::Path;

use vramlab_reports::canvas::{HEIGHT, WIDTH};
use vramlab_reports::charts::Chart;
use vramlab_reports::suite_charts::for_suite;

fn results() -> vramlab_suites::RunResults {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/full-cpu-results.json");
    vramlab_reports::load_results(&path).expect("the fixture loads").results
}

/// Every element opened is closed, in order (no XML library needed for this).
fn assert_well_formed(svg: &str, what: &str) {
    let mut stack: Vec<&str> = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find('<') {
        let end = rest[i..].find('>').unwrap_or_else(|| panic!("{what}: unclosed tag")) + i;
        let tag = &rest[i + 1..end];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop(), Some(name.trim()), "{what}: </{name}> closes the wrong element");
        } else if !tag.ends_with('/') && !tag.starts_with('?') && !tag.starts_with('!') {
            stack.push(tag.split_whitespace().next().unwrap_or(""));
        }
        rest = &rest[end + 1..];
    }
    assert!(stack.is_empty(), "{what}: unclosed {stack:?}");
    assert!(!rest.contains('>'), "{what}: stray text after the root");
}

fn png_size(path: &Path) -> (u32, u32) {
    let decoder = png::Decoder::new(std::fs::File::open(path).unwrap());
    let mut reader = decoder.read_info().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (info.width, info.height)
}

#[test]
fn every_suite_gets_its_claim_charts_and_each_draws_cleanly() {
    let results = results();
    let dir = std::env::temp_dir().join(format!("vramlab-suite-charts-{}", std::process::id()));
    let mut names = Vec::new();
    for suite in &results.suites {
        let Some(charts) = for_suite(suite) else {
            names.push(format!("{} (generic)", suite.name));
            continue;
        };
        for (name, chart) in &charts {
            let what = format!("{}/{name}", suite.name);
            let svg = chart.svg().unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_well_formed(&svg, &what);
            let png = dir.join(format!("{}-{name}.png", suite.name));
            chart.write_png(&png).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(png_size(&png), (WIDTH, HEIGHT), "{what}");
            names.push(what);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    for expected in [
        "devices (generic)",
        "cpu-vs-gpu/matmul-time-by-size",
        "cpu-vs-gpu/speedup",
        "amp/step-time",
        "amp/peak",
        "autotune/convolution-candidates",
        "autotune/matmul-candidates",
        "autotune/tuning-cost",
        "transfer/bandwidth",
        "transfer/overlap",
        "async/host-vs-device",
        "memory/no-grad",
        "memory/batch-sweep",
        "memory/empty-cache",
        "memory/fragmentation",
        "allocator/latency",
        "allocator/recording",
        "input-pipeline/throughput",
    ] {
        assert!(names.iter().any(|n| n == expected), "no {expected} in {names:?}");
    }
}

#[test]
fn gpu_sides_say_why_they_are_missing_on_a_cpu_only_machine() {
    let results = results();
    let suite = |name: &str| results.suites.iter().find(|s| s.name == name).expect("suite in the fixture");
    let charts = for_suite(suite("cpu-vs-gpu")).unwrap();
    let (_, speedup) = charts.iter().find(|(n, _)| n == "speedup").unwrap();
    let Chart::Unavailable { reason, .. } = speedup else { panic!("speedups drawn without a GPU") };
    assert!(reason.contains("CUDA unavailable"), "{reason}");
    let (_, matmul) = charts.iter().find(|(n, _)| n == "matmul-time-by-size").unwrap();
    let svg = matmul.svg().unwrap();
    assert!(svg.contains("GPU side matmul/gpu: not available: no GPU: CUDA unavailable"), "{svg}");
    assert!(svg.contains("GPU (not available)"));
    let charts = for_suite(suite("async")).unwrap();
    let svg = charts[0].1.svg().unwrap();
    assert!(svg.contains("device events (the kernel&apos;s time): not available"), "{svg}");
}
