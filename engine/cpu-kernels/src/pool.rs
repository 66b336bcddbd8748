//! 2-D max pooling over NCHW with its backward pass through argmax indices.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::element::Element;
use super::error::{KernelError, Result, check_len, checked_product};
use super::par::PAR_THRESHOLD;

/// Shape of a max-pool: input `[n, c, h, w]`, window `kernel`, step `stride`,
/// implicit `-inf` padding `pad` on each side (PyTorch's `MaxPool2d`, dilation 1,
/// floor mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MaxPool2dShape {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub pad: (usize, usize),
}

impl MaxPool2dShape {
    /// A `kernel × kernel` window moving by `stride`, no padding.
    pub const fn new(n: usize, c: usize, h: usize, w: usize, kernel: usize, stride: usize) -> Self {
        MaxPool2dShape { n, c, h, w, kernel: (kernel, kernel), stride: (stride, stride), pad: (0, 0) }
    }

    /// The same pool with padding.
    pub const fn with_padding(self, pad_h: usize, pad_w: usize) -> Self {
        MaxPool2dShape { pad: (pad_h, pad_w), ..self }
    }

    /// Output height (0 when the window does not fit).
    pub const fn out_h(&self) -> usize {
        out_dim(self.h, self.kernel.0, self.stride.0, self.pad.0)
    }
    /// Output width (0 when the window does not fit).
    pub const fn out_w(&self) -> usize {
        out_dim(self.w, self.kernel.1, self.stride.1, self.pad.1)
    }
    /// Elements of the input.
    pub const fn x_len(&self) -> usize {
        self.n * self.c * self.h * self.w
    }
    /// Elements of the output (and of the indices).
    pub const fn y_len(&self) -> usize {
        self.n * self.c * self.out_h() * self.out_w()
    }

    fn validate(&self, op: &'static str) -> Result<()> {
        let bad = |reason: String| Err(KernelError::InvalidShape { op, reason });
        if self.kernel.0 == 0 || self.kernel.1 == 0 || self.stride.0 == 0 || self.stride.1 == 0 {
            return bad(format!("kernel {:?} and stride {:?} must be positive", self.kernel, self.stride));
        }
        if (self.h == 0 || self.w == 0) && self.n * self.c > 0 {
            return bad(format!("empty {}×{} input planes", self.h, self.w));
        }
        if 2 * self.pad.0 > self.kernel.0 || 2 * self.pad.1 > self.kernel.1 {
            return bad(format!("padding {:?} exceeds half the kernel {:?}", self.pad, self.kernel));
        }
        checked_product(op, &[self.n, self.c, self.h + 2 * self.pad.0, self.w + 2 * self.pad.1])?;
        Ok(())
    }
}

const fn out_dim(size: usize, kernel: usize, stride: usize, pad: usize) -> usize {
    let padded = size + 2 * pad;
    if stride == 0 || padded < kernel { 0 } else { (padded - kernel) / stride + 1 }
}

/// `y` = the maximum of each window; `indices` = its flat position `ih·w + iw` within
/// the input plane (PyTorch's `return_indices=True` layout). NaN wins, as in PyTorch.
pub fn max_pool2d_forward<T: Element>(shape: MaxPool2dShape, x: &[T], y: &mut [T], indices: &mut [i64]) -> Result<()> {
    const OP: &str = "max_pool2d_forward";
    shape.validate(OP)?;
    check_len(OP, "x", x.len(), shape.x_len())?;
    check_len(OP, "y", y.len(), shape.y_len())?;
    check_len(OP, "indices", indices.len(), shape.y_len())?;
    let (oh, ow) = (shape.out_h(), shape.out_w());
    if shape.y_len() == 0 {
        return Ok(());
    }
    let s = shape;
    let plane = |((xp, yp), ip): ((&[T], &mut [T]), &mut [i64])| {
        for r in 0..oh {
            let h0 = (r * s.stride.0) as isize - s.pad.0 as isize;
            let rows = h0.max(0) as usize..((h0 + s.kernel.0 as isize) as usize).min(s.h);
            for col in 0..ow {
                let w0 = (col * s.stride.1) as isize - s.pad.1 as isize;
                let cols = w0.max(0) as usize..((w0 + s.kernel.1 as isize) as usize).min(s.w);
                let mut best = f32::NEG_INFINITY;
                let mut arg = rows.start * s.w + cols.start;
                'window: for ih in rows.clone() {
                    for iw in cols.clone() {
                        let v = xp[ih * s.w + iw].to_f32();
                        if v > best || v.is_nan() {
                            best = v;
                            arg = ih * s.w + iw;
                            if v.is_nan() {
                                break 'window;
                            }
                        }
                    }
                }
                yp[r * ow + col] = xp[arg];
                ip[r * ow + col] = arg as i64;
            }
        }
    };
    let (hw, ohw) = (s.h * s.w, oh * ow);
    if x.len() >= PAR_THRESHOLD {
        x.par_chunks(hw).zip(y.par_chunks_mut(ohw)).zip(indices.par_chunks_mut(ohw)).for_each(plane);
    } else {
        x.chunks(hw).zip(y.chunks_mut(ohw)).zip(indices.chunks_mut(ohw)).for_each(plane);
    }
    Ok(())
}

/// `gx[plane][indices[o]] += gy[o]` for every output `o`, `gx` zeroed first; summed
/// in output order within each plane (reproducible).
pub fn max_pool2d_backward<T: Element>(shape: MaxPool2dShape, indices: &[i64], gy: &[T], gx: &mut [T]) -> Result<()> {
    const OP: &str = "max_pool2d_backward";
    shape.validate(OP)?;
    check_len(OP, "indices", indices.len(), shape.y_len())?;
    check_len(OP, "gy", gy.len(), shape.y_len())?;
    check_len(OP, "gx", gx.len(), shape.x_len())?;
    let hw = shape.h * shape.w;
    if let Some(pos) = indices.iter().position(|&i| i < 0 || i as u64 >= hw as u64) {
        return Err(KernelError::InvalidShape {
            op: OP,
            reason: format!("index {} at position {pos} is outside the {hw}-element plane", indices[pos]),
        });
    }
    let ohw = shape.out_h() * shape.out_w();
    if shape.y_len() == 0 {
        gx.fill(T::ZERO);
        return Ok(());
    }
    let plane = |((gp, ip), gxp): ((&[T], &[i64]), &mut [T])| {
        let mut acc = vec![0.0f32; gxp.len()];
        for (&g, &i) in gp.iter().zip(ip) {
            acc[i as usize] += g.to_f32();
        }
        T::slice_from_f32(&acc, gxp);
    };
    if gx.len() >= PAR_THRESHOLD {
        gy.par_chunks(ohw).zip(indices.par_chunks(ohw)).zip(gx.par_chunks_mut(hw)).for_each(plane);
    } else {
        gy.chunks(ohw).zip(indices.chunks(ohw)).zip(gx.chunks_mut(hw)).for_each(plane);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answer_with_padding() {
        #[rustfmt::skip]
        let x = [
            1.0f32, 2.0, 3.0,
            4.0, 9.0, 0.0,
            5.0, 6.0, 7.0,
        ];
        let s = MaxPool2dShape::new(1, 1, 3, 3, 2, 2).with_padding(1, 1);
        assert_eq!((s.out_h(), s.out_w()), (2, 2));
        let mut y = [0.0f32; 4];
        let mut idx = [0i64; 4];
        max_pool2d_forward(s, &x, &mut y, &mut idx).unwrap();
        assert_eq!(y, [1.0, 3.0, 5.0, 9.0]);
        assert_eq!(idx, [0, 2, 6, 4]);
        let mut gx = [9.0f32; 9];
        max_pool2d_backward(s, &idx, &[1.0, 2.0, 3.0, 4.0], &mut gx).unwrap();
        assert_eq!(gx, [1.0, 0.0, 2.0, 0.0, 4.0, 0.0, 3.0, 0.0, 0.0]);
        assert!(max_pool2d_backward(s, &[0, 0, 0, 9], &[0.0; 4], &mut gx).is_err());
    }

    #[test]
    fn empty_shapes() {
        let none = MaxPool2dShape::new(0, 3, 4, 4, 2, 2);
        max_pool2d_forward::<f32>(none, &[], &mut [], &mut []).unwrap();
        max_pool2d_backward::<f32>(none, &[], &[], &mut []).unwrap();
        let flat = MaxPool2dShape::new(1, 1, 0, 4, 2, 2).with_padding(1, 1);
        assert!(max_pool2d_forward::<f32>(flat, &[], &mut [0.0; 2], &mut [0; 2]).is_err());
    }
}
