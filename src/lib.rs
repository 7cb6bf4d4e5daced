//! breakdance: a software branch tracer for x86-64 Linux.
//!
//! Injected with LD_PRELOAD, the library samples each thread with a perf
//! event, decodes ahead from the sampled pc, and follows the branches it
//! cannot resolve statically with one hardware execute breakpoint per
//! thread, recording bursts of consecutive taken branches (LBR-like traces)
//! without a hardware LBR. See ARCHITECTURE.md for the algorithm and the
//! measured facts behind the design.
//!
//! Floors, from the ground up; an import only ever points down (see
//! ARCHITECTURE.md):
//!
//! - `sys` (the only syscalls, ioctls and sigaction; fault-safe loads),
//!   `sync` (spin locks a fork child can reset, the fork guard), `alloc`
//!   (the library's own heap, apart from the C library's malloc), `panic`
//!   (the library never unwinds into its host), `host` (what it met of
//!   its host: process-wide counters), `quiet` (one application thread
//!   and no asynchronous signal handler);
//! - `modules` (/proc/self/maps, ELF facts), `exec_map` (the handlers'
//!   table of code, rseq and immutable ranges), `buffer` (branch entries,
//!   trace ends, the preallocated trace buffers and their queues);
//! - `decode` (iced look-ahead, branch forms), `emulate` (the x86-sem core
//!   on live memory);
//! - `trace` (per-thread state, the SIGTRAP handler, one engine per
//!   look-ahead mode behind one trait);
//! - `aggregate`, `output` (traces to ranges and counts to files);
//! - `control` (socket, session, configuration, terminate), then its
//!   `preload` surface (the interposers and the constructor).
//!
//! Beside the floors, in measurement builds only (`--features census`):
//! `census`, the lines a trace's handlers touch.

/// Runs its statements in census builds only (`src/census.rs`): a note of
/// memory the handler touches. Nothing at all otherwise.
macro_rules! census {
    ($($t:tt)*) => {
        #[cfg(feature = "census")]
        {
            $($t)*
        }
    };
}

pub mod aggregate;
pub mod alloc;
pub mod buffer;
#[cfg(feature = "census")]
pub mod census;
pub mod control;
pub mod decode;
pub mod emulate;
pub mod exec_map;
pub mod host;
pub mod modules;
pub mod output;
#[cfg(feature = "paired")]
pub mod paired;
pub mod panic;
pub mod quiet;
pub mod sync;
pub mod sys;
pub mod trace;
pub mod unwind;

/// Writes `msg` to stderr and aborts: the library must not unwind into its
/// host.
pub fn fatal(msg: &[u8]) -> ! {
    sys::write_stderr(msg);
    std::process::abort()
}
