//! The two passes over a recording: the first finds peaks, OOMs, phase
//! peaks and the kernel and copy tables; the second takes the snapshots at
//! the peaks.

use std::collections::BTreeMap;

use crate::record::{FLAG_IGNORED, FxHashMap, NO_DEVICE, Record, Recording, copy_kind_of, kind};
use crate::timeline::{ByCategory, CATEGORY_COUNT};

use super::levels::*;
use super::state::*;
use super::types::*;
use super::{MAX_OOM_REPORTS, NO_PHASE, OOM_LIVE_ALLOCATIONS};

// ---------------------------------------------------------------------------
// The passes.

#[derive(Debug, Clone, Copy)]
struct PeakTrack {
    bytes: u64,
    time_ns: u64,
    index: Option<u64>,
    phase: u32,
}

impl Default for PeakTrack {
    fn default() -> Self {
        PeakTrack { bytes: 0, time_ns: 0, index: None, phase: NO_PHASE }
    }
}

impl PeakTrack {
    #[inline]
    fn offer(&mut self, bytes: u64, time_ns: u64, index: usize, phase: &dyn Fn() -> u32) -> bool {
        if bytes > self.bytes {
            *self = PeakTrack { bytes, time_ns, index: Some(index as u64), phase: phase() };
            true
        } else {
            false
        }
    }
}

#[derive(Debug, Default, Clone)]
struct DevAcc {
    counts: EventCounts,
    peak_allocated: PeakTrack,
    peak_reserved: PeakTrack,
    peak_active: PeakTrack,
    peak_requested: PeakTrack,
    peak_by_cat: [u64; CATEGORY_COUNT],
    ooms: Vec<OomReport>,
}

#[derive(Debug, Clone, Copy, Default)]
struct PhaseTrack {
    entry_allocated: u64,
    max_allocated: u64,
    max_allocated_time: u64,
    max_reserved: u64,
    touched: bool,
}

#[derive(Debug, Default)]
struct PhasePeakAcc {
    instances: u64,
    total_ns: u64,
    peak_allocated: u64,
    peak_allocated_time: u64,
    peak_reserved: u64,
    max_rise: u64,
}

#[derive(Debug, Default)]
struct KernelAcc {
    durations: Vec<u64>,
    launch: u64,
    flops: u64,
    bytes: u64,
}

#[derive(Debug, Default)]
struct CopyAcc {
    calls: u64,
    bytes: u64,
    ns: u64,
}

/// Runs both passes. Marks the records found to free pre-recording memory as
/// ignored, so later timeline queries need no replay state.
pub(crate) fn analyze(rec: &mut Recording, devices: &[DeviceInfo], end_ns: u64) -> Analysis {
    let infos = device_slots(rec, devices);
    let index_of: Vec<u32> = infos.iter().map(|d| d.index).collect();
    let slot_of = |device: u32| index_of.binary_search(&device).map_or(u32::MAX, |p| p as u32);
    let n = infos.len();

    let (accs, ignored, pass1) = first_pass(rec, &slot_of, n, end_ns);
    for i in ignored {
        rec.get_mut(i).flags |= FLAG_IGNORED;
    }
    let rec: &Recording = rec;
    let names = &rec.phases;
    let (mut at_alloc, mut at_reserved) = second_pass(rec, &slot_of, &accs, &pass1);

    let path = |p: u32| pass1.phases.path(p, names);
    let peak = |p: &PeakTrack| Peak { bytes: p.bytes, time_ns: p.time_ns, event_index: p.index, phase: path(p.phase) };
    let devices_out: Vec<DeviceProfile> = infos
        .into_iter()
        .zip(accs)
        .enumerate()
        .map(|(s, (info, a))| DeviceProfile {
            info,
            counts: a.counts,
            end: pass1.levels[s],
            peak_allocated: peak(&a.peak_allocated),
            peak_reserved: peak(&a.peak_reserved),
            peak_active: peak(&a.peak_active),
            peak_requested: peak(&a.peak_requested),
            peak_by_category: ByCategory::from_array(a.peak_by_cat),
            at_peak_allocated: at_alloc[s].take(),
            at_peak_reserved: at_reserved[s].take(),
            oom_reports: a.ooms,
        })
        .collect();

    let phases = pass1
        .phases
        .instances
        .iter()
        .enumerate()
        .map(|(id, p)| PhaseSpan {
            name: names.get(p.name as usize).cloned().unwrap_or_default(),
            path: path(id as u32).unwrap_or_default(),
            thread: p.thread,
            depth: p.depth,
            start_ns: p.start_ns,
            end_ns: p.end_ns.unwrap_or(end_ns.max(p.start_ns)),
            closed: p.end_ns.is_some(),
        })
        .collect();
    let unmatched_phase_ends = pass1.phases.unmatched_ends;
    Analysis {
        devices: devices_out,
        phases,
        phase_peaks: phase_peak_rows(pass1.phase_peaks, names, &index_of),
        kernels: kernel_rows(rec, pass1.kernels, &index_of),
        copies: copy_rows(pass1.copies, &index_of),
        unmatched_phase_ends,
    }
}

/// The devices' slots, in device order: the described devices and every
/// device the events name.
fn device_slots(rec: &Recording, devices: &[DeviceInfo]) -> Vec<DeviceInfo> {
    let mut infos: Vec<DeviceInfo> = devices.to_vec();
    for c in &rec.contexts {
        if c.device != NO_DEVICE && !infos.iter().any(|d| d.index == c.device) {
            infos.push(DeviceInfo {
                index: c.device,
                name: format!("device {}", c.device),
                kind: ProfiledDeviceKind::Unknown,
            });
        }
    }
    infos.sort_by_key(|d| d.index);
    infos.dedup_by_key(|d| d.index);
    infos
}

/// Each device's snapshot at its allocated peak and fragmentation at its reserved peak.
type PeakViews = (Vec<Option<PeakSnapshot>>, Vec<Option<Fragmentation>>);

/// The second pass: replays up to the last peak and takes each device's
/// snapshot at its allocated peak and its fragmentation at its reserved peak.
fn second_pass(rec: &Recording, slot_of: &dyn Fn(u32) -> u32, accs: &[DevAcc], pass1: &FirstPass) -> PeakViews {
    let n = accs.len();
    let names = &rec.phases;
    let mut targets: Vec<(u64, u32, bool)> = Vec::new();
    for (s, a) in accs.iter().enumerate() {
        if let Some(i) = a.peak_allocated.index {
            targets.push((i, s as u32, true));
        }
        if let Some(i) = a.peak_reserved.index {
            targets.push((i, s as u32, false));
        }
    }
    targets.sort_unstable();
    let mut at_alloc: Vec<Option<PeakSnapshot>> = vec![None; n];
    let mut at_reserved: Vec<Option<Fragmentation>> = vec![None; n];
    let Some(&(last, _, _)) = targets.last() else { return (at_alloc, at_reserved) };
    let mut replay = Replay::new(rec, slot_of, n);
    let mut t = 0;
    for (i, r) in rec.range(0, last as usize + 1) {
        match r.kind {
            k if k <= kind::EMPTY_CACHE => {
                replay.allocator(i, r);
            }
            kind::PHASE_BEGIN => {
                let ctx = rec.context(r);
                replay.phases.begin(r.c, ctx.thread, r.time_ns);
            }
            kind::PHASE_END => {
                let ctx = rec.context(r);
                let mut closed = std::mem::take(&mut replay.closed);
                replay.phases.end(r.c, ctx.thread, r.time_ns, &mut closed);
                replay.closed = closed;
            }
            _ => {}
        }
        while t < targets.len() && targets[t].0 == i as u64 {
            let (_, slot, allocated) = targets[t];
            let s = slot as usize;
            if allocated {
                at_alloc[s] = Some(PeakSnapshot {
                    time_ns: r.time_ns,
                    phase: pass1.phases.path(accs[s].peak_allocated.phase, names),
                    levels: replay.levels[s],
                    by_category: ByCategory::from_array(replay.by_cat[s]),
                    live_allocations: replay.live_allocations(slot, names, &pass1.phases),
                    fragmentation: replay.fragmentation(slot, r.time_ns),
                });
            } else {
                at_reserved[s] = Some(replay.fragmentation(slot, r.time_ns));
            }
            t += 1;
        }
    }
    (at_alloc, at_reserved)
}

/// The phases' peaks per device, by device then phase name.
fn phase_peak_rows(peaks: BTreeMap<(u32, u32), PhasePeakAcc>, names: &[String], index_of: &[u32]) -> Vec<PhasePeak> {
    let mut phase_peaks: Vec<PhasePeak> = peaks
        .into_iter()
        .map(|((name, slot), a)| PhasePeak {
            phase: names.get(name as usize).cloned().unwrap_or_default(),
            device: index_of[slot as usize],
            instances: a.instances,
            total_ns: a.total_ns,
            peak_allocated_bytes: a.peak_allocated,
            peak_allocated_time_ns: a.peak_allocated_time,
            peak_reserved_bytes: a.peak_reserved,
            max_rise_bytes: a.max_rise,
        })
        .collect();
    phase_peaks.sort_by(|a, b| a.device.cmp(&b.device).then(a.phase.cmp(&b.phase)));
    phase_peaks
}

/// The kernel table: each kernel's calls and times, the most total time first.
fn kernel_rows(rec: &Recording, kernels: FxHashMap<(u32, u32), KernelAcc>, index_of: &[u32]) -> Vec<KernelStats> {
    let mut kernels: Vec<KernelStats> = kernels
        .into_iter()
        .map(|((id, slot), mut k)| {
            k.durations.sort_unstable();
            let calls = k.durations.len() as u64;
            let total: u64 = k.durations.iter().fold(0u64, |s, &d| s.saturating_add(d));
            let m = k.durations.len();
            let median = if m == 0 {
                0.0
            } else if m % 2 == 1 {
                k.durations[m / 2] as f64
            } else {
                (k.durations[m / 2 - 1] as f64 + k.durations[m / 2] as f64) / 2.0
            };
            let name = rec.kernels.get(id as usize).cloned().unwrap_or_else(|| crate::record::KernelName {
                name: format!("kernel {id}"),
                algorithm: String::new(),
            });
            KernelStats {
                name: name.name,
                algorithm: name.algorithm,
                device: index_of[slot as usize],
                calls,
                total_ns: total,
                mean_ns: if calls == 0 { 0.0 } else { total as f64 / calls as f64 },
                median_ns: median,
                min_ns: k.durations.first().copied().unwrap_or(0),
                max_ns: k.durations.last().copied().unwrap_or(0),
                launch_total_ns: k.launch,
                total_flops: k.flops,
                total_bytes: k.bytes,
                achieved_gflops: rate(k.flops, total),
                achieved_gbps: rate(k.bytes, total),
            }
        })
        .collect();
    kernels.sort_by(|a, b| {
        b.total_ns.cmp(&a.total_ns).then_with(|| (&a.name, &a.algorithm).cmp(&(&b.name, &b.algorithm)))
    });
    kernels
}

/// The copy table, by device, kind, pinned and non-blocking.
fn copy_rows(copies: FxHashMap<(u32, u32, bool, bool), CopyAcc>, index_of: &[u32]) -> Vec<CopyStats> {
    let mut copies: Vec<CopyStats> = copies
        .into_iter()
        .map(|((slot, code, pinned, nb), c)| CopyStats {
            kind: copy_kind_of(code),
            device: index_of[slot as usize],
            pinned,
            non_blocking: nb,
            calls: c.calls,
            total_bytes: c.bytes,
            total_ns: c.ns,
            achieved_gbps: rate(c.bytes, c.ns),
        })
        .collect();
    copies.sort_by_key(|c| (c.device, crate::record::copy_kind_code(c.kind), c.pinned, c.non_blocking));
    copies
}

/// Units per nanosecond = 10⁹ units per second.
fn rate(units: u64, ns: u64) -> f64 {
    if ns == 0 { 0.0 } else { units as f64 / ns as f64 }
}

struct FirstPass {
    levels: Vec<MemoryLevels>,
    phases: Phases,
    phase_peaks: BTreeMap<(u32, u32), PhasePeakAcc>,
    kernels: FxHashMap<(u32, u32), KernelAcc>,
    copies: FxHashMap<(u32, u32, bool, bool), CopyAcc>,
}

fn fold_phase(
    peaks: &mut BTreeMap<(u32, u32), PhasePeakAcc>,
    inst: &PhaseInstance,
    tracks: &[PhaseTrack],
    end_ns: u64,
) {
    for (slot, t) in tracks.iter().enumerate() {
        if !t.touched && t.max_allocated == 0 && t.max_reserved == 0 {
            continue;
        }
        let a = peaks.entry((inst.name, slot as u32)).or_default();
        a.instances += 1;
        a.total_ns += end_ns.saturating_sub(inst.start_ns);
        if a.instances == 1 || t.max_allocated > a.peak_allocated {
            a.peak_allocated = t.max_allocated;
            a.peak_allocated_time = t.max_allocated_time;
        }
        a.peak_reserved = a.peak_reserved.max(t.max_reserved);
        a.max_rise = a.max_rise.max(t.max_allocated - t.entry_allocated.min(t.max_allocated));
    }
}

/// The first pass's state while it walks the recording: the replay, each
/// device's accumulators, the open phases' trackers and the tables.
struct FirstPassWalk<'a> {
    rec: &'a Recording,
    replay: Replay<'a>,
    accs: Vec<DevAcc>,
    /// Records found to free memory allocated before the recording.
    ignored: Vec<usize>,
    /// Open phase instances and their per-device trackers, in begin order.
    tracks: Vec<(u32, Vec<PhaseTrack>)>,
    phase_peaks: BTreeMap<(u32, u32), PhasePeakAcc>,
    kernels: FxHashMap<(u32, u32), KernelAcc>,
    copies: FxHashMap<(u32, u32, bool, bool), CopyAcc>,
    closed: Vec<u32>,
}

fn first_pass(
    rec: &Recording,
    slot_of: &dyn Fn(u32) -> u32,
    n: usize,
    end_ns: u64,
) -> (Vec<DevAcc>, Vec<usize>, FirstPass) {
    let mut w = FirstPassWalk {
        rec,
        replay: Replay::new(rec, slot_of, n),
        accs: vec![DevAcc::default(); n],
        ignored: Vec::new(),
        tracks: Vec::new(),
        phase_peaks: BTreeMap::new(),
        kernels: FxHashMap::default(),
        copies: FxHashMap::default(),
        closed: Vec::new(),
    };
    let mut i = 0;
    while i < rec.len() {
        let r = rec.get(i);
        match r.kind {
            k if k <= kind::EMPTY_CACHE => w.allocator(i, r),
            kind::KERNEL => {
                // The kernel's duration and launch time follow in a continuation record.
                let cont = (i + 1 < rec.len() && rec.get(i + 1).kind == kind::KERNEL_CONT).then(|| rec.get(i + 1));
                i += usize::from(cont.is_some());
                w.kernel(r, cont.map_or((0, 0), |c| (c.time_ns, c.a)));
            }
            kind::COPY => w.copy(r),
            kind::PHASE_BEGIN => w.phase_begin(r),
            kind::PHASE_END => w.phase_end(r),
            _ => {}
        }
        i += 1;
    }
    w.finish(end_ns)
}

impl FirstPassWalk<'_> {
    /// An allocator event: counts, peaks, the open phases' maxima, an OOM's report.
    #[inline]
    fn allocator(&mut self, i: usize, r: &Record) {
        let step = self.replay.allocator(i, r);
        if step.slot == u32::MAX {
            return;
        }
        let s = step.slot as usize;
        let c = &mut self.accs[s].counts;
        c.allocator_events += 1;
        match r.kind {
            kind::ALLOC => c.allocs += 1,
            kind::FREE_REQUESTED => c.frees_requested += 1,
            kind::FREE_COMPLETED => c.frees_completed += 1,
            kind::SEGMENT_ALLOC => c.segment_allocs += 1,
            kind::SEGMENT_FREE => c.segment_frees += 1,
            kind::SEGMENT_MAP => c.segment_maps += 1,
            kind::SEGMENT_UNMAP => c.segment_unmaps += 1,
            kind::EMPTY_CACHE => c.empty_cache_calls += 1,
            kind::OOM => c.ooms += 1,
            _ => {}
        }
        if step.ignored {
            c.unmatched_frees += 1;
            self.ignored.push(i);
        }
        if step.changed != 0 {
            self.levels_changed(i, r, s, step.changed);
        } else if !self.tracks.is_empty() {
            for (_, t) in self.tracks.iter_mut() {
                t[s].touched = true;
            }
        }
        if r.kind == kind::OOM && self.accs[s].ooms.len() < MAX_OOM_REPORTS {
            let report = self.oom_report(i, r, step.slot);
            self.accs[s].ooms.push(report);
        }
    }

    /// Device slot `s`'s levels changed at record `i`: its peaks and the open phases' maxima.
    #[inline]
    fn levels_changed(&mut self, i: usize, r: &Record, s: usize, changed: u8) {
        let lv = self.replay.levels[s];
        let thread = self.rec.context(r).thread;
        let phases = &self.replay.phases;
        let phase = || phases.current(thread);
        let acc = &mut self.accs[s];
        if changed & CH_ALLOCATED != 0 && acc.peak_allocated.offer(lv.allocated_bytes, r.time_ns, i, &phase) {
            acc.peak_by_cat = self.replay.by_cat[s];
        }
        if changed & CH_RESERVED != 0 {
            acc.peak_reserved.offer(lv.reserved_bytes, r.time_ns, i, &phase);
        }
        if changed & CH_ACTIVE != 0 {
            acc.peak_active.offer(lv.active_bytes, r.time_ns, i, &phase);
        }
        if changed & CH_REQUESTED != 0 {
            acc.peak_requested.offer(lv.requested_bytes, r.time_ns, i, &phase);
        }
        for (_, t) in self.tracks.iter_mut() {
            let t = &mut t[s];
            t.touched = true;
            if lv.allocated_bytes > t.max_allocated {
                t.max_allocated = lv.allocated_bytes;
                t.max_allocated_time = r.time_ns;
            }
            t.max_reserved = t.max_reserved.max(lv.reserved_bytes);
        }
    }

    /// The report of the out-of-memory at record `i` on `slot`.
    fn oom_report(&self, i: usize, r: &Record, slot: u32) -> OomReport {
        let (rec, replay, names) = (self.rec, &self.replay, &self.rec.phases);
        let frag = replay.fragmentation(slot, r.time_ns);
        let rounded = r.b;
        let cause = if frag.reserved_unallocated_bytes >= rounded && frag.largest_free_block_bytes < rounded {
            OomCause::Fragmentation
        } else {
            OomCause::Capacity
        };
        let thread = rec.context(r).thread;
        OomReport {
            time_ns: r.time_ns,
            event_index: i as u64,
            phase: replay.phases.path(replay.phases.current(thread), names),
            stream: rec.context(r).stream,
            requested_bytes: rec.requested(i, r),
            rounded_bytes: rounded,
            device_free_bytes: r.a,
            cause,
            fragmentation: frag,
            largest_live_allocations: replay.largest_live(slot, OOM_LIVE_ALLOCATIONS, names),
        }
    }

    /// A kernel launch with its `(duration, launch)` times.
    #[inline]
    fn kernel(&mut self, r: &Record, (duration, launch): (u64, u64)) {
        let slot = self.replay.ctx_slot[r.ctx as usize];
        if slot != u32::MAX {
            self.accs[slot as usize].counts.kernels += 1;
            let k = self.kernels.entry((r.c, slot)).or_default();
            k.durations.push(duration);
            k.launch = k.launch.saturating_add(launch);
            k.flops = k.flops.saturating_add(r.a);
            k.bytes = k.bytes.saturating_add(r.b);
        }
    }

    #[inline]
    fn copy(&mut self, r: &Record) {
        let slot = self.replay.ctx_slot[r.ctx as usize];
        if slot != u32::MAX {
            self.accs[slot as usize].counts.copies += 1;
            let key = (slot, r.c & 3, r.c & 4 != 0, r.c & 8 != 0);
            let c = self.copies.entry(key).or_default();
            c.calls += 1;
            c.bytes = c.bytes.saturating_add(r.b);
            c.ns = c.ns.saturating_add(r.a);
        }
    }

    fn phase_begin(&mut self, r: &Record) {
        let thread = self.rec.context(r).thread;
        let id = self.replay.phases.begin(r.c, thread, r.time_ns);
        let t: Vec<PhaseTrack> = self
            .replay
            .levels
            .iter()
            .map(|lv| PhaseTrack {
                entry_allocated: lv.allocated_bytes,
                max_allocated: lv.allocated_bytes,
                max_allocated_time: r.time_ns,
                max_reserved: lv.reserved_bytes,
                touched: false,
            })
            .collect();
        self.tracks.push((id, t));
    }

    fn phase_end(&mut self, r: &Record) {
        let thread = self.rec.context(r).thread;
        self.replay.phases.end(r.c, thread, r.time_ns, &mut self.closed);
        for &id in &self.closed {
            if let Some(p) = self.tracks.iter().rposition(|(t, _)| *t == id) {
                let (_, t) = self.tracks.remove(p);
                fold_phase(&mut self.phase_peaks, &self.replay.phases.instances[id as usize], &t, r.time_ns);
            }
        }
    }

    /// Phases still open at the end count up to the end.
    fn finish(mut self, end_ns: u64) -> (Vec<DevAcc>, Vec<usize>, FirstPass) {
        for (id, t) in self.tracks.drain(..) {
            let inst = &self.replay.phases.instances[id as usize];
            fold_phase(&mut self.phase_peaks, inst, &t, end_ns.max(inst.start_ns));
        }
        let pass = FirstPass {
            levels: self.replay.levels,
            phases: self.replay.phases,
            phase_peaks: self.phase_peaks,
            kernels: self.kernels,
            copies: self.copies,
        };
        (self.accs, self.ignored, pass)
    }
}
