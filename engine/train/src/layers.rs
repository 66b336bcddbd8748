//! The layers: [`Linear`], [`Conv2d`], [`ReLU`], [`GELU`], [`MaxPool2d`], [`Flatten`].
//! `ReLU` and `GELU` are the one elementwise [`Activation`] module with two
//! functions ([`ActivationFn`]: [`ReluFn`], [`GeluFn`]).
//!
//! What each saves for backward with grad mode on (nothing with it off):
//!
//! | layer | saves | backward computes |
//! |---|---|---|
//! | `Linear` | its input (in the compute dtype; under autocast also the casted weight) | `gW = gyᵀ·x`, `gb = Σ gy`, `gx = gy·W` |
//! | `Conv2d` | its input (likewise) | `conv2d_backward_weight`, `bias_grad`, `conv2d_backward_data` |
//! | `ReLU` | its output (shared with the next layer's saved input) | `gy · [y > 0]` |
//! | `GELU` | its input | `gelu_backward(x, gy)` |
//! | `MaxPool2d` | the argmax indices (i64) and the input shape | scatter of `gy` through the indices |
//! | `Flatten` | the input shape (no tensor) | a reshape of `gy` |

use std::marker::PhantomData;

use super::mode::{autocast_dtype, is_grad_enabled};
use super::{Module, NnError, Parameter, Result};
use vramlab_engine::device::Device;
use vramlab_engine::hooks::Tag;
use vramlab_engine::tensor::{Conv2dOptions, DType, Tensor, tag_scope};
use vramlab_rng::Rng;

/// `t` in `dtype`, allocated under `tag` if a cast is needed (else `t` itself).
fn cast(t: &Tensor, dtype: DType, tag: Tag) -> Result<Tensor> {
    if t.dtype() == dtype {
        return Ok(t.clone());
    }
    let _t = tag_scope(tag);
    Ok(t.to_dtype(dtype)?)
}

/// The dtype a matmul/conv layer computes in: the autocast dtype when autocast is
/// on and the input is floating point, else the parameters'.
fn compute_dtype(x: &Tensor, param: &Tensor) -> DType {
    match autocast_dtype() {
        Some(d) if x.dtype() != DType::I64 => d,
        _ => param.dtype(),
    }
}

/// PyTorch's default init for linear and conv layers (`kaiming_uniform_(a=√5)`
/// for the weight, which is `U(−1/√fan_in, 1/√fan_in)`, and the same bound for
/// the bias), allocated under [`Tag::Parameter`].
fn init_uniform(name: &str, shape: &[usize], fan_in: usize, rng: &mut Rng, device: &Device) -> Result<Parameter> {
    let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
    let n: usize = shape.iter().product();
    let values: Vec<f32> = (0..n).map(|_| rng.uniform_range(-bound, bound) as f32).collect();
    Parameter::from_values(name, &values, shape, device)
}

fn missing(module: &str) -> NnError {
    NnError::NoSavedForward { module: module.to_owned() }
}

/// Saved by [`Linear`] and [`Conv2d`].
struct AffineSaved {
    /// The input in the compute dtype.
    x: Tensor,
    /// The weight cast to the autocast dtype (autocast only).
    w: Option<Tensor>,
    /// The input's own dtype, for the input gradient.
    input_dtype: DType,
}

impl AffineSaved {
    fn tensors(&self) -> Vec<&Tensor> {
        std::iter::once(&self.x).chain(self.w.as_ref()).collect()
    }
}

/// Casts the input, weight and bias for the compute dtype: the input under
/// `activation` when it will be saved, the weight and bias under `temporary`
/// (autocast's cast cache; see the module docs of `nn`).
fn affine_inputs(
    x: &Tensor,
    weight: &Parameter,
    bias: Option<&Parameter>,
) -> Result<(Tensor, Tensor, Option<Tensor>, DType)> {
    let dtype = compute_dtype(x, weight.data());
    let grad = is_grad_enabled();
    let xc = cast(x, dtype, if grad { Tag::Activation } else { Tag::Temporary })?;
    let wc = cast(weight.data(), dtype, Tag::Temporary)?;
    let bc = bias.map(|b| cast(b.data(), dtype, Tag::Temporary)).transpose()?;
    Ok((xc, wc, bc, dtype))
}

/// The forward [`Linear`] and [`Conv2d`] share: the inputs cast for the compute
/// dtype, `y = op(x, w) + b`, and with grad mode on what backward needs.
fn affine_forward(
    x: &Tensor,
    weight: &Parameter,
    bias: Option<&Parameter>,
    op: impl FnOnce(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<(Tensor, Option<AffineSaved>)> {
    let (xc, wc, bc, dtype) = affine_inputs(x, weight, bias)?;
    let mut y = op(&xc, &wc)?;
    if let Some(b) = &bc {
        y.add_bias_(b)?;
    }
    let saved = is_grad_enabled().then(|| {
        let w = (dtype != weight.data().dtype()).then_some(wc);
        AffineSaved { x: xc, w, input_dtype: x.dtype() }
    });
    Ok((y, saved))
}

/// The backward [`Linear`] and [`Conv2d`] share: the weight's gradient
/// `weight_grad(x, gy)` and the bias's `Σ gy` in the compute dtype, the saved
/// input dropped, then (when asked) the input's gradient `input_grad(w, gy)`
/// under `temporary`, in the input's own dtype.
fn affine_backward(
    saved: AffineSaved,
    gy: Tensor,
    need_input_grad: bool,
    weight: &mut Parameter,
    bias: Option<&mut Parameter>,
    weight_grad: impl FnOnce(&Tensor, &Tensor) -> Result<Tensor>,
    input_grad: impl FnOnce(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Option<Tensor>> {
    let AffineSaved { x, w, input_dtype } = saved;
    let dtype = x.dtype();
    let gy = grad_in(gy, dtype)?;
    param_grad(weight, dtype, || weight_grad(&x, &gy))?;
    if let Some(b) = bias {
        param_grad(b, dtype, || Ok(gy.bias_grad()?))?;
    }
    drop(x);
    if !need_input_grad {
        return Ok(None);
    }
    let _t = tag_scope(Tag::Temporary);
    let w = match w {
        Some(w) => w,
        None => weight.data().clone(),
    };
    let gx = input_grad(&w, &gy)?;
    drop((gy, w));
    Ok(Some(gx.to_dtype(input_dtype)?))
}

/// The gradient `gy` in `dtype` (autograd casts gradients back through casts).
fn grad_in(gy: Tensor, dtype: DType) -> Result<Tensor> {
    if gy.dtype() == dtype {
        return Ok(gy);
    }
    let _t = tag_scope(Tag::Temporary);
    Ok(gy.to_dtype(dtype)?)
}

/// Computes a parameter's gradient under the right tag and accumulates it.
fn param_grad(p: &mut Parameter, dtype: DType, compute: impl FnOnce() -> Result<Tensor>) -> Result<()> {
    let g = {
        let _t = tag_scope(p.grad_tag_for(dtype));
        compute()?
    };
    p.accumulate_grad(g)
}

/// `y = x·Wᵀ + b` (`torch.nn.Linear`): `x` is `[n, in]`, `W` is `[out, in]`.
pub struct Linear {
    in_features: usize,
    out_features: usize,
    weight: Parameter,
    bias: Option<Parameter>,
    saved: Option<AffineSaved>,
}

impl std::fmt::Debug for Linear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Linear {
    /// PyTorch's initialization from `seed`, parameters on `device`.
    pub fn new(in_features: usize, out_features: usize, seed: u64, device: &Device) -> Result<Linear> {
        let mut rng = Rng::new(seed);
        let weight = init_uniform("weight", &[out_features, in_features], in_features, &mut rng, device)?;
        let bias = init_uniform("bias", &[out_features], in_features, &mut rng, device)?;
        Ok(Linear { in_features, out_features, weight, bias: Some(bias), saved: None })
    }

    /// From given tensors: `weight` `[out, in]`, `bias` `[out]`.
    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>) -> Result<Linear> {
        let &[out_features, in_features] = weight.shape() else {
            return Err(NnError::Invalid {
                what: "Linear",
                reason: format!("weight {:?} is not [out, in]", weight.shape()),
            });
        };
        if let Some(b) = &bias
            && b.shape() != [out_features]
        {
            return Err(NnError::Invalid {
                what: "Linear",
                reason: format!("bias {:?} is not [{out_features}]", b.shape()),
            });
        }
        Ok(Linear {
            in_features,
            out_features,
            weight: Parameter::new("weight", weight),
            bias: bias.map(|b| Parameter::new("bias", b)),
            saved: None,
        })
    }

    /// Without a bias term (`bias=False`).
    pub fn without_bias(mut self) -> Linear {
        self.bias = None;
        self
    }

    pub fn weight(&self) -> &Parameter {
        &self.weight
    }

    pub fn bias(&self) -> Option<&Parameter> {
        self.bias.as_ref()
    }
}

impl Module for Linear {
    fn name(&self) -> &'static str {
        "Linear"
    }

    fn describe(&self) -> String {
        format!(
            "Linear({} → {}{})",
            self.in_features,
            self.out_features,
            if self.bias.is_some() { "" } else { ", no bias" }
        )
    }

    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        self.saved = None;
        if x.shape().len() != 2 || x.shape()[1] != self.in_features {
            return Err(NnError::Invalid {
                what: "Linear",
                reason: format!("input {:?} is not [batch, {}]", x.shape(), self.in_features),
            });
        }
        let (y, saved) =
            affine_forward(x, &self.weight, self.bias.as_ref(), |x, w| Ok(x.matmul_transposed(w, false, true)?))?;
        self.saved = saved;
        Ok(y)
    }

    fn backward(&mut self, gy: Tensor, need_input_grad: bool) -> Result<Option<Tensor>> {
        let saved = self.saved.take().ok_or_else(|| missing("Linear"))?;
        affine_backward(
            saved,
            gy,
            need_input_grad,
            &mut self.weight,
            self.bias.as_mut(),
            |x, gy| Ok(gy.matmul_transposed(x, true, false)?),
            |w, gy| Ok(gy.matmul(w)?),
        )
    }

    fn parameters(&self) -> Vec<&Parameter> {
        std::iter::once(&self.weight).chain(self.bias.as_ref()).collect()
    }

    fn parameters_mut(&mut self) -> Vec<&mut Parameter> {
        std::iter::once(&mut self.weight).chain(self.bias.as_mut()).collect()
    }

    fn saves_input(&self) -> bool {
        true
    }

    fn saved_tensors(&self) -> Vec<&Tensor> {
        self.saved.as_ref().map(AffineSaved::tensors).unwrap_or_default()
    }

    fn clear_saved(&mut self) {
        self.saved = None;
    }
}

/// 2-d convolution with bias (`torch.nn.Conv2d`, dilation 1, one group): input
/// `[n, c, h, w]`, weight `[k, c, r, s]`, bias `[k]`.
pub struct Conv2d {
    in_channels: usize,
    out_channels: usize,
    kernel: (usize, usize),
    opts: Conv2dOptions,
    weight: Parameter,
    bias: Option<Parameter>,
    saved: Option<(AffineSaved, Vec<usize>)>,
}

impl std::fmt::Debug for Conv2d {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Conv2d {
    /// A square `kernel` with `opts` (stride, padding); PyTorch's initialization
    /// from `seed`, parameters on `device`.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel: usize,
        opts: Conv2dOptions,
        seed: u64,
        device: &Device,
    ) -> Result<Conv2d> {
        let mut rng = Rng::new(seed);
        let fan_in = in_channels * kernel * kernel;
        let weight = init_uniform("weight", &[out_channels, in_channels, kernel, kernel], fan_in, &mut rng, device)?;
        let bias = init_uniform("bias", &[out_channels], fan_in, &mut rng, device)?;
        Ok(Conv2d { in_channels, out_channels, kernel: (kernel, kernel), opts, weight, bias: Some(bias), saved: None })
    }

    /// From given tensors: `weight` `[k, c, r, s]`, `bias` `[k]`.
    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>, opts: Conv2dOptions) -> Result<Conv2d> {
        let &[k, c, r, s] = weight.shape() else {
            return Err(NnError::Invalid {
                what: "Conv2d",
                reason: format!("weight {:?} is not [out, in, kh, kw]", weight.shape()),
            });
        };
        if let Some(b) = &bias
            && b.shape() != [k]
        {
            return Err(NnError::Invalid { what: "Conv2d", reason: format!("bias {:?} is not [{k}]", b.shape()) });
        }
        Ok(Conv2d {
            in_channels: c,
            out_channels: k,
            kernel: (r, s),
            opts,
            weight: Parameter::new("weight", weight),
            bias: bias.map(|b| Parameter::new("bias", b)),
            saved: None,
        })
    }

    pub fn weight(&self) -> &Parameter {
        &self.weight
    }

    pub fn bias(&self) -> Option<&Parameter> {
        self.bias.as_ref()
    }

    /// Output `[h, w]` for an input of `[h, w]`.
    pub fn output_hw(&self, h: usize, w: usize) -> (usize, usize) {
        let o = |i: usize, k: usize, s: usize, p: usize| (i + 2 * p).saturating_sub(k) / s + 1;
        (
            o(h, self.kernel.0, self.opts.stride.0, self.opts.padding.0),
            o(w, self.kernel.1, self.opts.stride.1, self.opts.padding.1),
        )
    }
}

impl Module for Conv2d {
    fn name(&self) -> &'static str {
        "Conv2d"
    }

    fn describe(&self) -> String {
        format!(
            "Conv2d({} → {}, {}×{}, stride {:?}, padding {:?})",
            self.in_channels, self.out_channels, self.kernel.0, self.kernel.1, self.opts.stride, self.opts.padding
        )
    }

    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        self.saved = None;
        if x.shape().len() != 4 || x.shape()[1] != self.in_channels {
            return Err(NnError::Invalid {
                what: "Conv2d",
                reason: format!("input {:?} is not [batch, {}, h, w]", x.shape(), self.in_channels),
            });
        }
        let opts = self.opts;
        let (y, saved) = affine_forward(x, &self.weight, self.bias.as_ref(), |x, w| Ok(x.conv2d(w, opts)?))?;
        self.saved = saved.map(|s| (s, x.shape().to_vec()));
        Ok(y)
    }

    fn backward(&mut self, gy: Tensor, need_input_grad: bool) -> Result<Option<Tensor>> {
        let (saved, x_shape) = self.saved.take().ok_or_else(|| missing("Conv2d"))?;
        let w_shape = self.weight.shape().to_vec();
        let opts = self.opts;
        affine_backward(
            saved,
            gy,
            need_input_grad,
            &mut self.weight,
            self.bias.as_mut(),
            |x, gy| Ok(Tensor::conv2d_backward_weight(x, gy, &w_shape, opts)?),
            |w, gy| Ok(Tensor::conv2d_backward_data(w, gy, &x_shape, opts)?),
        )
    }

    fn parameters(&self) -> Vec<&Parameter> {
        std::iter::once(&self.weight).chain(self.bias.as_ref()).collect()
    }

    fn parameters_mut(&mut self) -> Vec<&mut Parameter> {
        std::iter::once(&mut self.weight).chain(self.bias.as_mut()).collect()
    }

    fn saves_input(&self) -> bool {
        true
    }

    fn saved_tensors(&self) -> Vec<&Tensor> {
        self.saved.as_ref().map(|(s, _)| s.tensors()).unwrap_or_default()
    }

    fn clear_saved(&mut self) {
        self.saved = None;
    }
}

/// What tells one elementwise activation from another: its name, its kernel,
/// its backward and which tensor that backward needs. [`Activation`] is the
/// one module around them; [`ReLU`] and [`GELU`] are its two kinds.
pub trait ActivationFn: Send + 'static {
    /// The layer's name ([`Module::name`]).
    const NAME: &'static str;
    /// Whether backward needs the output (`true`) or the input (`false`).
    const SAVES_OUTPUT: bool;
    /// `y = f(x)`.
    fn forward(x: &Tensor) -> Result<Tensor>;
    /// The input gradient from the saved tensor (the output or the input, as
    /// [`SAVES_OUTPUT`](Self::SAVES_OUTPUT) says) and `gy` in its dtype.
    fn backward(saved: &Tensor, gy: &Tensor) -> Result<Tensor>;
}

/// [`ReLU`]'s function: `max(x, 0)`, backward `gy · [y > 0]` from its output.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReluFn;

impl ActivationFn for ReluFn {
    const NAME: &'static str = "ReLU";
    const SAVES_OUTPUT: bool = true;

    fn forward(x: &Tensor) -> Result<Tensor> {
        Ok(x.relu()?)
    }

    fn backward(y: &Tensor, gy: &Tensor) -> Result<Tensor> {
        // y > 0 exactly where x > 0.
        Ok(y.relu_backward(gy)?)
    }
}

/// [`GELU`]'s function: GELU, tanh approximation, backward
/// `gelu_backward(x, gy)` from its input.
#[derive(Debug, Clone, Copy, Default)]
pub struct GeluFn;

impl ActivationFn for GeluFn {
    const NAME: &'static str = "GELU";
    const SAVES_OUTPUT: bool = false;

    fn forward(x: &Tensor) -> Result<Tensor> {
        Ok(x.gelu()?)
    }

    fn backward(x: &Tensor, gy: &Tensor) -> Result<Tensor> {
        Ok(x.gelu_backward(gy)?)
    }
}

/// An elementwise activation layer, `A` its function: saves the one tensor its
/// backward needs (the output or the input) with grad mode on. Used as
/// [`ReLU`] and [`GELU`].
pub struct Activation<A> {
    saved: Option<Tensor>,
    kind: PhantomData<fn() -> A>,
}

/// `max(x, 0)` (`torch.nn.ReLU`). Saves its output, as PyTorch does: the next
/// layer usually saves the same tensor as its input, so it costs nothing extra.
pub type ReLU = Activation<ReluFn>;

/// GELU, tanh approximation (`torch.nn.GELU(approximate='tanh')`). Saves its input.
pub type GELU = Activation<GeluFn>;

impl<A: ActivationFn> Activation<A> {
    pub fn new() -> Self {
        Activation { saved: None, kind: PhantomData }
    }
}

impl<A: ActivationFn> Default for Activation<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: ActivationFn> std::fmt::Debug for Activation<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(A::NAME).field("saved", &self.saved).finish()
    }
}

impl<A: ActivationFn> Module for Activation<A> {
    fn name(&self) -> &'static str {
        A::NAME
    }

    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        self.saved = None;
        let y = A::forward(x)?;
        if is_grad_enabled() {
            self.saved = Some(if A::SAVES_OUTPUT { y.clone() } else { x.clone() });
        }
        Ok(y)
    }

    fn backward(&mut self, gy: Tensor, need_input_grad: bool) -> Result<Option<Tensor>> {
        let saved = self.saved.take().ok_or_else(|| missing(A::NAME))?;
        if !need_input_grad {
            return Ok(None);
        }
        let gy = grad_in(gy, saved.dtype())?;
        Ok(Some(A::backward(&saved, &gy)?))
    }

    fn saves_input(&self) -> bool {
        !A::SAVES_OUTPUT
    }

    fn saves_output(&self) -> bool {
        A::SAVES_OUTPUT
    }

    fn saved_tensors(&self) -> Vec<&Tensor> {
        self.saved.iter().collect()
    }

    fn clear_saved(&mut self) {
        self.saved = None;
    }
}

/// 2-d max pooling with a square window (`torch.nn.MaxPool2d(kernel, stride)`).
/// Saves the argmax indices (i64, like PyTorch) and the input shape. With grad
/// mode on, the output and the indices are allocated under `activation` (the
/// indices are saved; the output is, in every model here, the next layer's
/// saved input).
#[derive(Debug)]
pub struct MaxPool2d {
    kernel: usize,
    stride: usize,
    /// Indices, input shape, input dtype.
    saved: Option<(Tensor, Vec<usize>, DType)>,
}

impl MaxPool2d {
    pub fn new(kernel: usize, stride: usize) -> MaxPool2d {
        MaxPool2d { kernel, stride, saved: None }
    }
}

impl Module for MaxPool2d {
    fn name(&self) -> &'static str {
        "MaxPool2d"
    }

    fn describe(&self) -> String {
        format!("MaxPool2d({}×{}, stride {})", self.kernel, self.kernel, self.stride)
    }

    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        self.saved = None;
        let grad = is_grad_enabled();
        let _t = grad.then(|| tag_scope(Tag::Activation));
        let (y, indices) = x.max_pool2d(self.kernel, self.stride)?;
        if grad {
            self.saved = Some((indices, x.shape().to_vec(), x.dtype()));
        }
        Ok(y)
    }

    fn backward(&mut self, gy: Tensor, need_input_grad: bool) -> Result<Option<Tensor>> {
        let (indices, x_shape, dtype) = self.saved.take().ok_or_else(|| missing("MaxPool2d"))?;
        if !need_input_grad {
            return Ok(None);
        }
        let gy = grad_in(gy, dtype)?;
        Ok(Some(Tensor::max_pool2d_backward(&indices, &gy, &x_shape, self.kernel, self.stride)?))
    }

    fn saved_tensors(&self) -> Vec<&Tensor> {
        self.saved.iter().map(|(i, _, _)| i).collect()
    }

    fn clear_saved(&mut self) {
        self.saved = None;
    }
}

/// `[n, …] → [n, ∏…]` (`torch.nn.Flatten()`): a reshape sharing the storage.
#[derive(Debug, Default)]
pub struct Flatten {
    saved: Option<Vec<usize>>,
}

impl Flatten {
    pub fn new() -> Flatten {
        Flatten::default()
    }
}

impl Module for Flatten {
    fn name(&self) -> &'static str {
        "Flatten"
    }

    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let Some((&n, rest)) = x.shape().split_first() else {
            return Err(NnError::Invalid { what: "Flatten", reason: "a 0-d tensor has no batch dimension".into() });
        };
        self.saved = is_grad_enabled().then(|| x.shape().to_vec());
        Ok(x.reshape(&[n, rest.iter().product()])?)
    }

    fn backward(&mut self, gy: Tensor, need_input_grad: bool) -> Result<Option<Tensor>> {
        let shape = self.saved.take().ok_or_else(|| missing("Flatten"))?;
        if !need_input_grad {
            return Ok(None);
        }
        Ok(Some(gy.reshape(&shape)?))
    }

    fn is_view(&self) -> bool {
        true
    }

    fn clear_saved(&mut self) {
        self.saved = None;
    }
}
