//! The suites, one module per claim.

mod devices;

use crate::suite::Suite;

/// Every suite, in run order.
pub fn all() -> Vec<Box<dyn Suite>> {
    vec![Box::new(devices::DevicesSuite)]
}
