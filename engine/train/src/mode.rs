//! Thread-local modes: grad mode (`torch.no_grad()`) and autocast
//! (`torch.autocast(device_type, dtype)`).
//!
//! Both are guards, like the engine's `tag_scope`: the mode holds on this thread
//! until the guard drops, and guards nest (dropping restores the previous mode).

use std::cell::Cell;

use super::{NnError, Result};
use vramlab_engine::tensor::DType;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
    static AUTOCAST: Cell<Option<DType>> = const { Cell::new(None) };
}

/// Whether layers save what their backward needs on this thread (`torch.is_grad_enabled()`).
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(Cell::get)
}

/// Restores the previous grad mode when dropped.
#[derive(Debug)]
#[must_use = "grad mode is changed only until the guard is dropped"]
pub struct GradModeGuard {
    previous: bool,
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.previous));
    }
}

/// `torch.set_grad_enabled(enabled)` as a guard.
pub fn set_grad_enabled(enabled: bool) -> GradModeGuard {
    GradModeGuard { previous: GRAD_ENABLED.with(|g| g.replace(enabled)) }
}

/// `with torch.no_grad():` — until the guard drops, layers save nothing for
/// backward, so every activation is freed as soon as the next layer has consumed it.
pub fn no_grad() -> GradModeGuard {
    set_grad_enabled(false)
}

/// `with torch.enable_grad():` inside a `no_grad` region.
pub fn enable_grad() -> GradModeGuard {
    set_grad_enabled(true)
}

/// The autocast dtype on this thread, if autocast is on.
pub fn autocast_dtype() -> Option<DType> {
    AUTOCAST.with(Cell::get)
}

/// Restores the previous autocast state when dropped.
#[derive(Debug)]
#[must_use = "autocast is on only until the guard is dropped"]
pub struct AutocastGuard {
    previous: Option<DType>,
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        AUTOCAST.with(|a| a.set(self.previous));
    }
}

/// `with torch.autocast(device_type, dtype=dtype):` — matmul and conv layers run
/// in `dtype` (float16 or bfloat16) until the guard drops; see the op list in the
/// [module docs](super#mixed-precision-autocast).
pub fn autocast(dtype: DType) -> Result<AutocastGuard> {
    set_autocast(Some(dtype))
}

/// Autocast on with `dtype`, or off with `None` (`torch.autocast(..., enabled=False)`
/// inside an autocast region).
pub fn set_autocast(dtype: Option<DType>) -> Result<AutocastGuard> {
    if let Some(d) = dtype
        && !matches!(d, DType::F16 | DType::BF16)
    {
        return Err(NnError::AutocastDType { dtype: d });
    }
    Ok(AutocastGuard { previous: AUTOCAST.with(|a| a.replace(dtype)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_nest_and_restore() {
        assert!(is_grad_enabled());
        {
            let _a = no_grad();
            assert!(!is_grad_enabled());
            {
                let _b = enable_grad();
                assert!(is_grad_enabled());
            }
            assert!(!is_grad_enabled());
        }
        assert!(is_grad_enabled());
        assert_eq!(autocast_dtype(), None);
        {
            let _g = autocast(DType::BF16).unwrap();
            assert_eq!(autocast_dtype(), Some(DType::BF16));
            let _off = set_autocast(None).unwrap();
            assert_eq!(autocast_dtype(), None);
        }
        assert_eq!(autocast_dtype(), None);
        assert!(matches!(autocast(DType::F32), Err(NnError::AutocastDType { .. })));
    }
}
