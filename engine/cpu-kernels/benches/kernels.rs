//! CPU kernel throughput: f32 matmul 1024³ through `cpu_kernels::matmul` against the
//! `gemm` crate called directly in the same run, f16/bf16 matmul, and conv2d on
//! ResNet-like shapes with every applicable algorithm for each pass.
//!
//! Run: `cargo bench -p vramlab-engine --bench kernels` (filter with a trailing
//! name, e.g. `-- matmul`). Throughput is reported in elements/s where one element
//! is one nominal FLOP, so `Gelem/s` reads as GFLOP/s.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use half::{bf16, f16};
use vramlab_cpu_kernels::{
    Algorithm, Conv2dShape, ConvAlgo, ConvPass, ConvProblem, Element, FloatDType, KernelCall, MatmulAlgo, MatmulShape,
    conv2d_backward_data, conv2d_backward_weight, conv2d_forward, matmul,
};

/// Deterministic pseudo-random values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn matmul_f32_1024(c: &mut Criterion) {
    const N: usize = 1024;
    let shape = MatmulShape::new(N, N, N);
    let a = values(N * N, 1);
    let b = values(N * N, 2);
    let mut out = vec![0.0f32; N * N];
    let mut group = c.benchmark_group("matmul_f32_1024");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(2 * (N as u64).pow(3)));
    group.bench_function("gemm_crate_direct", |bench| {
        bench.iter(|| {
            // SAFETY: three distinct N×N row-major buffers of exactly N² elements.
            unsafe {
                gemm::gemm(
                    N,
                    N,
                    N,
                    out.as_mut_ptr(),
                    1,
                    N as isize,
                    false,
                    a.as_ptr(),
                    1,
                    N as isize,
                    b.as_ptr(),
                    1,
                    N as isize,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    gemm::Parallelism::Rayon(0),
                );
            }
            black_box(&out);
        })
    });
    for &algo in MatmulAlgo::all() {
        let mut ws = vec![0.0f32; algo.workspace_len(&shape, FloatDType::F32)];
        group.bench_function(BenchmarkId::new("vramlab", algo.name()), |bench| {
            bench.iter(|| {
                matmul(algo, shape, black_box(&a), black_box(&b), &mut out, &mut ws).unwrap();
                black_box(&out);
            })
        });
    }
    group.finish();
}

fn matmul_half<T: Element>(c: &mut Criterion) {
    const N: usize = 512;
    let shape = MatmulShape::new(N, N, N);
    let a: Vec<T> = values(N * N, 3).into_iter().map(T::from_f32).collect();
    let b: Vec<T> = values(N * N, 4).into_iter().map(T::from_f32).collect();
    let mut out = vec![T::ZERO; N * N];
    let mut group = c.benchmark_group(format!("matmul_{}_512", T::DTYPE));
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(2 * (N as u64).pow(3)));
    let algo = MatmulAlgo::GemmRayon;
    let mut ws = vec![0.0f32; algo.workspace_len(&shape, T::DTYPE)];
    group.bench_function(algo.name(), |bench| {
        bench.iter(|| {
            matmul(algo, shape, black_box(&a), black_box(&b), &mut out, &mut ws).unwrap();
            black_box(&out);
        })
    });
    group.finish();
}

fn matmul_f16_bf16(c: &mut Criterion) {
    matmul_half::<f16>(c);
    matmul_half::<bf16>(c);
}

/// ResNet-50-like layers at batch 8.
fn conv_shapes() -> [(&'static str, Conv2dShape); 3] {
    [
        ("n8_c64_56x56_k64_3x3", Conv2dShape::new(8, 64, 56, 56, 64, 3, 3).with_padding(1, 1)),
        ("n8_c256_56x56_k64_1x1", Conv2dShape::new(8, 256, 56, 56, 64, 1, 1)),
        ("n8_c128_28x28_k128_3x3", Conv2dShape::new(8, 128, 28, 28, 128, 3, 3).with_padding(1, 1)),
    ]
}

fn conv2d(c: &mut Criterion) {
    for pass in ConvPass::ALL {
        let mut group = c.benchmark_group(pass.kernel_name());
        group
            .sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for (label, shape) in conv_shapes() {
            let problem = ConvProblem { pass, shape };
            let flops = KernelCall::Conv2d { pass, shape, dtype: FloatDType::F32 }.cost().flops;
            group.throughput(Throughput::Elements(flops));
            let x = values(shape.x_len(), 5);
            let w = values(shape.w_len(), 6);
            let y = values(shape.y_len(), 7);
            for algo in ConvAlgo::candidates(&problem) {
                let mut ws = vec![0.0f32; algo.workspace_len(&problem, FloatDType::F32)];
                group.bench_function(BenchmarkId::new(label, algo.name()), |bench| match pass {
                    ConvPass::Forward => {
                        let mut out = vec![0.0f32; shape.y_len()];
                        bench.iter(|| conv2d_forward(algo, shape, black_box(&x), &w, &mut out, &mut ws).unwrap())
                    }
                    ConvPass::BackwardData => {
                        let mut out = vec![0.0f32; shape.x_len()];
                        bench.iter(|| conv2d_backward_data(algo, shape, &w, black_box(&y), &mut out, &mut ws).unwrap())
                    }
                    ConvPass::BackwardWeight => {
                        let mut out = vec![0.0f32; shape.w_len()];
                        bench
                            .iter(|| conv2d_backward_weight(algo, shape, &x, black_box(&y), &mut out, &mut ws).unwrap())
                    }
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, matmul_f32_1024, matmul_f16_bf16, conv2d);
criterion_main!(benches);
