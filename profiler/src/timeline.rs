//! Step series, memory categories, and min/max decimation.

use serde::{Deserialize, Serialize};
use vramlab_engine::hooks::Tag;

/// What allocated bytes are for: the engine's tags plus `untagged`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Parameter,
    Gradient,
    Activation,
    OptimizerState,
    Input,
    Temporary,
    Workspace,
    Untagged,
}

/// Number of categories.
pub const CATEGORY_COUNT: usize = 8;

impl Category {
    /// Every category, in a stable order (the tags' order, then `untagged`).
    pub const ALL: [Category; CATEGORY_COUNT] = [
        Category::Parameter,
        Category::Gradient,
        Category::Activation,
        Category::OptimizerState,
        Category::Input,
        Category::Temporary,
        Category::Workspace,
        Category::Untagged,
    ];

    /// The category's name (`optimizer_state`, `untagged`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Untagged => "untagged",
            other => other.tag().map_or("untagged", Tag::as_str),
        }
    }

    /// The engine tag, or `None` for `untagged`.
    pub fn tag(self) -> Option<Tag> {
        Tag::ALL.get(self.index()).copied()
    }

    /// Position in [`Category::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl From<Option<Tag>> for Category {
    fn from(tag: Option<Tag>) -> Category {
        match tag {
            None => Category::Untagged,
            Some(t) => Category::ALL[Tag::ALL.iter().position(|&x| x == t).unwrap_or(CATEGORY_COUNT - 1)],
        }
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Allocated bytes by category. The fields always sum to the allocated bytes
/// they break down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByCategory {
    pub parameter_bytes: u64,
    pub gradient_bytes: u64,
    pub activation_bytes: u64,
    pub optimizer_state_bytes: u64,
    pub input_bytes: u64,
    pub temporary_bytes: u64,
    pub workspace_bytes: u64,
    pub untagged_bytes: u64,
}

impl ByCategory {
    pub fn from_array(a: [u64; CATEGORY_COUNT]) -> ByCategory {
        ByCategory {
            parameter_bytes: a[0],
            gradient_bytes: a[1],
            activation_bytes: a[2],
            optimizer_state_bytes: a[3],
            input_bytes: a[4],
            temporary_bytes: a[5],
            workspace_bytes: a[6],
            untagged_bytes: a[7],
        }
    }

    pub fn to_array(&self) -> [u64; CATEGORY_COUNT] {
        [
            self.parameter_bytes,
            self.gradient_bytes,
            self.activation_bytes,
            self.optimizer_state_bytes,
            self.input_bytes,
            self.temporary_bytes,
            self.workspace_bytes,
            self.untagged_bytes,
        ]
    }

    /// The bytes of one category.
    pub fn get(&self, c: Category) -> u64 {
        self.to_array()[c.index()]
    }

    /// The sum over all categories.
    pub fn total_bytes(&self) -> u64 {
        self.to_array().iter().sum()
    }

    /// (category, bytes) pairs, largest first, zero categories left out.
    pub fn largest_first(&self) -> Vec<(Category, u64)> {
        let mut v: Vec<(Category, u64)> =
            Category::ALL.iter().map(|&c| (c, self.get(c))).filter(|&(_, b)| b > 0).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

/// A step series: the value `bytes[i]` holds from `time_ns[i]` until
/// `time_ns[i + 1]` (the last until the recording's end). Several points may
/// share a time (the events of one allocator call carry one time stamp); the
/// last of them is the value after that call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepSeries {
    pub time_ns: Vec<u64>,
    pub bytes: Vec<u64>,
}

impl StepSeries {
    pub fn len(&self) -> usize {
        self.time_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.time_ns.is_empty()
    }

    #[inline]
    pub(crate) fn push(&mut self, time_ns: u64, bytes: u64) {
        self.time_ns.push(time_ns);
        self.bytes.push(bytes);
    }

    /// The highest value and the first time it was reached.
    pub fn max(&self) -> Option<(u64, u64)> {
        let mut best: Option<(u64, u64)> = None;
        for (&t, &b) in self.time_ns.iter().zip(&self.bytes) {
            if best.is_none_or(|(_, v)| b > v) {
                best = Some((t, b));
            }
        }
        best
    }

    /// The last value (the value at the recording's end), 0 when empty.
    pub fn last_bytes(&self) -> u64 {
        self.bytes.last().copied().unwrap_or(0)
    }

    /// The value in force at `time_ns` (the last point at or before it; 0 before the first).
    pub fn value_at(&self, time_ns: u64) -> u64 {
        let n = self.time_ns.partition_point(|&t| t <= time_ns);
        if n == 0 { 0 } else { self.bytes[n - 1] }
    }

    /// At most `max_points` points chosen by [`decimate`]: every bucket's
    /// minimum and maximum, so the peak is always among them.
    pub fn decimate(&self, max_points: usize) -> StepSeries {
        let d = decimate(&self.time_ns, &self.bytes, max_points);
        StepSeries {
            time_ns: d.indices.iter().map(|&i| self.time_ns[i]).collect(),
            bytes: d.indices.iter().map(|&i| self.bytes[i]).collect(),
        }
    }
}

/// One device's memory over time, as the allocator counts it: every series
/// starts at the recording's start (at 0 bytes, or the baseline given for the
/// device) and changes at every event that changes it. The last point is at the
/// recording's end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    pub device: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Bytes of blocks handed out and not yet freed by their user (`memory_allocated`).
    pub allocated_bytes: StepSeries,
    /// Bytes of segments obtained from the device (`memory_reserved`).
    pub reserved_bytes: StepSeries,
    /// Allocated bytes plus freed blocks still in use by other streams.
    pub active_bytes: StepSeries,
    /// Bytes the callers asked for, of active blocks (before rounding).
    pub requested_bytes: StepSeries,
}

impl Timeline {
    /// Every series decimated to at most `max_points` points.
    pub fn decimate(&self, max_points: usize) -> Timeline {
        Timeline {
            device: self.device,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            allocated_bytes: self.allocated_bytes.decimate(max_points),
            reserved_bytes: self.reserved_bytes.decimate(max_points),
            active_bytes: self.active_bytes.decimate(max_points),
            requested_bytes: self.requested_bytes.decimate(max_points),
        }
    }
}

/// Allocated bytes by category over time: one row per change of allocated
/// bytes. At every row the categories sum to `allocated_bytes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CategoryTimeline {
    pub device: u32,
    pub time_ns: Vec<u64>,
    pub allocated_bytes: Vec<u64>,
    pub by_category: Vec<ByCategory>,
}

impl CategoryTimeline {
    pub fn len(&self) -> usize {
        self.time_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.time_ns.is_empty()
    }

    /// One category as a step series.
    pub fn series(&self, category: Category) -> StepSeries {
        StepSeries { time_ns: self.time_ns.clone(), bytes: self.by_category.iter().map(|b| b.get(category)).collect() }
    }

    /// At most `max_points` whole rows, chosen by the min/max decimation of
    /// the allocated total: the rows stay exact (they still sum), and the row
    /// of the allocated peak is kept — the stacked chart's peak is the true one.
    pub fn decimate(&self, max_points: usize) -> CategoryTimeline {
        let d = decimate(&self.time_ns, &self.allocated_bytes, max_points);
        CategoryTimeline {
            device: self.device,
            time_ns: d.indices.iter().map(|&i| self.time_ns[i]).collect(),
            allocated_bytes: d.indices.iter().map(|&i| self.allocated_bytes[i]).collect(),
            by_category: d.indices.iter().map(|&i| self.by_category[i]).collect(),
        }
    }
}

/// A bucket of a [`Decimation`]: the input points `first..=last`, of which
/// `min` and `max` (first occurrences) were kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub first: usize,
    pub last: usize,
    pub min: usize,
    pub max: usize,
}

/// The result of [`decimate`]: the kept indices (sorted, distinct) and the
/// buckets they were chosen from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decimation {
    pub indices: Vec<usize>,
    pub buckets: Vec<Bucket>,
}

/// Min/max decimation of a time series to at most `max_points` points (at
/// least 4 are allowed).
///
/// The time span is cut into equal-width buckets (about `max_points / 2` of
/// them); each bucket keeps the first point of its minimum and the first of its
/// maximum, and the series' first and last points are kept too. So the global
/// maximum and minimum are always kept, and every dropped point lies between
/// the kept minimum and maximum of its bucket — the envelope of the chart is
/// the envelope of the data. A series short enough is returned whole (one
/// bucket per point). Times that go backwards (events from different emitters)
/// stay in the current bucket.
pub fn decimate(time_ns: &[u64], values: &[u64], max_points: usize) -> Decimation {
    let n = time_ns.len().min(values.len());
    if n <= max_points.max(4) {
        return Decimation {
            indices: (0..n).collect(),
            buckets: (0..n).map(|i| Bucket { first: i, last: i, min: i, max: i }).collect(),
        };
    }
    let mut d = Decimator::new(time_ns[0], time_ns[n - 1], max_points);
    for i in 0..n {
        d.push(time_ns[i], values[i], ());
    }
    let (kept, buckets) = d.finish();
    Decimation { indices: kept.into_iter().map(|k| k.index).collect(), buckets }
}

/// A point kept by a [`Decimator`], with its payload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kept<P> {
    pub index: usize,
    pub time_ns: u64,
    pub value: u64,
    pub payload: P,
}

#[derive(Debug, Clone, Copy)]
struct Open<P> {
    first: usize,
    last: usize,
    min: Kept<P>,
    max: Kept<P>,
}

/// The streaming core of [`decimate`]: points arrive one by one over a time
/// span known in advance; memory is proportional to the output.
#[derive(Debug)]
pub(crate) struct Decimator<P> {
    t0: u64,
    width: u64,
    buckets_wanted: u64,
    current: u64,
    open: Option<Open<P>>,
    n: usize,
    last: Option<Kept<P>>,
    kept: Vec<Kept<P>>,
    buckets: Vec<Bucket>,
}

impl<P: Copy> Decimator<P> {
    pub(crate) fn new(t0: u64, t_end: u64, max_points: usize) -> Decimator<P> {
        let buckets_wanted = ((max_points.max(4) - 2) / 2).max(1) as u64;
        let span = t_end.saturating_sub(t0).max(1);
        Decimator {
            t0,
            width: span.div_ceil(buckets_wanted).max(1),
            buckets_wanted,
            current: 0,
            open: None,
            n: 0,
            last: None,
            kept: Vec::with_capacity(buckets_wanted as usize * 2 + 2),
            buckets: Vec::with_capacity(buckets_wanted as usize),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, time_ns: u64, value: u64, payload: P) {
        let k = Kept { index: self.n, time_ns, value, payload };
        self.n += 1;
        self.last = Some(k);
        let slot = (time_ns.saturating_sub(self.t0) / self.width).min(self.buckets_wanted - 1).max(self.current);
        match &mut self.open {
            None => {
                self.kept.push(k);
                self.current = slot;
                self.open = Some(Open { first: k.index, last: k.index, min: k, max: k });
            }
            Some(_) if slot != self.current => {
                self.close();
                self.current = slot;
                self.open = Some(Open { first: k.index, last: k.index, min: k, max: k });
            }
            Some(b) => {
                b.last = k.index;
                if value < b.min.value {
                    b.min = k;
                }
                if value > b.max.value {
                    b.max = k;
                }
            }
        }
    }

    fn close(&mut self) {
        if let Some(b) = self.open.take() {
            self.buckets.push(Bucket { first: b.first, last: b.last, min: b.min.index, max: b.max.index });
            let (lo, hi) = if b.min.index <= b.max.index { (b.min, b.max) } else { (b.max, b.min) };
            for k in [lo, hi] {
                if self.kept.last().is_none_or(|l| l.index != k.index) {
                    self.kept.push(k);
                }
            }
        }
    }

    /// The kept points in order (distinct indices) and the buckets.
    pub(crate) fn finish(mut self) -> (Vec<Kept<P>>, Vec<Bucket>) {
        self.close();
        if let Some(l) = self.last
            && self.kept.last().is_none_or(|k| k.index != l.index)
        {
            self.kept.push(l);
        }
        (self.kept, self.buckets)
    }
}

/// Decimates a stream whose length is not known in advance: points are kept
/// whole while they fit in `max_points`, and go through a [`Decimator`] over
/// `[t0, t_end]` from the first point that does not.
#[derive(Debug)]
pub(crate) struct StreamDecimator<P> {
    max_points: usize,
    t0: u64,
    t_end: u64,
    buffer: Vec<Kept<P>>,
    decimator: Option<Decimator<P>>,
}

impl<P: Copy> StreamDecimator<P> {
    pub(crate) fn new(t0: u64, t_end: u64, max_points: usize) -> StreamDecimator<P> {
        StreamDecimator { max_points: max_points.max(4), t0, t_end, buffer: Vec::new(), decimator: None }
    }

    #[inline]
    pub(crate) fn push(&mut self, time_ns: u64, value: u64, payload: P) {
        if let Some(d) = &mut self.decimator {
            d.push(time_ns, value, payload);
            return;
        }
        if self.buffer.len() < self.max_points {
            self.buffer.push(Kept { index: self.buffer.len(), time_ns, value, payload });
            return;
        }
        let mut d = Decimator::new(self.t0, self.t_end, self.max_points);
        for k in self.buffer.drain(..) {
            d.push(k.time_ns, k.value, k.payload);
        }
        d.push(time_ns, value, payload);
        self.decimator = Some(d);
    }

    pub(crate) fn finish(self) -> Vec<Kept<P>> {
        match self.decimator {
            Some(d) => d.finish().0,
            None => self.buffer,
        }
    }
}

impl StreamDecimator<()> {
    pub(crate) fn finish_series(self) -> StepSeries {
        let kept = self.finish();
        StepSeries { time_ns: kept.iter().map(|k| k.time_ns).collect(), bytes: kept.iter().map(|k| k.value).collect() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_categories_line_up() {
        for t in vramlab_engine::hooks::Tag::ALL {
            assert_eq!(Category::from(Some(t)).tag(), Some(t));
        }
    }

    #[test]
    fn categories_map_tags() {
        for (i, t) in Tag::ALL.iter().enumerate() {
            assert_eq!(Category::from(Some(*t)).index(), i);
            assert_eq!(Category::from(Some(*t)).as_str(), t.as_str());
        }
        assert_eq!(Category::from(None), Category::Untagged);
        assert_eq!(Category::Untagged.as_str(), "untagged");
    }

    #[test]
    fn short_series_are_kept_whole() {
        let d = decimate(&[1, 2, 3], &[5, 1, 9], 10);
        assert_eq!(d.indices, vec![0, 1, 2]);
    }

    #[test]
    fn decimation_keeps_the_spike() {
        let n = 100_000;
        let t: Vec<u64> = (0..n).collect();
        let mut v: Vec<u64> = (0..n).map(|i| 1000 + (i % 7)).collect();
        v[54_321] = 1_000_000;
        v[77_777] = 3;
        let d = decimate(&t, &v, 1000);
        assert!(d.indices.len() <= 1000);
        assert!(d.indices.contains(&54_321));
        assert!(d.indices.contains(&77_777));
        assert!(d.indices.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn value_at_steps() {
        let s = StepSeries { time_ns: vec![10, 20, 20, 30], bytes: vec![1, 2, 3, 4] };
        assert_eq!(s.value_at(5), 0);
        assert_eq!(s.value_at(10), 1);
        assert_eq!(s.value_at(25), 3);
        assert_eq!(s.value_at(99), 4);
        assert_eq!(s.max(), Some((30, 4)));
    }
}
