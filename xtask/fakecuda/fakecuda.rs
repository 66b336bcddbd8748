//! The stand-in for the CUDA runtime and driver entry points torch calls when its
//! CUDA tensors are fake (`vramlab estimate`'s capture): device count and
//! properties, the current device, streams, events, stream-capture status, context
//! state, memory info. No GPU, no CUDA toolkit: `xtask/build.rs` compiles this file
//! with `$RUSTC --crate-type cdylib` and the capture writes the library twice, as the
//! child's `LD_PRELOAD` (its `cuda*` symbols come before libcudart's) and as
//! `libcuda.so.1` on its `LD_LIBRARY_PATH` (torch dlopens the driver for
//! `cuDevicePrimaryCtxGetState`). The assumed GPU comes from the environment:
//! `VRAMLAB_FAKECUDA_GPU=NAME;TOTAL_BYTES;SM_COUNT;MAJOR;MINOR`.
//!
//! Whatever would touch device memory or run a kernel (cudaMalloc, copies, launches)
//! fails with `cudaErrorNotSupported`: under the capture nothing may, so a call that
//! escapes the fake tensors is an error torch reports, never a silent wrong answer.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

const SUCCESS: c_int = 0;
const INVALID_VALUE: c_int = 1;
const INVALID_DEVICE: c_int = 101;
const NOT_SUPPORTED: c_int = 801;
const SYMBOL_NOT_FOUND: c_int = 500;

struct Gpu {
    name: [u8; 256],
    total: usize,
    sms: c_int,
    major: c_int,
    minor: c_int,
}

fn gpu() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| {
        let spec = std::env::var("VRAMLAB_FAKECUDA_GPU").unwrap_or_default();
        let mut parts = spec.split(';');
        let name_s = parts.next().filter(|s| !s.is_empty()).unwrap_or("NVIDIA H100 80GB HBM3");
        let num = |p: Option<&str>, d: u64| p.and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(d);
        let total = num(parts.next(), 85_017_755_648) as usize;
        let sms = num(parts.next(), 132) as c_int;
        let major = num(parts.next(), 9) as c_int;
        let minor = num(parts.next(), 0) as c_int;
        let mut name = [0u8; 256];
        let n = name_s.len().min(255);
        name[..n].copy_from_slice(&name_s.as_bytes()[..n]);
        Gpu { name, total, sms, major, minor }
    })
}

thread_local! {
    static CURRENT: std::cell::Cell<c_int> = const { std::cell::Cell::new(0) };
}

/// Opaque non-null handles for streams, events and graphs.
fn handle() -> *mut c_void {
    static NEXT: AtomicUsize = AtomicUsize::new(0x1000);
    NEXT.fetch_add(0x10, Ordering::Relaxed) as *mut c_void
}

/// `cudaDeviceProp` as CUDA 13's `driver_types.h` lays it out.
#[repr(C)]
pub struct DeviceProp {
    name: [u8; 256],
    uuid: [u8; 16],
    luid: [u8; 8],
    luid_device_node_mask: c_uint,
    total_global_mem: usize,
    shared_mem_per_block: usize,
    regs_per_block: c_int,
    warp_size: c_int,
    mem_pitch: usize,
    max_threads_per_block: c_int,
    max_threads_dim: [c_int; 3],
    max_grid_size: [c_int; 3],
    total_const_mem: usize,
    major: c_int,
    minor: c_int,
    texture_alignment: usize,
    texture_pitch_alignment: usize,
    multi_processor_count: c_int,
    integrated: c_int,
    can_map_host_memory: c_int,
    max_texture1d: c_int,
    max_texture1d_mipmap: c_int,
    max_texture2d: [c_int; 2],
    max_texture2d_mipmap: [c_int; 2],
    max_texture2d_linear: [c_int; 3],
    max_texture2d_gather: [c_int; 2],
    max_texture3d: [c_int; 3],
    max_texture3d_alt: [c_int; 3],
    max_texture_cubemap: c_int,
    max_texture1d_layered: [c_int; 2],
    max_texture2d_layered: [c_int; 3],
    max_texture_cubemap_layered: [c_int; 2],
    max_surface1d: c_int,
    max_surface2d: [c_int; 2],
    max_surface3d: [c_int; 3],
    max_surface1d_layered: [c_int; 2],
    max_surface2d_layered: [c_int; 3],
    max_surface_cubemap: c_int,
    max_surface_cubemap_layered: [c_int; 2],
    surface_alignment: usize,
    concurrent_kernels: c_int,
    ecc_enabled: c_int,
    pci_bus_id: c_int,
    pci_device_id: c_int,
    pci_domain_id: c_int,
    tcc_driver: c_int,
    async_engine_count: c_int,
    unified_addressing: c_int,
    memory_bus_width: c_int,
    l2_cache_size: c_int,
    persisting_l2_cache_max_size: c_int,
    max_threads_per_multi_processor: c_int,
    stream_priorities_supported: c_int,
    global_l1_cache_supported: c_int,
    local_l1_cache_supported: c_int,
    shared_mem_per_multiprocessor: usize,
    regs_per_multiprocessor: c_int,
    managed_memory: c_int,
    is_multi_gpu_board: c_int,
    multi_gpu_board_group_id: c_int,
    host_native_atomic_supported: c_int,
    pageable_memory_access: c_int,
    concurrent_managed_access: c_int,
    compute_preemption_supported: c_int,
    can_use_host_pointer_for_registered_mem: c_int,
    cooperative_launch: c_int,
    shared_mem_per_block_optin: usize,
    pageable_memory_access_uses_host_page_tables: c_int,
    direct_managed_mem_access_from_host: c_int,
    max_blocks_per_multi_processor: c_int,
    access_policy_max_window_size: c_int,
    reserved_shared_mem_per_block: usize,
    tail: [c_int; 17 + 56],
}

const GPU_ATTR_MAX_THREADS_PER_BLOCK: c_int = 1;
const GPU_ATTR_WARP_SIZE: c_int = 10;
const GPU_ATTR_SMS: c_int = 16;
const GPU_ATTR_L2: c_int = 38;
const GPU_ATTR_THREADS_PER_SM: c_int = 39;
const GPU_ATTR_MAJOR: c_int = 75;
const GPU_ATTR_MINOR: c_int = 76;
const GPU_ATTR_SHARED_PER_SM: c_int = 81;
const GPU_ATTR_SHARED_OPTIN: c_int = 97;
const GPU_ATTR_BLOCKS_PER_SM: c_int = 106;

fn attribute(attr: c_int) -> c_int {
    let g = gpu();
    match attr {
        GPU_ATTR_MAX_THREADS_PER_BLOCK => 1024,
        GPU_ATTR_WARP_SIZE => 32,
        GPU_ATTR_SMS => g.sms,
        GPU_ATTR_L2 => 50 << 20,
        GPU_ATTR_THREADS_PER_SM => 2048,
        GPU_ATTR_MAJOR => g.major,
        GPU_ATTR_MINOR => g.minor,
        GPU_ATTR_SHARED_PER_SM => 233_472,
        GPU_ATTR_SHARED_OPTIN => 232_448,
        GPU_ATTR_BLOCKS_PER_SM => 32,
        _ => 0,
    }
}

unsafe fn put<T>(p: *mut T, v: T) {
    if !p.is_null() {
        unsafe { p.write(v) };
    }
}

fn device_ok(d: c_int) -> bool {
    d == 0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGetDeviceCount(count: *mut c_int) -> c_int {
    unsafe { put(count, 1) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGetDevice(device: *mut c_int) -> c_int {
    unsafe { put(device, CURRENT.with(|c| c.get())) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaSetDevice(device: c_int) -> c_int {
    if !device_ok(device) {
        return INVALID_DEVICE;
    }
    CURRENT.with(|c| c.set(device));
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGetDeviceProperties(prop: *mut DeviceProp, device: c_int) -> c_int {
    if prop.is_null() {
        return INVALID_VALUE;
    }
    if !device_ok(device) {
        return INVALID_DEVICE;
    }
    let g = gpu();
    // SAFETY: the caller passes a cudaDeviceProp; every field is plain data.
    unsafe {
        std::ptr::write_bytes(prop, 0, 1);
        let p = &mut *prop;
        p.name = g.name;
        p.uuid = *b"vramlab-fakegpu0";
        p.total_global_mem = g.total;
        p.shared_mem_per_block = 49_152;
        p.regs_per_block = 65_536;
        p.warp_size = 32;
        p.mem_pitch = 2_147_483_647;
        p.max_threads_per_block = 1024;
        p.max_threads_dim = [1024, 1024, 64];
        p.max_grid_size = [2_147_483_647, 65_535, 65_535];
        p.total_const_mem = 65_536;
        p.major = g.major;
        p.minor = g.minor;
        p.texture_alignment = 512;
        p.multi_processor_count = g.sms;
        p.concurrent_kernels = 1;
        p.async_engine_count = 2;
        p.unified_addressing = 1;
        p.memory_bus_width = 5120;
        p.l2_cache_size = 50 << 20;
        p.max_threads_per_multi_processor = 2048;
        p.stream_priorities_supported = 1;
        p.shared_mem_per_multiprocessor = 233_472;
        p.regs_per_multiprocessor = 65_536;
        p.managed_memory = 1;
        p.shared_mem_per_block_optin = 232_448;
        p.max_blocks_per_multi_processor = 32;
    }
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaDeviceGetAttribute(value: *mut c_int, attr: c_int, device: c_int) -> c_int {
    if !device_ok(device) {
        return INVALID_DEVICE;
    }
    unsafe { put(value, attribute(attr)) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaDriverGetVersion(v: *mut c_int) -> c_int {
    unsafe { put(v, 13000) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaRuntimeGetVersion(v: *mut c_int) -> c_int {
    unsafe { put(v, 13000) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> c_int {
    unsafe {
        put(free, gpu().total);
        put(total, gpu().total);
    }
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaDeviceGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> c_int {
    unsafe {
        put(least, 0);
        put(greatest, -5);
    }
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaStreamCreateWithPriority(s: *mut *mut c_void, _flags: c_uint, _prio: c_int) -> c_int {
    unsafe { put(s, handle()) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaEventCreate(e: *mut *mut c_void) -> c_int {
    unsafe { put(e, handle()) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaEventCreateWithFlags(e: *mut *mut c_void, _flags: c_uint) -> c_int {
    unsafe { put(e, handle()) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaEventElapsedTime(ms: *mut f32, _a: *mut c_void, _b: *mut c_void) -> c_int {
    unsafe { put(ms, 0.0) };
    SUCCESS
}

/// The stream-capture queries: no stream is ever capturing (`cudaStreamCaptureStatusNone`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaStreamIsCapturing(_s: *mut c_void, status: *mut c_int) -> c_int {
    unsafe { put(status, 0) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaStreamGetCaptureInfo(
    _s: *mut c_void,
    status: *mut c_int,
    id: *mut c_ulonglong,
    graph: *mut *mut c_void,
    deps: *mut *const c_void,
    edges: *mut *const c_void,
    count: *mut usize,
) -> c_int {
    unsafe {
        put(status, 0);
        put(id, 0);
        put(graph, std::ptr::null_mut());
        put(deps, std::ptr::null());
        put(edges, std::ptr::null());
        put(count, 0);
    }
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaThreadExchangeStreamCaptureMode(mode: *mut c_int) -> c_int {
    let _ = mode;
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaPointerGetAttributes(attrs: *mut c_int, _ptr: *const c_void) -> c_int {
    // cudaPointerAttributes: type (cudaMemoryTypeUnregistered), device, two pointers.
    if !attrs.is_null() {
        unsafe { std::ptr::write_bytes(attrs as *mut u8, 0, 24) };
    }
    SUCCESS
}

macro_rules! succeed {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        /// Nothing to do without a device: succeeds.
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($($arg: $ty),*) -> c_int { $(let _ = $arg;)* SUCCESS }
    )*};
}

macro_rules! unsupported {
    ($($name:ident;)*) => {$(
        /// Would touch device memory or run device work: not under the capture.
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> c_int { NOT_SUPPORTED }
    )*};
}

succeed! {
    cudaDeviceSynchronize();
    cudaGetLastError();
    cudaPeekAtLastError();
    cudaStreamSynchronize(s: *mut c_void);
    cudaStreamDestroy(s: *mut c_void);
    cudaStreamWaitEvent(s: *mut c_void, e: *mut c_void, f: c_uint);
    cudaEventDestroy(e: *mut c_void);
    cudaEventQuery(e: *mut c_void);
    cudaEventRecord(e: *mut c_void, s: *mut c_void);
    cudaEventRecordWithFlags(e: *mut c_void, s: *mut c_void, f: c_uint);
    cudaEventSynchronize(e: *mut c_void);
    cudaDeviceCanAccessPeer(can: *mut c_int, a: c_int, b: c_int);
    cudaDeviceEnablePeerAccess(d: c_int, f: c_uint);
    cudaFuncSetAttribute(f: *const c_void, a: c_int, v: c_int);
}

unsupported! {
    cudaMalloc;
    cudaFree;
    cudaHostAlloc;
    cudaFreeHost;
    cudaHostRegister;
    cudaHostUnregister;
    cudaMemcpy;
    cudaMemcpyAsync;
    cudaMemcpyToSymbol;
    cudaMemset;
    cudaMemsetAsync;
    cudaLaunchKernelExC;
    cudaFuncGetAttributes;
    cudaGetSymbolAddress;
    cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags;
    cudaStreamAddCallback;
    cudaStreamBeginCapture;
    cudaStreamEndCapture;
    cudaGraphInstantiateWithFlags;
    cudaGraphLaunch;
    cudaIpcGetMemHandle;
    cudaIpcOpenMemHandle;
    cudaIpcCloseMemHandle;
    cudaIpcGetEventHandle;
    cudaIpcOpenEventHandle;
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaDeviceGetPCIBusId(buf: *mut c_char, len: c_int, _d: c_int) -> c_int {
    let id = b"0000:00:00.0\0";
    if !buf.is_null() && len as usize >= id.len() {
        unsafe { std::ptr::copy_nonoverlapping(id.as_ptr() as *const c_char, buf, id.len()) };
    }
    SUCCESS
}

fn error_text(code: c_int) -> &'static [u8] {
    match code {
        SUCCESS => b"no error\0",
        INVALID_DEVICE => b"invalid device ordinal (vramlab's fake CUDA has one device, 0)\0",
        NOT_SUPPORTED => {
            b"operation not supported: vramlab's capture has no GPU; a real CUDA allocation, copy or \
kernel escaped the fake tensors\0"
        }
        _ => b"vramlab fake CUDA error\0",
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaGetErrorString(code: c_int) -> *const c_char {
    error_text(code).as_ptr() as *const c_char
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaGetErrorName(code: c_int) -> *const c_char {
    match code {
        SUCCESS => c"cudaSuccess".as_ptr(),
        INVALID_DEVICE => c"cudaErrorInvalidDevice".as_ptr(),
        NOT_SUPPORTED => c"cudaErrorNotSupported".as_ptr(),
        _ => c"cudaErrorUnknown".as_ptr(),
    }
}

/// The driver's entry points, looked up by name: those below, nothing else.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGetDriverEntryPointByVersion(
    symbol: *const c_char,
    func: *mut *const c_void,
    _version: c_uint,
    _flags: c_ulonglong,
    status: *mut c_int,
) -> c_int {
    if symbol.is_null() {
        return INVALID_VALUE;
    }
    let name = unsafe { std::ffi::CStr::from_ptr(symbol) }.to_bytes();
    let f: *const c_void = match name {
        b"cuDevicePrimaryCtxGetState" => cuDevicePrimaryCtxGetState as *const c_void,
        b"cuCtxGetCurrent" => cuCtxGetCurrent as *const c_void,
        b"cuGetErrorString" => cuGetErrorString as *const c_void,
        b"cuDeviceGet" => cuDeviceGet as *const c_void,
        b"cuDeviceGetCount" => cuDeviceGetCount as *const c_void,
        b"cuInit" => cuInit as *const c_void,
        _ => std::ptr::null(),
    };
    unsafe {
        put(func, f);
        put(status, if f.is_null() { 1 } else { 0 });
    }
    if f.is_null() { SYMBOL_NOT_FOUND } else { SUCCESS }
}

// The driver (`libcuda.so.1`): what torch asks of it through the runtime's entry
// points or by dlopen.

#[unsafe(no_mangle)]
pub extern "C" fn cuInit(_flags: c_uint) -> c_int {
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(v: *mut c_int) -> c_int {
    unsafe { put(v, 13000) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> c_int {
    unsafe { put(count, 1) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(dev: *mut c_int, ordinal: c_int) -> c_int {
    if !device_ok(ordinal) {
        return INVALID_DEVICE;
    }
    unsafe { put(dev, ordinal) };
    SUCCESS
}

/// The primary context: active on the one device (the autograd engine asks).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(dev: c_int, flags: *mut c_uint, active: *mut c_int) -> c_int {
    if !device_ok(dev) {
        return INVALID_DEVICE;
    }
    unsafe {
        put(flags, 0);
        put(active, 1);
    }
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut *mut c_void) -> c_int {
    static CTX: OnceLock<usize> = OnceLock::new();
    unsafe { put(ctx, *CTX.get_or_init(|| handle() as usize) as *mut c_void) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(value: *mut c_int, attr: c_int, dev: c_int) -> c_int {
    unsafe { cudaDeviceGetAttribute(value, attr, dev) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(code: c_int, s: *mut *const c_char) -> c_int {
    unsafe { put(s, error_text(code).as_ptr() as *const c_char) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(code: c_int, s: *mut *const c_char) -> c_int {
    unsafe { put(s, cudaGetErrorName(code)) };
    SUCCESS
}
