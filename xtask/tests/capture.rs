//! `vramlab estimate`'s capture against real torch (found by `torch_python/`; a
//! missing torch fails): the H100 workloads of `gpu-check/record_snapshots.py`
//! (`data/capture/{mlp,cnn,transformer}.py` import and run them) run with no GPU, their
//! request streams matched in order against the H100 recordings in
//! `tests/data/torch-snapshots`, and the captures replayed through
//! `vramlab_snapshot` under the recordings' settings (default and
//! `expandable_segments:True`), peaks compared; and the refusals (`.item()` on
//! CUDA data, `nonzero`, CUDA graph capture, `torch.compile`): exit 2's error, the
//! op and the user's line, no capture file. One capture per workload, shared by
//! its asserts.

mod torch_python;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use vramlab_engine::alloc::AllocatorConfig;
use vramlab_snapshot::{Action, Snapshot, SnapshotReplayOptions, read_snapshot_file, replay_snapshot};
use xtask::capture::{AssumedGpu, Capture, CaptureError, CaptureOptions, capture};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/capture").join(name)
}

fn recorded(name: &str) -> Snapshot {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/torch-snapshots").join(name);
    read_snapshot_file(&path).unwrap()
}

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramlab-capture-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn run(script: &str, stacks: bool) -> (Result<Capture, CaptureError>, PathBuf) {
    let out = out_dir(script);
    let opts = CaptureOptions {
        command: vec![torch_python::torch_python().display().to_string(), data(script).display().to_string()],
        out_dir: out.clone(),
        gpu: AssumedGpu::h100(),
        stacks,
        env: Vec::new(),
    };
    (capture(&opts), out)
}

/// The sizes of a trace's allocations, in order, each with the rule that made it
/// (`None`: a tensor's storage).
fn allocations(s: &Snapshot) -> Vec<(u64, Option<String>)> {
    s.device_traces[0]
        .iter()
        .filter(|e| e.action == Action::Alloc)
        .map(|e| {
            let rule = s.frames.stack(e.frames).next().filter(|f| f.filename.starts_with("<vramlab model>"));
            (e.size, rule.map(|f| f.name.to_string()))
        })
        .collect()
}

/// The longest common subsequence of two size streams: how many of `a` are
/// matched in order, and which of `a` and of `b` are not.
fn matched_in_order(a: &[u64], b: &[u64]) -> (usize, Vec<usize>, Vec<usize>) {
    let (n, m) = (a.len(), b.len());
    let mut dp = vec![vec![0u32; m + 1]; n + 1];
    for i in 0..n {
        for j in 0..m {
            dp[i + 1][j + 1] = if a[i] == b[j] { dp[i][j] + 1 } else { dp[i][j + 1].max(dp[i + 1][j]) };
        }
    }
    let (mut i, mut j) = (n, m);
    let (mut only_a, mut only_b) = (Vec::new(), Vec::new());
    while i > 0 && j > 0 {
        if a[i - 1] == b[j - 1] {
            i -= 1;
            j -= 1;
        } else if dp[i - 1][j] >= dp[i][j - 1] {
            i -= 1;
            only_a.push(i);
        } else {
            j -= 1;
            only_b.push(j);
        }
    }
    only_a.extend((0..i).rev());
    only_b.extend((0..j).rev());
    (dp[n][m] as usize, only_a, only_b)
}

struct Compared {
    matched: usize,
    recorded: usize,
    captured: usize,
    /// Captured allocations the recording lacks, by rule (or "tensor storage") and size.
    extra: BTreeMap<String, usize>,
    /// Recorded allocations the capture lacks, by size.
    missing: BTreeMap<u64, usize>,
    /// Their indices among the recorded allocations.
    missing_at: Vec<usize>,
}

fn compare(rec: &Snapshot, cap: &Snapshot) -> Compared {
    let r = allocations(rec);
    let c = allocations(cap);
    let rs: Vec<u64> = r.iter().map(|x| x.0).collect();
    let cs: Vec<u64> = c.iter().map(|x| x.0).collect();
    let (matched, only_r, only_c) = matched_in_order(&rs, &cs);
    let mut extra = BTreeMap::new();
    for j in only_c {
        let kind = c[j].1.clone().unwrap_or_else(|| "tensor storage".into());
        *extra.entry(format!("{kind} ({} B)", c[j].0)).or_default() += 1;
    }
    let mut missing = BTreeMap::new();
    for &i in &only_r {
        *missing.entry(r[i].0).or_default() += 1;
    }
    Compared { matched, recorded: r.len(), captured: c.len(), extra, missing, missing_at: only_r }
}

/// (peak allocated, peak reserved) of `s` replayed under `conf`.
fn peaks(s: &Snapshot, conf: &str) -> (u64, u64) {
    let opts = SnapshotReplayOptions {
        config: Some(AllocatorConfig::parse(conf).unwrap()),
        no_capacity_inference: true,
        ..SnapshotReplayOptions::default()
    };
    let r = replay_snapshot(s, &opts).unwrap();
    (r.peak_allocated_bytes, r.peak_reserved_bytes)
}

fn pct(a: u64, b: u64) -> f64 {
    100.0 * (a as f64 - b as f64) / b as f64
}

/// The recording's own request stream (its allocs and frees) without its segment
/// events: what a capture can at best be, replayed from nothing as a capture is.
fn request_stream(rec: &Snapshot) -> Snapshot {
    let trace = rec.device_traces[0]
        .iter()
        .filter(|e| matches!(e.action, Action::Alloc | Action::FreeRequested | Action::FreeCompleted))
        .cloned()
        .collect();
    Snapshot::of_one_device(trace, Vec::new(), rec.frames.clone())
}

/// Captures `workload` once and checks it against both recordings: the stream
/// matched in order (at least `min_match` % of the recorded allocations), the
/// replayed peak allocated within `tolerance` % of the recording's, and the peak
/// reserved equal to that of the recording's own request stream replayed the same
/// way; within `tolerance` % of the recorded peak reserved where `reserved` says so.
fn check_workload(workload: &str, min_match: f64, tolerance: f64, reserved: bool) {
    let (result, out) = run(&format!("{workload}.py"), false);
    let cap = result.unwrap_or_else(|e| panic!("{workload}: {e}"));
    assert_eq!(cap.exit_code, 0);
    assert_eq!(cap.files.len(), 1, "{workload}: one process used CUDA: {:?}", cap.files);
    let captured = read_snapshot_file(&cap.files[0]).unwrap();
    assert!(captured.segments.is_empty(), "a raw capture has no segments");
    for (setting, conf) in [("default", ""), ("expandable", "expandable_segments:True")] {
        let rec = recorded(&format!("{workload}-{setting}.pickle"));
        let c = compare(&rec, &captured);
        let share = 100.0 * c.matched as f64 / c.recorded as f64;
        let (rec_alloc, rec_reserved) = peaks(&rec, conf);
        let (cap_alloc, cap_reserved) = peaks(&captured, conf);
        let (_, stream_reserved) = peaks(&request_stream(&rec), conf);
        eprintln!(
            "{workload}-{setting}: the recording's own request stream replayed from nothing: peak \
             reserved {stream_reserved} ({:+.2} % of the recorded)",
            pct(stream_reserved, rec_reserved)
        );
        eprintln!(
            "{workload}-{setting}: {} of {} recorded allocations matched in order ({share:.1} %), {} captured; \
             peak allocated {cap_alloc} vs {rec_alloc} ({:+.2} %), reserved {cap_reserved} vs {rec_reserved} \
             ({:+.2} %); wall {:?}\n  captured only: {:?}\n  recorded only (size: count): {:?}",
            c.matched,
            c.recorded,
            c.captured,
            pct(cap_alloc, rec_alloc),
            pct(cap_reserved, rec_reserved),
            cap.wall,
            c.extra,
            c.missing,
        );
        assert!(share >= min_match, "{workload}-{setting}: only {share:.1} % matched in order");
        assert!(pct(cap_alloc, rec_alloc).abs() <= tolerance, "{workload}-{setting}: peak allocated");
        assert_eq!(cap_reserved, stream_reserved, "{workload}-{setting}: peak reserved of the same stream");
        if reserved {
            assert!(pct(cap_reserved, rec_reserved).abs() <= tolerance, "{workload}-{setting}: peak reserved");
        }
    }
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn mlp_capture_matches_the_h100_recording() {
    check_workload("mlp", 95.0, 1.0, true);
}

/// A refused script: exit 2's error names the op and the user's line; no capture.
fn check_refusal(script: &str, kind: &str, op: &str, line: u32) {
    let (result, out) = run(script, false);
    match result {
        Err(CaptureError::Refused { kind: k, op: o, file, line: l, message }) => {
            assert_eq!((k.as_str(), o.as_str()), (kind, op), "{script}: {message}");
            assert!(file.ends_with(script), "{script}: the user's file, not torch's: {file}");
            assert_eq!(l, line, "{script}: the user's line");
        }
        other => panic!("{script}: not refused: {other:?}"),
    }
    let left: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.iter().all(|n| !n.to_string_lossy().ends_with(".pickle")), "{script}: {left:?}");
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn item_on_cuda_data_is_refused() {
    check_refusal("refuse_item.py", "data-dependent", "_local_scalar_dense", 5);
}

#[test]
fn nonzero_is_refused() {
    check_refusal("refuse_nonzero.py", "data-dependent-shape", "nonzero", 5);
}

#[test]
fn cuda_graph_capture_is_refused() {
    check_refusal("refuse_cudagraph.py", "cuda-graph", "torch.cuda.graph", 6);
}

#[test]
fn torch_compile_is_refused() {
    check_refusal("refuse_compile.py", "torch.compile", "torch.compile", 5);
}

#[test]
fn a_failing_program_leaves_no_capture() {
    let (result, out) = run("fails.py", false);
    match result {
        Err(CaptureError::ProgramFailed { code, stderr_tail }) => {
            assert_eq!(code, 1);
            assert!(stderr_tail.contains("training diverged"), "{stderr_tail}");
        }
        other => panic!("not a failure: {other:?}"),
    }
    assert!(!Path::new(&out).join("refused.json").exists());
    let left: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.iter().all(|n| !n.to_string_lossy().ends_with(".pickle")), "{left:?}");
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn transformer_capture_matches_the_h100_recording() {
    check_workload("transformer", 95.0, 1.0, false);
}

/// The CNN under `cudnn.benchmark`: every captured allocation matches the recording
/// in order; what the recording has beyond them is cuDNN's convolution workspaces
/// (per call, and the benchmark's trials), which no shape rule gives and the capture
/// says it does not model. Its peaks are then a lower bound of the recorded ones.
#[test]
fn cnn_capture_is_a_lower_bound_short_only_of_cudnn_workspaces() {
    let (result, out) = run("cnn.py", false);
    let cap = result.unwrap_or_else(|e| panic!("cnn: {e}"));
    let captured = read_snapshot_file(&cap.files[0]).unwrap();
    for (setting, conf) in [("default", ""), ("expandable", "expandable_segments:True")] {
        let rec = recorded(&format!("cnn-{setting}.pickle"));
        let c = compare(&rec, &captured);
        let (rec_alloc, rec_reserved) = peaks(&rec, conf);
        let (cap_alloc, cap_reserved) = peaks(&captured, conf);
        eprintln!(
            "cnn-{setting}: {} of {} recorded allocations matched in order ({:.1} %), {} captured; \
             peak allocated {cap_alloc} vs {rec_alloc}, reserved {cap_reserved} vs {rec_reserved}; \
             recorded only (size: count): {:?}",
            c.matched,
            c.recorded,
            100.0 * c.matched as f64 / c.recorded as f64,
            c.captured,
            c.missing,
        );
        assert_eq!(
            c.matched, c.captured,
            "cnn-{setting}: every captured allocation is in the recording: {:?}",
            c.extra
        );
        let allocs: Vec<_> = rec.device_traces[0].iter().filter(|e| e.action == Action::Alloc).collect();
        for &i in &c.missing_at {
            let cudnn = rec.frames.stack(allocs[i].frames).any(|f| {
                let n = f.name.to_ascii_lowercase();
                n.contains("cudnn") || n.contains("conv")
            });
            assert!(cudnn, "cnn-{setting}: recorded allocation {i} ({} B) is not cuDNN's", allocs[i].size);
        }
        assert!(cap_alloc <= rec_alloc && cap_reserved <= rec_reserved, "cnn-{setting}: a lower bound");
    }
    let text = std::fs::read(&cap.files[0]).unwrap();
    let needle = b"cuDNN convolution workspaces: NOT MODELLED";
    assert!(text.windows(needle.len()).any(|w| w == needle), "the capture says what it does not model");
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn gradscaler_step_is_refused_at_the_users_line() {
    check_refusal("refuse_gradscaler.py", "data-dependent", "_local_scalar_dense", 10);
}

/// A tiny forward pass with stacks: every request in order, the modelled ones
/// marked as such, the user's frames innermost first; the estimate record beside.
#[test]
fn a_tiny_forward_pass_is_captured_with_its_stacks() {
    let (result, out) = run("tiny.py", true);
    let cap = result.unwrap();
    let s = read_snapshot_file(&cap.files[0]).unwrap();
    let allocs = allocations(&s);
    let cublas = Some("cuBLAS workspace, 32 MiB per thread".to_owned());
    let lt = Some("cuBLASLt workspace, 1 MiB at the first addmm".to_owned());
    // weight, bias, the input, addmm's output, then the workspaces its GEMM takes.
    let expected = [(8192, None), (128, None), (4096, None), (2048, None), (32 << 20, cublas), (1 << 20, lt)];
    assert_eq!(allocs, expected);
    let trace = &s.device_traces[0];
    assert!(trace.iter().all(|e| e.stream == 0 && e.addr % 512 == 0));
    let input = trace.iter().find(|e| e.action == Action::Alloc && e.size == 4096).unwrap();
    let frames: Vec<_> = s.frames.stack(input.frames).filter(|f| f.filename.ends_with("tiny.py")).collect();
    let at: Vec<_> = frames.iter().map(|f| (f.name.as_ref(), f.line)).collect();
    assert_eq!(at, [("forward", 7), ("<module>", 11)], "the user's frames, innermost first");
    let text = std::fs::read(&cap.files[0]).unwrap();
    // torch.cuda.empty_cache() is an entry of its own, which the replay makes again.
    assert_eq!(trace.iter().filter(|e| e.action == Action::EmptyCache).count(), 1);
    for key in ["vramlab_estimate", "startup_s", "capture_s", "sm_count", "2.11.0", "empty_cache"] {
        assert!(text.windows(key.len()).any(|w| w == key.as_bytes()), "{key}");
    }
    let _ = std::fs::remove_dir_all(out);
}

/// A Python that cannot import torch is named, not taken for a failing program.
#[test]
fn a_python_without_torch_is_named() {
    let out = out_dir("no-torch");
    let opts = CaptureOptions {
        command: vec![torch_python::torch_python().display().to_string(), data("tiny.py").display().to_string()],
        out_dir: out.clone(),
        gpu: AssumedGpu::h100(),
        stacks: false,
        // A `torch` that cannot be imported, first on the path.
        env: vec![("PYTHONPATH".into(), data("no_torch").display().to_string())],
    };
    match capture(&opts) {
        Err(CaptureError::NoTorch { python }) => assert!(python.contains("python"), "{python}"),
        other => panic!("not NoTorch: {other:?}"),
    }
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn a_custom_op_without_a_fake_implementation_is_refused() {
    check_refusal("refuse_custom_op.py", "custom-op", "vramlab_test::scale", 11);
}

/// cuDNN attention under no_grad: the seed and offset first, the output, the
/// workspace; no logsumexp (which the fake kernel makes and CUDA's does not).
#[test]
fn attention_under_no_grad_takes_no_logsumexp() {
    let (result, out) = run("attention_no_grad.py", false);
    let s = read_snapshot_file(&result.unwrap().files[0]).unwrap();
    let sizes: Vec<u64> = allocations(&s).into_iter().map(|a| a.0).collect();
    assert_eq!(sizes, [524288, 8, 8, 524288, 256]);
    let _ = std::fs::remove_dir_all(out);
}

/// record_stream: a storage used on another stream is freed in two steps, its
/// free completing at the next allocation; the last is still pending at the end.
/// cuBLAS takes a workspace for the side stream's GEMM.
#[test]
fn a_record_stream_free_completes_at_the_next_allocation() {
    let (result, out) = run("record_stream.py", false);
    let s = read_snapshot_file(&result.unwrap().files[0]).unwrap();
    let trace = &s.device_traces[0];
    let side = trace.iter().find(|e| e.stream != 0).map(|e| e.stream).expect("the side stream's requests");
    // Each x (4 MiB, default stream) is requested free when deleted and completes
    // at the next allocation.
    let xs: Vec<u64> = trace
        .iter()
        .filter(|e| e.action == Action::Alloc && e.size == 4 << 20 && e.stream == 0)
        .map(|e| e.addr)
        .collect();
    assert_eq!(xs.len(), 4 + 3, "four x and three 4 MiB empties");
    let mut completed = 0;
    for (at, req) in trace.iter().enumerate().filter(|(_, e)| e.action == Action::FreeRequested && xs.contains(&e.addr))
    {
        if xs[1..].iter().step_by(2).any(|&a| a == req.addr) {
            continue; // the 4 MiB empties, freed at the end of the program
        }
        match trace[at + 1..].iter().position(|e| e.action == Action::FreeCompleted && e.addr == req.addr) {
            Some(d) => {
                completed += 1;
                let next = trace[at + 2 + d..].iter().find(|e| e.action != Action::FreeCompleted).unwrap();
                assert_eq!(next.action, Action::Alloc, "the free completes at the next allocation");
            }
            None => assert_eq!(req.addr, xs[xs.len() - 1], "only the last x is pending at the end"),
        }
    }
    assert_eq!(completed, 3, "the first three x complete, the last does not");
    assert!(trace.iter().any(|e| e.action == Action::FreeRequested && e.addr == xs[xs.len() - 1]));
    let cublas =
        allocations(&s).iter().filter(|a| a.1.as_deref() == Some("cuBLAS workspace, 32 MiB per thread")).count();
    assert_eq!(cublas, 1, "one GEMM stream, one workspace");
    assert!(trace.iter().any(|e| e.stream == side && e.size == 32 << 20));
    let _ = std::fs::remove_dir_all(out);
}
