//! breakdance: a software branch tracer.

pub mod decode;
pub mod sys;

/// Writes `msg` to stderr and aborts: the library must not unwind into its
/// host.
pub fn fatal(msg: &[u8]) -> ! {
    sys::write_stderr(msg);
    std::process::abort()
}
