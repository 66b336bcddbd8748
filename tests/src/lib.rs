//! End-to-end tests for vramlab live in `tests/tests/`: they build and run the
//! real `cargo xtask` binary (in release, as users run it) and check what it
//! writes. This library is empty on purpose.
