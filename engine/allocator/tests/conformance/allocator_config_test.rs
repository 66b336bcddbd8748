//! `c10/test/core/AllocatorConfig_test.cpp` (pytorch/pytorch commit
//! 8266849bda90b66701d82c9a839849b115a765c7, the `AcceleratorAllocatorConfig` version
//! of PyTorch 2.9–2.11 that `AllocatorConfig::parse` models):
//! `AllocatorConfigTest.allocator_config_test`.
//!
//! Each `setAllocatorSettings(env)` there re-parses from the defaults, as
//! [`AllocatorConfig::parse`] does. Not converted: the `device_specific_option_mb`
//! key, which the test registers itself through `REGISTER_ALLOCATOR_CONFIG_PARSE_HOOK`
//! (an extension point for other devices; vramlab refuses unknown keys, as the CUDA
//! parser does from PyTorch 2.10); and `getAllocatorSettings() == env`, since vramlab
//! keeps the parsed config rather than the string (its canonical text round-trips
//! instead, asserted below).

use vramlab_allocator::AllocatorConfig;
use vramlab_allocator::consts::MIB;

fn parse(env: &str) -> AllocatorConfig {
    let config = AllocatorConfig::parse(env).unwrap_or_else(|e| panic!("{env}: {e}"));
    // vramlab's own: the canonical text reads back to the same config.
    assert_eq!(AllocatorConfig::parse(&config.to_string()).unwrap(), config, "{env}");
    config
}

#[test]
fn allocator_config_test() {
    const K_MB: u64 = MIB;
    let env = "max_split_size_mb:40,\
               max_non_split_rounding_mb:30,\
               garbage_collection_threshold:0.5,\
               roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1],\
               expandable_segments:True,\
               pinned_use_background_threads:True";
    let config = parse(env);
    assert_eq!(config.max_split_size, Some(40 * K_MB));
    assert_eq!(config.max_non_split_rounding, 30 * K_MB);
    assert_eq!(config.garbage_collection_threshold, Some(0.5));
    assert_eq!(config.roundup_divisions_for(32 * K_MB), 8);
    assert_eq!(config.roundup_divisions_for(64 * K_MB), 8);
    assert_eq!(config.roundup_divisions_for(128 * K_MB), 2);
    assert_eq!(config.roundup_divisions_for(256 * K_MB), 4);
    assert_eq!(config.roundup_divisions_for(512 * K_MB), 2);
    assert_eq!(config.roundup_divisions_for(1024 * K_MB), 4);
    assert_eq!(config.roundup_divisions_for(2048 * K_MB), 1);
    assert_eq!(config.roundup_divisions_for(4096 * K_MB), 1);
    assert_eq!(config.roundup_divisions_for(8192 * K_MB), 1);
    assert!(config.expandable_segments);
    // pinned_use_background_threads: accepted; pinned host memory is not modelled.

    let env = "max_split_size_mb:20,\
               max_non_split_rounding_mb:40,\
               garbage_collection_threshold:0.8";
    let config = parse(env);
    assert_eq!(config.max_split_size, Some(20 * K_MB));
    assert_eq!(config.max_non_split_rounding, 40 * K_MB);
    assert_eq!(config.garbage_collection_threshold, Some(0.8));

    // roundup_power2_divisions knob array syntax
    let env = "roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]";
    let config = parse(env);
    assert_eq!(config.roundup_divisions_for(64 * K_MB), 8);
    assert_eq!(config.roundup_divisions_for(128 * K_MB), 8);
    assert_eq!(config.roundup_divisions_for(256 * K_MB), 16);
    assert_eq!(config.roundup_divisions_for(512 * K_MB), 1);
    assert_eq!(config.roundup_divisions_for(1024 * K_MB), 0);
    assert_eq!(config.roundup_divisions_for(2048 * K_MB), 8);
    assert_eq!(config.roundup_divisions_for(4096 * K_MB), 2);

    // roundup_power2_divisions single value syntax for backward compatibility
    let env = "roundup_power2_divisions:4";
    let config = parse(env);
    assert_eq!(config.roundup_divisions_for(64 * K_MB), 4);
    assert_eq!(config.roundup_divisions_for(256 * K_MB), 4);
    assert_eq!(config.roundup_divisions_for(2048 * K_MB), 4);

    let env = "expandable_segments:False,";
    let config = parse(env);
    assert!(!config.expandable_segments);

    let env = "pinned_use_background_threads:False";
    parse(env);
}

/// From the source (`AcceleratorAllocatorConfig::parseArgs` and its checks): the
/// refusals the test file does not exercise, with PyTorch's texts where PyTorch
/// words them.
#[test]
fn refusals_follow_the_parser() {
    for (env, fragment) in [
        // PyTorch's own texts (c10/core/AllocatorConfig.cpp, c10/cuda/CUDAAllocatorConfig.cpp).
        ("max_split_size_mb:19", "CachingAllocator option max_split_size_mb too small, must be >= 20"),
        ("max_non_split_rounding_mb:19", "CachingAllocator option max_non_split_rounding_mb too small, must be >= 20"),
        ("garbage_collection_threshold:1.0", "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"),
        ("garbage_collection_threshold:0", "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"),
        ("roundup_power2_divisions:3", "For roundups, the divisions has to be power of 2"),
        ("roundup_power2_divisions:[64:3]", "For roundups, the divisions has to be power of 2 or 0 to disable roundup"),
        ("roundup_power2_divisions:[63:4]", "For roundups, the intervals have to be power of 2"),
        ("device_specific_option_mb:64", "Unrecognized key 'device_specific_option_mb' in CUDA allocator config."),
        ("pinned_num_register_threads:3", "Number of register threads has to be power of 2, got 3"),
        ("pinned_reserve_segment_size_mb:0", "Pinned reserve segment size has to be greater than 0"),
        ("backend:foo", "Unknown allocator backend, options are native and cudaMallocAsync"),
        ("expandable_segments:true", "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'"),
        ("per_process_memory_fraction:1.5", "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"),
        // vramlab's own (not in the version read).
        ("large_segment_size_mb:10", "greater than 10"),
    ] {
        let err = AllocatorConfig::parse(env).expect_err(env).to_string();
        assert!(err.contains(fragment), "{env}: {err}");
    }
}
