//! The conformance suite: PyTorch's own allocator tests, converted to vramlab's
//! allocator model. Each test names its source (`file::Class.test` and the
//! pytorch/pytorch commit read) and asserts what PyTorch's test asserts, relative
//! assertions kept relative; assertions that PyTorch's test does not make but that
//! follow from PyTorch's allocator source are marked "from the source". After every
//! allocator operation the harness runs PyTorch's `_check_memory_stat_consistency`
//! ([`vramlab_allocator::check_memory_stat_consistency`]). CONFORMANCE.md at the
//! repository root lists every memory test of those files and what became of it.

mod allocator_config_test;
mod harness;
mod test_block_state_absorption;
mod test_cuda;
mod test_cuda_expandable_segments;
mod test_cuda_graphs;
mod test_cuda_multigpu;
mod test_mempool;
