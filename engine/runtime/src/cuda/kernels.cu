// vramlab's CUDA kernels: every tensor op but matmul and convolution, compiled
// at run time with NVRTC (see kernels.rs).
//
// Conventions
// - No headers. NVRTC compiles this file alone (`cuda_fp16.h` is not there), so
//   f16 and bf16 are 16-bit patterns (`half_t`, `bf16_t`) converted here: f16
//   with the PTX `cvt` instructions, bf16 by bit manipulation exactly as the
//   `half` crate does it (round to nearest even, NaN kept quiet).
// - Kernels compute in f32 and round once on store, with the CPU kernels'
//   formulas (engine/src/cpu_kernels/) expression for expression; sums the CPU
//   takes in f64 (sum, mean, bias gradients, the losses) are taken in double.
//   kernels.rs compiles with `--fmad=false`, so products and sums are rounded
//   one by one as on the CPU: elementwise ops and optimizer updates give the
//   CPU's bits, up to `expf`/`logf` (2 ulp here, libm's on the CPU).
// - Arguments: device pointers as `const void*`/`void*` (the Rust side passes
//   `CUdeviceptr` values), counts and dimensions as `u64`, scalars as `float`,
//   `double` or `unsigned`. `i64` tensors (labels, indices) are `long long`.
// - Grid-stride loops with 64-bit indices: any grid is correct, the Rust side
//   picks it. Row kernels give each block whole rows; block sizes are multiples
//   of 32 (full warps for the shuffles).
// - Reductions are deterministic: a fixed tree over each block (warp shuffles,
//   then one warp over the warps' results) and per-block partials that one
//   block sums in index order. No floating-point atomics, so the same inputs
//   and grid give the same bits on every run.
// - Names: a template `name_k<S>` over the storage type becomes the kernels
//   `name_f32`, `name_f16` and `name_bf16` through INSTANTIATE; f32-only
//   kernels and casts are written out. kernels.rs lists every name the Rust
//   side launches; a test checks the list against this file and NVRTC's PTX.

typedef unsigned long long u64;
typedef long long i64;

struct half_t {
    unsigned short bits;
};
struct bf16_t {
    unsigned short bits;
};

#define F32_INF __int_as_float(0x7f800000)
#define F32_NAN __int_as_float(0x7fc00000)
#define F64_NAN __longlong_as_double(0x7ff8000000000000LL)
#define I64_MAX 0x7fffffffffffffffLL
#define I64_MIN (-I64_MAX - 1LL)

#define GRID_STRIDE(i, n) for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)
#define ROWS(r, rows) for (u64 r = blockIdx.x; r < (rows); r += gridDim.x)
#define ROW_ELEMS(j, cols) for (u64 j = threadIdx.x; j < (cols); j += blockDim.x)

__device__ __forceinline__ bool is_nan(float v) { return v != v; }
__device__ __forceinline__ bool is_finite(float v) { return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u; }
__device__ __forceinline__ i64 imin(i64 a, i64 b) { return a < b ? a : b; }
__device__ __forceinline__ i64 imax(i64 a, i64 b) { return a > b ? a : b; }

// ---- storage conversions ---------------------------------------------------

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(half_t v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
}
__device__ __forceinline__ float to_f32(bf16_t v) { return __uint_as_float((unsigned)v.bits << 16); }

template <class S> __device__ S from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ half_t from_f32<half_t>(float v) {
    half_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
    return h;
}
// half's f32_to_bf16: NaN keeps its high bits and becomes quiet; otherwise
// round to nearest even (a carry into the exponent gives infinity).
template <> __device__ __forceinline__ bf16_t from_f32<bf16_t>(float v) {
    unsigned x = __float_as_uint(v);
    bf16_t b;
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        b.bits = (unsigned short)((x >> 16) | 0x40u);
        return b;
    }
    unsigned r = x >> 16;
    if ((x & 0x8000u) != 0u && (x & 0x17fffu) != 0u) r += 1u;
    b.bits = (unsigned short)r;
    return b;
}

// f64 -> f32 rounding to odd (Element::from_f64): rounding that to f16 or bf16
// equals rounding the double directly.
__device__ __forceinline__ float f64_to_f32_round_odd(double v) {
    float f = (float)v;
    unsigned b = __float_as_uint(f);
    if (!is_finite(f) || (double)f == v || (b & 1u) != 0u) return f;
    return __uint_as_float(fabs((double)f) > fabs(v) ? b - 1u : b + 1u);
}
template <class S> __device__ __forceinline__ S from_f64(double v) { return from_f32<S>(f64_to_f32_round_odd(v)); }
template <> __device__ __forceinline__ float from_f64<float>(double v) { return (float)v; }

// A value given as its bit pattern (f32 bits, or f16/bf16 bits in the low half).
template <class S> __device__ S from_bits(unsigned bits);
template <> __device__ __forceinline__ float from_bits<float>(unsigned bits) { return __uint_as_float(bits); }
template <> __device__ __forceinline__ half_t from_bits<half_t>(unsigned bits) {
    half_t h;
    h.bits = (unsigned short)bits;
    return h;
}
template <> __device__ __forceinline__ bf16_t from_bits<bf16_t>(unsigned bits) {
    bf16_t b;
    b.bits = (unsigned short)bits;
    return b;
}

// ---- block reductions -----------------------------------------------------

struct ArgMax {
    float v;
    i64 i;
};

__device__ __forceinline__ float shfl_down(float v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }
__device__ __forceinline__ double shfl_down(double v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }
__device__ __forceinline__ ArgMax shfl_down(ArgMax a, int o) {
    ArgMax r;
    r.v = __shfl_down_sync(0xffffffffu, a.v, o);
    r.i = __shfl_down_sync(0xffffffffu, a.i, o);
    return r;
}

struct SumOp {
    template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
// The CPU's row maximum: a NaN anywhere makes it NaN.
struct MaxNanOp {
    __device__ __forceinline__ float operator()(float a, float b) const {
        if (is_nan(a)) return a;
        return (b > a || is_nan(b)) ? b : a;
    }
};
// argmax's order: NaN first, then the larger value, then the lower index; so
// the winner is the first NaN, else the first maximum (the CPU's loop).
struct ArgMaxOp {
    __device__ __forceinline__ ArgMax operator()(ArgMax a, ArgMax b) const {
        bool take;
        if (is_nan(b.v)) {
            take = !is_nan(a.v) || b.i < a.i;
        } else if (is_nan(a.v)) {
            take = false;
        } else {
            take = b.v > a.v || (b.v == a.v && b.i < a.i);
        }
        return take ? b : a;
    }
};

template <class T, class Op> __device__ __forceinline__ T warp_reduce(T v, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_down(v, o));
    return v;
}

// Reduces one value per thread over the block; every thread gets the result.
// A fixed tree for a given block size. Every thread of the block must call it.
template <class T, class Op> __device__ T block_reduce(T v, Op op, T identity) {
    __shared__ T partial[32];
    __shared__ T result;
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned warps = (blockDim.x + 31u) >> 5;
    v = warp_reduce(v, op);
    if (lane == 0u) partial[warp] = v;
    __syncthreads();
    if (warp == 0u) {
        v = lane < warps ? partial[lane] : identity;
        v = warp_reduce(v, op);
        if (lane == 0u) result = v;
    }
    __syncthreads();
    T r = result;
    __syncthreads();  // the next call may overwrite `partial` and `result`
    return r;
}

#define INSTANTIATE(name, PARAMS, ARGS)                                          \
    extern "C" __global__ void name##_f32 PARAMS { name##_k<float> ARGS; }      \
    extern "C" __global__ void name##_f16 PARAMS { name##_k<half_t> ARGS; }     \
    extern "C" __global__ void name##_bf16 PARAMS { name##_k<bf16_t> ARGS; }

// ---- elementwise ----------------------------------------------------------

#define SQRT_2_OVER_PI 0.7978846f
#define GELU_CUBIC 0.044715f

// GELU, tanh approximation, as x / (1 + e^(-2u)) (cpu_kernels/activation.rs).
__device__ __forceinline__ float gelu_f32(float x) {
    float u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

__device__ __forceinline__ float gelu_grad_f32(float x) {
    float x2 = x * x;
    float u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x2 * x);
    float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_CUBIC * x2);
    float e = expf(-2.0f * fabsf(u));
    float r = 1.0f / (1.0f + e);
    float s = u >= 0.0f ? r : e * r;
    float s_one_minus_s = e * r * r;
    return s + 2.0f * x * s_one_minus_s * du;
}

struct AddOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MulOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a * b; }
};
struct ReluBackwardOp {
    __device__ __forceinline__ float operator()(float x, float g) const { return x > 0.0f ? g : 0.0f; }
};
struct GeluBackwardOp {
    __device__ __forceinline__ float operator()(float x, float g) const { return g * gelu_grad_f32(x); }
};
struct ScaleOp {
    float alpha;
    __device__ __forceinline__ float operator()(float v) const { return alpha * v; }
};
struct ReluOp {
    __device__ __forceinline__ float operator()(float v) const { return v < 0.0f ? 0.0f : v; }
};
struct GeluOp {
    __device__ __forceinline__ float operator()(float v) const { return gelu_f32(v); }
};

template <class S, class F> __device__ __forceinline__ void map1(const void* xv, void* yv, u64 n, F f) {
    const S* x = (const S*)xv;
    S* y = (S*)yv;
    GRID_STRIDE(i, n) y[i] = from_f32<S>(f(to_f32(x[i])));
}

// `y` may be `a` (in-place `add_`): each element is read before it is written.
template <class S, class F> __device__ __forceinline__ void map2(const void* av, const void* bv, void* yv, u64 n, F f) {
    const S* a = (const S*)av;
    const S* b = (const S*)bv;
    S* y = (S*)yv;
    GRID_STRIDE(i, n) y[i] = from_f32<S>(f(to_f32(a[i]), to_f32(b[i])));
}

template <class S> __device__ void add_k(const void* a, const void* b, void* y, u64 n) { map2<S>(a, b, y, n, AddOp()); }
template <class S> __device__ void mul_k(const void* a, const void* b, void* y, u64 n) { map2<S>(a, b, y, n, MulOp()); }
template <class S> __device__ void relu_backward_k(const void* x, const void* gy, void* gx, u64 n) {
    map2<S>(x, gy, gx, n, ReluBackwardOp());
}
template <class S> __device__ void gelu_backward_k(const void* x, const void* gy, void* gx, u64 n) {
    map2<S>(x, gy, gx, n, GeluBackwardOp());
}
template <class S> __device__ void scale_k(const void* x, void* y, float alpha, u64 n) {
    ScaleOp op;
    op.alpha = alpha;
    map1<S>(x, y, n, op);
}
template <class S> __device__ void relu_k(const void* x, void* y, u64 n) { map1<S>(x, y, n, ReluOp()); }
template <class S> __device__ void gelu_k(const void* x, void* y, u64 n) { map1<S>(x, y, n, GeluOp()); }

INSTANTIATE(add, (const void* a, const void* b, void* y, u64 n), (a, b, y, n))
INSTANTIATE(mul, (const void* a, const void* b, void* y, u64 n), (a, b, y, n))
INSTANTIATE(relu_backward, (const void* x, const void* gy, void* gx, u64 n), (x, gy, gx, n))
INSTANTIATE(gelu_backward, (const void* x, const void* gy, void* gx, u64 n), (x, gy, gx, n))
INSTANTIATE(scale, (const void* x, void* y, float alpha, u64 n), (x, y, alpha, n))
INSTANTIATE(relu, (const void* x, void* y, u64 n), (x, y, n))
INSTANTIATE(gelu, (const void* x, void* y, u64 n), (x, y, n))

// y[o, c, i] = x[o, c, i] + bias[c] over [outer, channels, inner]; `y` may be `x`.
template <class S> __device__ void add_bias_k(const void* xv, const void* bv, void* yv, u64 n, u64 channels, u64 inner) {
    const S* x = (const S*)xv;
    const S* b = (const S*)bv;
    S* y = (S*)yv;
    GRID_STRIDE(i, n) y[i] = from_f32<S>(to_f32(x[i]) + to_f32(b[(i / inner) % channels]));
}
INSTANTIATE(add_bias, (const void* x, const void* bias, void* y, u64 n, u64 channels, u64 inner),
            (x, bias, y, n, channels, inner))

// Every element set to the value whose bits are given (rounded on the host).
template <class S> __device__ void fill_k(void* yv, unsigned bits, u64 n) {
    S* y = (S*)yv;
    const S v = from_bits<S>(bits);
    GRID_STRIDE(i, n) y[i] = v;
}
INSTANTIATE(fill, (void* y, unsigned bits, u64 n), (y, bits, n))

// GradScaler's unscale: y *= inv_scale in place; *found (a float the caller
// zeroed) becomes 1 when any element was inf or NaN before the multiplication.
template <class S> __device__ void unscale_k(void* yv, float inv_scale, void* found, u64 n) {
    S* y = (S*)yv;
    bool bad = false;
    GRID_STRIDE(i, n) {
        float v = to_f32(y[i]);
        bad = bad || !is_finite(v);
        y[i] = from_f32<S>(v * inv_scale);
    }
    if (bad) *(float*)found = 1.0f;  // every writer writes the same value
}
INSTANTIATE(unscale, (void* y, float inv_scale, void* found, u64 n), (y, inv_scale, found, n))

// ---- reductions -----------------------------------------------------------

// parts[block] = the block's sum of x, in double; `reduce_finish` adds them.
template <class S> __device__ void sum_partial_k(const void* xv, u64 n, void* parts) {
    const S* x = (const S*)xv;
    double acc = 0.0;
    GRID_STRIDE(i, n) acc += (double)to_f32(x[i]);
    acc = block_reduce(acc, SumOp(), 0.0);
    if (threadIdx.x == 0) ((double*)parts)[blockIdx.x] = acc;
}
INSTANTIATE(sum_partial, (const void* x, u64 n, void* parts), (x, n, parts))

// One block: *out = (float)(sum of parts[0..count] / divisor), in double.
extern "C" __global__ void reduce_finish(const void* partsv, u64 count, double divisor, void* out) {
    const double* parts = (const double*)partsv;
    double acc = 0.0;
    for (u64 i = threadIdx.x; i < count; i += blockDim.x) acc += parts[i];
    acc = block_reduce(acc, SumOp(), 0.0);
    if (threadIdx.x == 0) *(float*)out = (float)(acc / divisor);
}

// gb[c] = sum over o, i of gy[o, c, i], in double; one block per channel.
template <class S> __device__ void bias_grad_k(const void* gyv, void* gbv, u64 outer, u64 channels, u64 inner) {
    const S* gy = (const S*)gyv;
    S* gb = (S*)gbv;
    const u64 total = outer * inner;
    ROWS(c, channels) {
        double acc = 0.0;
        for (u64 e = threadIdx.x; e < total; e += blockDim.x) {
            u64 o = e / inner, i = e - o * inner;
            acc += (double)to_f32(gy[(o * channels + c) * inner + i]);
        }
        acc = block_reduce(acc, SumOp(), 0.0);
        if (threadIdx.x == 0) gb[c] = from_f64<S>(acc);
    }
}
INSTANTIATE(bias_grad, (const void* gy, void* gb, u64 outer, u64 channels, u64 inner), (gy, gb, outer, channels, inner))

// The same for inner = 1 (a linear layer's [rows, channels]), in two steps
// that read whole rows together and keep the GPU busy for tall inputs.
// Step 1: block (bx, by) sums rows [by * chunk, (by + 1) * chunk) of channels
// bx * 32 .. bx * 32 + 31; thread (tx, ty) adds every 8th row from ty, then the
// block adds its 8 sums in order into parts[by * channels + c].
#define BIAS_ROWS_TX 32
#define BIAS_ROWS_TY 8
template <class S>
__device__ void bias_grad_rows_partial_k(const void* gyv, void* partsv, u64 rows, u64 channels, u64 chunk) {
    const S* gy = (const S*)gyv;
    double* parts = (double*)partsv;
    __shared__ double sums[BIAS_ROWS_TY][BIAS_ROWS_TX];
    const u64 c = (u64)blockIdx.x * BIAS_ROWS_TX + threadIdx.x;
    const u64 r0 = (u64)blockIdx.y * chunk;
    const u64 r1 = r0 + chunk < rows ? r0 + chunk : rows;
    double acc = 0.0;
    if (c < channels)
        for (u64 r = r0 + threadIdx.y; r < r1; r += BIAS_ROWS_TY) acc += (double)to_f32(gy[r * channels + c]);
    sums[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < channels) {
        double total = 0.0;
        for (int k = 0; k < BIAS_ROWS_TY; ++k) total += sums[k][threadIdx.x];
        parts[(u64)blockIdx.y * channels + c] = total;
    }
}
INSTANTIATE(bias_grad_rows_partial, (const void* gy, void* parts, u64 rows, u64 channels, u64 chunk),
            (gy, parts, rows, channels, chunk))

// Step 2: gb[c] = the sum of parts[0 .. chunks][c], in order.
template <class S> __device__ void bias_grad_rows_finish_k(const void* partsv, void* gbv, u64 chunks, u64 channels) {
    const double* parts = (const double*)partsv;
    S* gb = (S*)gbv;
    GRID_STRIDE(c, channels) {
        double acc = 0.0;
        for (u64 k = 0; k < chunks; ++k) acc += parts[k * channels + c];
        gb[c] = from_f64<S>(acc);
    }
}
INSTANTIATE(bias_grad_rows_finish, (const void* parts, void* gb, u64 chunks, u64 channels), (parts, gb, chunks, channels))

// out[r] = index of the first NaN of row r, else of its first maximum.
template <class S> __device__ void argmax_k(const void* xv, void* outv, u64 rows, u64 cols) {
    const S* x = (const S*)xv;
    i64* out = (i64*)outv;
    ArgMax identity;
    identity.v = -F32_INF;
    identity.i = I64_MAX;
    ROWS(r, rows) {
        ArgMax best = identity;
        ROW_ELEMS(j, cols) {
            ArgMax c;
            c.v = to_f32(x[r * cols + j]);
            c.i = (i64)j;
            best = ArgMaxOp()(best, c);
        }
        best = block_reduce(best, ArgMaxOp(), identity);
        if (threadIdx.x == 0) out[r] = best.i;
    }
}
INSTANTIATE(argmax, (const void* x, void* out, u64 rows, u64 cols), (x, out, rows, cols))

// ---- softmax (one block per row) ------------------------------------------

template <class S> __device__ __forceinline__ float row_max(const S* x, u64 cols) {
    float m = -F32_INF;
    ROW_ELEMS(j, cols) m = MaxNanOp()(m, to_f32(x[j]));
    return block_reduce(m, MaxNanOp(), -F32_INF);
}

// y = exp(x - max) * (1 / sum exp(x - max))
template <class S> __device__ void softmax_k(const void* xv, void* yv, u64 rows, u64 cols) {
    ROWS(r, rows) {
        const S* x = (const S*)xv + r * cols;
        S* y = (S*)yv + r * cols;
        const float m = row_max(x, cols);
        float s = 0.0f;
        ROW_ELEMS(j, cols) s += expf(to_f32(x[j]) - m);
        s = block_reduce(s, SumOp(), 0.0f);
        const float inv = 1.0f / s;
        ROW_ELEMS(j, cols) y[j] = from_f32<S>(expf(to_f32(x[j]) - m) * inv);
    }
}

// y = (x - max) - ln sum exp(x - max)
template <class S> __device__ void log_softmax_k(const void* xv, void* yv, u64 rows, u64 cols) {
    ROWS(r, rows) {
        const S* x = (const S*)xv + r * cols;
        S* y = (S*)yv + r * cols;
        const float m = row_max(x, cols);
        float s = 0.0f;
        ROW_ELEMS(j, cols) s += expf(to_f32(x[j]) - m);
        const float ls = logf(block_reduce(s, SumOp(), 0.0f));
        ROW_ELEMS(j, cols) y[j] = from_f32<S>((to_f32(x[j]) - m) - ls);
    }
}

// gx = y * (gy - sum(gy * y)), from softmax's output y.
template <class S> __device__ void softmax_backward_k(const void* yv, const void* gyv, void* gxv, u64 rows, u64 cols) {
    ROWS(r, rows) {
        const S* y = (const S*)yv + r * cols;
        const S* gy = (const S*)gyv + r * cols;
        S* gx = (S*)gxv + r * cols;
        float dot = 0.0f;
        ROW_ELEMS(j, cols) dot += to_f32(y[j]) * to_f32(gy[j]);
        dot = block_reduce(dot, SumOp(), 0.0f);
        ROW_ELEMS(j, cols) gx[j] = from_f32<S>(to_f32(y[j]) * (to_f32(gy[j]) - dot));
    }
}

// gx = gy - exp(y) * sum(gy), from log-softmax's output y.
template <class S>
__device__ void log_softmax_backward_k(const void* yv, const void* gyv, void* gxv, u64 rows, u64 cols) {
    ROWS(r, rows) {
        const S* y = (const S*)yv + r * cols;
        const S* gy = (const S*)gyv + r * cols;
        S* gx = (S*)gxv + r * cols;
        float s = 0.0f;
        ROW_ELEMS(j, cols) s += to_f32(gy[j]);
        s = block_reduce(s, SumOp(), 0.0f);
        ROW_ELEMS(j, cols) gx[j] = from_f32<S>(to_f32(gy[j]) - expf(to_f32(y[j])) * s);
    }
}

INSTANTIATE(softmax, (const void* x, void* y, u64 rows, u64 cols), (x, y, rows, cols))
INSTANTIATE(log_softmax, (const void* x, void* y, u64 rows, u64 cols), (x, y, rows, cols))
INSTANTIATE(softmax_backward, (const void* y, const void* gy, void* gx, u64 rows, u64 cols), (y, gy, gx, rows, cols))
INSTANTIATE(log_softmax_backward, (const void* y, const void* gy, void* gx, u64 rows, u64 cols),
            (y, gy, gx, rows, cols))

// ---- losses (f32 logits and predictions) ----------------------------------

// The row's max (f32) and ln sum exp(x - max) (double), as the CPU's
// `max_and_log_sum`.
__device__ __forceinline__ double row_log_sum(const float* x, u64 cols, float m) {
    double s = 0.0;
    ROW_ELEMS(j, cols) s += exp((double)(x[j] - m));
    return log(block_reduce(s, SumOp(), 0.0));
}

// loss[r] = logsumexp(x[r]) - x[r, label], in double; NaN for a label outside
// 0..classes (the CPU refuses those; a device cannot without a sync).
extern "C" __global__ void cross_entropy_rows(const void* xv, const void* labelsv, void* lossv, u64 rows, u64 classes) {
    const i64* labels = (const i64*)labelsv;
    ROWS(r, rows) {
        const float* x = (const float*)xv + r * classes;
        const float m = row_max(x, classes);
        const double ls = row_log_sum(x, classes, m);
        if (threadIdx.x == 0) {
            const i64 l = labels[r];
            const bool ok = l >= 0 && (u64)l < classes;
            ((double*)lossv)[r] = ok ? ls - ((double)x[l] - (double)m) : F64_NAN;
        }
    }
}

// g[r, j] = scale * softmax(x[r])_j - scale * [j = label[r]], scale = grad_out / rows.
extern "C" __global__ void cross_entropy_backward(const void* xv, const void* labelsv, void* gv, u64 rows, u64 classes,
                                                  float scale) {
    const i64* labels = (const i64*)labelsv;
    ROWS(r, rows) {
        const float* x = (const float*)xv + r * classes;
        float* g = (float*)gv + r * classes;
        const float m = row_max(x, classes);
        const float ls = (float)row_log_sum(x, classes, m);
        const i64 l = labels[r];
        const bool ok = l >= 0 && (u64)l < classes;
        ROW_ELEMS(j, classes) {
            float o = scale * expf((x[j] - m) - ls);
            if ((i64)j == l) o = o - scale;
            g[j] = ok ? o : F32_NAN;
        }
    }
}

// parts[block] = the block's sum of (p - t)^2, in double.
extern "C" __global__ void mse_partial(const void* pv, const void* tv, u64 n, void* parts) {
    const float* p = (const float*)pv;
    const float* t = (const float*)tv;
    double acc = 0.0;
    GRID_STRIDE(i, n) {
        double d = (double)p[i] - (double)t[i];
        acc += d * d;
    }
    acc = block_reduce(acc, SumOp(), 0.0);
    if (threadIdx.x == 0) ((double*)parts)[blockIdx.x] = acc;
}

// g = k * (p - t), k = 2 * grad_out / n.
extern "C" __global__ void mse_backward(const void* pv, const void* tv, void* gv, float k, u64 n) {
    const float* p = (const float*)pv;
    const float* t = (const float*)tv;
    float* g = (float*)gv;
    GRID_STRIDE(i, n) g[i] = k * (p[i] - t[i]);
}

// ---- max pooling (NCHW, -inf padding, indices ih * w + iw in the plane) ---

template <class S>
__device__ void max_pool2d_k(const void* xv, void* yv, void* indicesv, u64 planes, u64 h, u64 w, u64 oh, u64 ow,
                             u64 kh, u64 kw, u64 sh, u64 sw, u64 ph, u64 pw) {
    const S* x = (const S*)xv;
    S* y = (S*)yv;
    i64* indices = (i64*)indicesv;
    GRID_STRIDE(o, planes * oh * ow) {
        const u64 c = o % ow, t = o / ow, r = t % oh, p = t / oh;
        const i64 h0 = (i64)(r * sh) - (i64)ph, w0 = (i64)(c * sw) - (i64)pw;
        const i64 hs = imax(h0, 0), he = imin(h0 + (i64)kh, (i64)h);
        const i64 ws = imax(w0, 0), we = imin(w0 + (i64)kw, (i64)w);
        const S* plane = x + p * h * w;
        float best = -F32_INF;
        i64 arg = hs * (i64)w + ws;
        bool nan = false;
        for (i64 ih = hs; ih < he && !nan; ++ih) {
            for (i64 iw = ws; iw < we; ++iw) {
                const float v = to_f32(plane[ih * (i64)w + iw]);
                if (v > best || is_nan(v)) {
                    best = v;
                    arg = ih * (i64)w + iw;
                    if (is_nan(v)) {
                        nan = true;
                        break;
                    }
                }
            }
        }
        y[o] = plane[arg];
        indices[o] = arg;
    }
}

// gx[p, pos] = sum of gy[o] over the outputs o of plane p whose window holds
// pos and whose index is pos, in output order (the CPU's order, no atomics).
// An index outside its window adds nothing.
template <class S>
__device__ void max_pool2d_backward_k(const void* indicesv, const void* gyv, void* gxv, u64 planes, u64 h, u64 w,
                                      u64 oh, u64 ow, u64 kh, u64 kw, u64 sh, u64 sw, u64 ph, u64 pw) {
    const i64* indices = (const i64*)indicesv;
    const S* gy = (const S*)gyv;
    S* gx = (S*)gxv;
    GRID_STRIDE(e, planes * h * w) {
        const u64 iw = e % w, t = e / w, ih = t % h, p = t / h;
        const i64 pos = (i64)(ih * w + iw);
        // Output row r covers input rows r*sh - ph .. r*sh - ph + kh - 1.
        const i64 a = (i64)(ih + ph), b = (i64)(iw + pw);
        const i64 r_lo = a - (i64)kh + 1 <= 0 ? 0 : (a - (i64)kh + 1 + (i64)sh - 1) / (i64)sh;
        const i64 r_hi = imin(a / (i64)sh, (i64)oh - 1);
        const i64 c_lo = b - (i64)kw + 1 <= 0 ? 0 : (b - (i64)kw + 1 + (i64)sw - 1) / (i64)sw;
        const i64 c_hi = imin(b / (i64)sw, (i64)ow - 1);
        float acc = 0.0f;
        for (i64 r = r_lo; r <= r_hi; ++r) {
            for (i64 c = c_lo; c <= c_hi; ++c) {
                const u64 o = (p * oh + (u64)r) * ow + (u64)c;
                if (indices[o] == pos) acc += to_f32(gy[o]);
            }
        }
        gx[e] = from_f32<S>(acc);
    }
}

INSTANTIATE(max_pool2d,
            (const void* x, void* y, void* indices, u64 planes, u64 h, u64 w, u64 oh, u64 ow, u64 kh, u64 kw, u64 sh,
             u64 sw, u64 ph, u64 pw),
            (x, y, indices, planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw))
INSTANTIATE(max_pool2d_backward,
            (const void* indices, const void* gy, void* gx, u64 planes, u64 h, u64 w, u64 oh, u64 ow, u64 kh, u64 kw,
             u64 sh, u64 sw, u64 ph, u64 pw),
            (indices, gy, gx, planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw))

// ---- optimizers (f32, in place; cpu_kernels/optim.rs) ---------------------

// torch.optim.SGD. `buf` is unused (may be null) when momentum is 0; on the
// first step it is set to the first (decayed) gradient.
extern "C" __global__ void sgd_step(void* pv, const void* gv, void* bufv, u64 n, float lr, float momentum,
                                    float dampening, float weight_decay, unsigned nesterov, unsigned first) {
    float* param = (float*)pv;
    const float* grad = (const float*)gv;
    float* buf = (float*)bufv;
    GRID_STRIDE(i, n) {
        const float p = param[i];
        const float g = grad[i];
        float d = weight_decay != 0.0f ? g + weight_decay * p : g;
        if (momentum != 0.0f) {
            const float b = first != 0u ? d : momentum * buf[i] + (1.0f - dampening) * d;
            buf[i] = b;
            d = nesterov != 0u ? d + momentum * b : b;
        }
        param[i] = p - lr * d;
    }
}

// torch.optim.Adam / AdamW; the bias corrections come from the host:
// step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t), decay =
// 1 - lr * weight_decay for AdamW (else 1), coupled = weight_decay for Adam
// (else 0).
extern "C" __global__ void adam_step(void* pv, const void* gv, void* mv, void* vv, u64 n, float beta1, float beta2,
                                     float eps, float step_size, float bc2_sqrt, float decay, float coupled) {
    float* param = (float*)pv;
    const float* grad = (const float*)gv;
    float* exp_avg = (float*)mv;
    float* exp_avg_sq = (float*)vv;
    GRID_STRIDE(i, n) {
        float p = param[i] * decay;
        const float g = grad[i] + coupled * p;
        float m = exp_avg[i];
        m += (1.0f - beta1) * (g - m);
        const float v = beta2 * exp_avg_sq[i] + (1.0f - beta2) * g * g;
        const float denom = sqrtf(v) / bc2_sqrt + eps;
        p -= step_size * m / denom;
        param[i] = p;
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
    }
}

// ---- casts ----------------------------------------------------------------

// Between floats: widen (exact), then round once to the target.
template <class S, class D> __device__ __forceinline__ void cast_float(const void* xv, void* yv, u64 n) {
    const S* x = (const S*)xv;
    D* y = (D*)yv;
    GRID_STRIDE(i, n) y[i] = from_f32<D>(to_f32(x[i]));
}

// From i64: through double, as the CPU does (`v as f64`, then one rounding).
template <class D> __device__ __forceinline__ void cast_from_i64(const void* xv, void* yv, u64 n) {
    const i64* x = (const i64*)xv;
    D* y = (D*)yv;
    GRID_STRIDE(i, n) y[i] = from_f64<D>((double)x[i]);
}

// To i64: toward zero, saturating, NaN to 0 (Rust's `as i64`).
template <class S> __device__ __forceinline__ void cast_to_i64(const void* xv, void* yv, u64 n) {
    const S* x = (const S*)xv;
    i64* y = (i64*)yv;
    GRID_STRIDE(i, n) {
        const double d = (double)to_f32(x[i]);
        y[i] = d != d ? 0LL : d >= 9223372036854775808.0 ? I64_MAX : d <= -9223372036854775808.0 ? I64_MIN : (i64)d;
    }
}

extern "C" __global__ void cast_f32_f16(const void* x, void* y, u64 n) { cast_float<float, half_t>(x, y, n); }
extern "C" __global__ void cast_f32_bf16(const void* x, void* y, u64 n) { cast_float<float, bf16_t>(x, y, n); }
extern "C" __global__ void cast_f16_f32(const void* x, void* y, u64 n) { cast_float<half_t, float>(x, y, n); }
extern "C" __global__ void cast_f16_bf16(const void* x, void* y, u64 n) { cast_float<half_t, bf16_t>(x, y, n); }
extern "C" __global__ void cast_bf16_f32(const void* x, void* y, u64 n) { cast_float<bf16_t, float>(x, y, n); }
extern "C" __global__ void cast_bf16_f16(const void* x, void* y, u64 n) { cast_float<bf16_t, half_t>(x, y, n); }
extern "C" __global__ void cast_i64_f32(const void* x, void* y, u64 n) { cast_from_i64<float>(x, y, n); }
extern "C" __global__ void cast_i64_f16(const void* x, void* y, u64 n) { cast_from_i64<half_t>(x, y, n); }
extern "C" __global__ void cast_i64_bf16(const void* x, void* y, u64 n) { cast_from_i64<bf16_t>(x, y, n); }
extern "C" __global__ void cast_f32_i64(const void* x, void* y, u64 n) { cast_to_i64<float>(x, y, n); }
extern "C" __global__ void cast_f16_i64(const void* x, void* y, u64 n) { cast_to_i64<half_t>(x, y, n); }
extern "C" __global__ void cast_bf16_i64(const void* x, void* y, u64 n) { cast_to_i64<bf16_t>(x, y, n); }
