//! The [`Module`] trait and [`Sequential`].

use std::fmt;

use super::mode::is_grad_enabled;
use super::{Parameter, Result};
use vramlab_engine::device::Device;
use vramlab_engine::hooks::Tag;
use vramlab_engine::tensor::{Tensor, current_tag, tag_scope};

/// A layer or a model: forward, backward, parameters (`torch.nn.Module` with
/// the autograd of its forward written out by hand; see the
/// [module docs](super#backward-explicit-per-module)).
///
/// **Tags.** A module's output is allocated under the calling thread's
/// `tag_scope`, which [`Sequential`] sets per layer: `activation` when the
/// output is saved for backward (by this layer or the next), `temporary`
/// otherwise. What a module saves besides its output (a casted input,
/// pooling indices) it allocates under `activation` itself, and its
/// parameter gradients under `gradient`.
pub trait Module: Send {
    /// The layer's kind (`Linear`, `ReLU`, …).
    fn name(&self) -> &'static str;

    /// One line: kind and sizes (`Linear(784 → 1024)`).
    fn describe(&self) -> String {
        self.name().to_owned()
    }

    /// Computes the output. With grad mode on, saves what [`backward`](Self::backward)
    /// needs (one pending forward per module: a second forward replaces the
    /// first's saved tensors); with it off (`no_grad`), saves nothing.
    fn forward(&mut self, x: &Tensor) -> Result<Tensor>;

    /// Consumes what the forward saved: accumulates the parameters' gradients
    /// from the output gradient `gy` and returns the input's gradient when
    /// `need_input_grad` (the first layer of a model skips that product).
    fn backward(&mut self, gy: Tensor, need_input_grad: bool) -> Result<Option<Tensor>>;

    fn parameters(&self) -> Vec<&Parameter> {
        Vec::new()
    }

    fn parameters_mut(&mut self) -> Vec<&mut Parameter> {
        Vec::new()
    }

    /// Whether it has any parameter (so gradients must flow into it).
    fn has_parameters(&self) -> bool {
        !self.parameters().is_empty()
    }

    /// Whether backward needs this module's input (then the previous layer's
    /// output is an activation, not a temporary).
    fn saves_input(&self) -> bool {
        false
    }

    /// Whether backward needs this module's output.
    fn saves_output(&self) -> bool {
        false
    }

    /// Whether the output shares the input's storage (a reshape): such a layer
    /// passes the question "is my input saved?" on to the next one.
    fn is_view(&self) -> bool {
        false
    }

    /// The tensors held for backward right now.
    fn saved_tensors(&self) -> Vec<&Tensor> {
        Vec::new()
    }

    /// Drops what the forward saved (PyTorch frees a graph when the loss dies).
    fn clear_saved(&mut self) {}

    /// `model.to(device)`: moves every parameter (and gradient) and drops saved
    /// tensors. Build optimizers after moving, as the guides say.
    fn to(&mut self, device: &Device) -> Result<()> {
        self.clear_saved();
        for p in self.parameters_mut() {
            p.to(device)?;
        }
        Ok(())
    }

    /// `model.zero_grad(set_to_none)`.
    fn zero_grad(&mut self, set_to_none: bool) -> Result<()> {
        for p in self.parameters_mut() {
            p.zero_grad(set_to_none)?;
        }
        Ok(())
    }

    /// Number of parameter elements.
    fn num_parameters(&self) -> usize {
        self.parameters().iter().map(|p| p.numel()).sum()
    }

    /// Bytes the allocator holds for parameters (rounded blocks).
    fn parameter_bytes(&self) -> u64 {
        self.parameters().iter().map(|p| p.data().allocated_bytes()).sum()
    }

    /// Bytes the allocator holds for gradients (rounded blocks).
    fn gradient_bytes(&self) -> u64 {
        self.parameters().iter().filter_map(|p| p.grad()).map(Tensor::allocated_bytes).sum()
    }
}

/// Layers run in order (`torch.nn.Sequential`). Backward runs them in reverse,
/// freeing each layer's saved tensors and each intermediate gradient as soon
/// as it has been used.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
}

impl fmt::Debug for Sequential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.layers.iter().map(|l| l.describe())).finish()
    }
}

impl Sequential {
    pub fn new() -> Sequential {
        Sequential::default()
    }

    /// Appends a layer (builder style).
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, layer: impl Module + 'static) -> Sequential {
        self.layers.push(Box::new(layer));
        self
    }

    /// Appends a boxed layer.
    pub fn push(&mut self, layer: Box<dyn Module>) {
        self.layers.push(layer);
    }

    pub fn layers(&self) -> &[Box<dyn Module>] {
        &self.layers
    }

    pub fn layers_mut(&mut self) -> &mut [Box<dyn Module>] {
        &mut self.layers
    }

    pub fn len(&self) -> usize {
        self.layers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Whether the consumer of layer `i - 1`'s output (layer `i`, looking through
    /// views) saves it. Past the end, the caller's tag decides.
    fn consumer_saves_input(&self, mut i: usize) -> Option<bool> {
        while let Some(layer) = self.layers.get(i) {
            if !layer.is_view() {
                return Some(layer.saves_input());
            }
            i += 1;
        }
        None
    }
}

impl Module for Sequential {
    fn name(&self) -> &'static str {
        "Sequential"
    }

    fn describe(&self) -> String {
        let inner: Vec<String> = self.layers.iter().map(|l| l.describe()).collect();
        format!("Sequential({})", inner.join(", "))
    }

    /// Runs the layers, dropping each intermediate once the next layer has it:
    /// with grad mode off nothing else holds it, so it is freed right there.
    ///
    /// Tags: each layer's output is `activation` when grad mode is on and
    /// backward will need it (the layer saves its output, or the next non-view
    /// layer saves its input), else `temporary`. The last layer's output takes
    /// the caller's tag if one is set, else `activation` in grad mode (the
    /// losses save their input) and `temporary` without.
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let grad = is_grad_enabled();
        let n = self.layers.len();
        let last = current_tag().unwrap_or(if grad { Tag::Activation } else { Tag::Temporary });
        let tags: Vec<Tag> = (0..n)
            .map(|i| {
                let saves_output = grad && self.layers[i].saves_output();
                match self.consumer_saves_input(i + 1) {
                    // The output leaves this Sequential (perhaps through views).
                    None if saves_output => Tag::Activation,
                    None => last,
                    Some(next_saves) if saves_output || (grad && next_saves) => Tag::Activation,
                    Some(_) => Tag::Temporary,
                }
            })
            .collect();
        let mut h = x.clone();
        for (layer, tag) in self.layers.iter_mut().zip(tags) {
            let _t = tag_scope(tag);
            h = layer.forward(&h)?;
        }
        Ok(h)
    }

    fn backward(&mut self, gy: Tensor, need_input_grad: bool) -> Result<Option<Tensor>> {
        let _t = tag_scope(Tag::Temporary);
        // Layer i's input gradient is needed only if some earlier layer has
        // parameters (or the caller wants it): autograd's requires_grad. The
        // first Linear after a Flatten skips its input-gradient product.
        let first_trainable = self.layers.iter().position(|l| l.has_parameters());
        let mut g = gy;
        for i in (0..self.layers.len()).rev() {
            let need = need_input_grad || first_trainable.is_some_and(|f| f < i);
            match self.layers[i].backward(g, need)? {
                Some(gx) => g = gx,
                None => {
                    // Earlier layers still hold saved tensors only if the chain was
                    // cut on purpose; free them.
                    for l in &mut self.layers[..i] {
                        l.clear_saved();
                    }
                    return Ok(None);
                }
            }
        }
        Ok(Some(g))
    }

    fn parameters(&self) -> Vec<&Parameter> {
        self.layers.iter().flat_map(|l| l.parameters()).collect()
    }

    fn parameters_mut(&mut self) -> Vec<&mut Parameter> {
        self.layers.iter_mut().flat_map(|l| l.parameters_mut()).collect()
    }

    fn saves_input(&self) -> bool {
        self.consumer_saves_input(0).unwrap_or(false)
    }

    fn saves_output(&self) -> bool {
        self.layers.last().is_some_and(|l| l.saves_output())
    }

    fn saved_tensors(&self) -> Vec<&Tensor> {
        self.layers.iter().flat_map(|l| l.saved_tensors()).collect()
    }

    fn clear_saved(&mut self) {
        for l in &mut self.layers {
            l.clear_saved();
        }
    }
}
