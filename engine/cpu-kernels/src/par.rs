//! Chunked, optionally parallel element loops shared by the elementwise kernels.

use rayon::prelude::*;

use super::element::Element;

/// Below this many elements a loop runs on the calling thread (rayon's fork/join
/// costs a few microseconds, the work a few nanoseconds per element).
pub(crate) const PAR_THRESHOLD: usize = 1 << 16;
/// Elements per parallel task.
pub(crate) const CHUNK: usize = 1 << 14;
/// Elements widened to f32 at a time on the stack for f16/bf16.
const BLOCK: usize = 256;

/// `y[i] = f(x[i])`, computed in f32. Lengths must already match.
pub(crate) fn map1<T: Element, F>(x: &[T], y: &mut [T], f: F)
where
    F: Fn(f32) -> f32 + Sync,
{
    debug_assert_eq!(x.len(), y.len());
    if x.len() >= PAR_THRESHOLD {
        x.par_chunks(CHUNK).zip(y.par_chunks_mut(CHUNK)).for_each(|(xc, yc)| map1_serial(xc, yc, &f));
    } else {
        map1_serial(x, y, &f);
    }
}

// Never inlined: the loop is one function of its own in every build and
// for every size (rayon's chunk closures would take it in otherwise, under a
// name that changes with the caller's inlining), so a simulated run's
// differential profile puts a kernel's change in the kernel.
#[inline(never)]
fn map1_serial<T: Element, F: Fn(f32) -> f32>(x: &[T], y: &mut [T], f: &F) {
    if let Some(xf) = T::as_f32(x) {
        let yf = T::as_f32_mut(y).expect("f32 input implies f32 output");
        for (o, &i) in yf.iter_mut().zip(xf) {
            *o = f(i);
        }
        return;
    }
    let mut bx = [0.0f32; BLOCK];
    for (xc, yc) in x.chunks(BLOCK).zip(y.chunks_mut(BLOCK)) {
        let n = xc.len();
        T::slice_to_f32(xc, &mut bx[..n]);
        for v in &mut bx[..n] {
            *v = f(*v);
        }
        T::slice_from_f32(&bx[..n], yc);
    }
}

/// `y[i] = f(a[i], b[i])`, computed in f32. Lengths must already match.
pub(crate) fn map2<T: Element, F>(a: &[T], b: &[T], y: &mut [T], f: F)
where
    F: Fn(f32, f32) -> f32 + Sync,
{
    debug_assert!(a.len() == y.len() && b.len() == y.len());
    if a.len() >= PAR_THRESHOLD {
        a.par_chunks(CHUNK)
            .zip(b.par_chunks(CHUNK))
            .zip(y.par_chunks_mut(CHUNK))
            .for_each(|((ac, bc), yc)| map2_serial(ac, bc, yc, &f));
    } else {
        map2_serial(a, b, y, &f);
    }
}

// Never inlined: the loop is one function of its own in every build and
// for every size (rayon's chunk closures would take it in otherwise, under a
// name that changes with the caller's inlining), so a simulated run's
// differential profile puts a kernel's change in the kernel.
#[inline(never)]
fn map2_serial<T: Element, F: Fn(f32, f32) -> f32>(a: &[T], b: &[T], y: &mut [T], f: &F) {
    if let (Some(af), Some(bf)) = (T::as_f32(a), T::as_f32(b)) {
        let yf = T::as_f32_mut(y).expect("f32 input implies f32 output");
        for ((o, &i), &j) in yf.iter_mut().zip(af).zip(bf) {
            *o = f(i, j);
        }
        return;
    }
    let mut ba = [0.0f32; BLOCK];
    let mut bb = [0.0f32; BLOCK];
    for ((ac, bc), yc) in a.chunks(BLOCK).zip(b.chunks(BLOCK)).zip(y.chunks_mut(BLOCK)) {
        let n = ac.len();
        T::slice_to_f32(ac, &mut ba[..n]);
        T::slice_to_f32(bc, &mut bb[..n]);
        for (v, &w) in ba[..n].iter_mut().zip(&bb[..n]) {
            *v = f(*v, w);
        }
        T::slice_from_f32(&ba[..n], yc);
    }
}

/// Widens `src` into `dst` (same length), in parallel for large slices.
pub(crate) fn widen<T: Element>(src: &[T], dst: &mut [f32]) {
    if src.len() >= PAR_THRESHOLD {
        src.par_chunks(CHUNK).zip(dst.par_chunks_mut(CHUNK)).for_each(|(s, d)| T::slice_to_f32(s, d));
    } else {
        T::slice_to_f32(src, dst);
    }
}

/// Narrows `src` into `dst` (same length), in parallel for large slices.
pub(crate) fn narrow<T: Element>(src: &[f32], dst: &mut [T]) {
    if src.len() >= PAR_THRESHOLD {
        src.par_chunks(CHUNK).zip(dst.par_chunks_mut(CHUNK)).for_each(|(s, d)| T::slice_from_f32(s, d));
    } else {
        T::slice_from_f32(src, dst);
    }
}

/// Runs an f32 kernel `f(in0, in1, out, workspace)` on operands of any element type.
///
/// For f32 the slices are passed through untouched. Otherwise the front of `ws` holds
/// widened copies of both inputs and an f32 output that is narrowed back afterwards;
/// [`staging_len_for`] says how much that takes. The caller has checked every length.
pub(crate) fn via_f32<T: Element, R>(
    in0: &[T],
    in1: &[T],
    out: &mut [T],
    ws: &mut [f32],
    f: impl FnOnce(&[f32], &[f32], &mut [f32], &mut [f32]) -> R,
) -> R {
    if let (Some(a), Some(b)) = (T::as_f32(in0), T::as_f32(in1)) {
        let o = T::as_f32_mut(out).expect("f32 inputs imply an f32 output");
        return f(a, b, o, ws);
    }
    let (a, rest) = ws.split_at_mut(in0.len());
    let (b, rest) = rest.split_at_mut(in1.len());
    let (o, rest) = rest.split_at_mut(out.len());
    widen(in0, a);
    widen(in1, b);
    let r = f(a, b, o, rest);
    narrow(o, out);
    r
}

/// Workspace elements [`via_f32`] needs in front of the algorithm's own workspace.
pub(crate) fn staging_len_for(dtype: super::FloatDType, in0: usize, in1: usize, out: usize) -> usize {
    if dtype == super::FloatDType::F32 { 0 } else { in0 + in1 + out }
}
