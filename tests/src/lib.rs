//! End-to-end tests for vramlab live in `tests/tests/`; this library holds their
//! shared helpers.
