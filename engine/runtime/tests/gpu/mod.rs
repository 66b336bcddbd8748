//! Helpers shared by the tests that run on a GPU (`engine/runtime/tests/cuda.rs`,
//! `engine/train/tests/cuda_training.rs`): the device or the reason to skip,
//! the lock over process-wide settings, and guards that set the autotuner's
//! mode and the TF32 switches until dropped.

#![allow(dead_code)] // each test crate uses its own subset

use std::sync::{Mutex, MutexGuard};

use vramlab_engine::autotune::{self, TuneMode};
use vramlab_engine::cuda;
use vramlab_engine::device::{Device, cuda_probe};

/// `cuda:0`, or `None` after saying why the test is skipped.
pub fn gpu() -> Option<Device> {
    match cuda_probe() {
        Err(reason) => {
            println!("skipped: no CUDA device ({reason})");
            None
        }
        Ok(n) => match Device::parse("cuda:0") {
            Ok(d) => Some(d),
            Err(e) => panic!("the driver reports {n} CUDA device(s) but cuda:0 does not open: {e}"),
        },
    }
}

pub fn cpu() -> Device {
    Device::cpu()
}

/// Serializes the tests that change or depend on process-wide settings (the
/// autotuner's mode, the TF32 switches).
pub fn settings() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets the autotuner's mode until dropped.
pub struct TunerMode(TuneMode);

impl TunerMode {
    pub fn set(mode: TuneMode) -> TunerMode {
        let previous = autotune::global().mode();
        autotune::global().set_mode(mode);
        TunerMode(previous)
    }
}

impl Drop for TunerMode {
    fn drop(&mut self) {
        autotune::global().set_mode(self.0);
    }
}

/// Sets both TF32 switches until dropped.
pub struct Tf32(bool, bool);

impl Tf32 {
    pub fn set(matmul: bool, cudnn: bool) -> Tf32 {
        let previous = Tf32(cuda::matmul_allow_tf32(), cuda::cudnn_allow_tf32());
        cuda::set_matmul_allow_tf32(matmul);
        cuda::set_cudnn_allow_tf32(cudnn);
        previous
    }
}

impl Drop for Tf32 {
    fn drop(&mut self) {
        cuda::set_matmul_allow_tf32(self.0);
        cuda::set_cudnn_allow_tf32(self.1);
    }
}
