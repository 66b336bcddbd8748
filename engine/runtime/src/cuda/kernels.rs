//! The backend's CUDA C kernels (`kernels.cu`), compiled with NVRTC on first
//! use, and the name of every kernel the Rust side launches.
//!
//! Names live here only: [`FloatKernel`] for the kernels instantiated per float
//! storage type (`add_f32`, `add_f16`, `add_bf16`), the `f32`-only constants,
//! and [`cast_kernel`]. [`all_names`] lists them all; the tests check that
//! list against the source and against the PTX NVRTC makes of it.

use cudarc::nvrtc::{Ptx, result as nvrtc};

use super::error::{CudaError, CudaResult};
use super::library::CudaLib;
use crate::cpu_kernels::FloatDType;
use crate::dtype::DType;

/// The kernels' source.
pub const SOURCE: &str = include_str!("kernels.cu");

const SOURCE_NAME: &str = "kernels.cu";

/// NVRTC options besides the architecture. No fused multiply-add: products and
/// sums round one at a time, as the CPU kernels' do, so elementwise results
/// and optimizer updates match the CPU's bit for bit (see `kernels.cu`).
pub const OPTIONS: &[&str] = &["--fmad=false"];

/// Compiles [`SOURCE`] to PTX for a virtual architecture (`compute_90`).
pub fn compile(arch: &str) -> CudaResult<Ptx> {
    compile_with_log(arch).map(|(ptx, _)| ptx)
}

/// [`compile`], with NVRTC's log (its warnings; empty when the source is clean).
pub fn compile_with_log(arch: &str) -> CudaResult<(Ptx, String)> {
    CudaLib::Nvrtc.require()?;
    let fail = |log: String| CudaError::Compile { source_name: SOURCE_NAME, log };
    let src = std::ffi::CString::new(SOURCE).map_err(|_| fail("the source holds a NUL byte".into()))?;
    let prog =
        nvrtc::create_program(&src, Some(c"kernels.cu")).map_err(|e| fail(format!("nvrtcCreateProgram: {e}")))?;
    let mut options = vec![format!("--gpu-architecture={arch}")];
    options.extend(OPTIONS.iter().map(|o| o.to_string()));
    // SAFETY: `prog` was created above from `src`, which outlives it, and is
    // destroyed only at the end.
    let (compiled, log, ptx) = unsafe {
        let compiled = nvrtc::compile_program(prog, &options);
        let log = nvrtc::get_program_log(prog).map(|l| c_text(&l)).unwrap_or_default();
        let ptx = compiled.and_then(|()| nvrtc::get_ptx(prog));
        let _ = nvrtc::destroy_program(prog);
        (compiled, log, ptx)
    };
    match (compiled, ptx) {
        (Ok(()), Ok(ptx)) => Ok((Ptx::from_src(c_text(&ptx)), log)),
        (Err(e), _) | (Ok(()), Err(e)) => Err(fail(if log.is_empty() { e.to_string() } else { log })),
    }
}

/// The text of a NUL-terminated C buffer.
fn c_text(buf: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = buf.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

macro_rules! float_kernels {
    ($($(#[$doc:meta])* $variant:ident = $base:literal,)*) => {
        /// A kernel instantiated for each float storage type: `Add` is `add_f32`,
        /// `add_f16` and `add_bf16`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum FloatKernel {
            $($(#[$doc])* $variant,)*
        }

        impl FloatKernel {
            pub const ALL: &'static [FloatKernel] = &[$(FloatKernel::$variant,)*];

            /// The name shared by the three instantiations (`add`).
            pub const fn base(self) -> &'static str {
                match self {
                    $(FloatKernel::$variant => $base,)*
                }
            }

            /// The kernel for `dtype` storage (`add_bf16`).
            pub const fn name(self, dtype: FloatDType) -> &'static str {
                match self {
                    $(FloatKernel::$variant => match dtype {
                        FloatDType::F32 => concat!($base, "_f32"),
                        FloatDType::F16 => concat!($base, "_f16"),
                        FloatDType::BF16 => concat!($base, "_bf16"),
                    },)*
                }
            }
        }
    };
}

float_kernels! {
    Add = "add",
    Mul = "mul",
    ReluBackward = "relu_backward",
    GeluBackward = "gelu_backward",
    Scale = "scale",
    Relu = "relu",
    Gelu = "gelu",
    /// `[outer, channels, inner] + bias[channels]`.
    AddBias = "add_bias",
    /// Sets every element to a value given as its bits.
    Fill = "fill",
    /// GradScaler's unscale with the inf/NaN flag.
    Unscale = "unscale",
    /// Per-block f64 partial sums, finished by [`REDUCE_FINISH`].
    SumPartial = "sum_partial",
    BiasGrad = "bias_grad",
    /// [`FloatKernel::BiasGrad`] for `inner = 1`: f64 sums of row chunks,
    /// 32 channels by 8 row lanes a block, one block row per chunk ...
    BiasGradRowsPartial = "bias_grad_rows_partial",
    /// ... then each channel's chunks added in order.
    BiasGradRowsFinish = "bias_grad_rows_finish",
    Argmax = "argmax",
    Softmax = "softmax",
    LogSoftmax = "log_softmax",
    SoftmaxBackward = "softmax_backward",
    LogSoftmaxBackward = "log_softmax_backward",
    MaxPool2d = "max_pool2d",
    MaxPool2dBackward = "max_pool2d_backward",
}

/// One block sums f64 partials into an f32 scalar, divided by a divisor.
pub const REDUCE_FINISH: &str = "reduce_finish";
/// Cross-entropy per row (f64), finished by [`REDUCE_FINISH`].
pub const CROSS_ENTROPY_ROWS: &str = "cross_entropy_rows";
pub const CROSS_ENTROPY_BACKWARD: &str = "cross_entropy_backward";
/// Per-block f64 partial sums of squared differences.
pub const MSE_PARTIAL: &str = "mse_partial";
pub const MSE_BACKWARD: &str = "mse_backward";
pub const SGD_STEP: &str = "sgd_step";
pub const ADAM_STEP: &str = "adam_step";

/// The kernels that exist for f32 only.
pub const F32_KERNELS: &[&str] =
    &[REDUCE_FINISH, CROSS_ENTROPY_ROWS, CROSS_ENTROPY_BACKWARD, MSE_PARTIAL, MSE_BACKWARD, SGD_STEP, ADAM_STEP];

/// The kernel converting `from` to `to` (`cast_f32_bf16`); `None` when they are equal.
pub const fn cast_kernel(from: DType, to: DType) -> Option<&'static str> {
    use DType::{BF16, F16, F32, I64};
    Some(match (from, to) {
        (F32, F16) => "cast_f32_f16",
        (F32, BF16) => "cast_f32_bf16",
        (F32, I64) => "cast_f32_i64",
        (F16, F32) => "cast_f16_f32",
        (F16, BF16) => "cast_f16_bf16",
        (F16, I64) => "cast_f16_i64",
        (BF16, F32) => "cast_bf16_f32",
        (BF16, F16) => "cast_bf16_f16",
        (BF16, I64) => "cast_bf16_i64",
        (I64, F32) => "cast_i64_f32",
        (I64, F16) => "cast_i64_f16",
        (I64, BF16) => "cast_i64_bf16",
        (F32, F32) | (F16, F16) | (BF16, BF16) | (I64, I64) => return None,
    })
}

/// Every kernel the Rust side may launch.
pub fn all_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> =
        FloatKernel::ALL.iter().flat_map(|k| FloatDType::ALL.map(|d| k.name(d))).collect();
    names.extend_from_slice(F32_KERNELS);
    let dtypes = [DType::F32, DType::F16, DType::BF16, DType::I64];
    names.extend(dtypes.iter().flat_map(|&a| dtypes.iter().filter_map(move |&b| cast_kernel(a, b))));
    names
}

/// The kernels (`.entry` functions) of a PTX module.
pub fn ptx_entries(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| l.trim_start().strip_prefix(".visible .entry "))
        .map(|rest| rest.split('(').next().unwrap_or_default().trim().to_owned())
        .collect()
}

/// Reading `kernels.cu` for the tests: which kernels it defines, with which
/// parameters.
#[cfg(test)]
pub(crate) mod source {
    /// How a kernel parameter is passed.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Param {
        Ptr,
        U64,
        U32,
        F32,
        F64,
    }

    /// The type of one parameter declaration (`const void* x`, `u64 n`);
    /// `None` for a type no launch passes.
    fn param(decl: &str) -> Option<Param> {
        if decl.contains('*') {
            return Some(Param::Ptr);
        }
        let words: Vec<&str> = decl.split_whitespace().collect();
        match words[..words.len().saturating_sub(1)].join(" ").as_str() {
            "u64" | "unsigned long long" => Some(Param::U64),
            "unsigned" | "unsigned int" => Some(Param::U32),
            "float" => Some(Param::F32),
            "double" => Some(Param::F64),
            _ => None,
        }
    }

    /// The text inside the parentheses `s` starts with, and what follows them.
    fn parenthesized(s: &str) -> Option<(&str, &str)> {
        let mut depth = 0usize;
        for (i, c) in s.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        return Some((&s[1..i], &s[i + 1..]));
                    }
                }
                _ if depth == 0 => return None,
                _ => {}
            }
        }
        None
    }

    /// Every kernel `source` defines, with its parameters: each `extern "C"`
    /// function, and the three instantiations of each `INSTANTIATE(base, (…), (…))`.
    pub(crate) fn kernels(source: &str) -> Vec<(String, Vec<Option<Param>>)> {
        let params = |list: &str| list.split(',').map(param).collect::<Vec<_>>();
        let mut out = Vec::new();
        const INSTANTIATE: &str = "INSTANTIATE";
        for (at, _) in source.match_indices("INSTANTIATE(") {
            if source[..at].ends_with("#define ") {
                continue;
            }
            let Some((inside, _)) = parenthesized(&source[at + INSTANTIATE.len()..]) else { continue };
            let Some((base, rest)) = inside.split_once(',') else { continue };
            let Some((list, _)) = parenthesized(rest.trim_start()) else { continue };
            for suffix in ["f32", "f16", "bf16"] {
                out.push((format!("{}_{suffix}", base.trim()), params(list)));
            }
        }
        const EXTERN: &str = "extern \"C\" __global__ void ";
        for (at, _) in source.match_indices(EXTERN) {
            let rest = &source[at + EXTERN.len()..];
            let (name, rest) = rest.split_at(rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(0));
            // The macro's own template (`name##_f32 PARAMS`) is not a kernel.
            if let Some((list, _)) = parenthesized(rest).filter(|_| !name.is_empty()) {
                out.push((name.to_owned(), params(list)));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::source::{Param, kernels};
    use super::*;

    #[test]
    fn every_launched_kernel_is_defined_once() {
        let defined: Vec<String> = kernels(SOURCE).into_iter().map(|(name, _)| name).collect();
        let unique: BTreeSet<&str> = defined.iter().map(String::as_str).collect();
        assert_eq!(unique.len(), defined.len(), "a kernel is defined twice: {defined:?}");
        let wanted: BTreeSet<&str> = all_names().into_iter().collect();
        assert_eq!(wanted.len(), all_names().len(), "a name is listed twice");
        let missing: Vec<_> = wanted.difference(&unique).collect();
        assert!(missing.is_empty(), "launched but not in kernels.cu: {missing:?}");
        let unused: Vec<_> = unique.difference(&wanted).collect();
        assert!(unused.is_empty(), "in kernels.cu but not listed in kernels.rs: {unused:?}");
        for (name, params) in kernels(SOURCE) {
            assert!(params.iter().all(Option::is_some), "{name} has a parameter no launch passes: {params:?}");
        }
    }

    #[test]
    fn names_and_parsers() {
        assert_eq!(FloatKernel::Add.name(FloatDType::BF16), "add_bf16");
        assert_eq!(FloatKernel::MaxPool2dBackward.base(), "max_pool2d_backward");
        assert_eq!(cast_kernel(DType::I64, DType::F16), Some("cast_i64_f16"));
        assert_eq!(cast_kernel(DType::F16, DType::F16), None);
        let src = "#define INSTANTIATE(name, PARAMS, ARGS) extern \"C\" __global__ void name##_f32 PARAMS {}\n\
                   INSTANTIATE(relu, (const void* x,\n u64 n), (x, n))\n\
                   extern \"C\" __global__ void sgd_step(void* p, float lr, double d, unsigned f, int bad) {}\n";
        let (p, f) = (Some(Param::Ptr), Some(Param::F32));
        let relu = vec![p, Some(Param::U64)];
        assert_eq!(
            kernels(src),
            [
                ("relu_f32".to_owned(), relu.clone()),
                ("relu_f16".to_owned(), relu.clone()),
                ("relu_bf16".to_owned(), relu),
                ("sgd_step".to_owned(), vec![p, f, Some(Param::F64), Some(Param::U32), None]),
            ]
        );
        let ptx = ".visible .entry add_f32(\n\t.param .u64 a\n)\n.func helper(\n.visible .entry mul_f16(";
        assert_eq!(ptx_entries(ptx), ["add_f32", "mul_f16"]);
    }
}
