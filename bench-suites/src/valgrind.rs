//! valgrind's client requests that a simulated run needs: callgrind's
//! START_INSTRUMENTATION and STOP_INSTRUMENTATION, so that only a case's own
//! work (its warm-up call and its measured call) runs under callgrind's
//! instrumentation (the rest of the process runs
//! at valgrind's plain speed, several times faster), ZERO_STATS and
//! DUMP_STATS, so that each measured call is one profile of its own
//! ([`CountRequests`]), and RUNNING_ON_VALGRIND.
//!
//! A client request is the magic instruction sequence of valgrind's
//! `valgrind.h` (x86-64: four rotations of `rdi` that add up to 128 bits, then
//! `xchg rbx, rbx`; `rax` points at the request and its arguments, `rdx`
//! holds the default and receives the answer). On a real CPU the sequence
//! changes nothing and the answer is the default. It is written here rather
//! than taken from a crate: `crabgrind` compiles C against valgrind's headers
//! at build time (every build machine would need them), and gungraun's
//! requests come with its whole benchmark framework; these are five requests.
//! On other architectures the requests do nothing and [`SUPPORTED`] is false.

/// Whether this build can make client requests (x86-64).
pub const SUPPORTED: bool = cfg!(target_arch = "x86_64");

/// callgrind's requests start at `VG_USERREQ_TOOL_BASE('C', 'T')`.
const CALLGRIND_BASE: usize = (b'C' as usize) << 24 | (b'T' as usize) << 16;
/// `VG_USERREQ__DUMP_STATS`, `…ZERO_STATS`, `…START_INSTRUMENTATION` and
/// `…STOP_INSTRUMENTATION` (callgrind.h).
const DUMP_STATS: usize = CALLGRIND_BASE;
const ZERO_STATS: usize = CALLGRIND_BASE + 1;
const START_INSTRUMENTATION: usize = CALLGRIND_BASE + 4;
const STOP_INSTRUMENTATION: usize = CALLGRIND_BASE + 5;
/// `VG_USERREQ__RUNNING_ON_VALGRIND` (valgrind.h).
const RUNNING_ON_VALGRIND: usize = 0x1001;

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn client_request(default: usize, request: usize) -> usize {
    let args: [usize; 6] = [request, 0, 0, 0, 0, 0];
    let mut result = default;
    // SAFETY: the sequence rotates rdi by 3 + 13 + 61 + 51 = 128 bits (rdi
    // unchanged; the flags are clobbered, which asm! assumes without
    // `preserves_flags`) and exchanges rbx with itself: registers and memory
    // are as before on a real CPU. Under valgrind, valgrind reads the six words at
    // rax (alive for the whole asm block) and writes its answer to rdx only.
    unsafe {
        std::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            inout("rdx") result,
            in("rax") args.as_ptr(),
            options(nostack),
        );
    }
    result
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn client_request(default: usize, _request: usize) -> usize {
    default
}

/// Whether this process runs under valgrind (false on a real CPU).
pub fn running_on_valgrind() -> bool {
    client_request(0, RUNNING_ON_VALGRIND) != 0
}

/// callgrind: instrument from here on (with `--instr-atstart=no`).
#[inline(always)]
pub fn start_instrumentation() {
    client_request(0, START_INSTRUMENTATION);
}

/// callgrind: stop instrumenting (the process runs on at valgrind's plain speed).
#[inline(always)]
pub fn stop_instrumentation() {
    client_request(0, STOP_INSTRUMENTATION);
}

/// The two requests around a call: ZERO_STATS before it (the counts so far
/// are forgotten) and DUMP_STATS after it (the counts since are written as the
/// next profile, `callgrind.out.N`, N counting the dumps from 1) — or, for a
/// warm-up call, RUNNING_ON_VALGRIND in their place, which changes nothing:
/// the warm-up then executes the very instructions the counted call will,
/// since only the requests' data differ, so the simulated caches hold every
/// line the counted call touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountRequests {
    zero: usize,
    dump: usize,
}

impl CountRequests {
    /// A counted call's: zero, then dump.
    pub const COUNTED: CountRequests = CountRequests { zero: ZERO_STATS, dump: DUMP_STATS };
    /// A warm-up call's: nothing.
    pub const WARM_UP: CountRequests = CountRequests { zero: RUNNING_ON_VALGRIND, dump: RUNNING_ON_VALGRIND };

    /// Before the call.
    #[inline(always)]
    pub fn zero(self) {
        client_request(0, self.zero);
    }

    /// After the call.
    #[inline(always)]
    pub fn dump(self) {
        client_request(0, self.dump);
    }
}

/// Instrumentation on from [`Instrumented::start`] until dropped (an error
/// or a panic in between stops it too).
#[derive(Debug)]
pub struct Instrumented(());

impl Instrumented {
    pub fn start() -> Instrumented {
        start_instrumentation();
        Instrumented(())
    }
}

impl Drop for Instrumented {
    fn drop(&mut self) {
        stop_instrumentation();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_a_real_cpu_the_requests_do_nothing() {
        // The test binary runs natively: the answer is the default, and the
        // instrumentation requests neither fault nor change anything.
        assert!(!running_on_valgrind());
        start_instrumentation();
        CountRequests::COUNTED.zero();
        CountRequests::WARM_UP.dump();
        stop_instrumentation();
        assert_eq!(START_INSTRUMENTATION, 0x4354_0004);
    }
}
