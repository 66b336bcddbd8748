//! `test/test_cuda_multigpu.py` (pytorch/pytorch commit 042452378619d10f8ba1986cd78086f4018c179c):
//! `TestCudaMultiGPU._test_memory_stats_generator` with `test_memory_stats` and
//! `test_memory_stats_multigpu`, and `test_mem_get_info`.

use std::sync::mpsc;

use vramlab_allocator::AllocatorConfig;

use crate::harness::{Gpu, Tensor};

/// `assert_change`'s remembered values (`last_m_arr`, `max_m_arr`, `last_r_arr`, `max_r_arr`).
struct Watch {
    last_m: u64,
    max_m: u64,
    last_r: u64,
    max_r: u64,
}

impl Watch {
    fn new(gpu: &Gpu) -> Watch {
        Watch {
            last_m: gpu.memory_allocated(),
            max_m: gpu.max_memory_allocated(),
            last_r: gpu.memory_reserved(),
            max_r: gpu.max_memory_reserved(),
        }
    }

    /// `assert_change(comp, empty_cache, reset_peak)`, assertion for assertion.
    #[track_caller]
    fn assert_change(&mut self, gpu: &Gpu, comp: i64, empty_cache: bool, reset_peak: bool) {
        let new_m = gpu.memory_allocated();
        let new_max_m = gpu.max_memory_allocated();
        match comp.signum() {
            1 => assert!(new_m > self.last_m, "allocated {new_m} not above {}", self.last_m),
            -1 => assert!(new_m < self.last_m, "allocated {new_m} not below {}", self.last_m),
            _ => assert_eq!(new_m, self.last_m),
        }
        assert!(new_m <= new_max_m);
        assert!(new_max_m >= self.max_m);
        self.last_m = new_m;
        self.max_m = new_max_m;

        let new_r = gpu.memory_reserved();
        let new_max_r = gpu.max_memory_reserved();
        assert!(new_r <= new_max_r);
        assert!(new_max_r >= self.max_r);
        self.last_r = new_r;
        self.max_r = new_max_r;

        if empty_cache {
            let num_sync_1 = gpu.stat("num_sync_all_streams");
            assert!(num_sync_1 >= 0);
            let num_alloc_1 = gpu.stat("num_device_alloc");
            assert!(num_alloc_1 >= if new_m == 0 { 0 } else { 1 });
            let num_free_1 = gpu.stat("num_device_free");
            assert!(num_free_1 >= 0);
            gpu.empty_cache();
            assert_eq!(gpu.stat("num_sync_all_streams"), num_sync_1 + 1);
            assert!(gpu.stat("num_device_alloc") >= num_alloc_1);
            assert!(gpu.stat("num_device_free") >= num_free_1);
            let new_r = gpu.memory_reserved();
            let new_max_r = gpu.max_memory_reserved();
            assert!(new_r <= self.last_r);
            assert!(new_r <= new_max_r);
            assert_eq!(new_max_r, self.max_r);
            self.last_r = new_r;
        }

        if reset_peak {
            gpu.reset_peak_memory_stats();
            assert_eq!(gpu.memory_allocated(), self.last_m);
            assert_eq!(gpu.max_memory_allocated(), self.last_m);
            self.max_m = self.last_m;
            assert_eq!(gpu.memory_reserved(), self.last_r);
            assert_eq!(gpu.max_memory_reserved(), self.last_r);
            self.max_r = self.last_r;
        }
    }
}

/// A fixed permutation of `0..n` standing in for `torch.randperm(n)` (the
/// assertions after it, `assert_change(0)`, hold for every permutation).
fn permutation(n: usize) -> Vec<usize> {
    let step = (2..).find(|s| gcd(*s, n) == 1 && *s < n.max(3)).unwrap_or(1);
    (0..n).map(|i| (i * step + 3) % n.max(1)).collect()
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// `_test_memory_stats_generator(self, device, N)`; `yield_` is Python's `yield`
/// (its argument is the `True` of `yield True`).
fn memory_stats_generator(gpu: &Gpu, n: u64, yield_: &mut dyn FnMut(bool)) {
    let m0 = gpu.memory_allocated();
    let mut w = Watch::new(gpu);
    w.assert_change(gpu, 0, false, false);
    w.assert_change(gpu, 0, false, true);
    w.assert_change(gpu, 0, true, false);
    w.assert_change(gpu, 0, false, true);
    w.assert_change(gpu, 0, false, false);
    yield_(false);

    let tensors1 = vec![gpu.floats(&[1]), gpu.floats(&[10, 20]), gpu.floats(&[200, 300, 2000])];
    let m1 = gpu.memory_allocated();
    w.assert_change(gpu, 1, false, false);
    yield_(false);

    let mut tensors2: Vec<std::rc::Rc<Tensor<'_>>> = Vec::new();
    for i in 1..(n / 2) + 1 {
        // small ones
        tensors2.push(gpu.floats(&[i, i * 4]).into());
        w.assert_change(gpu, 1, false, false);
        yield_(false);
    }
    for i in 5..(n / 2) + 5 {
        // large ones
        tensors2.push(gpu.floats(&[i, i * 7, i * 9, i * 11]).into());
        w.assert_change(gpu, 1, false, i % 2 == 0);
        yield_(false);
    }
    tensors2.push(gpu.floats(&[0, 0, 0]).into());
    w.assert_change(gpu, 0, false, false);
    yield_(false);

    let mut permute = Vec::new();
    for i in permutation(tensors2.len()) {
        permute.push(tensors2[i].clone());
        w.assert_change(gpu, 0, false, false);
        yield_(false);
    }

    drop(tensors2);
    w.assert_change(gpu, 0, false, false);
    yield_(false);
    let mut tensors2 = permute.clone();
    w.assert_change(gpu, 0, false, false);
    yield_(false);
    drop(permute);
    w.assert_change(gpu, 0, false, true);
    yield_(false);

    for i in 0..(n / 2) as usize {
        let x = tensors2[i].numel() as i64;
        tensors2.remove(i);
        w.assert_change(gpu, -x, false, false); // in case that tensors2[i] is empty
        yield_(false);
    }

    for i in 2..(2 * n / 3) + 2 {
        tensors2.push(gpu.floats(&[i, i * 3, i * 8]).into());
        w.assert_change(gpu, 1, false, false);
        yield_(false);
    }

    drop(tensors2);
    w.assert_change(gpu, -1, false, true);
    w.assert_change(gpu, 0, false, false);
    assert_eq!(gpu.memory_allocated(), m1);
    yield_(true);

    drop(tensors1);
    w.assert_change(gpu, -1, false, true);
    assert_eq!(gpu.memory_allocated(), m0);

    // test empty_cache and reset_peak
    w.assert_change(gpu, 0, true, false);
    w.assert_change(gpu, 0, false, true);
}

/// `test_cuda_multigpu.py::TestCudaMultiGPU.test_memory_stats`: the generator with
/// `_check_memory_stat_consistency` at every yield (and, here, after every op).
pub fn memory_stats(config: AllocatorConfig) {
    let gpu = Gpu::new(config);
    gpu.empty_cache();
    let mut yields = 0;
    memory_stats_generator(&gpu, 35, &mut |_| {
        gpu.check();
        yields += 1;
    });
    // 1 + 1 + 17 + 17 + 1 + 35 + 3 + 17 + 23 + 1 yields for N = 35.
    assert_eq!(yields, 116);
    // From the source: everything freed and the cache emptied, nothing stays.
    assert_eq!((gpu.memory_allocated(), gpu.memory_reserved()), (0, 0));
}

#[test]
fn test_memory_stats() {
    memory_stats(AllocatorConfig::default());
}

/// Python's generator as a thread that runs only between `advance` calls.
struct Generator<'scope> {
    resume: mpsc::SyncSender<()>,
    yielded: mpsc::Receiver<()>,
    end: bool,
    /// The generator's thread; it returns how many times it yielded.
    thread: std::thread::ScopedJoinHandle<'scope, u32>,
}

impl<'scope> Generator<'scope> {
    fn spawn<'env>(scope: &'scope std::thread::Scope<'scope, 'env>, gpu: &'env Gpu) -> Generator<'scope> {
        let (resume, resumed) = mpsc::sync_channel::<()>(0);
        let (yields, yielded) = mpsc::sync_channel::<()>(0);
        let thread = scope.spawn(move || {
            let mut count = 0;
            if resumed.recv().is_err() {
                return count;
            }
            memory_stats_generator(gpu, 35, &mut |_| {
                count += 1;
                yields.send(()).expect("the driver waits");
                resumed.recv().expect("the driver resumes or the test ends");
            });
            // Dropping `yields` is StopIteration.
            count
        });
        Generator { resume, yielded, end: false, thread }
    }

    /// `advance(gen, end)`: `next(gen)`, or `end` once it raised StopIteration.
    fn advance(&mut self) -> bool {
        if !self.end && (self.resume.send(()).is_err() || self.yielded.recv().is_err()) {
            self.end = true;
        }
        self.end
    }
}

/// `test_cuda_multigpu.py::TestCudaMultiGPU.test_memory_stats_multigpu`: two devices,
/// one allocator each, their generators interlaced and then in a "semi-random"
/// order (a fixed cycle of 0, 1, 2 steps for `torch.LongTensor(1).random_(0, 3)`).
#[test]
fn test_memory_stats_multigpu() {
    for semi_random in [false, true] {
        let gpu0 = Gpu::new(AllocatorConfig::default());
        let gpu1 = Gpu::new(AllocatorConfig::default());
        gpu0.empty_cache();
        gpu1.empty_cache();
        std::thread::scope(|scope| {
            let mut gen0 = Generator::spawn(scope, &gpu0);
            let mut gen1 = Generator::spawn(scope, &gpu1);
            let mut cycle = [0u32, 1, 2].into_iter().cycle();
            while !(gen0.end && gen1.end) {
                let end0 = gen0.advance();
                if !semi_random {
                    gen1.advance();
                    continue;
                }
                let gen1_max_times = if end0 { u32::MAX } else { cycle.next().expect("endless") };
                let mut t = 0;
                while t < gen1_max_times && !gen1.end {
                    gen1.advance();
                    t += 1;
                }
            }
            for generator in [gen0, gen1] {
                assert_eq!(generator.thread.join().expect("the generator ran to its end"), 116);
            }
        });
        // From the source: one allocator per device, each back at zero on its own.
        for gpu in [&gpu0, &gpu1] {
            assert_eq!((gpu.memory_allocated(), gpu.memory_reserved()), (0, 0));
            gpu.check();
        }
    }
}

/// `test_cuda_multigpu.py::TestCudaMultiGPU.test_mem_get_info`: allocating 32 MiB
/// (8 Mi floats, enough to need a new block) after `empty_cache` lowers the free
/// bytes and leaves the total alone, on each device.
#[test]
fn test_mem_get_info() {
    for _device in 0..2 {
        let gpu = Gpu::new(AllocatorConfig::default());
        gpu.empty_cache();
        let before = gpu.allocator.mem_info();
        let _t = gpu.floats(&[1024 * 1024 * 8]);
        let after = gpu.allocator.mem_info();
        assert!(after.free_bytes < before.free_bytes);
        assert_eq!(before.total_bytes, after.total_bytes);
        // From the source: the free bytes fell by the new segment, 32 MiB.
        assert_eq!(before.free_bytes - after.free_bytes, 32 << 20);
    }
}
