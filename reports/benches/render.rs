//! placeholder until written
fn main() {}
