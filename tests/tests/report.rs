//! The report of a fixed results file, end to end, as a person sees it: the
//! HTML's text and escaping, `summary.md`, every chart file, and the page opened
//! in a real headless browser (Debian's `chromium`, driven by its command line):
//! no console error, no network request, charts with a size, hovering the
//! timeline shows a value, screenshots at 1280 px and 390 px under
//! `target/report-screenshots/`. Without chromium the browser test prints
//! `skipped: no chromium (…)` and passes, except in CI (`CI` set), where it fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use vramlab_reports::testing::{chromium, chromium_run};
use vramlab_suites::{
    CaseResult, CategoryStack, Environment, Finding, MemoryPeaks, MemoryTimeline, PhaseBand, RunOptions, RunResults,
    SCHEMA_VERSION, Series, SuiteResult, Verdict,
};

const EVIL: &str = "<script>alert(1)</script>";

fn fixture() -> RunResults {
    let timeline = MemoryTimeline {
        device: "cpu:0".into(),
        duration_ns: 10_000_000,
        allocated: Series { time_ns: vec![0, 2_000_000, 5_000_000, 8_000_000], bytes: vec![0, 1 << 20, 3 << 20, 0] },
        reserved: Series { time_ns: vec![0, 2_000_000], bytes: vec![0, 4 << 20] },
        active: Series::default(),
        phases: vec![PhaseBand {
            name: "forward".into(),
            path: "train_step/forward".into(),
            depth: 1,
            start_ns: 1_000_000,
            end_ns: 6_000_000,
        }],
        peak_allocated_bytes: 3 << 20,
        peak_time_ns: 5_000_000,
        peak_phase: Some("train_step/forward".into()),
        events: 6,
    };
    let stack = CategoryStack {
        time_ns: vec![0, 2_000_000, 5_000_000, 8_000_000],
        by_category_bytes: BTreeMap::from([
            ("parameter".into(), vec![0, 1 << 20, 1 << 20, 0]),
            ("activation".into(), vec![0, 0, 2 << 20, 0]),
        ]),
    };
    let train = CaseResult::ok("train_step_peak")
        .with_params([("mode".into(), serde_json::json!("train")), ("tag".into(), serde_json::json!(EVIL))])
        .with_timing(vramlab_suites::harness::summarize(vec![2_000_000.0, 2_100_000.0, 1_900_000.0], 1, "host"))
        .with_metrics([("peak_allocated_bytes".into(), (3u64 << 20) as f64)])
        .with_memory(MemoryPeaks {
            device: "cpu:0".into(),
            peak_allocated_bytes: 3 << 20,
            peak_reserved_bytes: 4 << 20,
            peak_active_bytes: 3 << 20,
            peak_phase: Some("train_step/forward".into()),
            by_category_at_peak_bytes: BTreeMap::new(),
            allocator_events: 6,
        })
        .with_duration_ns(10_000_000)
        .with_timeline(timeline)
        .with_categories(stack);
    let evil = CaseResult::failed(EVIL, "it broke | badly").with_duration_ns(1);
    let gpu = CaseResult::not_available("h2d/pinned", "no CUDA driver here").with_duration_ns(1);
    RunResults {
        schema_version: SCHEMA_VERSION,
        vramlab_version: "0.1.0".into(),
        started_at: "2026-11-24T00:00:00Z".into(),
        options: RunOptions {
            suites: vec![],
            device: "cpu".into(),
            quick: true,
            samples: None,
            seed: 1,
            capacity_bytes: 1 << 30,
        },
        environment: Environment {
            cpu_model: "Test CPU".into(),
            cpu_cores: 2,
            host_memory_bytes: 8 << 30,
            gpus: vec![],
            gpu_unavailable_reason: Some("CUDA unavailable: no driver".into()),
            device: "cpu".into(),
            os: "linux".into(),
            rustc: None,
            git_commit: Some("abc123".into()),
        },
        suites: vec![
            SuiteResult {
                name: "memory".into(),
                description: "where memory goes".into(),
                device: "cpu".into(),
                duration_ns: 1,
                cases: vec![train, evil],
                findings: vec![Finding {
                    claim: "no_grad saves memory".into(),
                    verdict: Verdict::Holds,
                    evidence: "training 3.00 MiB vs eval 1.00 MiB".into(),
                }],
                charts: vec![],
            },
            SuiteResult {
                name: "transfer".into(),
                description: "copies".into(),
                device: "cpu".into(),
                duration_ns: 1,
                cases: vec![gpu],
                findings: vec![Finding {
                    claim: "pinned is faster".into(),
                    verdict: Verdict::NotApplicable,
                    evidence: "no GPU".into(),
                }],
                charts: vec![],
            },
        ],
    }
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("target"))
}

fn write_fixture_report(tag: &str) -> (PathBuf, vramlab_reports::ReportFiles) {
    let dir = target_dir().join(format!("report-test-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    let files = vramlab_reports::write_report(&fixture(), &dir, &[], None).expect("report written");
    (dir, files)
}

/// The page's text as a reader sees it: tags dropped, scripts and styles removed.
fn visible_text(html: &str) -> String {
    let mut rest = html.to_owned();
    for (open, close) in [("<style", "</style>"), ("<script", "</script>")] {
        let mut kept = String::new();
        let mut r = rest.as_str();
        while let Some(i) = r.find(open) {
            kept.push_str(&r[..i]);
            r = r[i..].find(close).map_or("", |j| &r[i + j + close.len()..]);
        }
        kept.push_str(r);
        rest = kept;
    }
    let mut text = String::new();
    let mut in_tag = false;
    for ch in rest.chars() {
        match ch {
            '<' => {
                in_tag = true;
                text.push(' ');
            }
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    let text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&#x2f;", "/").replace("&quot;", "\"");
    text.replace("&#x27;", "'").replace("&amp;", "&").split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn html_text_escaping_markdown_and_chart_files() {
    let (_dir, files) = write_fixture_report("text");
    let html = std::fs::read_to_string(&files.index_html).unwrap();
    // Escaped, never executed: the evil name shows as text.
    assert!(!html.contains(EVIL), "raw script in the page");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"));
    // Offline: no resource is fetched (links to read are fine, but no src= or stylesheet).
    assert!(!html.contains("src=\"http") && !html.contains("<link") && !html.contains("@import"));
    let text = visible_text(&html);
    for expected in [
        "Environment CPU Test CPU (2 cores) Host memory 8.00 GiB GPUs none: CUDA unavailable: no driver",
        "Measured on the CPU, Test CPU (2 cores; no GPU: CUDA unavailable: no driver): 2 suites (memory, \
         transfer), a quick run (fewer samples and sizes).",
        "1 holds · 0 inconclusive · 0 do not hold · 1 not applicable",
        "Contents Verdicts memory 2 cases · 1 holds transfer 1 case · 1 not applicable Environment · Trends",
        "memory holds no_grad saves memory Training 3.00 MiB vs eval 1.00 MiB.",
        "transfer not applicable pinned is faster No GPU.",
        "holds no_grad saves memory — Training 3.00 MiB vs eval 1.00 MiB.",
        "Memory over time: 1 interactive timeline, 1 by category (the largest peaks)",
        "peak 3.00 MiB at 5.00 ms in train_step/forward",
        "train_step_peak mode=train; tag=<script>alert(1)</script> 2.00 ms",
        "<script>alert(1)</script> failed: it broke | badly",
        "Perfetto trace of memory / train_step_peak: trace.json",
        "failed: it broke | badly",
        "not available: no CUDA driver here",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    // The answer comes first: the sentence, the counts and the contents before the verdict table,
    // the environment and the suites.
    let at = |what: &str| text.find(what).unwrap_or_else(|| panic!("{what:?} missing"));
    assert!(at("Measured on") < at("1 holds ·") && at("1 holds ·") < at("Contents Verdicts"));
    assert!(at("Contents Verdicts") < at("Verdicts Suite Verdict Claim Evidence"));
    assert!(at("Verdicts Suite Verdict Claim Evidence") < at("Environment CPU"));
    // Timelines wait, collapsed, until the reader opens them.
    assert!(html.contains("<details class=\"timelines\"><summary>Memory over time"));
    // summary.md: GitHub tables, pipes escaped, verdicts.
    let md = std::fs::read_to_string(&files.summary_md).unwrap();
    assert!(md.contains(
        "| Suite | Claim | Verdict | Evidence |\n|---|---|---|---|\n\
         | memory | no_grad saves memory | **holds** | training 3.00 MiB vs eval 1.00 MiB |\n\
         | transfer | pinned is faster | **not applicable** | no GPU |\n"
    ));
    assert!(md.contains("| &lt;script&gt;alert(1)&lt;/script&gt; | – | – | failed: it broke \\| badly |"));
    assert!(md.len() < 1 << 20);
    // Every chart: a PNG of the declared size, a well-formed SVG.
    assert!(!files.charts.is_empty());
    for c in &files.charts {
        let bytes = std::fs::read(c).unwrap();
        match c.extension().and_then(|e| e.to_str()) {
            Some("png") => {
                assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", c.display());
                assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), vramlab_reports::canvas::WIDTH);
                assert_eq!(u32::from_be_bytes(bytes[20..24].try_into().unwrap()), vramlab_reports::canvas::HEIGHT);
            }
            Some("svg") => {
                let s = String::from_utf8(bytes).unwrap();
                assert!(s.trim_start().starts_with("<svg") && s.trim_end().ends_with("</svg>"), "{}", c.display());
                assert_eq!(s.matches("<svg").count(), s.matches("</svg>").count());
            }
            other => panic!("unexpected chart file {other:?}"),
        }
    }
    // The GPU-only suite says why instead of drawing empty axes.
    let unavailable = files.charts.iter().find(|p| p.to_string_lossy().contains("transfer-unavailable.svg")).unwrap();
    assert!(std::fs::read_to_string(unavailable).unwrap().contains("No data here: no CUDA driver here"));
    // The trace opens as Chrome trace JSON.
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(files.trace_json.unwrap()).unwrap()).unwrap();
    assert!(trace["traceEvents"].as_array().unwrap().iter().any(|e| e["ph"] == "X" && e["name"] == "forward"));
}

#[test]
fn report_in_a_headless_browser() {
    let Some(browser) = chromium() else {
        println!("skipped: no chromium (install Debian's chromium package to run this test)");
        return;
    };
    let (dir, files) = write_fixture_report("browser");
    let profile = dir.join("chromium-profile");
    let url = format!("file://{}#hover=0.55", files.index_html.display());
    // The DOM after the scripts ran, with the first timeline hovered at the middle
    // of its width (the page's hover handler, fed a real mouse event).
    let dom = chromium_run(
        &browser,
        &profile,
        &["--window-size=1280,900".into(), "--virtual-time-budget=2000".into(), "--dump-dom".into(), url.clone()],
    );
    let html = String::from_utf8_lossy(&dom.stdout);
    let log = String::from_utf8_lossy(&dom.stderr);
    assert!(html.contains("<svg viewBox="), "the timeline script drew nothing:\n{log}");
    // The axis starts at the work (forward, at 1 ms of 10: the setup before it is left out),
    // so 55 % along it is 1 + 0.55 × 9 = 5.95 ms: allocated 3 MiB, reserved 4 MiB, in forward.
    let readout = html.split("tl-memory-0-readout\">").nth(1).and_then(|r| r.split('<').next()).unwrap_or("");
    assert!(
        readout.starts_with("t = 5.9") || readout.starts_with("t = 6.0"),
        "hover did not update the readout: {readout:?}"
    );
    assert!(readout.contains("allocated 3.00 MiB") && readout.contains("reserved 4.00 MiB"), "{readout}");
    assert!(readout.contains("phase train_step/forward"), "{readout}");
    // No console error, no network request (a file:// page with nothing to fetch).
    for bad in ["Uncaught", "CONSOLE(", "ERR_", "net::"] {
        assert!(!log.lines().any(|l| l.contains(bad) && !l.contains("dbus")), "browser log has {bad}:\n{log}");
    }
    // Every chart has a size: static SVGs carry width/height; the interactive one was drawn at the window's width.
    for svg in html.split("<svg").skip(1) {
        let head = &svg[..svg.find('>').unwrap_or(0)];
        assert!(head.contains("width=\"") && !head.contains("width=\"0\""), "a chart without size: {head}");
    }
    let shots = target_dir().join("report-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    for width in [1280, 390] {
        let path = shots.join(format!("report-{width}.png"));
        let _ = std::fs::remove_file(&path);
        let out = chromium_run(
            &browser,
            &profile,
            &[
                format!("--window-size={width},900"),
                "--virtual-time-budget=2000".into(),
                format!("--screenshot={}", path.display()),
                url.clone(),
            ],
        );
        let bytes =
            std::fs::read(&path).unwrap_or_else(|_| panic!("no screenshot: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), width);
        println!("screenshot: {}", path.display());
    }
}

/// The page as a reader meets it, measured by `tests/data/report-probe.html`
/// (the report in an iframe of the asked width, timelines opened): the verdict
/// counts and the whole table of contents on the first screen (900 px high),
/// every chart text inside its SVG, the interactive timeline's legend, round
/// ticks and x axis on the work, nothing wider than the page at 1280 and 390 px.
#[test]
fn first_screen_labels_and_phone_width_in_a_headless_browser() {
    let Some(browser) = chromium() else {
        println!("skipped: no chromium (install Debian's chromium package to run this test)");
        return;
    };
    let (dir, files) = write_fixture_report("probe");
    let probe = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/report-probe.html");
    std::fs::copy(&probe, dir.join("probe.html")).unwrap();
    assert!(files.index_html.starts_with(&dir));
    let profile = dir.join("chromium-profile");
    for width in [1280, 390] {
        let url = format!("file://{}#w={width}", dir.join("probe.html").display());
        let out = chromium_run(
            &browser,
            &profile,
            &[
                "--allow-file-access-from-files".into(),
                "--window-size=1300,1000".into(),
                "--virtual-time-budget=3000".into(),
                "--dump-dom".into(),
                url,
            ],
        );
        let dom = String::from_utf8_lossy(&out.stdout);
        let json = dom.split("<pre id=\"probe\">").nth(1).and_then(|r| r.split("</pre>").next()).unwrap_or("");
        let json = json.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&");
        let m: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| {
            panic!("no probe result at {width} px ({e}): {json:?}\n{}", String::from_utf8_lossy(&out.stderr))
        });
        let f = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {m}"));
        // The answer on the first screen: the counts and every suite of the contents.
        assert_eq!(m["counts_text"], "1 holds · 0 inconclusive · 0 do not hold · 1 not applicable", "{m}");
        assert!(
            f("counts_top") >= 0.0 && f("counts_top") < f("height"),
            "counts below the first screen at {width} px: {m}"
        );
        assert!(
            f("last_toc_suite_top") >= 0.0 && f("last_toc_suite_top") < f("height"),
            "contents below the first screen at {width} px: {m}"
        );
        // Every label inside its chart, the interactive timeline's included.
        assert!(f("timeline_svgs") >= 1.0 && f("texts") > 10.0, "no charts measured at {width} px: {m}");
        assert_eq!(m["outside"], serde_json::json!([]), "chart text outside its canvas at {width} px");
        // The interactive timeline: a legend with the device, y ticks on round steps (the data
        // reach 4 MiB reserved: 0 to 5 MiB by 1 MiB, never 0.84 MiB), x ticks on round times
        // from the work's start, and a note on the setup left out (forward starts at 1 of 10 ms).
        let tl = &m["timelines"][0];
        assert_eq!(tl["legend"], serde_json::json!(["allocated", "reserved", "peak", "device cpu:0"]), "{m}");
        assert_eq!(tl["y_ticks"], serde_json::json!(["0 MiB", "1 MiB", "2 MiB", "3 MiB", "4 MiB", "5 MiB"]), "{m}");
        let x_ticks: Vec<&str> = tl["x_ticks"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        let expected_x: &[&str] = if width == 1280 {
            &["2.00 ms", "4.00 ms", "6.00 ms", "8.00 ms", "10.00 ms"]
        } else {
            &["5.00 ms", "10.00 ms"]
        };
        assert_eq!(x_ticks, expected_x, "{m}");
        let note = tl["note"].as_str().unwrap_or("");
        assert!(note.starts_with("The time axis starts at 1.00 ms, where the first phase begins"), "{m}");
        // No sideways scroll: tables scroll in their own box, nothing else sticks out.
        assert!(f("scroll_width") <= f("client_width"), "sideways scroll at {width} px: {m}");
        assert_eq!(m["sticking_out"], serde_json::json!([]), "wider than the page at {width} px");
    }
}
