//! Every CPU kernel and every algorithm against a float64 reference on fresh random
//! inputs, and every analytic backward against finite differences in f64.
//!
//! Error measures (stated per check):
//! - *elementwise*: `max_i |x_i − ref_i| / max(|ref_i|, tiny)`, for kernels whose
//!   outputs are one rounding away from exact (add, mul, relu, softmax, …), where
//!   `tiny` is the dtype's smallest normal number (below it a format has only
//!   absolute precision: f16's subnormals are multiples of 2⁻²⁴);
//! - *norm-wise*: `‖x − ref‖₂ / ‖ref‖₂`, where elementwise error is ill-conditioned:
//!   sums of products with cancellation (matmul, conv, reductions, gradients) and
//!   functions with zeros (log-softmax, the GELU derivative).
//!
//! Tolerances: f32 ≤ 1e-5, f16/bf16 ≤ 1e-2 (inputs are rounded to the dtype first and
//! the reference is computed from the rounded values). A NaN or infinity in an output
//! never passes. Inputs come from the workspace's seeded generator (`vramlab_rng`), seeded
//! per test; set `VRAMLAB_TEST_SEED` to draw other inputs.

mod common;

use common::{Rng, elem_rel_err, norm_rel_err, rng_for_test};
use half::{bf16, f16};
use vramlab_cpu_kernels::*;

// ---------------------------------------------------------------------------------
// Conversions and checks.

fn quant<T: Element>(v: &[f32]) -> Vec<T> {
    v.iter().map(|&x| T::from_f32(x)).collect()
}

fn wide<T: Element>(v: &[T]) -> Vec<f64> {
    v.iter().map(|&x| x.to_f64()).collect()
}

fn tol<T: Element>() -> f64 {
    if T::DTYPE == FloatDType::F32 { 1e-5 } else { 1e-2 }
}

/// The smallest normal number of `T`.
fn tiny<T: Element>() -> f64 {
    match T::DTYPE {
        FloatDType::F16 => 2f64.powi(-14),
        _ => f64::from(f32::MIN_POSITIVE),
    }
}

#[track_caller]
fn check_norm(what: &str, got: &[f64], want: &[f64], tol: f64) {
    let e = norm_rel_err(got, want);
    assert!(e <= tol, "{what}: norm-wise relative error {e:.3e} > {tol:.0e}");
}

#[track_caller]
fn check_elem<T: Element>(what: &str, got: &[f64], want: &[f64], tol: f64) {
    let e = elem_rel_err(got, want, tiny::<T>());
    assert!(e <= tol, "{what}: elementwise relative error {e:.3e} > {tol:.0e}");
}

/// Central differences of a scalar function of `x`, in f64.
fn finite_diff(x: &[f64], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let mut xp = x.to_vec();
    (0..x.len())
        .map(|i| {
            let h = 1e-6 * x[i].abs().max(1.0);
            xp[i] = x[i] + h;
            let up = f(&xp);
            xp[i] = x[i] - h;
            let down = f(&xp);
            xp[i] = x[i];
            (up - down) / (2.0 * h)
        })
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn nan_never_passes_the_checks() {
    let want = [1.0, 2.0, 3.0];
    assert!(norm_rel_err(&[1.0, f64::NAN, 3.0], &want).is_infinite());
    assert!(elem_rel_err(&[1.0, 2.0, f64::NAN], &want, 1e-30).is_infinite());
    assert!(norm_rel_err(&[f64::NAN], &[f64::NAN]).is_infinite());
    assert!(std::panic::catch_unwind(|| check_norm("nan", &[f64::NAN], &[1.0], 1.0)).is_err());
}

// ---------------------------------------------------------------------------------
// Matmul.

fn matmul_ref(s: &MatmulShape, a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut c = vec![0.0; s.c_len()];
    for bi in 0..s.batch {
        for i in 0..s.m {
            for j in 0..s.n {
                let mut acc = 0.0;
                for p in 0..s.k {
                    let av = if s.trans_a { a[bi * s.m * s.k + p * s.m + i] } else { a[bi * s.m * s.k + i * s.k + p] };
                    let bv = if s.trans_b { b[bi * s.k * s.n + j * s.k + p] } else { b[bi * s.k * s.n + p * s.n + j] };
                    acc += av * bv;
                }
                c[bi * s.m * s.n + i * s.n + j] = acc;
            }
        }
    }
    c
}

fn run_matmul<T: Element>(algo: MatmulAlgo, s: MatmulShape, a: &[T], b: &[T]) -> Vec<T> {
    let mut c = vec![T::ZERO; s.c_len()];
    let mut ws = vec![0.0f32; algo.workspace_len(&s, T::DTYPE)];
    matmul(algo, s, a, b, &mut c, &mut ws).unwrap();
    c
}

fn matmul_case<T: Element>(rng: &mut Rng) {
    let shapes = [MatmulShape::new(7, 5, 3), MatmulShape::batched(3, 17, 33, 65), MatmulShape::new(40, 24, 300)];
    for base in shapes {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let s = base.transposed(ta, tb);
            let a: Vec<T> = quant(&rng.normals(s.a_len(), 1.0));
            let b: Vec<T> = quant(&rng.normals(s.b_len(), 1.0));
            let want = matmul_ref(&s, &wide(&a), &wide(&b));
            for &algo in MatmulAlgo::all() {
                let c = run_matmul(algo, s, &a, &b);
                check_norm(&format!("matmul {:?} {algo:?} {s:?}", T::DTYPE), &wide(&c), &want, tol::<T>());
                if algo.is_reproducible(&s) {
                    assert!(run_matmul(algo, s, &a, &b) == c, "{algo:?} {s:?} is declared reproducible");
                }
            }
        }
    }
}

#[test]
fn matmul_every_algorithm_every_dtype_and_transpose() {
    let mut rng = rng_for_test("matmul");
    matmul_case::<f32>(&mut rng);
    matmul_case::<f16>(&mut rng);
    matmul_case::<bf16>(&mut rng);
}

#[test]
fn matmul_gradients_through_transposes_match_finite_differences() {
    // L = Σ G ⊙ (A·B): dA = G·Bᵀ, dB = Aᵀ·G, both computed with this kernel.
    let mut rng = rng_for_test("matmul_grad");
    let (m, n, k) = (5, 4, 6);
    let a = rng.normals(m * k, 1.0);
    let b = rng.normals(k * n, 1.0);
    let g = rng.normals(m * n, 1.0);
    let (a64, b64, g64) = (wide(&a), wide(&b), wide(&g));
    let loss = |a: &[f64], b: &[f64]| dot(&matmul_ref(&MatmulShape::new(m, n, k), a, b), &g64);
    for &algo in MatmulAlgo::all() {
        let da = run_matmul(algo, MatmulShape::new(m, k, n).transposed(false, true), &g, &b);
        let db = run_matmul(algo, MatmulShape::new(k, n, m).transposed(true, false), &a, &g);
        check_norm(&format!("dA {algo:?}"), &wide(&da), &finite_diff(&a64, |a| loss(a, &b64)), 1e-5);
        check_norm(&format!("dB {algo:?}"), &wide(&db), &finite_diff(&b64, |b| loss(&a64, b)), 1e-5);
    }
}

// ---------------------------------------------------------------------------------
// Elementwise, activations, casts.

/// Lengths on both sides of the parallel threshold.
const LENS: [usize; 2] = [1000, 70_001];

fn gelu_ref(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

fn elementwise_case<T: Element>(rng: &mut Rng) {
    let t = tol::<T>();
    let name = |op: &str| format!("{op} {:?}", T::DTYPE);
    for n in LENS {
        let a: Vec<T> = quant(&rng.normals(n, 2.0));
        let b: Vec<T> = quant(&rng.normals(n, 2.0));
        let g: Vec<T> = quant(&rng.normals(n, 1.0));
        let (a64, b64, g64) = (wide(&a), wide(&b), wide(&g));
        let mut y = vec![T::ZERO; n];
        let mut y2 = vec![T::ZERO; n];
        let map2 = |f: fn(f64, f64) -> f64, u: &[f64], v: &[f64]| -> Vec<f64> {
            u.iter().zip(v).map(|(&p, &q)| f(p, q)).collect()
        };

        add(&a, &b, &mut y).unwrap();
        check_elem::<T>(&name("add (elementwise)"), &wide(&y), &map2(|p, q| p + q, &a64, &b64), t);
        mul(&a, &b, &mut y).unwrap();
        check_elem::<T>(&name("mul (elementwise)"), &wide(&y), &map2(|p, q| p * q, &a64, &b64), t);
        scale(&a, -0.37, &mut y).unwrap();
        let want: Vec<f64> = a64.iter().map(|v| v * f64::from(-0.37f32)).collect();
        check_elem::<T>(&name("scale (elementwise)"), &wide(&y), &want, t);
        mul_backward(&a, &b, &g, &mut y, &mut y2).unwrap();
        check_elem::<T>(&name("mul_backward ga (elementwise)"), &wide(&y), &map2(|p, q| p * q, &g64, &b64), t);
        check_elem::<T>(&name("mul_backward gb (elementwise)"), &wide(&y2), &map2(|p, q| p * q, &g64, &a64), t);

        relu(&a, &mut y).unwrap();
        check_elem::<T>(
            &name("relu (elementwise)"),
            &wide(&y),
            &a64.iter().map(|&v| v.max(0.0)).collect::<Vec<_>>(),
            0.0,
        );
        relu_backward(&a, &g, &mut y).unwrap();
        let want = map2(|x, g| if x > 0.0 { g } else { 0.0 }, &a64, &g64);
        check_elem::<T>(&name("relu_backward (elementwise)"), &wide(&y), &want, 0.0);

        // Norm-wise: for large negative x, GELU → 0 with relative condition number
        // ≈ 2|x|·u′(x) (≈ 120 at x = −8), so elementwise error is ill-conditioned there.
        gelu(&a, &mut y).unwrap();
        let want: Vec<f64> = a64.iter().map(|&v| gelu_ref(v)).collect();
        check_norm(&name("gelu (norm-wise)"), &wide(&y), &want, t);
        gelu_backward(&a, &g, &mut y).unwrap();
        let want = map2(|x, g| g * (gelu_ref(x + 1e-6) - gelu_ref(x - 1e-6)) / 2e-6, &a64, &g64);
        check_norm(&name("gelu_backward vs finite differences (norm-wise)"), &wide(&y), &want, t);
    }
}

#[test]
fn elementwise_and_activations_every_dtype() {
    let mut rng = rng_for_test("elementwise");
    elementwise_case::<f32>(&mut rng);
    elementwise_case::<f16>(&mut rng);
    elementwise_case::<bf16>(&mut rng);
}

fn bias_case<T: Element>(rng: &mut Rng) {
    for (outer, channels, inner) in [(7, 5, 1), (3, 4, 9), (2, 3, 12_000)] {
        let n = outer * channels * inner;
        let x: Vec<T> = quant(&rng.normals(n, 1.0));
        let bias: Vec<T> = quant(&rng.normals(channels, 1.0));
        let mut y = vec![T::ZERO; n];
        add_bias(&x, &bias, outer, channels, inner, &mut y).unwrap();
        let (x64, b64) = (wide(&x), wide(&bias));
        let want: Vec<f64> = (0..n).map(|i| x64[i] + b64[(i / inner) % channels]).collect();
        check_elem::<T>(&format!("add_bias {:?} (elementwise)", T::DTYPE), &wide(&y), &want, tol::<T>());
        let mut gb = vec![T::ZERO; channels];
        bias_grad(&x, outer, channels, inner, &mut gb).unwrap();
        let mut want = vec![0.0; channels];
        for (i, v) in x64.iter().enumerate() {
            want[(i / inner) % channels] += v;
        }
        check_norm(&format!("bias_grad {:?} (norm-wise)", T::DTYPE), &wide(&gb), &want, tol::<T>());
    }
}

#[test]
fn bias_add_and_gradient_every_dtype() {
    let mut rng = rng_for_test("bias");
    bias_case::<f32>(&mut rng);
    bias_case::<f16>(&mut rng);
    bias_case::<bf16>(&mut rng);
}

fn cast_pair<S: Element, D: Element>(src: &[f32]) {
    let s: Vec<S> = quant(src);
    let mut d = vec![D::ZERO; s.len()];
    cast(&s, &mut d).unwrap();
    for (i, (&a, &b)) in s.iter().zip(&d).enumerate() {
        let want = D::from_f64(a.to_f64());
        let same = b == want || (b.to_f32().is_nan() && want.to_f32().is_nan());
        assert!(same, "cast {:?}→{:?} at {i}: {a:?} became {b:?}, expected {want:?}", S::DTYPE, D::DTYPE);
    }
}

fn cast_from<S: Element>(src: &[f32]) {
    cast_pair::<S, f32>(src);
    cast_pair::<S, f16>(src);
    cast_pair::<S, bf16>(src);
}

#[test]
fn casts_round_once_to_nearest_even() {
    let mut rng = rng_for_test("cast");
    let mut src = rng.normals(70_001, 100.0);
    src.extend([0.0, -0.0, 65504.0, 65520.0, 1e-8, -3e38, f32::INFINITY, f32::NAN, 6e-8]);
    cast_from::<f32>(&src);
    cast_from::<f16>(&src);
    cast_from::<bf16>(&src);
}

// ---------------------------------------------------------------------------------
// Softmax, losses, reductions.

fn softmax_ref(x: &[f64], cols: usize, log: bool) -> Vec<f64> {
    x.chunks(cols)
        .flat_map(|r| {
            let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
            r.iter().map(move |v| if log { v - m - s.ln() } else { (v - m).exp() / s }).collect::<Vec<_>>()
        })
        .collect()
}

fn softmax_case<T: Element>(rng: &mut Rng) {
    let t = tol::<T>();
    for (rows, cols) in [(6, 11), (70, 1000)] {
        let n = rows * cols;
        let mut xs = rng.normals(n, 3.0);
        xs[0] += 80.0; // a large logit: the max subtraction must keep this finite
        let x: Vec<T> = quant(&xs);
        let x64 = wide(&x);
        let mut y = vec![T::ZERO; n];
        softmax(&x, rows, cols, &mut y).unwrap();
        let want = softmax_ref(&x64, cols, false);
        if T::DTYPE == FloatDType::F16 {
            // f16 cannot hold probabilities below 6e-8: they flush to zero, so only a
            // norm-wise check makes sense there.
            check_norm("softmax F16 (norm-wise)", &wide(&y), &want, t);
        } else {
            check_elem::<T>(&format!("softmax {:?} (elementwise)", T::DTYPE), &wide(&y), &want, t);
        }
        log_softmax(&x, rows, cols, &mut y).unwrap();
        let want = softmax_ref(&x64, cols, true);
        check_norm(&format!("log_softmax {:?} (norm-wise)", T::DTYPE), &wide(&y), &want, t);
    }
}

#[test]
fn softmax_and_log_softmax_every_dtype() {
    let mut rng = rng_for_test("softmax");
    softmax_case::<f32>(&mut rng);
    softmax_case::<f16>(&mut rng);
    softmax_case::<bf16>(&mut rng);
}

fn softmax_backward_case<T: Element>(rng: &mut Rng) {
    // L = Σ G ⊙ softmax(x): the kernels get y = softmax(x) and G; compare with
    // finite differences of the f64 reference (norm-wise).
    let (rows, cols) = (4, 9);
    let x = wide(&quant::<T>(&rng.normals(rows * cols, 2.0)));
    let g: Vec<T> = quant(&rng.normals(rows * cols, 1.0));
    let g64 = wide(&g);
    for log in [false, true] {
        let y: Vec<T> = softmax_ref(&x, cols, log).iter().map(|&v| T::from_f64(v)).collect();
        let mut gx = vec![T::ZERO; rows * cols];
        if log {
            log_softmax_backward(&y, &g, rows, cols, &mut gx).unwrap();
        } else {
            softmax_backward(&y, &g, rows, cols, &mut gx).unwrap();
        }
        let want = finite_diff(&x, |x| dot(&softmax_ref(x, cols, log), &g64));
        // y was rounded to T before the backward: allow for that in f16/bf16.
        check_norm(&format!("softmax_backward log={log} {:?}", T::DTYPE), &wide(&gx), &want, tol::<T>());
    }
}

#[test]
fn softmax_backward_matches_finite_differences() {
    let mut rng = rng_for_test("softmax_backward");
    softmax_backward_case::<f32>(&mut rng);
    softmax_backward_case::<f16>(&mut rng);
    softmax_backward_case::<bf16>(&mut rng);
}

fn cross_entropy_ref(x: &[f64], labels: &[i64], cols: usize) -> f64 {
    let ls = softmax_ref(x, cols, true);
    -labels.iter().enumerate().map(|(r, &l)| ls[r * cols + l as usize]).sum::<f64>() / labels.len() as f64
}

#[test]
fn cross_entropy_forward_and_backward() {
    let mut rng = rng_for_test("cross_entropy");
    for (rows, classes) in [(5, 7), (300, 300)] {
        let x = rng.normals(rows * classes, 3.0);
        let labels: Vec<i64> = (0..rows).map(|_| rng.below(classes) as i64).collect();
        let x64 = wide(&x);
        let loss = cross_entropy(&x, &labels, rows, classes).unwrap();
        let want = cross_entropy_ref(&x64, &labels, classes);
        check_elem::<f32>("cross_entropy (scalar)", &[f64::from(loss)], &[want], 1e-5);
        let mut g = vec![0.0f32; rows * classes];
        cross_entropy_backward(&x, &labels, rows, classes, 0.5, &mut g).unwrap();
        if rows * classes <= 100 {
            let fd: Vec<f64> =
                finite_diff(&x64, |x| cross_entropy_ref(x, &labels, classes)).iter().map(|v| 0.5 * v).collect();
            check_norm("cross_entropy_backward vs finite differences", &wide(&g), &fd, 1e-5);
        } else {
            // Analytic: 0.5 / rows · (softmax − onehot).
            let mut want = softmax_ref(&x64, classes, false);
            for (r, &l) in labels.iter().enumerate() {
                want[r * classes + l as usize] -= 1.0;
            }
            want.iter_mut().for_each(|v| *v *= 0.5 / rows as f64);
            check_norm("cross_entropy_backward (norm-wise)", &wide(&g), &want, 1e-5);
        }
    }
    let bad = cross_entropy(&[0.0; 6], &[0, -1], 2, 3).unwrap_err();
    assert!(matches!(bad, KernelError::LabelOutOfRange { row: 1, label: -1, .. }), "{bad}");
}

#[test]
fn mse_forward_and_backward() {
    let mut rng = rng_for_test("mse");
    for n in [17, 70_001] {
        let p = rng.normals(n, 1.0);
        let t = rng.normals(n, 1.0);
        let (p64, t64) = (wide(&p), wide(&t));
        let reference = |p: &[f64]| p.iter().zip(&t64).map(|(a, b)| (a - b) * (a - b)).sum::<f64>() / n as f64;
        let loss = mse(&p, &t).unwrap();
        check_elem::<f32>("mse (scalar)", &[f64::from(loss)], &[reference(&p64)], 1e-5);
        let mut g = vec![0.0f32; n];
        mse_backward(&p, &t, 2.0, &mut g).unwrap();
        if n < 100 {
            let fd: Vec<f64> = finite_diff(&p64, reference).iter().map(|v| 2.0 * v).collect();
            check_norm("mse_backward vs finite differences", &wide(&g), &fd, 1e-5);
        } else {
            let want: Vec<f64> = p64.iter().zip(&t64).map(|(a, b)| 4.0 * (a - b) / n as f64).collect();
            check_elem::<f32>("mse_backward (elementwise)", &wide(&g), &want, 1e-5);
        }
    }
}

fn reduce_case<T: Element>(rng: &mut Rng) {
    for n in [1, 999, 200_003] {
        let x: Vec<T> = quant(&rng.normals(n, 1.0));
        let x64 = wide(&x);
        let exact: f64 = x64.iter().sum();
        let abs: f64 = x64.iter().map(|v| v.abs()).sum();
        // Relative to Σ|x|: the sum of signed values is ill-conditioned.
        let (s, m) = (f64::from(sum(&x)), f64::from(mean(&x)));
        assert!((s - exact).abs() <= tol::<T>() * abs, "sum {:?} n={n}: {s} vs {exact}", T::DTYPE);
        assert!((m - exact / n as f64).abs() <= tol::<T>() * abs / n as f64, "mean {:?} n={n}", T::DTYPE);
        let mut y = vec![T::ZERO; n];
        fill(0.5, &mut y);
        assert!(y.iter().all(|&v| v.to_f32() == 0.5));
    }
}

#[test]
fn sum_mean_fill_every_dtype() {
    let mut rng = rng_for_test("reduce");
    reduce_case::<f32>(&mut rng);
    reduce_case::<f16>(&mut rng);
    reduce_case::<bf16>(&mut rng);
}

// ---------------------------------------------------------------------------------
// conv2d.

fn conv_ref(s: &Conv2dShape, x: &[f64], w: &[f64]) -> Vec<f64> {
    let (oh, ow) = (s.out_h(), s.out_w());
    let mut y = vec![0.0; s.y_len()];
    for n in 0..s.n {
        for k in 0..s.k {
            for i in 0..oh {
                for j in 0..ow {
                    let mut acc = 0.0;
                    for c in 0..s.c {
                        for r in 0..s.r {
                            for q in 0..s.s {
                                let ih = (i * s.stride.0 + r) as isize - s.pad.0 as isize;
                                let iw = (j * s.stride.1 + q) as isize - s.pad.1 as isize;
                                if ih < 0 || iw < 0 || ih >= s.h as isize || iw >= s.w as isize {
                                    continue;
                                }
                                let xv = x[((n * s.c + c) * s.h + ih as usize) * s.w + iw as usize];
                                acc += xv * w[((k * s.c + c) * s.r + r) * s.s + q];
                            }
                        }
                    }
                    y[((n * s.k + k) * oh + i) * ow + j] = acc;
                }
            }
        }
    }
    y
}

/// The adjoints of [`conv_ref`] (scatter form), for larger shapes where finite
/// differences would be slow; themselves checked against finite differences below.
fn conv_ref_backward(s: &Conv2dShape, x: &[f64], w: &[f64], gy: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (oh, ow) = (s.out_h(), s.out_w());
    let (mut gx, mut gw) = (vec![0.0; s.x_len()], vec![0.0; s.w_len()]);
    for n in 0..s.n {
        for k in 0..s.k {
            for i in 0..oh {
                for j in 0..ow {
                    let g = gy[((n * s.k + k) * oh + i) * ow + j];
                    for c in 0..s.c {
                        for r in 0..s.r {
                            for q in 0..s.s {
                                let ih = (i * s.stride.0 + r) as isize - s.pad.0 as isize;
                                let iw = (j * s.stride.1 + q) as isize - s.pad.1 as isize;
                                if ih < 0 || iw < 0 || ih >= s.h as isize || iw >= s.w as isize {
                                    continue;
                                }
                                let xi = ((n * s.c + c) * s.h + ih as usize) * s.w + iw as usize;
                                let wi = ((k * s.c + c) * s.r + r) * s.s + q;
                                gx[xi] += g * w[wi];
                                gw[wi] += g * x[xi];
                            }
                        }
                    }
                }
            }
        }
    }
    (gx, gw)
}

fn conv_shapes() -> Vec<Conv2dShape> {
    vec![
        Conv2dShape::new(2, 3, 7, 6, 4, 3, 3).with_padding(1, 1),
        Conv2dShape::new(1, 2, 5, 5, 3, 3, 3),
        Conv2dShape::new(3, 2, 6, 5, 2, 3, 3).with_padding(2, 2),
        Conv2dShape::new(2, 3, 9, 8, 5, 3, 3).with_stride(2, 2).with_padding(1, 1),
        Conv2dShape::new(2, 3, 7, 7, 2, 5, 3).with_stride(2, 1).with_padding(2, 1),
        Conv2dShape::new(2, 4, 6, 5, 3, 1, 1),
        Conv2dShape::new(1, 8, 5, 5, 6, 1, 1).with_stride(2, 2),
        Conv2dShape::new(3, 5, 4, 4, 3, 3, 3).with_padding(3, 3),
    ]
}

fn workspace<A: Algorithm>(algo: A, problem: &A::Problem, dtype: FloatDType) -> Vec<f32> {
    vec![f32::NAN; algo.workspace_len(problem, dtype)] // NaN: the kernels must not read stale workspace
}

fn run_conv<T: Element>(algo: ConvAlgo, pass: ConvPass, s: Conv2dShape, a: &[T], b: &[T]) -> Vec<T> {
    let p = ConvProblem { pass, shape: s };
    let mut ws = workspace(algo, &p, T::DTYPE);
    match pass {
        ConvPass::Forward => {
            let mut y = vec![T::ZERO; s.y_len()];
            conv2d_forward(algo, s, a, b, &mut y, &mut ws).unwrap();
            y
        }
        ConvPass::BackwardData => {
            let mut gx = vec![T::ZERO; s.x_len()];
            conv2d_backward_data(algo, s, a, b, &mut gx, &mut ws).unwrap();
            gx
        }
        ConvPass::BackwardWeight => {
            let mut gw = vec![T::ZERO; s.w_len()];
            conv2d_backward_weight(algo, s, a, b, &mut gw, &mut ws).unwrap();
            gw
        }
    }
}

fn conv_case<T: Element>(rng: &mut Rng) {
    for s in conv_shapes() {
        let x: Vec<T> = quant(&rng.normals(s.x_len(), 1.0));
        let w: Vec<T> = quant(&rng.normals(s.w_len(), 1.0));
        let gy: Vec<T> = quant(&rng.normals(s.y_len(), 1.0));
        let (x64, w64, gy64) = (wide(&x), wide(&w), wide(&gy));
        let y_ref = conv_ref(&s, &x64, &w64);
        let (gx_ref, gw_ref) = conv_ref_backward(&s, &x64, &w64, &gy64);
        for pass in ConvPass::ALL {
            let problem = ConvProblem { pass, shape: s };
            let (a, b, want) = match pass {
                ConvPass::Forward => (&x, &w, &y_ref),
                ConvPass::BackwardData => (&w, &gy, &gx_ref),
                ConvPass::BackwardWeight => (&x, &gy, &gw_ref),
            };
            let mut results = Vec::new();
            for algo in ConvAlgo::candidates(&problem) {
                let got = run_conv(algo, pass, s, a, b);
                let what = format!("{pass:?} {algo:?} {:?} {s:?}", T::DTYPE);
                check_norm(&what, &wide(&got), want, tol::<T>());
                if algo.is_reproducible(&problem) {
                    assert!(run_conv(algo, pass, s, a, b) == got, "{what} is declared reproducible");
                }
                results.push((algo, wide(&got)));
            }
            assert!(results.len() >= 3, "{pass:?} {s:?}: only {} algorithms apply", results.len());
            // The algorithms agree with each other as well as with the reference.
            for (algo, got) in &results[1..] {
                let e = norm_rel_err(got, &results[0].1);
                assert!(e <= 2.0 * tol::<T>(), "{pass:?} {algo:?} vs {:?}: {e:.3e}", results[0].0);
            }
        }
    }
}

#[test]
fn conv2d_every_algorithm_and_pass_f32() {
    conv_case::<f32>(&mut rng_for_test("conv_f32"));
}

#[test]
fn conv2d_every_algorithm_and_pass_f16_bf16() {
    let mut rng = rng_for_test("conv_half");
    conv_case::<f16>(&mut rng);
    conv_case::<bf16>(&mut rng);
}

#[test]
fn conv2d_backward_matches_finite_differences() {
    let mut rng = rng_for_test("conv_fd");
    for s in [
        Conv2dShape::new(2, 2, 5, 4, 3, 3, 3).with_padding(1, 1),
        Conv2dShape::new(1, 2, 6, 5, 2, 3, 2).with_stride(2, 1).with_padding(1, 0),
        Conv2dShape::new(2, 3, 3, 4, 2, 1, 1),
    ] {
        let x = rng.normals(s.x_len(), 1.0);
        let w = rng.normals(s.w_len(), 1.0);
        let gy = rng.normals(s.y_len(), 1.0);
        let (x64, w64, gy64) = (wide(&x), wide(&w), wide(&gy));
        let fd_x = finite_diff(&x64, |x| dot(&conv_ref(&s, x, &w64), &gy64));
        let fd_w = finite_diff(&w64, |w| dot(&conv_ref(&s, &x64, w), &gy64));
        let (gx_ref, gw_ref) = conv_ref_backward(&s, &x64, &w64, &gy64);
        check_norm("reference backward data vs finite differences", &gx_ref, &fd_x, 1e-8);
        check_norm("reference backward weight vs finite differences", &gw_ref, &fd_w, 1e-8);
        for pass in [ConvPass::BackwardData, ConvPass::BackwardWeight] {
            for algo in ConvAlgo::candidates(&ConvProblem { pass, shape: s }) {
                let (got, fd) = match pass {
                    ConvPass::BackwardData => (run_conv(algo, pass, s, &w, &gy), &fd_x),
                    _ => (run_conv(algo, pass, s, &x, &gy), &fd_w),
                };
                check_norm(&format!("{pass:?} {algo:?} {s:?} vs finite differences"), &wide(&got), fd, 1e-5);
            }
        }
    }
}

#[test]
fn conv2d_algorithm_metadata() {
    let threes = Conv2dShape::new(8, 64, 56, 56, 64, 3, 3).with_padding(1, 1);
    let ones = Conv2dShape::new(8, 256, 56, 56, 64, 1, 1);
    let strided = Conv2dShape::new(8, 64, 56, 56, 128, 3, 3).with_stride(2, 2).with_padding(1, 1);
    for shape in [threes, ones, strided] {
        for pass in ConvPass::ALL {
            let p = ConvProblem { pass, shape };
            let h = ConvAlgo::heuristic(&p);
            assert!(h.is_applicable(&p) && h.is_reproducible(&p), "{h:?} for {p:?}");
            let info = h.info(&p, FloatDType::F32);
            assert_eq!(info.workspace_bytes, 4 * h.workspace_len(&p, FloatDType::F32));
            // Deterministic mode still has a candidate for every problem.
            assert!(ConvAlgo::candidates(&p).iter().any(|a| a.is_reproducible(&p)));
        }
    }
    let p = ConvProblem { pass: ConvPass::Forward, shape: threes };
    assert_eq!(ConvAlgo::heuristic(&p), ConvAlgo::Winograd);
    let names: Vec<_> = ConvAlgo::candidates(&p).iter().map(|a| a.name()).collect();
    assert_eq!(names, ["direct", "im2col_gemm", "im2col_gemm_batch_split", "winograd_f2x3"]);
    let p1 = ConvProblem { pass: ConvPass::Forward, shape: ones };
    assert_eq!(ConvAlgo::heuristic(&p1), ConvAlgo::Gemm1x1);
    let bw = ConvProblem { pass: ConvPass::BackwardWeight, shape: threes };
    assert!(!ConvAlgo::Im2colGemmBatchSplit.info(&bw, FloatDType::F32).reproducible);
    // f16 operands add f32 staging for x, w and y.
    let staging = threes.x_len() + threes.w_len() + threes.y_len();
    assert_eq!(
        ConvAlgo::Direct.workspace_len(&p, FloatDType::F16),
        ConvAlgo::Direct.workspace_len(&p, FloatDType::F32) + staging
    );
}

// ---------------------------------------------------------------------------------
// Max pooling.

fn pool_ref(s: &MaxPool2dShape, x: &[f64]) -> (Vec<f64>, Vec<i64>) {
    let (oh, ow) = (s.out_h(), s.out_w());
    let (mut y, mut idx) = (Vec::new(), Vec::new());
    for plane in x.chunks(s.h * s.w) {
        for i in 0..oh {
            for j in 0..ow {
                let mut best = (f64::NEG_INFINITY, -1i64);
                for a in 0..s.kernel.0 {
                    for b in 0..s.kernel.1 {
                        let ih = (i * s.stride.0 + a) as isize - s.pad.0 as isize;
                        let iw = (j * s.stride.1 + b) as isize - s.pad.1 as isize;
                        if ih < 0 || iw < 0 || ih >= s.h as isize || iw >= s.w as isize {
                            continue;
                        }
                        let flat = ih as usize * s.w + iw as usize;
                        if plane[flat] > best.0 {
                            best = (plane[flat], flat as i64);
                        }
                    }
                }
                y.push(best.0);
                idx.push(best.1);
            }
        }
    }
    (y, idx)
}

fn pool_case<T: Element>(rng: &mut Rng) {
    for s in [
        MaxPool2dShape::new(2, 3, 8, 7, 2, 2),
        MaxPool2dShape::new(1, 2, 9, 9, 3, 2).with_padding(1, 1),
        MaxPool2dShape::new(2, 40, 32, 30, 3, 1),
    ] {
        let x: Vec<T> = quant(&rng.normals(s.x_len(), 1.0));
        let x64 = wide(&x);
        let (mut y, mut idx) = (vec![T::ZERO; s.y_len()], vec![0i64; s.y_len()]);
        max_pool2d_forward(s, &x, &mut y, &mut idx).unwrap();
        let (y_ref, idx_ref) = pool_ref(&s, &x64);
        check_elem::<T>(&format!("max_pool2d {:?} {s:?} (elementwise)", T::DTYPE), &wide(&y), &y_ref, 0.0);
        assert_eq!(idx, idx_ref, "argmax {:?} {s:?}", T::DTYPE);
        let gy: Vec<T> = quant(&rng.normals(s.y_len(), 1.0));
        let mut gx = vec![T::ZERO; s.x_len()];
        max_pool2d_backward(s, &idx, &gy, &mut gx).unwrap();
        let mut want = vec![0.0; s.x_len()];
        let plane_out = s.out_h() * s.out_w();
        for (o, (&g, &i)) in wide(&gy).iter().zip(&idx_ref).enumerate() {
            want[(o / plane_out) * s.h * s.w + i as usize] += g;
        }
        check_norm(&format!("max_pool2d_backward {:?} {s:?} (norm-wise)", T::DTYPE), &wide(&gx), &want, tol::<T>());
    }
}

#[test]
fn max_pool_every_dtype() {
    let mut rng = rng_for_test("pool");
    pool_case::<f32>(&mut rng);
    pool_case::<f16>(&mut rng);
    pool_case::<bf16>(&mut rng);
}

#[test]
fn max_pool_backward_matches_finite_differences() {
    let mut rng = rng_for_test("pool_fd");
    let s = MaxPool2dShape::new(1, 2, 6, 6, 3, 2).with_padding(1, 1);
    let x = rng.normals(s.x_len(), 1.0); // continuous values: no ties
    let gy = rng.normals(s.y_len(), 1.0);
    let (mut y, mut idx) = (vec![0.0f32; s.y_len()], vec![0i64; s.y_len()]);
    max_pool2d_forward(s, &x, &mut y, &mut idx).unwrap();
    let mut gx = vec![0.0f32; s.x_len()];
    max_pool2d_backward(s, &idx, &gy, &mut gx).unwrap();
    let gy64 = wide(&gy);
    let fd = finite_diff(&wide(&x), |x| dot(&pool_ref(&s, x).0, &gy64));
    check_norm("max_pool2d_backward vs finite differences", &wide(&gx), &fd, 1e-5);
}

#[test]
fn max_pool_propagates_nan() {
    let s = MaxPool2dShape::new(1, 1, 2, 2, 2, 2);
    let (mut y, mut idx) = ([0.0f32], [0i64]);
    max_pool2d_forward(s, &[1.0, f32::NAN, 5.0, 2.0], &mut y, &mut idx).unwrap();
    assert!(y[0].is_nan() && idx[0] == 1);
}

// ---------------------------------------------------------------------------------
// Optimizers, against f64 transcriptions of PyTorch's update rules.

#[test]
fn sgd_matches_pytorch_semantics() {
    let mut rng = rng_for_test("sgd");
    let n = 70_001;
    let configs = [
        Sgd::new(0.1),
        Sgd { lr: 0.05, momentum: 0.9, dampening: 0.0, weight_decay: 1e-2, nesterov: false },
        Sgd { lr: 0.05, momentum: 0.9, dampening: 0.1, weight_decay: 0.0, nesterov: false },
        Sgd { lr: 0.05, momentum: 0.8, dampening: 0.0, weight_decay: 5e-3, nesterov: true },
    ];
    for cfg in configs {
        let mut p = rng.normals(n, 1.0);
        let mut buf = if cfg.momentum > 0.0 { vec![0.0f32; n] } else { Vec::new() };
        let mut p64 = wide(&p);
        let mut buf64 = vec![0.0f64; n];
        let f = |v: f32| f64::from(v);
        for step in 1..=4u64 {
            let g = rng.normals(n, 1.0);
            sgd_step(&cfg, step, &mut p, &g, &mut buf).unwrap();
            for i in 0..n {
                let mut d = f64::from(g[i]) + f(cfg.weight_decay) * p64[i];
                if cfg.momentum > 0.0 {
                    buf64[i] = if step == 1 { d } else { f(cfg.momentum) * buf64[i] + (1.0 - f(cfg.dampening)) * d };
                    d = if cfg.nesterov { d + f(cfg.momentum) * buf64[i] } else { buf64[i] };
                }
                p64[i] -= f(cfg.lr) * d;
            }
        }
        check_norm(&format!("sgd {cfg:?}"), &wide(&p), &p64, 1e-5);
    }
}

#[test]
fn adam_and_adamw_match_pytorch_semantics() {
    let mut rng = rng_for_test("adam");
    let n = 70_001;
    let configs = [
        Adam::new(1e-3),
        Adam { weight_decay: 1e-2, ..Adam::new(1e-2) },
        Adam { weight_decay: 1e-2, decoupled_weight_decay: true, beta1: 0.8, beta2: 0.99, ..Adam::new(1e-2) },
    ];
    for cfg in configs {
        let mut p = rng.normals(n, 1.0);
        let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
        let mut p64 = wide(&p);
        let (mut m64, mut v64) = (vec![0.0f64; n], vec![0.0f64; n]);
        let f = |v: f32| f64::from(v);
        for step in 1..=5u64 {
            let g = rng.normals(n, 0.1);
            adam_step(&cfg, step, &mut p, &g, &mut m, &mut v).unwrap();
            let (b1, b2) = (f(cfg.beta1), f(cfg.beta2));
            let bc1 = 1.0 - b1.powi(step as i32);
            let bc2 = 1.0 - b2.powi(step as i32);
            for i in 0..n {
                let mut gi = f(g[i]);
                if cfg.decoupled_weight_decay {
                    p64[i] *= 1.0 - f(cfg.lr) * f(cfg.weight_decay);
                } else {
                    gi += f(cfg.weight_decay) * p64[i];
                }
                m64[i] = b1 * m64[i] + (1.0 - b1) * gi;
                v64[i] = b2 * v64[i] + (1.0 - b2) * gi * gi;
                p64[i] -= f(cfg.lr) / bc1 * m64[i] / (v64[i].sqrt() / bc2.sqrt() + f(cfg.eps));
            }
        }
        check_norm(&format!("adam {cfg:?}"), &wide(&p), &p64, 1e-5);
        check_norm(&format!("adam exp_avg {cfg:?}"), &wide(&m), &m64, 1e-5);
        check_norm(&format!("adam exp_avg_sq {cfg:?}"), &wide(&v), &v64, 1e-5);
    }
}

// ---------------------------------------------------------------------------------
// Errors and costs.

#[test]
fn mismatched_operands_are_errors_not_panics() {
    let mut y = [0.0f32; 3];
    assert!(matches!(
        add(&[1.0f32; 3], &[1.0; 2], &mut y),
        Err(KernelError::LengthMismatch { op: "add", operand: "b", expected: 3, actual: 2 })
    ));
    assert!(relu(&[1.0f32; 4], &mut y).is_err());
    assert!(softmax(&[0.0f32; 5], 2, 3, &mut [0.0; 6]).is_err());
    assert!(mse(&[0.0], &[0.0, 1.0]).is_err());
    assert!(cast(&[0.0f32; 2], &mut [f16::ZERO; 3]).is_err());
    let s = MatmulShape::new(2, 2, 2);
    assert!(matmul(MatmulAlgo::SplitK, s, &[0.0f32; 4], &[0.0; 4], &mut [0.0; 4], &mut []).is_err());
    let pool = MaxPool2dShape::new(1, 1, 4, 4, 2, 0);
    assert!(max_pool2d_forward(pool, &[0.0f32; 16], &mut [], &mut []).is_err());
    assert!(adam_step(&Adam { beta1: 1.0, ..Adam::new(0.1) }, 1, &mut [0.0], &[0.0], &mut [0.0], &mut [0.0]).is_err());
}

#[test]
fn kernel_costs() {
    let s = MatmulShape::batched(2, 3, 4, 5);
    let c = KernelCall::Matmul { shape: s, dtype: FloatDType::BF16 }.cost();
    assert_eq!(c, Cost { flops: 2 * 2 * 3 * 4 * 5, bytes: 2 * (15 + 20 + 12) * 2 });
    let call = KernelCall::Elementwise { op: ElementwiseOp::Add, len: 10, channels: 0, dtype: FloatDType::F32 };
    assert_eq!((call.name(), call.cost()), ("add", Cost { flops: 10, bytes: 120 }));
    let adam = KernelCall::Adam { len: 4, weight_decay: false };
    assert_eq!((adam.name(), adam.cost().bytes), ("adam_step", 112));
    let conv = Conv2dShape::new(8, 64, 56, 56, 64, 3, 3).with_padding(1, 1);
    let call = KernelCall::Conv2d { pass: ConvPass::BackwardData, shape: conv, dtype: FloatDType::F32 };
    assert_eq!(call.name(), "conv2d_backward_data");
    assert_eq!(call.cost().flops, 2 * 8 * 64 * 64 * 9 * 56 * 56);
    let json = serde_json::to_string(&call).unwrap();
    assert!(json.contains("\"kernel\":\"conv2d\""), "{json}");
}
