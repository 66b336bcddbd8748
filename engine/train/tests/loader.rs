//! The DataLoader's workers, transforms, pinned staging and `data_wait`
//! phases: same batches for every worker count, errors and panics that name
//! the sample, clean shutdown mid-epoch, and the phase events on the hub.

use std::sync::Arc;

use vramlab_engine::alloc::AllocatorConfig;
use vramlab_engine::alloc::consts::MIB;
use vramlab_engine::device::{Device, DeviceId, DeviceKind};
use vramlab_engine::hooks::{Event, EventLog, Hooks};
use vramlab_rng::Rng;
use vramlab_train::{Augment, DataLoader, Dataset, LoaderConfig, NnError, SampleTransform};

fn device(index: u32) -> (Device, Arc<Hooks>) {
    let hooks = Hooks::new();
    let id = DeviceId { kind: DeviceKind::Cpu, index };
    (Device::host(id, 256 * MIB, AllocatorConfig::default(), &hooks).unwrap(), hooks)
}

/// Every batch of `epochs` epochs as (features bits, target bits).
fn batches(loader: &DataLoader<'_>, epochs: u64, d: &Device) -> Vec<(Vec<u32>, Vec<u64>)> {
    let mut out = Vec::new();
    for e in 0..epochs {
        for b in loader.epoch(e, d) {
            let b = b.unwrap();
            let x = b.x.to_f64_vec().unwrap().iter().map(|&v| (v as f32).to_bits()).collect();
            let y = b.y.to_f64_vec().unwrap().iter().map(|&v| v.to_bits()).collect();
            out.push((x, y));
        }
    }
    out
}

fn augmenting(batch: usize, workers: usize) -> LoaderConfig {
    LoaderConfig {
        seed: 11,
        num_workers: workers,
        transform: Some(Arc::new(Augment::with_rounds(2))),
        ..LoaderConfig::new(batch)
    }
}

#[test]
fn batches_are_bit_identical_for_0_1_2_4_workers() {
    let (d, _) = device(70);
    let images = Dataset::images(45, [1, 8, 8], 3, 0.5, 1).unwrap();
    let regression = Dataset::regression(23, 5, 2, 0.1, 2).unwrap();
    for data in [&images, &regression] {
        let reference = batches(&DataLoader::new(data, augmenting(4, 0)).unwrap(), 2, &d);
        assert_eq!(reference.len(), 2 * data.len().div_ceil(4));
        // The transform changed the samples (normalised, noised): not the raw features.
        let plain =
            batches(&DataLoader::new(data, LoaderConfig { transform: None, ..augmenting(4, 0) }).unwrap(), 1, &d);
        assert_ne!(reference[0].0, plain[0].0);
        assert_eq!(reference[0].1, plain[0].1, "targets are not transformed");
        // Another epoch draws other noise for the same samples.
        assert_ne!(reference[0], reference[reference.len() / 2]);
        for workers in [1, 2, 4] {
            for persistent in [false, true] {
                for pin_memory in [false, true] {
                    let cfg = LoaderConfig { persistent_workers: persistent, pin_memory, ..augmenting(4, workers) };
                    let loader = DataLoader::new(data, cfg).unwrap();
                    assert_eq!(
                        batches(&loader, 2, &d),
                        reference,
                        "{workers} workers, persistent {persistent}, pinned {pin_memory}"
                    );
                }
            }
        }
        // A shared dataset gives the same batches, with no copy.
        let shared = DataLoader::shared(Arc::new(data.clone()), augmenting(4, 2)).unwrap();
        assert_eq!(batches(&shared, 2, &d), reference);
        assert_eq!(shared.epoch(0, &d).memory().dataset_copy_bytes, 0);
    }
}

/// Panics on one sample index.
#[derive(Debug)]
struct PanicsOn(usize);

impl SampleTransform for PanicsOn {
    fn apply(&self, index: usize, _: &[usize], _: &mut [f32], _: &mut Rng) -> Result<(), String> {
        assert_ne!(index, self.0, "bad sample");
        Ok(())
    }
}

#[test]
fn a_failing_or_panicking_sample_reaches_the_loop_with_its_index() {
    let (d, _) = device(71);
    // Sample 13 is constant: normalising it fails.
    let mut features: Vec<f32> = Rng::new(3).normals(20 * 6, 1.0);
    features[13 * 6..14 * 6].fill(2.0);
    let data =
        Dataset::new(features, &[6], vramlab_train::Targets::Classes { labels: vec![0; 20], classes: 2 }).unwrap();
    let normalise = Augment { noise_std: 0.0, crop_pad: 0, rounds: 1 };
    for workers in [0, 2] {
        for transform in [Arc::new(normalise) as Arc<dyn SampleTransform>, Arc::new(PanicsOn(13))] {
            let cfg = LoaderConfig { num_workers: workers, transform: Some(transform), ..LoaderConfig::new(3) };
            let loader = DataLoader::new(&data, cfg).unwrap();
            let mut it = loader.epoch(0, &d);
            let results: Vec<_> = it.by_ref().collect();
            let err = results.iter().find_map(|r| r.as_ref().err()).expect("one batch fails");
            match err {
                NnError::LoadSample { sample, worker, reason } => {
                    assert_eq!(*sample, 13, "{err}");
                    assert_eq!(worker.is_some(), workers > 0, "{err}");
                    assert!(reason.contains("standard deviation") || reason.contains("panicked: "), "{err}");
                }
                other => panic!("unexpected error {other}"),
            }
            assert!(err.to_string().contains("sample 13"), "{err}");
            // The failed batch is the last one delivered, and the workers are gone.
            assert!(results.last().unwrap().is_err());
            assert!(it.live_workers().is_none());
            if workers == 0 {
                // With the training thread loading, panics are the caller's (as in PyTorch).
                break;
            }
        }
    }
}

#[test]
fn dropping_mid_epoch_joins_every_worker() {
    let (d, _) = device(72);
    let data = Dataset::images(64, [1, 8, 8], 2, 0.5, 4).unwrap();
    let loader = DataLoader::new(&data, augmenting(2, 4)).unwrap();
    let mut it = loader.epoch(0, &d);
    let live = it.live_workers().unwrap();
    assert_eq!(live.count(), 4);
    it.next().unwrap().unwrap();
    // The workers now sit on full queues (prefetch 2 each, 31 batches left).
    drop(it);
    assert_eq!(live.count(), 0);

    // Persistent workers outlive the epoch, serve the next one, and stop with the loader.
    let cfg = LoaderConfig { persistent_workers: true, ..augmenting(8, 2) };
    let loader = DataLoader::new(&data, cfg).unwrap();
    assert_eq!(loader.epoch(0, &d).count(), 8);
    let kept = loader.persistent_workers_live().expect("kept after a full epoch");
    assert_eq!(kept.count(), 2);
    let mut it = loader.epoch(1, &d);
    assert_eq!(it.live_workers().unwrap().count(), 2);
    it.next().unwrap().unwrap();
    drop(it); // mid-epoch: not reusable, stopped
    assert_eq!(kept.count(), 0);
    assert!(loader.persistent_workers_live().is_none());
    assert_eq!(loader.epoch(2, &d).count(), 8);
    let again = loader.persistent_workers_live().unwrap();
    drop(loader);
    assert_eq!(again.count(), 0);
}

#[test]
fn every_wait_for_a_batch_is_a_data_wait_phase_on_the_device_hub() {
    let (d, hooks) = device(73);
    let data = Dataset::classification(30, 4, 2, 1.0, 5).unwrap();
    for workers in [0, 2] {
        let log = EventLog::new();
        let id = hooks.subscribe(log.clone());
        let loader = DataLoader::new(&data, augmenting(8, workers)).unwrap();
        assert_eq!(loader.epoch(0, &d).count(), 4);
        hooks.unsubscribe(id);
        let phases: Vec<_> = log
            .events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Phase(p) => Some(p),
                _ => None,
            })
            .collect();
        assert_eq!(phases.len(), 8, "{phases:?}");
        for pair in phases.chunks(2) {
            assert!(pair[0].begin && !pair[1].begin);
            assert!(pair.iter().all(|p| &*p.name == "data_wait" && p.depth == 1));
            assert!(pair[1].time_ns >= pair[0].time_ns);
        }
    }
}

#[test]
fn memory_counts_staging_worker_batches_and_the_dataset_copy() {
    let (d, _) = device(74);
    let data = Dataset::images(16, [1, 4, 4], 2, 0.5, 6).unwrap();
    let batch_bytes = 4 * (16 * 4 + 8) as u64;
    let inline = DataLoader::new(&data, LoaderConfig::new(4)).unwrap();
    let m = inline.epoch(0, &d).memory();
    assert_eq!((m.staging_bytes, m.worker_batches_bytes, m.dataset_copy_bytes), (batch_bytes, 0, 0));
    let cfg = LoaderConfig { num_workers: 2, pin_memory: true, prefetch_factor: 3, ..LoaderConfig::new(4) };
    let workers = DataLoader::new(&data, cfg).unwrap();
    let it = workers.epoch(0, &d);
    let m = it.memory();
    assert_eq!(m.staging_bytes, 2 * batch_bytes, "a pool of two pinned slots");
    assert_eq!(m.worker_batches_bytes, 2 * 4 * batch_bytes);
    assert_eq!(m.dataset_copy_bytes, 16 * (16 * 4 + 8));
    assert_eq!(m.total_bytes(), m.staging_bytes + m.worker_batches_bytes + m.dataset_copy_bytes);
    assert_eq!(m.page_locked_bytes > 0, it.staging_is_page_locked());
    assert!(
        DataLoader::new(&data, LoaderConfig { num_workers: 1, prefetch_factor: 0, ..LoaderConfig::new(4) }).is_err()
    );
}
