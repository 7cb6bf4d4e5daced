//! breakdance: a software branch tracer for x86-64 Linux.
//!
//! Injected with LD_PRELOAD, the library samples each thread with a perf
//! event, decodes ahead from the sampled pc, and follows the branches it
//! cannot resolve statically with one hardware execute breakpoint per
//! thread, recording bursts of consecutive taken branches (LBR-like traces)
//! without a hardware LBR. See DESIGN.md for the algorithm.
//!
//! Layers, data flowing down the list: `sys` (syscalls), `decode`
//! (look-ahead, branch forms), `trace` (handlers, per-thread state),
//! `buffer` (trace buffers and queues), `aggregate` (worker), `modules` and
//! `output` (writer), `control` (socket, session, preload surface).

pub mod aggregate;
pub mod buffer;
pub mod control;
pub mod decode;
pub mod emulate;
pub mod modules;
pub mod output;
pub mod sync;
pub mod sys;
pub mod trace;

/// Writes `msg` to stderr and aborts: the library must not unwind into its
/// host.
pub fn fatal(msg: &[u8]) -> ! {
    sys::write_stderr(msg);
    std::process::abort()
}
