//! `vramlab estimate -- python …` end to end through the binary, against real
//! torch (found by `torch_python/`; a missing torch fails): a tiny MLP
//! (`tests/data/estimate/tiny_mlp.py`) estimated, its `--out` snapshot read by
//! `replay`, `whatif`, `diff` and the pages, each saying "estimated"; a refused
//! program (exit 2, the op and the line, no file); under `--capacity` around each
//! peak, the OOM verdict of the H100 workloads (`data/capture/{mlp,transformer}.py`,
//! default and `expandable_segments:True`) equal to that of the real recording's
//! replay (`tests/data/torch-snapshots`), and the recorded peaks: allocated
//! exact, reserved one of the estimate's two segment placements; and `--search` over the transformer's
//! batch, its answer confirmed by captures at that batch and one more; and the CNN under
//! `cudnn.benchmark`, whose unsized cuDNN workspaces make its peaks lower bounds under an upper
//! one (the memory limit) that contains the recorded peaks.

mod terminal;
mod torch_python;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use vramlab_engine::alloc::AllocatorConfig;
use vramlab_snapshot::{SnapshotReplayOptions, read_snapshot_file, what_if};

fn vramlab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vramlab"))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn capture_script(name: &str) -> String {
    root().join("xtask/tests/data/capture").join(name).display().to_string()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramlab-estimate-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `vramlab ARGS -- python SCRIPT SCRIPT_ARGS`, its lines checked to fit.
fn estimate(args: &[&str], script: &str, script_args: &[&str]) -> Output {
    let python = torch_python::torch_python();
    let o = vramlab().arg("estimate").args(args).arg("--").arg(python).arg(script).args(script_args).output().unwrap();
    terminal::fits(o)
}

fn json(o: &Output) -> Value {
    assert!(o.status.success(), "{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_tiny_mlp_is_estimated_and_every_view_of_its_snapshot_says_so() {
    let dir = tmp("mlp");
    let out = dir.join("est.pickle");
    let script = root().join("tests/data/estimate/tiny_mlp.py").display().to_string();
    let o = estimate(&["--json", "--out", out.to_str().unwrap()], &script, &["--batch", "32"]);
    let j = json(&o);
    // The program's own stdout went to stderr: stdout is the document alone.
    assert!(String::from_utf8_lossy(&o.stderr).contains("tiny_mlp: done"));
    let e = &j["estimate"];
    assert!(e["torch"].as_str().unwrap().starts_with("2.11.0"), "{e}");
    assert_eq!(e["gpu"]["name"], "NVIDIA H100 80GB HBM3");
    assert!(e["rules"].as_array().unwrap().iter().any(|r| r["name"].as_str().unwrap().starts_with("cuBLAS workspace")));
    // Two cuBLAS workspaces (forward and the backward thread) and the cuBLASLt one are modelled.
    assert_eq!(j["modelled_requests"]["at_peak_bytes"], 65 << 20);
    assert!(j["own_requests"]["allocs"].as_u64().unwrap() > 20);
    let (allocated, reserved) =
        (j["peak_allocated_bytes"].as_u64().unwrap(), j["peak_reserved_bytes"].as_u64().unwrap());
    assert!(allocated > 65 << 20 && reserved >= allocated, "{allocated} {reserved}");
    assert_eq!(j["fits"], true);
    assert_eq!(j["capacity_bytes"], e["gpu"]["total_memory"], "the assumed GPU's memory by default");
    // The snapshot written: a full one (segments), marked, and every command says so.
    let snap = read_snapshot_file(&out).unwrap();
    assert!(snap.estimate.is_some() && !snap.segments.is_empty());
    let replay = vramlab().args(["replay", "--json"]).arg(&out).output().unwrap();
    let r = json(&replay);
    assert_eq!(r["estimate"]["torch"], e["torch"]);
    assert_eq!(r["fidelity"], Value::Null, "an estimate has no recording to check against");
    assert_eq!(r["peak_reserved_bytes"], j["peak_reserved_bytes"]);
    let page = dir.join("page");
    let replay = terminal::fits(vramlab().arg("replay").arg(&out).arg("--report").arg(&page).output().unwrap());
    assert!(
        text(&replay).contains("ESTIMATED snapshot") && text(&replay).contains("fidelity           not applicable")
    );
    let html = std::fs::read_to_string(page.join("index.html")).unwrap();
    assert!(html.contains("class=\"estimate-banner\"") && html.contains("Estimated: "), "banner and answer card");
    let whatif = terminal::fits(vramlab().arg("whatif").arg(&out).arg("--sweep").output().unwrap());
    assert!(text(&whatif).contains("ESTIMATED: captured with no GPU"));
    let w = json(&vramlab().arg("whatif").arg(&out).arg("--json").output().unwrap());
    assert_eq!(w["estimate"]["gpu"]["sm_count"], 132);
    let diff = terminal::fits(vramlab().arg("diff").arg(&out).arg(&out).output().unwrap());
    assert!(text(&diff).contains("A (before), ") && text(&diff).contains("estimated (no GPU ran)"));
    // The what-if and diff pages: the banner, and the answer card says it.
    for (command, dir) in [("whatif", dir.join("whatif")), ("diff", dir.join("diff"))] {
        let mut c = vramlab();
        c.arg(command).arg(&out);
        if command == "diff" {
            c.arg(&out);
        }
        assert!(c.arg("--report").arg(&dir).output().unwrap().status.success(), "{command}");
        let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
        assert!(html.contains("class=\"estimate-banner\""), "{command}'s page");
    }
    let html = std::fs::read_to_string(dir.join("whatif/index.html")).unwrap();
    assert!(html.contains("<strong>Estimated: "), "the what-if page's answer card");
    // The text: what it assumed, the peaks, the modelled rules apart from the program's requests.
    let t = estimate(&["--capacity", "1GiB"], &script, &["--batch", "32"]);
    assert!(t.status.success());
    let t = text(&t);
    for needle in ["(ESTIMATED: no GPU ran)", "torch 2.11.0", "your requests", "modelled", "cuBLAS workspace"] {
        assert!(t.contains(needle), "{needle}:\n{t}");
    }
    assert!(t.contains("out of memory      no: headroom"), "{t}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_refused_program_exits_2_naming_the_op_and_line_and_writes_nothing() {
    let dir = tmp("refused");
    let out = dir.join("est.pickle");
    let o = estimate(&["--out", out.to_str().unwrap()], &capture_script("refuse_item.py"), &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("refuse_item.py:5") && err.contains(".item()"), "{err}");
    assert!(err.contains("Nothing was written"), "{err}");
    assert!(o.stdout.is_empty());
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none(), "no file, not even a part");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether `path` replays under its own settings in `capacity` bytes with no out-of-memory.
/// PyTorch's own peak of a recording (its `.stats.json`, written beside it on the GPU).
fn recorded_peak(name: &str, key: &str) -> u64 {
    let path = root().join(format!("tests/data/torch-snapshots/{name}.stats.json"));
    let stats: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    stats["memory_stats"][key].as_u64().unwrap_or_else(|| panic!("{name}: no {key}"))
}

/// The CNN under `cudnn.benchmark`: cuDNN's convolution workspaces are counted,
/// not sized, so the estimate's peaks are lower bounds and the memory limit is
/// the upper one (PyTorch's `generate_and_filter_plans` sizes a trial workspace
/// up to `cacheInfo`'s largest block, which starts from the GPU's free memory).
/// The recorded peaks, allocated and reserved, default and expandable, lie
/// inside; the text, `--fraction`'s limit, and every view of the `--out`
/// snapshot show the bound and its reason.
#[test]
fn the_cnn_under_cudnn_benchmark_is_bounded_and_its_recorded_peaks_lie_inside() {
    let dir = tmp("cnn-bound");
    let out = dir.join("cnn.pickle");
    let script = capture_script("cnn.py");
    for (setting, conf) in [("default", ""), ("expandable", "expandable_segments:True")] {
        let mut args = vec!["--json"];
        if conf.is_empty() {
            args.extend(["--out", out.to_str().unwrap()]);
        } else {
            args.extend(["--alloc-conf", conf]);
        }
        let j = json(&estimate(&args, &script, &[]));
        let b = &j["peak_upper_bound"];
        let upper = b["bytes"].as_u64().unwrap();
        assert_eq!(upper, j["estimate"]["gpu"]["total_memory"].as_u64().unwrap(), "the assumed GPU's memory");
        let reason = b["reasons"][0].as_str().unwrap();
        assert!(reason.contains("generate_and_filter_plans") && reason.contains("cacheInfo"), "{reason}");
        let lower_reserved = [&j["peak_reserved_bytes"], &j["peak_reserved_downwards_bytes"]]
            .map(|v| v.as_u64().unwrap())
            .into_iter()
            .min()
            .unwrap();
        let name = format!("cnn-{setting}");
        for (what, lower, key) in [
            ("allocated", j["peak_allocated_bytes"].as_u64().unwrap(), "allocated_bytes.all.peak"),
            ("reserved", lower_reserved, "reserved_bytes.all.peak"),
        ] {
            let recorded = recorded_peak(&name, key);
            eprintln!("{name}: peak {what} recorded {recorded}, estimated [{lower}, {upper}]");
            assert!(lower <= recorded && recorded <= upper, "{name} {what}: {recorded} not in [{lower}, {upper}]");
        }
    }
    // The text: both bounds with the reason, the limit under --fraction.
    let t = text(&estimate(&["--fraction", "0.5"], &script, &[]));
    for needle in [
        "peaks' bounds      lower bounds",
        "x 0.5 = ",
        "not a PyTorch figure",
        "generate_and_filter_plans",
        "out of memory      no, at the lower bounds: headroom at most",
    ] {
        assert!(t.contains(needle), "{needle}:\n{t}");
    }
    // Every view of the snapshot: the replay's text and page say it too.
    let page = dir.join("page");
    let replay = terminal::fits(vramlab().arg("replay").arg(&out).arg("--report").arg(&page).output().unwrap());
    assert!(text(&replay).contains("peaks: lower bounds; each is at most"), "{}", text(&replay));
    let html = std::fs::read_to_string(page.join("index.html")).unwrap();
    assert!(html.contains("peaks: lower bounds") && html.contains("generate_and_filter_plans"), "the page says it");
    let diff = terminal::fits(vramlab().arg("diff").arg(&out).arg(&out).output().unwrap());
    assert!(text(&diff).contains("its peaks are lower bounds (requests counted, not sized), at most"), "diff");
    let _ = std::fs::remove_dir_all(&dir);
}

fn fits(path: &Path, capacity: u64) -> bool {
    let snap = read_snapshot_file(path).unwrap();
    let opts = SnapshotReplayOptions { capacity_bytes: Some(capacity), ..Default::default() };
    what_if(&snap, &opts, &[None]).unwrap()[0].fits()
}

#[test]
fn under_a_capacity_around_each_peak_the_oom_verdict_is_the_recordings() {
    let dir = tmp("verdicts");
    let cases = [("mlp", "default"), ("mlp", "expandable"), ("transformer", "default"), ("transformer", "expandable")];
    let mut wrong = Vec::new();
    for (workload, setting) in cases {
        let recording = root().join(format!("tests/data/torch-snapshots/{workload}-{setting}.pickle"));
        let rec = read_snapshot_file(&recording).unwrap();
        let conf = if setting == "expandable" { "expandable_segments:True" } else { "" };
        assert_eq!(rec.allocator_settings.as_ref().unwrap().to_config(), AllocatorConfig::parse(conf).unwrap());
        let r = vramlab_snapshot::replay_snapshot(&rec, &SnapshotReplayOptions::default()).unwrap();
        let peak = r.peak_reserved_bytes;
        let out = dir.join(format!("{workload}-{setting}.pickle"));
        // The estimate itself at the recording's peak: its verdict is its snapshot's.
        let mut args = vec!["--json", "--capacity"];
        let at_peak = peak.to_string();
        args.push(&at_peak);
        args.extend(["--out", out.to_str().unwrap()]);
        if !conf.is_empty() {
            args.extend(["--alloc-conf", conf]);
        }
        let j = json(&estimate(&args, &capture_script(&format!("{workload}.py")), &[]));
        assert_eq!(j["fits"], fits(&out, peak), "{workload}-{setting}: the command and its snapshot");
        // The peaks: allocated exact; reserved one of the two segment placements
        // (upwards for the MLP, downwards for the default transformer: the H100's
        // driver put its two 64 MiB segments below the others).
        assert_eq!(j["peak_allocated_bytes"], r.peak_allocated_bytes, "{workload}-{setting}");
        let placements = [&j["peak_reserved_bytes"], &j["peak_reserved_downwards_bytes"]].map(|v| v.as_u64().unwrap());
        assert!(placements.contains(&peak), "{workload}-{setting}: recorded {peak}, estimated {placements:?}");
        for percent in [90, 98, 100, 102, 110] {
            let capacity = peak * percent / 100;
            let (real, estimated) = (fits(&recording, capacity), fits(&out, capacity));
            if real != estimated {
                wrong.push(format!(
                    "{workload}-{setting} at {percent}% of its peak reserved ({capacity} B): the recording {}, \
                     the estimate {}",
                    if real { "fits" } else { "runs out" },
                    if estimated { "fits" } else { "runs out" }
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn search_finds_the_largest_transformer_batch_that_fits_and_captures_confirm_it() {
    const CAPACITY: &str = "512MiB";
    let script = capture_script("transformer.py");
    let o = estimate(&["--json", "--capacity", CAPACITY, "--search", "BATCH=1..160"], &script, &["--batch", "BATCH"]);
    let j = json(&o);
    let progress = String::from_utf8_lossy(&o.stderr);
    assert!(progress.contains("searching BATCH=1..160") && progress.contains("BATCH=160: reserves"), "{progress}");
    let answer = &j["answers"][0];
    let largest = answer["largest"].as_u64().unwrap_or_else(|| panic!("{answer}"));
    assert!(largest > 1 && largest < 160, "{answer}");
    assert_eq!(answer["next"].as_u64(), Some(largest + 1));
    assert_eq!(answer["confirmed"], true);
    assert!(answer["headroom_bytes"].as_u64().unwrap() < 1 << 30);
    // Bisection, not a scan: about log2 of the range in captures.
    assert!(j["trials"].as_array().unwrap().len() <= 10, "{}", j["trials"]);
    // Confirmed by the estimate's own captures at that batch and one more, in parallel.
    let confirm = |batch: u64| {
        let script = script.clone();
        std::thread::spawn(move || {
            json(&estimate(&["--json", "--capacity", CAPACITY], &script, &["--batch", &batch.to_string()]))
        })
    };
    let (at, above) = (confirm(largest), confirm(largest + 1));
    let (at, above) = (at.join().unwrap(), above.join().unwrap());
    assert_eq!((at["fits"].as_bool(), above["fits"].as_bool()), (Some(true), Some(false)), "{largest}");
    // The same capture: the search's trial at that batch reserved what the estimate does.
    let trial = j["trials"].as_array().unwrap().iter().find(|t| t["value"] == largest).unwrap();
    assert_eq!(at["peak_reserved_bytes"], trial["settings"][0]["unlimited_peak_reserved_bytes"]);
}
