//! callgrind's profiles read back: `bench --simulate` runs the suites under
//! valgrind's callgrind, which writes one profile ("dump part") per measured
//! region; this module reads them ([`read_profile`], the documented
//! callgrind format with name compression), sums a case's parts and turns
//! them into the results' [`SimulatedCpu`] figures ([`simulated_figures`]),
//! clears a previous run's dumps ([`clear_dumps`]) and links the program the
//! simulated processes run ([`link_program`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use thiserror::Error;
use vramlab_suites::{FunctionCount, SIMULATED_FUNCTIONS, SimulatedCpu};

/// The stem of the dump files: callgrind writes `callgrind.out.N` for part N.
pub const DUMP_STEM: &str = "callgrind.out";

/// A profile that could not be read.
#[derive(Debug, Error)]
pub enum CallgrindError {
    #[error("reading callgrind's profile {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}:{line}: not a callgrind profile as this build reads it ({reason}); run `bench --simulate` again, and report it if it persists"
    )]
    Format { path: PathBuf, line: usize, reason: String },
    #[error("callgrind's profile {path} is missing: the simulated run ended before writing it (see its log, {log})")]
    Missing { path: PathBuf, log: PathBuf },
}

/// One profile's counts: the totals per event and each function's own cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Profile {
    /// Event names, in the file's order (`Ir`, `Dr`, …).
    pub events: Vec<String>,
    /// Each event's total over the profile.
    pub totals: Vec<u64>,
    /// Each function's own cost (not its callees'), by demangled name.
    pub functions: BTreeMap<String, Vec<u64>>,
}

impl Profile {
    /// The total of event `name` (0 when the profile did not count it).
    pub fn total(&self, name: &str) -> u64 {
        self.events.iter().position(|e| e == name).map_or(0, |i| self.totals[i])
    }

    /// Adds `other`'s counts (same events, in any order).
    pub fn add(&mut self, other: &Profile) {
        for (i, name) in other.events.iter().enumerate() {
            let j = match self.events.iter().position(|e| e == name) {
                Some(j) => j,
                None => {
                    self.events.push(name.clone());
                    self.totals.push(0);
                    for costs in self.functions.values_mut() {
                        costs.push(0);
                    }
                    self.events.len() - 1
                }
            };
            self.totals[j] += other.totals[i];
            for (f, costs) in &other.functions {
                let mine = self.functions.entry(f.clone()).or_insert_with(|| vec![0; self.events.len()]);
                mine.resize(self.events.len(), 0);
                mine[j] += costs.get(i).copied().unwrap_or(0);
            }
        }
    }
}

/// The dump file of part `part` in `dir`.
pub fn dump_path(dir: &Path, part: u64) -> PathBuf {
    dir.join(format!("{DUMP_STEM}.{part}"))
}

/// Removes the dumps a previous simulated run left in `dir`.
pub fn clear_dumps(dir: &Path) -> Result<(), crate::ReportError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(crate::ReportError::Io { path: dir.to_path_buf(), source }),
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(DUMP_STEM) {
            std::fs::remove_file(entry.path())
                .map_err(|source| crate::ReportError::Io { path: entry.path(), source })?;
        }
    }
    Ok(())
}

/// The name of [`link_program`]'s link.
pub const PROGRAM_LINK: &str = "vramlab";

/// A link named [`PROGRAM_LINK`] in `dir` to the program `exe` (replacing a
/// previous run's), for the simulated processes to be started through: the
/// program's path is their `argv[0]`, which the process copies to its heap,
/// and a path of another length (another build's folder) shifts the heap
/// under every later allocation, and with it malloc's and memcpy's counts.
/// Returns the link's path.
pub fn link_program(dir: &Path, exe: &Path) -> Result<PathBuf, crate::ReportError> {
    let link = dir.join(PROGRAM_LINK);
    let io = |source| crate::ReportError::Io { path: link.clone(), source };
    if let Err(e) = std::fs::remove_file(&link)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        return Err(io(e));
    }
    #[cfg(unix)]
    std::os::unix::fs::symlink(exe, &link).map_err(io)?;
    #[cfg(not(unix))]
    std::fs::hard_link(exe, &link).map_err(io)?;
    Ok(link)
}

/// Reads one callgrind profile.
pub fn read_profile(path: &Path) -> Result<Profile, CallgrindError> {
    let text = std::fs::read_to_string(path).map_err(|source| CallgrindError::Io { path: path.into(), source })?;
    parse(&text).map_err(|(line, reason)| CallgrindError::Format { path: path.into(), line, reason })
}

/// Parses a profile's text; an error is the line (1-based) and what is wrong.
pub fn parse(text: &str) -> Result<Profile, (usize, String)> {
    let mut profile = Profile::default();
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    // The cost line after `calls=` is the call's inclusive cost: not the caller's own.
    let mut after_calls = false;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end();
        let bad = |reason: &str| (n + 1, reason.to_owned());
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix("events:") {
            profile.events = rest.split_whitespace().map(str::to_owned).collect();
            profile.totals = vec![0; profile.events.len()];
        } else if let Some(rest) = line.strip_prefix("fn=") {
            current = Some(compressed_name(rest, &mut names).ok_or_else(|| bad("a function id never named"))?);
        } else if let Some(rest) = line.strip_prefix("cfn=").or_else(|| line.strip_prefix("cfnc=")) {
            compressed_name(rest, &mut names).ok_or_else(|| bad("a called function id never named"))?;
        } else if line.starts_with("calls=") {
            after_calls = true;
        } else if line.starts_with(|c: char| c.is_ascii_digit() || c == '+' || c == '-' || c == '*') {
            if std::mem::take(&mut after_calls) {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let positions = 1; // `positions: line`, callgrind's default
            let Some(function) = &current else { return Err(bad("a cost line before any fn=")) };
            let costs = profile.functions.entry(function.clone()).or_insert_with(|| vec![0; profile.events.len()]);
            for (i, v) in fields.iter().skip(positions).enumerate() {
                let v: u64 = v.parse().map_err(|_| bad("a cost that is not a whole number"))?;
                if i >= costs.len() {
                    return Err(bad("more costs than events"));
                }
                costs[i] += v;
                profile.totals[i] += v;
            }
        } else if let Some(rest) = line.strip_prefix("positions:")
            && rest.trim() != "line"
        {
            return Err(bad("positions other than `line` (run callgrind without --dump-instr)"));
        }
        // Other lines (headers, ob=, fl=, fi=, fe=, cob=, cfi=, cfl=, jump=, totals:) carry no cost of a function.
    }
    if profile.events.is_empty() {
        return Err((0, "no `events:` line".into()));
    }
    Ok(profile)
}

/// `(id) name`, `(id)` or `name`: the name, remembering compressed ids.
fn compressed_name(rest: &str, names: &mut BTreeMap<u64, String>) -> Option<String> {
    let rest = rest.trim();
    let Some(after) = rest.strip_prefix('(') else { return Some(rest.to_owned()) };
    let (id, name) = after.split_once(')')?;
    let id: u64 = id.parse().ok()?;
    let name = name.trim();
    if name.is_empty() {
        names.get(&id).cloned()
    } else {
        names.insert(id, name.to_owned());
        Some(name.to_owned())
    }
}

/// The results' figures from a case's summed profile: instructions, data
/// accesses, cache misses, the estimated cycles and the functions with the
/// most instructions of their own.
pub fn simulated_figures(p: &Profile) -> SimulatedCpu {
    let t = |e: &str| p.total(e);
    let accesses = t("Ir") + t("Dr") + t("Dw");
    let l1_misses = t("I1mr") + t("D1mr") + t("D1mw");
    let ll_misses = t("ILmr") + t("DLmr") + t("DLmw");
    let estimated_cycles = estimated_cycles(accesses, l1_misses, ll_misses);
    let ir = p.events.iter().position(|e| e == "Ir");
    let mut functions: Vec<FunctionCount> = match ir {
        Some(i) => p
            .functions
            .iter()
            .map(|(name, costs)| FunctionCount { name: name.clone(), instructions: costs.get(i).copied().unwrap_or(0) })
            .filter(|f| f.instructions > 0)
            .collect(),
        None => Vec::new(),
    };
    functions.sort_by(|a, b| b.instructions.cmp(&a.instructions).then_with(|| a.name.cmp(&b.name)));
    functions.truncate(SIMULATED_FUNCTIONS);
    SimulatedCpu {
        regions: None,
        instructions: t("Ir"),
        data_reads: t("Dr"),
        data_writes: t("Dw"),
        l1_misses,
        ll_misses,
        estimated_cycles,
        functions,
        timed_choice: None,
    }
}

/// L1 hits + 5 × LL hits + 35 × LL misses: the estimate iai-callgrind and
/// gungraun use (an estimate of cycles, not a measurement).
pub fn estimated_cycles(accesses: u64, l1_misses: u64, ll_misses: u64) -> u64 {
    let ll_hits = l1_misses.saturating_sub(ll_misses);
    let l1_hits = accesses.saturating_sub(l1_misses);
    l1_hits + 5 * ll_hits + 35 * ll_misses
}

/// The summed figures of parts `first..=last` in `dir` (a case's regions).
pub fn read_case(dir: &Path, (first, last): (u64, u64), log: &Path) -> Result<SimulatedCpu, CallgrindError> {
    let mut sum = Profile::default();
    for part in first..=last {
        let path = dump_path(dir, part);
        if !path.is_file() {
            return Err(CallgrindError::Missing { path, log: log.to_path_buf() });
        }
        sum.add(&read_profile(&path)?);
    }
    Ok(simulated_figures(&sum))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile as callgrind 3.19 writes a dump part (name compression, a
    /// call with its inclusive cost, relative positions).
    const PART: &str = "\
# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 4242
cmd:  xtask bench
part: 3

desc: I1 cache: 32768 B, 64 B, 8-way associative
desc: Trigger: Dump after vramlab_suites::harness::measured_region

positions: line
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
summary: 1110 300 100 3 20 10 1 5 2

ob=(1) /x/xtask
fl=(1) ???
fn=(1) vramlab_suites::harness::measured_region
0 10 2 1
cfl=(2) src/elementwise.rs
cfn=(2) vramlab_cpu_kernels::elementwise::add
calls=1 0
0 1100 298 99 3 20 10 1 5 2

fl=(2)
fn=(2)
12 600 200 50 2 10 5 1 3 1
+2 500 98 49 1 10 5 0 2 1
";

    #[test]
    fn a_dump_part_reads_as_each_functions_own_cost() {
        let p = parse(PART).unwrap();
        assert_eq!(p.events[0], "Ir");
        assert_eq!(p.total("Ir"), 1110, "the call line's inclusive cost is not counted twice");
        assert_eq!(p.functions["vramlab_suites::harness::measured_region"][0], 10);
        assert_eq!(p.functions["vramlab_cpu_kernels::elementwise::add"], vec![1100, 298, 99, 3, 20, 10, 1, 5, 2]);
        assert_eq!(p.total("DLmw"), 2);
    }

    #[test]
    fn figures_and_the_cycle_estimate_known_answers() {
        let f = simulated_figures(&parse(PART).unwrap());
        assert_eq!((f.instructions, f.data_reads, f.data_writes), (1110, 300, 100));
        assert_eq!((f.l1_misses, f.ll_misses), (33, 8));
        // 1510 accesses: 1477 L1 hits, 25 LL hits, 8 to memory.
        assert_eq!(f.estimated_cycles, 1477 + 5 * 25 + 35 * 8);
        assert_eq!(
            f.functions[0],
            FunctionCount { name: "vramlab_cpu_kernels::elementwise::add".into(), instructions: 1100 }
        );
        assert_eq!(f.functions.len(), 2);
    }

    #[test]
    fn parts_add_up_and_bad_files_say_where() {
        let mut sum = parse(PART).unwrap();
        sum.add(&parse(PART).unwrap());
        assert_eq!(sum.total("Ir"), 2220);
        assert_eq!(sum.functions["vramlab_cpu_kernels::elementwise::add"][0], 2200);
        let err = parse("events: Ir\nfn=(7)\n1 5\n").unwrap_err();
        assert_eq!(err, (2, "a function id never named".to_owned()));
        assert_eq!(parse("events: Ir\n1 5\n").unwrap_err().0, 2);
        assert_eq!(parse("fn=x\n").unwrap_err().1, "no `events:` line");
    }
}
