//! `replay A.pickle B.pickle …`: several PyTorch snapshots (the ranks of a
//! job, `vramlab record`'s files) in one report. Every device with trace
//! entries of every file is replayed; a row per rank and device (the rank read
//! from a `-rank<R>-` in the file name), the imbalance of peak reserved memory
//! between the rows (largest over smallest, and the spread), and the row
//! closest to its capacity (`--capacity`, or the limit a recorded OOM implies).
//! The drill-down is `replay FILE --device D`, which the report names. Exit 1
//! when a file could not be read or replayed (its row says why; the others
//! are reported).

use std::fmt::Write as _;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Serialize;
use vramlab_display::format::fmt_bytes;
use vramlab_replay::OnOom;
use vramlab_snapshot::{self as snapshot, Action, SnapshotReplayOptions};

use crate::cli::ReplayArgs;
use crate::output::write_stdout;

/// One rank and device.
#[derive(Debug, Clone, Serialize)]
pub struct RankRow {
    pub file: String,
    /// From a `-rank<R>-` (or `-rank<R>.`) in the file name.
    pub rank: Option<String>,
    pub device: usize,
    pub entries: u64,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// The memory it may reserve: `--capacity` (or the per-process limit), else inferred from a recorded OOM.
    pub limit_bytes: Option<u64>,
    /// `limit_bytes` less the peak reserved memory.
    pub headroom_bytes: Option<u64>,
    /// `oom` entries in its trace.
    pub recorded_ooms: u64,
    /// The first request the replay could not serve (not a recorded OOM), in words: "at entry N: M".
    pub out_of_memory: Option<String>,
    /// Why it could not be replayed, when it could not (the other rows stand).
    pub error: Option<String>,
}

/// The rows with the most and the least peak reserved memory.
#[derive(Debug, Clone, Serialize)]
pub struct Imbalance {
    pub max_row: usize,
    pub min_row: usize,
    /// Largest peak reserved over smallest.
    pub ratio: f64,
    pub spread_bytes: u64,
}

/// The multi-snapshot report (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct RanksDoc {
    pub rows: Vec<RankRow>,
    pub imbalance: Option<Imbalance>,
    /// The row whose peak reserved memory is the largest share of its limit.
    pub closest_to_capacity: Option<usize>,
}

pub fn run(args: &ReplayArgs) -> anyhow::Result<u8> {
    if args.report.is_some()
        || args.export_snapshot.is_some()
        || args.chrome_trace.is_some()
        || args.window.from_us.is_some()
        || args.window.to_us.is_some()
        || args.alloc_conf.is_some()
        || args.fraction.is_some()
    {
        bail!(
            "--report, --export-snapshot, --chrome-trace, --from-us, --to-us, --alloc-conf and --fraction\n  \
             apply to one file; \
             with several, replay each on its own (`replay FILE --device D`)"
        );
    }
    let files: Vec<&PathBuf> = std::iter::once(&args.file).chain(&args.more).collect();
    let mut rows = Vec::new();
    for path in files {
        rows.extend(rows_of(path, args.window.device, args.capacity_bytes(), args.on_oom.into())?);
    }
    let doc = summarise(rows);
    let out = if args.json {
        let mut v = serde_json::to_vec_pretty(&doc).context("cannot serialize the report")?;
        v.push(b'\n');
        v
    } else {
        text(&doc).into_bytes()
    };
    write_stdout(&out)?;
    // A file that could not be read is bad input; the other rows were still reported.
    Ok(u8::from(doc.rows.iter().any(|r| r.error.is_some())))
}

/// The rows of one file: each device with entries (or `device` only), replayed
/// under `capacity` (`None`: unlimited, or the limit a recorded OOM implies).
pub fn rows_of(
    path: &Path,
    device: Option<usize>,
    capacity: Option<u64>,
    on_oom: OnOom,
) -> anyhow::Result<Vec<RankRow>> {
    let name = path.display().to_string();
    if path.as_os_str() == "-" {
        bail!("several files are replayed from their paths, not standard input");
    }
    let f = File::open(path).with_context(|| format!("cannot open {name}"))?;
    let mut row = RankRow {
        file: name.clone(),
        rank: rank_of(path),
        device: device.unwrap_or(0),
        entries: 0,
        peak_allocated_bytes: 0,
        peak_reserved_bytes: 0,
        limit_bytes: None,
        headroom_bytes: None,
        recorded_ooms: 0,
        out_of_memory: None,
        error: None,
    };
    let snap = match snapshot::read_snapshot(BufReader::with_capacity(1 << 20, f)) {
        Ok(s) => s,
        Err(e) => {
            row.error = Some(format!("not a readable PyTorch memory snapshot: {e}"));
            return Ok(vec![row]);
        }
    };
    let devices: Vec<usize> = match device {
        Some(d) => vec![d],
        None => (0..snap.device_traces.len()).filter(|&d| !snap.device_traces[d].is_empty()).collect(),
    };
    let mut rows = Vec::new();
    for device in devices {
        let opts =
            SnapshotReplayOptions { device: Some(device), capacity_bytes: capacity, on_oom, ..Default::default() };
        let mut r = RankRow { device, ..row.clone() };
        match snapshot::replay_snapshot(&snap, &opts) {
            Ok(rep) => {
                r.entries = rep.entries;
                r.peak_allocated_bytes = rep.peak_allocated_bytes;
                r.peak_reserved_bytes = rep.peak_reserved_bytes;
                r.limit_bytes = rep.memory_limit_bytes.or(rep.capacity_bytes);
                r.headroom_bytes = r.limit_bytes.map(|l| l.saturating_sub(rep.peak_reserved_bytes));
                r.recorded_ooms =
                    snap.device_traces.get(device).map_or(0, |t| t.iter().filter(|e| e.action == Action::Oom).count())
                        as u64;
                r.out_of_memory =
                    rep.ooms.first().map(|o| format!("at entry {}: {}", o.trace_index, fmt_bytes(o.requested_bytes)));
            }
            Err(e) => r.error = Some(format!("cannot replay device {device}: {e}")),
        }
        rows.push(r);
    }
    if rows.is_empty() {
        row.error = Some("no device has trace entries".into());
        rows.push(row);
    }
    Ok(rows)
}

/// A dump made at an out-of-memory error (`…-oomN.pickle`), not a process's last.
pub(crate) fn is_oom_dump(path: &Path) -> bool {
    let path = if is_part(path) { Path::new(path.file_stem().unwrap_or_default()) } else { path };
    path.file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.rsplit_once("-oom"))
        .is_some_and(|(_, n)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// A `.pickle.part` file: a dump its process never finished.
pub(crate) fn is_part(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "part")
}

/// `R` of a `-rank<R>-` or `-rank<R>.` in the file name.
pub(crate) fn rank_of(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let at = name.find("-rank")? + "-rank".len();
    let digits: String = name[at..].chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
    (!digits.is_empty()).then_some(digits)
}

pub fn summarise(rows: Vec<RankRow>) -> RanksDoc {
    let ok: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].error.is_none()).collect();
    let imbalance = if ok.len() >= 2 {
        let max_row = *ok.iter().max_by_key(|&&i| (rows[i].peak_reserved_bytes, usize::MAX - i)).unwrap_or(&ok[0]);
        let min_row = *ok.iter().min_by_key(|&&i| (rows[i].peak_reserved_bytes, i)).unwrap_or(&ok[0]);
        let (max, min) = (rows[max_row].peak_reserved_bytes, rows[min_row].peak_reserved_bytes);
        Some(Imbalance {
            max_row,
            min_row,
            ratio: if min == 0 { f64::INFINITY } else { max as f64 / min as f64 },
            spread_bytes: max - min,
        })
    } else {
        None
    };
    let share = |r: &RankRow| r.limit_bytes.filter(|&l| l > 0).map(|l| r.peak_reserved_bytes as f64 / l as f64);
    let closest_to_capacity = ok
        .iter()
        .copied()
        .filter(|&i| share(&rows[i]).is_some())
        .max_by(|&a, &b| share(&rows[a]).unwrap_or(0.0).total_cmp(&share(&rows[b]).unwrap_or(0.0)));
    RanksDoc { rows, imbalance, closest_to_capacity }
}

pub fn label(r: &RankRow) -> String {
    match &r.rank {
        Some(rank) => format!("rank {rank}, device {}", r.device),
        None => format!("{}, device {}", r.file, r.device),
    }
}

/// "peak reserved 1.20x between rank 1, device 0 (…) and rank 0, device 0 (…): … apart".
pub fn imbalance_text(doc: &RanksDoc) -> String {
    match &doc.imbalance {
        Some(i) => {
            let (hi, lo) = (&doc.rows[i.max_row], &doc.rows[i.min_row]);
            format!(
                "peak reserved {:.2}x between {} ({}) and {} ({}): {} apart",
                i.ratio,
                label(hi),
                fmt_bytes(hi.peak_reserved_bytes),
                label(lo),
                fmt_bytes(lo.peak_reserved_bytes),
                fmt_bytes(i.spread_bytes)
            )
        }
        None => "fewer than two rows replayed".to_owned(),
    }
}

/// "rank 1, device 0: peak reserved … of … (93.9%), … headroom", or why it is unknown.
pub fn closest_text(doc: &RanksDoc) -> String {
    match doc.closest_to_capacity.map(|i| &doc.rows[i]) {
        Some(r) => {
            let limit = r.limit_bytes.unwrap_or(0);
            format!(
                "{}: peak reserved {} of {} ({:.1}%), {} headroom",
                label(r),
                fmt_bytes(r.peak_reserved_bytes),
                fmt_bytes(limit),
                r.peak_reserved_bytes as f64 * 100.0 / limit.max(1) as f64,
                fmt_bytes(r.headroom_bytes.unwrap_or(0))
            )
        }
        None => "unknown: no --capacity given and no recorded OOM implies one".to_owned(),
    }
}

pub fn text(doc: &RanksDoc) -> String {
    let mut s = format!("vramlab replay of {} rank(s) and device(s)\n\n", doc.rows.len());
    let width = doc.rows.iter().map(|r| r.file.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(
        s,
        "  {:width$}  {:>4}  {:>6}  {:>8}  {:>14}  {:>13}  {:>12}  {:>12}  {:>13}  out of memory",
        "file", "rank", "device", "entries", "peak allocated", "peak reserved", "limit", "headroom", "recorded OOMs"
    );
    for r in &doc.rows {
        if let Some(e) = &r.error {
            let _ = writeln!(s, "  {:width$}  {e}", r.file);
            continue;
        }
        let opt = |b: Option<u64>| b.map(fmt_bytes).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            s,
            "  {:width$}  {:>4}  {:>6}  {:>8}  {:>14}  {:>13}  {:>12}  {:>12}  {:>13}  {}",
            r.file,
            r.rank.as_deref().unwrap_or("-"),
            r.device,
            r.entries,
            fmt_bytes(r.peak_allocated_bytes),
            fmt_bytes(r.peak_reserved_bytes),
            opt(r.limit_bytes),
            opt(r.headroom_bytes),
            r.recorded_ooms,
            r.out_of_memory.as_deref().unwrap_or("no")
        );
    }
    let _ = writeln!(s, "\nimbalance          {}", imbalance_text(doc));
    let _ = writeln!(s, "closest to capacity {}", closest_text(doc));
    let _ = writeln!(s, "drill-down         replay FILE --device D (one row's full report; --report DIR for its page)");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_read_from_file_names() {
        assert_eq!(rank_of(Path::new("d/host-rank12-pid4.pickle")).as_deref(), Some("12"));
        assert_eq!(rank_of(Path::new("host-rank3.pickle")).as_deref(), Some("3"));
        assert_eq!(rank_of(Path::new("host-pid4.pickle")), None);
    }
}
