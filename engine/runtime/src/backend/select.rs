//! Which backend a device's tensor ops dispatch to: [`Device::backend`].
//!
//! Kept beside the backends rather than in `device.rs`, so that devices know
//! nothing of the backend trait and the backends may use devices.

use super::Backend;
use super::cpu::CpuBackend;
use crate::device::Device;

impl Device {
    /// The backend its tensor ops dispatch to: the GPU's, or the host's.
    #[inline]
    pub(crate) fn backend(&self) -> &dyn Backend {
        match self.cuda() {
            Some(gpu) => gpu,
            None => &CpuBackend,
        }
    }
}
