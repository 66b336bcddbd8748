//! Property tests: categories sum to allocated at every point; decimation keeps
//! the extremes and every point inside its bucket's kept envelope.

mod common;

use proptest::prelude::*;
use vramlab_engine::alloc::{Allocation, AllocatorConfig};
use vramlab_engine::hooks::{Hooks, Tag};
use vramlab_profiler::{Category, decimate};

#[derive(Debug, Clone)]
enum Op {
    Alloc { size: u64, tag: Option<usize>, stream: u32 },
    Free(usize),
    EmptyCache,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (1u64..(48 << 20), proptest::option::of(0usize..Tag::ALL.len()), 0u32..2)
            .prop_map(|(size, tag, stream)| Op::Alloc { size, tag, stream }),
        4 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::EmptyCache),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn categories_sum_to_allocated_at_every_point(ops in proptest::collection::vec(op(), 1..120)) {
        let hub = Hooks::new();
        let alloc = common::allocator(&hub, None, AllocatorConfig::default(), 0);
        let profiler = common::profiler(&hub, &[0]);
        let mut live: Vec<Allocation> = Vec::new();
        let mut by_tag = [0u64; 8];
        for op in ops {
            match op {
                Op::Alloc { size, tag, stream } => {
                    let tag = tag.map(|t| Tag::ALL[t]);
                    let a = alloc.malloc(size, stream, tag).unwrap();
                    by_tag[Category::from(tag).index()] += a.size();
                    live.push(a);
                }
                Op::Free(i) if !live.is_empty() => {
                    let a = live.swap_remove(i % live.len());
                    by_tag[Category::from(a.tag()).index()] -= a.size();
                    alloc.free(a).unwrap();
                }
                Op::Free(_) => {}
                Op::EmptyCache => alloc.empty_cache(),
            }
        }
        let profile = profiler.stop();
        let c = profile.categories(0).unwrap();
        let t = profile.timeline(0).unwrap();
        prop_assert_eq!(&c.time_ns, &t.allocated_bytes.time_ns);
        prop_assert_eq!(&c.allocated_bytes, &t.allocated_bytes.bytes);
        for (row, total) in c.by_category.iter().zip(&c.allocated_bytes) {
            prop_assert_eq!(row.total_bytes(), *total);
        }
        // The last row is the truth the test kept on the side.
        prop_assert_eq!(c.by_category.last().unwrap().to_array(), by_tag);
        let d = profile.device(0).unwrap();
        prop_assert_eq!(d.peak_by_category.total_bytes(), d.peak_allocated.bytes);
        prop_assert_eq!(d.peak_allocated.bytes, alloc.max_memory_allocated());
        // Decimated rows stay whole rows.
        let dc = c.decimate(16);
        prop_assert!(dc.len() <= 16);
        for (row, total) in dc.by_category.iter().zip(&dc.allocated_bytes) {
            prop_assert_eq!(row.total_bytes(), *total);
        }
        prop_assert_eq!(dc.allocated_bytes.iter().max(), c.allocated_bytes.iter().max());
    }

    #[test]
    fn decimation_keeps_extremes_and_envelope(
        steps in proptest::collection::vec((0u64..50, 0u64..1_000_000, any::<bool>()), 1..3000),
        max_points in 4usize..200,
    ) {
        // Mostly increasing times with some ties and a few steps backwards.
        let mut t = 1_000u64;
        let mut time = Vec::with_capacity(steps.len());
        let mut values = Vec::with_capacity(steps.len());
        for (dt, v, back) in steps {
            t = if back && dt < 5 { t.saturating_sub(dt) } else { t + dt };
            time.push(t);
            values.push(v);
        }
        let n = values.len();
        let d = decimate(&time, &values, max_points);
        prop_assert!(d.indices.len() <= max_points.max(4));
        prop_assert!(d.indices.windows(2).all(|w| w[0] < w[1]));
        prop_assert_eq!(d.indices.first().copied(), Some(0));
        prop_assert_eq!(d.indices.last().copied(), Some(n - 1));

        let max = *values.iter().max().unwrap();
        let min = *values.iter().min().unwrap();
        let first_max = values.iter().position(|&v| v == max).unwrap();
        let first_min = values.iter().position(|&v| v == min).unwrap();
        prop_assert!(d.indices.contains(&first_max));
        prop_assert!(d.indices.contains(&first_min));

        // Buckets cover every point once, in order; each keeps its extremes.
        prop_assert_eq!(d.buckets.first().unwrap().first, 0);
        prop_assert_eq!(d.buckets.last().unwrap().last, n - 1);
        for w in d.buckets.windows(2) {
            prop_assert_eq!(w[0].last + 1, w[1].first);
        }
        for b in &d.buckets {
            prop_assert!(d.indices.contains(&b.min) && d.indices.contains(&b.max));
            let (lo, hi) = (values[b.min], values[b.max]);
            for (i, v) in values.iter().enumerate().take(b.last + 1).skip(b.first) {
                prop_assert!(lo <= *v && *v <= hi, "point {} = {} outside [{}, {}]", i, v, lo, hi);
            }
        }
    }
}
