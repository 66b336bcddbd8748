//! `record -- CMD` end to end against a stand-in `torch` package the test
//! writes (no GPU, no real torch): `torch.cuda._lazy_init`, which the hook
//! wraps; `torch.cuda.memory._record_memory_history` and `_dump_snapshot`
//! (which logs its calls and copies a real snapshot fixture); and
//! `torch._C._cuda_attach_out_of_memory_observer`, whose observers the
//! stand-in's `oom()` calls before raising. Each case checks the program's own
//! output and exit status, the hook's calls and one stderr line, the files'
//! names (host, rank, pid, `-oomN`), the chaining to an existing
//! `sitecustomize`, and the report. Its `_dump_snapshot` can also fail on cue:
//! a full disk (`FAKE_TORCH_DISK_FULL=N`: the N-th dump writes half, then
//! raises ENOSPC) or a process killed mid-dump (`FAKE_TORCH_KILL_IN_DUMP`).
//! The bad inputs: no torch in the child, a command that does not exist or
//! cannot run, an `--out` that cannot be written, a full disk, a snapshot cut
//! short by a killed process, Ctrl-C. With `FAKE_TORCH_MODEL` (the folder of
//! `scripts/make_snapshot_fixtures.py`) the stand-in's `torch.empty(nbytes)`
//! goes through that script's caching-allocator model, each allocation with the
//! program's own Python frames, and `_dump_snapshot` pickles what the model
//! recorded: the program's code decides what the snapshot holds, as with real
//! torch — the memory gate's end-to-end test (`--save-baseline`, `--baseline`).
//! Fails without `python3`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod terminal;

const TORCH_INIT: &str = "from . import _C, cuda\ndef empty(nbytes):\n    return cuda.Tensor(nbytes)\n";
const TORCH_C: &str = "\
_observers = []
def _cuda_attach_out_of_memory_observer(fn):
    _observers.append(fn)
    from .cuda.memory import _log
    _log('observer')
";
const TORCH_CUDA: &str = "\
from . import memory
_initialized = False
class OutOfMemoryError(RuntimeError):
    pass
def is_initialized():
    return _initialized
def _lazy_init():
    global _initialized
    _initialized = True
def alloc():
    _lazy_init()
class Tensor:
    def __init__(self, nbytes):
        _lazy_init()
        self._addr = memory._model[0].malloc(nbytes)
    def __del__(self):
        try:
            memory._model[0].free_(self._addr)
        except Exception:
            pass
def current_device():
    return 0
def get_device_name(device=None):
    return 'stand-in'
def memory_stats(device=None):
    import json, os
    path = os.environ.get('FAKE_TORCH_STATS')
    return json.load(open(path))['memory_stats'] if path else {}
def oom():
    _lazy_init()
    import torch._C
    for fn in torch._C._observers:
        fn(0, 1 << 30, 0, 0)
    raise OutOfMemoryError('CUDA out of memory. Tried to allocate 1.00 GiB')
";
const TORCH_MEMORY: &str = "\
import os, shutil, signal
_dumps = [0]
def _log(line):
    with open(os.environ['FAKE_TORCH_LOG'], 'a') as f:
        f.write(line + '\\n')
_model = [None]
def _frames():
    import traceback
    return [{'filename': f.filename, 'line': f.lineno, 'name': f.name}
            for f in reversed(traceback.extract_stack())
            if '/site/torch/' not in f.filename and 'make_snapshot_fixtures' not in f.filename]
def _record_memory_history(max_entries=None, stacks=None, **kwargs):
    _log('record max_entries=%s stacks=%s' % (max_entries, stacks))
    if os.environ.get('FAKE_TORCH_MODEL'):
        import sys
        sys.path.insert(0, os.environ['FAKE_TORCH_MODEL'])
        import make_snapshot_fixtures
        _model[0] = make_snapshot_fixtures.Model([])
        _model[0]._frames = _frames
def _dump_snapshot(path):
    _dumps[0] += 1
    if _model[0] is not None:
        import make_snapshot_fixtures, pickle
        m = _model[0]
        snap = {'segments': m.segment_dicts(), 'device_traces': [m.trace],
                'allocator_settings': make_snapshot_fixtures.settings(), 'external_annotations': []}
        with open(path, 'wb') as f:
            pickle.dump(snap, f, protocol=4)
        _log('dump ' + os.path.basename(path))
        return
    data = open(os.environ['FAKE_TORCH_SNAPSHOT'], 'rb').read()
    if os.environ.get('FAKE_TORCH_DISK_FULL') == str(_dumps[0]):
        with open(path, 'wb') as f:
            f.write(data[:len(data) // 2])
        raise OSError(28, 'No space left on device')
    if os.environ.get('FAKE_TORCH_KILL_IN_DUMP'):
        with open(path, 'wb') as f:
            f.write(data[:len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    shutil.copyfile(os.environ['FAKE_TORCH_SNAPSHOT'], path)
    _log('dump ' + os.path.basename(path))
";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// `record` runs Python programs: its tests need `python3` on PATH and fail,
/// never skip, without it (Debian: `apt-get install python3`).
fn require_python() {
    let ok = Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(ok, "record's tests need python3 on PATH (Debian: apt-get install python3)");
}

/// A fresh folder with the stand-in torch under `site/`.
fn setup(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramlab-record-test-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let torch = dir.join("site/torch");
    fs::create_dir_all(torch.join("cuda")).unwrap();
    fs::write(torch.join("__init__.py"), TORCH_INIT).unwrap();
    fs::write(torch.join("_C.py"), TORCH_C).unwrap();
    fs::write(torch.join("cuda/__init__.py"), TORCH_CUDA).unwrap();
    fs::write(torch.join("cuda/memory.py"), TORCH_MEMORY).unwrap();
    dir
}

/// `record --out DIR/out [extra] -- cmd…` with the stand-in on PYTHONPATH.
fn record(dir: &Path, snapshot: &Path, extra: &[&str], cmd: &[&str], envs: &[(&str, String)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xtask"));
    c.arg("record").arg("--out").arg(dir.join("out")).args(extra).arg("--").args(cmd);
    c.current_dir(dir)
        .env("PYTHONPATH", dir.join("site"))
        .env("FAKE_TORCH_LOG", dir.join("log.txt"))
        .env("FAKE_TORCH_SNAPSHOT", snapshot);
    for (k, v) in envs {
        c.env(k, v);
    }
    terminal::fits(c.output().unwrap())
}

fn script(dir: &Path, name: &str, body: &str) -> String {
    fs::write(dir.join(name), body).unwrap();
    dir.join(name).display().to_string()
}

fn log(dir: &Path) -> String {
    fs::read_to_string(dir.join("log.txt")).unwrap_or_default()
}

/// The finished snapshot names in `DIR/out`, sorted.
fn snapshots(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir.join("out"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".pickle") || n.ends_with(".part"))
        .collect();
    v.sort();
    v
}

fn small() -> PathBuf {
    root().join("tests/data/snapshots/small_p5.pickle")
}

fn host() -> String {
    let out = Command::new("python3").args(["-c", "import socket; print(socket.gethostname())"]).output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .chars()
        .map(|c| if c.is_alphanumeric() || c == '.' { c } else { '_' })
        .collect()
}

#[test]
fn a_clean_exit_is_recorded_replayed_and_keeps_the_programs_output_and_status() {
    require_python();
    let dir = setup("clean");
    // A library probing for torch (importlib.util.find_spec) before importing it must not defeat the hook.
    let s = script(
        &dir,
        "train.py",
        "import importlib.util\nassert importlib.util.find_spec('torch')\nimport torch\nprint('step 1')\ntorch.cuda.alloc()\nprint('done')\n",
    );
    let o = record(
        &dir,
        &small(),
        &["--max-entries", "1234", "--alloc-conf", "expandable_segments:True"],
        &["python3", &s],
        &[],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "step 1\ndone\n", "the program's stdout, untouched");
    assert_eq!(stderr.matches("vramlab: recording CUDA memory").count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("snapshots go to {}", dir.join("out").canonicalize().unwrap().display())),
        "{stderr}"
    );
    assert!(log(&dir).starts_with("record max_entries=1234 stacks=python\nobserver\ndump "), "{}", log(&dir));
    let files = snapshots(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    let name = &files[0];
    assert!(name.starts_with(&format!("{}-pid", host())) && !name.contains("rank"), "{name}");
    assert!(stderr.contains(&format!("{name}: device 0, 26 trace entries; peak allocated")), "{stderr}");
    assert!(stderr.contains("exited with status 0"), "{stderr}");
    let index = dir.join("out/report/index.html");
    assert!(stderr.contains(&format!("report: {}", index.canonicalize().unwrap().display())), "{stderr}");
    let html = fs::read_to_string(&index).unwrap();
    let stem = name.trim_end_matches(".pickle");
    assert!(html.contains(&format!("href=\"{stem}&#x2f;index.html\"")), "{html}");
    assert!(dir.join("out/report").join(stem).join("index.html").is_file());
    // --alloc-conf reaches the child; the hook's folder is gone afterwards.
    let env = script(&dir, "env.py", "import os\nprint(os.environ.get('PYTORCH_CUDA_ALLOC_CONF'))\n");
    let o = record(&dir, &small(), &["--alloc-conf", "max_split_size_mb:256"], &["python3", &env], &[]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "max_split_size_mb:256\n");
    assert!(String::from_utf8_lossy(&o.stderr).contains("no snapshot: no process initialised CUDA"));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn an_uncaught_exception_and_sys_exit_keep_their_status_and_dump_once() {
    require_python();
    let dir = setup("exception");
    let s = script(&dir, "crash.py", "import torch\ntorch.cuda.alloc()\nraise ValueError('bad batch')\n");
    let o = record(&dir, &small(), &["--stacks", "all"], &["python3", &s], &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("ValueError: bad batch"), "the program's traceback: {stderr}");
    assert_eq!(log(&dir).matches("dump ").count(), 1, "{}", log(&dir));
    assert!(log(&dir).contains("stacks=all"));
    assert_eq!(snapshots(&dir).len(), 1);
    let s = script(&dir, "exit.py", "import sys, torch\ntorch.cuda.alloc()\nsys.exit(5)\n");
    let o = record(&dir, &small(), &[], &["python3", &s], &[]);
    assert_eq!(o.status.code(), Some(5), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(snapshots(&dir).len(), 2);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn an_oom_is_dumped_when_it_happens_and_answered_by_the_what_if() {
    require_python();
    let dir = setup("oom");
    // The H200 back-off recording holds a recorded OOM, which the what-if answers.
    let snap = root().join("tests/data/torch-2.11-h200/oom-backoff.pickle");
    assert!(snap.is_file(), "{} is missing", snap.display());
    let s = script(
        &dir,
        "oom.py",
        "import torch\ntry:\n    torch.cuda.oom()\nexcept torch.cuda.OutOfMemoryError:\n    print('caught')\ntorch.cuda.oom()\n",
    );
    let o = record(&dir, &snap, &[], &["python3", &s], &[("RANK", "3".into())]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "caught\n");
    assert!(stderr.contains("OutOfMemoryError: CUDA out of memory"), "{stderr}");
    let files = snapshots(&dir);
    assert_eq!(files.len(), 3, "two OOMs and the exception: {files:?}");
    assert!(files.iter().any(|f| f.ends_with("-oom1.pickle")) && files.iter().any(|f| f.ends_with("-oom2.pickle")));
    assert!(files.iter().all(|f| f.contains("-rank3-pid")), "{files:?}");
    assert!(stderr.contains("recorded OOM at entry 44: a request of 512.00 MiB"), "{stderr}");
    assert!(stderr.contains("expandable_segments:True"), "{stderr}");
    assert!(stderr.contains("max_split_size_mb:128"), "{stderr}");
    // The smaller-batch answer: a model, said to be one. It is broken over lines
    // to fit 100 columns, so it is read with every run of spaces and breaks as one space.
    let flowing = stderr.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flowing.contains("smaller batch: yes, 43/64 of the recorded batch fits: peak reserved 2.87 GiB"),
        "{stderr}"
    );
    assert!(flowing.contains("(a model, not PyTorch's number: activation and temporary requests scaled by k"));
    let html = fs::read_to_string(dir.join("out/report/index.html")).unwrap();
    assert!(html.contains("expandable_segments:True"), "{html}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn two_ranks_chained_sitecustomize_signals_and_missing_commands() {
    require_python();
    let dir = setup("ranks");
    let s = script(&dir, "train.py", "import torch\ntorch.cuda.alloc()\n");
    let launch = script(&dir, "launch.sh", &format!("RANK=0 python3 {s} &\nRANK=1 python3 {s}\nwait\nexit 3\n"));
    // The program's own sitecustomize, on its PYTHONPATH: it still runs.
    let user = dir.join("user");
    fs::create_dir_all(&user).unwrap();
    fs::write(user.join("sitecustomize.py"), "import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n").unwrap();
    let path = format!("{}:{}", dir.join("site").display(), user.display());
    let o = record(&dir, &small(), &[], &["sh", &launch], &[("PYTHONPATH", path.clone())]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    let files = snapshots(&dir);
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files.iter().any(|f| f.contains("-rank0-")) && files.iter().any(|f| f.contains("-rank1-")), "{files:?}");
    // The ranks side by side: the same program, so no imbalance.
    assert!(stderr.contains("vramlab replay of 2 rank(s) and device(s)"), "{stderr}");
    assert!(stderr.contains("imbalance          peak reserved 1.00x between rank "), "{stderr}");
    let html = fs::read_to_string(dir.join("out/report/index.html")).unwrap();
    assert_eq!(html.matches("index.html\"><code>").count(), 2, "{html}");
    // The index's summary of ranks: a row each, its drill-down to that rank's replay and what-if pages.
    assert!(html.contains("<h2>Ranks</h2>"), "{html}");
    assert!(html.contains("<li><strong>Imbalance</strong>: peak reserved 1.00x between rank "), "{html}");
    for f in &files {
        let stem = f.trim_end_matches(".pickle");
        let rank = if f.contains("-rank0-") { "rank 0" } else { "rank 1" };
        let row = &html[html.find(&format!("<tr><td>{rank}, device 0</td>")).expect(rank)..];
        let row = &row[..row.find("</tr>").unwrap()];
        assert!(row.contains("<td class=\"num\">126.00 MiB</td>") && row.contains("<td>no</td>"), "{row}");
        assert!(row.contains(&format!("<a href=\"{stem}&#x2f;index.html\">replay</a>")), "{row}");
        assert!(row.contains(&format!("<a href=\"{stem}-whatif&#x2f;index.html\">what-if</a>")), "{row}");
        let whatif = fs::read_to_string(dir.join("out/report").join(format!("{stem}-whatif/index.html"))).unwrap();
        assert!(whatif.contains("expandable_segments:True") && whatif.contains("max_split_size_mb:512"));
        assert!(dir.join("out/report").join(stem).join("index.html").is_file());
    }
    let check = script(&dir, "check.py", "import os\nprint(os.environ.get('USER_SITECUSTOMIZE'))\n");
    let o = record(&dir, &small(), &[], &["python3", &check], &[("PYTHONPATH", path)]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "ran\n", "{}", String::from_utf8_lossy(&o.stderr));
    // Killed by a signal: 128 + N, as a shell says.
    let o = record(&dir, &small(), &[], &["sh", "-c", "kill -TERM $$"], &[]);
    assert_eq!(o.status.code(), Some(143));
    let o = record(&dir, &small(), &[], &["no-such-command-vramlab"], &[]);
    assert_eq!(o.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot run `no-such-command-vramlab`: command not found"));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn whatif_of_several_ranks_and_devices_has_a_row_each_a_recommendation_each_and_the_closest() {
    let dir = std::env::temp_dir().join(format!("vramlab-whatif-ranks-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let data = root().join("tests/data/snapshots");
    let (r0, r1, r2) =
        (dir.join("h-rank0-pid1.pickle"), dir.join("h-rank1-pid2.pickle"), dir.join("h-rank2-pid3.pickle"));
    fs::copy(data.join("small_p5.pickle"), &r0).unwrap();
    fs::copy(data.join("medium_p5.pickle"), &r1).unwrap();
    // Rank 2 was killed while dumping: cut short.
    fs::write(&r2, &fs::read(data.join("medium_p5.pickle")).unwrap()[..3000]).unwrap();
    let run = |args: &[&std::ffi::OsStr]| {
        terminal::fits(Command::new(env!("CARGO_BIN_EXE_xtask")).arg("whatif").args(args).output().unwrap())
    };
    let (a, b, c) = (r0.as_os_str(), r1.as_os_str(), r2.as_os_str());
    let conf = ["--capacity", "1GiB", "--alloc-conf", "expandable_segments:True"].map(std::ffi::OsStr::new);
    let o = run(&[&[a, b, c][..], &conf[..]].concat());
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "a file cut short is bad input: {text}");
    assert!(text.starts_with("vramlab what-if of 3 rank(s) and device(s)"), "{text}");
    // Each rank's own recommendation: rank 0 keeps its settings, rank 1 saves 52 MiB with expandable segments.
    let rank0 = &text[text.find("rank 0, device 0").unwrap()..text.find("rank 1, device 0").unwrap()];
    assert!(
        rank0.contains("recorded: PyTorch defaults     126.00 MiB") && rank0.contains("already the best"),
        "{rank0}"
    );
    let rank1 = &text[text.find("rank 1, device 0").unwrap()..text.find("rank 2, device 0").unwrap()];
    assert!(rank1.contains("expandable_segments:True       910.00 MiB"), "{rank1}");
    assert!(rank1.contains("Recommended: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"), "{rank1}");
    assert!(text.contains("h-rank2-pid3.pickle)\n  not a readable PyTorch memory snapshot (cut short?)"), "{text}");
    assert!(text.contains("the file is truncated"), "{text}");
    assert!(
        text.contains("closest to capacity rank 1, device 0: peak reserved 962.00 MiB of 1.00 GiB (93.9%)"),
        "{text}"
    );
    // The same as JSON, and a multi-device snapshot: a row per device.
    let multi = data.join("multi_device_p4.pickle");
    let o = run(&[multi.as_os_str(), a, std::ffi::OsStr::new("--json")]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = json["rows"].as_array().unwrap();
    let ids: Vec<(Option<&str>, u64)> =
        rows.iter().map(|r| (r["rank"].as_str(), r["device"].as_u64().unwrap())).collect();
    assert_eq!(ids, [(None, 0), (None, 1), (Some("0"), 0)]);
    assert_eq!(rows[1]["results"][0]["replay"]["peak_reserved_bytes"], 22 << 20);
    assert!(json["closest_to_capacity"].is_null(), "no capacity: unknown");
    // One multi-device file on its own is a row per device too.
    let o = run(&[multi.as_os_str()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("device 0") && text.contains("device 1") && text.contains("of 2 rank(s) and device(s)"),
        "{text}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn no_torch_a_command_that_cannot_run_and_an_out_that_cannot_be_written_are_said_clearly() {
    require_python();
    let dir = setup("bad");
    // No torch for this Python (the stand-in is not on its path).
    let s = script(&dir, "train.py", "print('start')\nimport torch\n");
    let empty = dir.join("empty");
    fs::create_dir_all(&empty).unwrap();
    let o = record(&dir, &small(), &[], &["python3", &s], &[("PYTHONPATH", empty.display().to_string())]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    if !stderr.contains("No module named 'torch'") {
        eprintln!("note: a real torch is installed for python3: the no-torch case is not checked");
    } else {
        assert_eq!(o.status.code(), Some(1), "the program's own status: {stderr}");
        assert_eq!(String::from_utf8_lossy(&o.stdout), "start\n");
        assert!(stderr.contains("no snapshot: torch could not be imported by /"), "{stderr}");
        assert!(stderr.contains("(pid ") && stderr.contains("install torch for that Python"), "{stderr}");
        let left: Vec<_> =
            fs::read_dir(dir.join("out")).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
        assert!(left.iter().all(|n| n == "report"), "the hook's note is read and removed: {left:?}");
    }
    // A file that is not executable: 126, as a shell says.
    let o = record(&dir, &small(), &[], &[&s], &[]);
    assert_eq!(o.status.code(), Some(126));
    assert!(String::from_utf8_lossy(&o.stderr).contains("permission denied"), "{}", String::from_utf8_lossy(&o.stderr));
    // An --out that cannot be written: said, and nothing is run.
    let ran = dir.join("ran");
    let mark = script(&dir, "mark.py", &format!("open({:?}, 'w').close()\n", ran.display().to_string()));
    let mut c = Command::new(env!("CARGO_BIN_EXE_xtask"));
    let o = c.arg("record").arg("--out").arg(dir.join("train.py/out")).args(["--", "python3", &mark]).output();
    let o = terminal::fits(o.unwrap());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot write snapshots into") && stderr.contains("nothing was run"), "{stderr}");
    assert!(!ran.exists(), "the program must not run where its snapshots cannot be kept");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_full_disk_mid_dump_keeps_the_snapshots_written_and_the_programs_status() {
    require_python();
    let dir = setup("full");
    // The OOM's dump is written; the one at exit fails half-way: the disk is full.
    let s = script(
        &dir,
        "oom.py",
        "import torch\ntry:\n    torch.cuda.oom()\nexcept torch.cuda.OutOfMemoryError:\n    print('caught')\nprint('done')\n",
    );
    let o = record(&dir, &small(), &[], &["python3", &s], &[("FAKE_TORCH_DISK_FULL", "2".into())]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "caught\ndone\n");
    assert!(
        stderr.contains(
            "vramlab: the recording hook failed to dump the snapshot at exit (OSError: [Errno 28] No space left on \
             device); the program runs on"
        ),
        "{stderr}"
    );
    let files = snapshots(&dir);
    assert_eq!(files.len(), 1, "the OOM's snapshot kept, no piece of the failed one: {files:?}");
    assert!(files[0].ends_with("-oom1.pickle"));
    assert!(stderr.contains(&format!("{}: device 0, 26 trace entries", files[0])), "{stderr}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_rank_killed_while_dumping_is_named_and_the_other_ranks_are_reported() {
    require_python();
    let dir = setup("killed");
    let s = script(&dir, "train.py", "import torch\ntorch.cuda.alloc()\n");
    let launch = script(
        &dir,
        "launch.sh",
        &format!("RANK=0 python3 {s} &\nRANK=1 FAKE_TORCH_KILL_IN_DUMP=1 python3 {s}\nr=$?\nwait\nexit $r\n"),
    );
    let o = record(&dir, &small(), &[], &["sh", &launch], &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(137), "rank 1's SIGKILL, as the launcher returned it: {stderr}");
    let files = snapshots(&dir);
    assert_eq!(files.len(), 2, "{files:?}");
    let part = files.iter().find(|f| f.ends_with(".pickle.part")).expect("rank 1's piece");
    let whole = files.iter().find(|f| f.ends_with(".pickle")).expect("rank 0's snapshot");
    assert!(part.contains("-rank1-") && whole.contains("-rank0-"), "{files:?}");
    assert!(
        stderr.contains(&format!(
            "{part}: cut short: its process ended while writing it (left as .part), so it is not replayed: "
        )),
        "{stderr}"
    );
    assert!(stderr.contains("truncated"), "{stderr}");
    assert!(stderr.contains(&format!("{whole}: device 0, 26 trace entries")), "{stderr}");
    let stem = whole.trim_end_matches(".pickle");
    assert!(dir.join("out/report").join(stem).join("index.html").is_file(), "rank 0's page is written");
    let html = fs::read_to_string(dir.join("out/report/index.html")).unwrap();
    assert!(html.contains(&format!("<code>{part}</code>")) && html.contains("cut short"), "{html}");
    let _ = fs::remove_dir_all(&dir);
}

#[cfg(unix)]
#[test]
fn ctrl_c_reaches_the_program_and_its_snapshot_is_replayed() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    require_python();
    let dir = setup("sigint");
    let s = script(
        &dir,
        "train.py",
        "import time, torch\ntorch.cuda.alloc()\nprint('ready', flush=True)\ntime.sleep(60)\n",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("record")
        .arg("--out")
        .arg(dir.join("out"))
        .args(["--", "python3", &s])
        .current_dir(&dir)
        .env("PYTHONPATH", dir.join("site"))
        .env("FAKE_TORCH_LOG", dir.join("log.txt"))
        .env("FAKE_TORCH_SNAPSHOT", small())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    // As `kill -INT` (or a scheduler) sends it: to vramlab alone, which passes it on.
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let o = terminal::fits(child.wait_with_output().unwrap());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "the program's status, ended by SIGINT: {stderr}");
    assert!(stderr.contains("KeyboardInterrupt"), "{stderr}");
    assert!(stderr.contains("interrupted by SIGINT (Ctrl-C) while it ran; the snapshots it wrote are replayed"));
    let files = snapshots(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(stderr.contains(&format!("{}: device 0, 26 trace entries", files[0])), "{stderr}");
    let _ = fs::remove_dir_all(&dir);
}

/// The training loop the gate tests record; `held` is where the activation is
/// freed: before the gradient's allocation (v1) or after it (v2, an activation
/// kept alive longer).
fn train_py(v2: bool) -> String {
    let (early, late) = if v2 { ("", "        del h\n") } else { ("        del h\n", "") };
    format!(
        "import torch\n\ndef main():\n    weights = torch.empty(16 << 20)\n    for step in range(2):\n        \
         h = torch.empty(24 << 20)\n        y = torch.empty(4 << 20)\n{early}        grad = torch.empty(48 << 20)\n\
         {late}        del y, grad\n\nmain()\n"
    )
}

/// `record --save-baseline`, then `record --baseline` of the same program (no
/// regression) and of the program changed to keep one activation alive past
/// the gradient's allocation: exit 1, the peak named, and the activation's call
/// path named first, in the terminal and in `regressions.md`.
#[test]
fn record_gates_a_programs_memory_on_a_saved_baseline() {
    require_python();
    let dir = setup("gate");
    let model = [("FAKE_TORCH_MODEL", root().join("scripts").display().to_string())];
    let s = script(&dir, "train.py", &train_py(false));
    let o = record(&dir, &small(), &["--save-baseline", "main"], &["python3", &s], &model);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("memory baseline `main` saved: target/vramlab/baselines/main.json"), "{stderr}");
    let saved: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("target/vramlab/baselines/main.json")).unwrap()).unwrap();
    assert_eq!(saved["kind"], "vramlab-memory-figures");
    let figure = |v: &serde_json::Value, name: &str| {
        v["ranks"][0]["figures"].as_array().unwrap().iter().find(|f| f["name"] == name).unwrap()["value"].clone()
    };
    assert_eq!(figure(&saved, "peak_allocated_bytes"), (68u64 << 20), "weights, y and grad");

    let o = record(&dir, &small(), &["--baseline", "main"], &["python3", &s], &model);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("ok: 0 regressions"), "{stderr}");

    fs::write(&s, train_py(true)).unwrap();
    let o = record(&dir, &small(), &["--baseline", "main"], &["python3", &s], &model);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("FAIL: 1 regression"), "{stderr}");
    let row = stderr.lines().find(|l| l.starts_with("REGRESSION")).unwrap();
    assert!(row.contains("peak_allocated_bytes") && row.contains("68.00 MiB → 92.00 MiB (+24.00 MiB)"), "{row}");
    let paths = stderr.split("call paths whose bytes at the allocated peak moved most:\n").nth(1).unwrap();
    let first = paths.lines().next().unwrap();
    assert!(first.contains("+24.00 MiB") && first.contains("train.py:6:main"), "{first}");
    let md = fs::read_to_string(dir.join("out/regressions.md")).unwrap();
    let table = md.split("## Call paths whose bytes at the allocated peak moved most").nth(1).unwrap();
    let first_row = table.lines().find(|l| l.starts_with("| `")).unwrap();
    assert!(first_row.contains("train.py:6:main ← train.py:12:<module>") && first_row.contains("+24.00 MiB"), "{md}");
    // A baseline that is not there: the comparison cannot be made.
    let o = record(&dir, &small(), &["--baseline", "nope"], &["python3", &s], &model);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    let _ = fs::remove_dir_all(&dir);
}

/// The hook writes `torch.cuda.memory_stats()` beside each snapshot; record
/// compares every key with its replay.
#[test]
fn record_checks_each_snapshot_against_pytorchs_memory_stats_written_beside_it() {
    require_python();
    let dir = setup("stats");
    let data = root().join("tests/data/torch-snapshots");
    let s = script(&dir, "train.py", "import torch\ntorch.cuda.alloc()\n");
    let stats = [("FAKE_TORCH_STATS", data.join("cnn-default.stats.json").display().to_string())];
    let o = record(&dir, &data.join("cnn-default.pickle"), &[], &["python3", &s], &stats);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let written: Vec<String> = fs::read_dir(dir.join("out"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".stats.json"))
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(written[0].trim_end_matches(".stats.json"), snapshots(&dir)[0].trim_end_matches(".pickle"));
    assert!(stderr.contains("the replay agrees with the recording"), "{stderr}");
    assert!(stderr.contains("121 of 121 memory_stats keys equal PyTorch's"), "{stderr}");
    let _ = fs::remove_dir_all(&dir);
}
