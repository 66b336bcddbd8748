//! End-to-end tests of `replay --report DIR` and `whatif --report DIR`: the real
//! binary writes the offline pages for the README's fragmentation example and a
//! snapshot fixture, and refuses a folder it cannot write with exit status 2.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod terminal;

fn repo(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path).display().to_string()
}

fn xtask(args: &[&str]) -> Output {
    terminal::fits(Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).output().unwrap())
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vramlab-report-pages-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn replay_report_of_the_fragmentation_example() {
    let dir = temp_dir("frag");
    let o = xtask(&[
        "replay",
        &repo("examples/traces/fragmentation.jsonl"),
        "--capacity",
        "1GiB",
        "--report",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(&format!("report: {}", dir.join("index.html").display())), "{out}");
    // The terminal report is unchanged above it.
    assert!(out.contains("peak reserved      1020.00 MiB (1069547520 bytes)"), "{out}");
    let html = read(&dir, "index.html");
    for expected in [
        "Memory over the replay",
        "Reserved memory peaks at 1020.00 MiB after 101 trace ops, with 808.00 MiB allocated.",
        "Segments at the reserved peak",
        "<tr><th>Segments</th><td>51</td></tr>",
        "<tr><th>Reserved but unallocated</th><td>212.00 MiB</td></tr>",
        // The OOM at line 154: request, reserved, allocated, reserved but unallocated, largest free block.
        // The Short column is "-": the replay's own capacity refused it, not a recorded failed request.
        "<td>op 153 (line 154)</td><td class=\"num\">0</td><td class=\"num\">16.00 MiB</td><td class=\"num\">-</td>\
         <td class=\"num\">1020.00 MiB</td><td class=\"num\">408.00 MiB</td><td class=\"num\">612.00 MiB</td>\
         <td class=\"num\">8.00 MiB</td>",
        // The answer card, first: the OOM, its request and the limit.
        "<strong>Out of memory at op 153 (line 154): a request of 16.00 MiB failed with 1020.00 MiB reserved",
        "Limit: 1.00 GiB simulated device.",
    ] {
        assert!(html.contains(expected), "missing {expected}");
    }
    for chart in ["timeline", "segments"] {
        for ext in ["png", "svg"] {
            assert!(dir.join("charts").join(format!("{chart}.{ext}")).is_file(), "{chart}.{ext}");
        }
    }
    let trace: Value = serde_json::from_str(&read(&dir, "trace.json")).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    assert!(events.iter().any(|e| e["ph"] == "C" && e["name"] == "reserved_bytes" && e["args"]["bytes"] == 1069547520));
    assert!(events.iter().any(|e| e["ph"] == "i" && e["name"] == "out of memory" && e["args"]["line"] == 154));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn replay_report_of_a_snapshot_and_json_stays_clean() {
    let dir = temp_dir("snap");
    let o =
        xtask(&["replay", &repo("tests/data/snapshots/small_p4.pickle"), "--json", "--report", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Standard output is still one JSON object.
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let html = read(&dir, "index.html");
    let peak = v["peak_reserved_bytes"].as_u64().unwrap();
    assert!(html.contains("trace entries"));
    assert!(html.contains(&format!("Reserved memory peaks at {:.2} MiB", peak as f64 / 1048576.0)), "peak {peak}");
    assert!(html.contains("<tr><th>fidelity</th><td>agrees with the recording</td></tr>"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn whatif_report_with_a_sweep() {
    let dir = temp_dir("whatif");
    let snap = repo("tests/data/snapshots/medium_p5.pickle");
    let o = xtask(&["whatif", &snap, "--sweep", "--capacity", "1GiB", "--report", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let json = xtask(&["whatif", &snap, "--sweep", "--capacity", "1GiB", "--json"]);
    let v: Value = serde_json::from_slice(&json.stdout).unwrap();
    let recommended = v["recommended"].as_str().expect("a setting fits");
    let html = read(&dir, "index.html");
    assert!(html.contains(&format!("<strong>Recommended: PYTORCH_CUDA_ALLOC_CONF={recommended}</strong>")));
    let results = v["results"].as_array().unwrap();
    // One row per group of settings with identical results, which names them
    // all; one static chart per row, and the overlay an interactive one.
    let table = &html[html.find("<table class=\"settings\">").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    let rows: Vec<&str> = table.split("<tr").skip(2).collect();
    let row = rows.iter().find(|r| r.contains(&format!("<code>{recommended}</code>"))).expect("the recommended row");
    assert!(row.contains("<span class=\"verdict holds\">recommended</span>"), "{row}");
    assert_eq!(html.matches("<span class=\"verdict holds\">recommended</span>").count(), 1);
    for r in results {
        let name = r["alloc_conf"].as_str().unwrap();
        let name = if r["recorded"] == true { "recorded: PyTorch defaults".to_owned() } else { name.to_owned() };
        assert_eq!(rows.iter().filter(|row| row.contains(&format!("<code>{name}</code>"))).count(), 1, "{name}");
    }
    let grouped = rows.iter().filter(|r| r.contains("identical results")).count();
    assert!(rows.len() < results.len() && grouped > 0, "the sweep's identical settings are grouped");
    assert_eq!(html.matches("<figure class=\"chart static\">").count(), rows.len());
    assert_eq!(html.matches("<figure class=\"chart stacked\" data-stacked=\"overlay\">").count(), 1);
    assert!(html.contains("capacity 1.00 GiB"), "the capacity line");
    for r in results {
        let peak = r["replay"]["peak_reserved_bytes"].as_u64().unwrap();
        assert!(html.contains(&format!("<td class=\"num\">{:.2} MiB</td>", peak as f64 / 1048576.0)));
    }
    let trace: Value = serde_json::from_str(&read(&dir, "trace.json")).unwrap();
    let processes = trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["name"] == "process_name").count();
    assert_eq!(processes, results.len());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_report_folder_that_cannot_be_written_is_exit_status_2() {
    let file = temp_dir("not-a-dir");
    std::fs::write(&file, b"a file").unwrap();
    let inside = file.join("report");
    for args in [
        vec!["replay".to_owned(), repo("examples/traces/fragmentation.jsonl")],
        vec!["replay".to_owned(), repo("tests/data/snapshots/small_p2.pickle")],
        vec!["whatif".to_owned(), repo("tests/data/snapshots/small_p2.pickle")],
    ] {
        let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
        all.extend(["--report", inside.to_str().unwrap()]);
        let o = xtask(&all);
        assert_eq!(o.status.code(), Some(2), "{all:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(&format!("cannot write the report into {}", inside.display())), "{err}");
        assert!(o.stdout.is_empty(), "nothing is replayed");
    }
    let _ = std::fs::remove_file(&file);
}
