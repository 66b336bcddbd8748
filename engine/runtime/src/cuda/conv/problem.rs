//! What every part of a CUDA convolution shares: the TF32 switch
//! (`torch.backends.cudnn.allow_tf32`) and the problem's sizes as the kernels
//! and cuDNN take them ([`Dims`], 32-bit ints).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::cpu_kernels::Conv2dShape;

static CUDNN_ALLOW_TF32: AtomicBool = AtomicBool::new(true);

/// `torch.backends.cudnn.allow_tf32 = on`: f32 convolutions on CUDA may use TF32
/// tensor cores. Process-wide; on by default, as in PyTorch.
pub fn set_cudnn_allow_tf32(on: bool) {
    CUDNN_ALLOW_TF32.store(on, Ordering::Relaxed);
}

/// Whether f32 convolutions on CUDA may use TF32 ([`set_cudnn_allow_tf32`]).
pub fn cudnn_allow_tf32() -> bool {
    CUDNN_ALLOW_TF32.load(Ordering::Relaxed)
}

/// A convolution's sizes as the kernels and cuDNN take them (32-bit ints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Dims {
    pub(super) n: i32,
    pub(super) c: i32,
    pub(super) h: i32,
    pub(super) w: i32,
    pub(super) k: i32,
    pub(super) r: i32,
    pub(super) s: i32,
    pub(super) sh: i32,
    pub(super) sw: i32,
    pub(super) ph: i32,
    pub(super) pw: i32,
    pub(super) oh: i32,
    pub(super) ow: i32,
}

impl Dims {
    /// `None` when a size, or a per-image size of a GEMM, exceeds 32 bits.
    pub(super) fn of(s: &Conv2dShape) -> Option<Dims> {
        let int = |v: usize| i32::try_from(v).ok();
        let d = Dims {
            n: int(s.n)?,
            c: int(s.c)?,
            h: int(s.h)?,
            w: int(s.w)?,
            k: int(s.k)?,
            r: int(s.r)?,
            s: int(s.s)?,
            sh: int(s.stride.0)?,
            sw: int(s.stride.1)?,
            ph: int(s.pad.0)?,
            pw: int(s.pad.1)?,
            oh: int(s.out_h())?,
            ow: int(s.out_w())?,
        };
        int(s.c.checked_mul(s.r)?.checked_mul(s.s)?)?;
        int(s.out_h().checked_mul(s.out_w())?)?;
        Some(d)
    }

    pub(super) fn crs(&self) -> usize {
        self.c as usize * self.r as usize * self.s as usize
    }

    pub(super) fn ohw(&self) -> usize {
        self.oh as usize * self.ow as usize
    }

    pub(super) fn chw(&self) -> usize {
        self.c as usize * self.h as usize * self.w as usize
    }
}
