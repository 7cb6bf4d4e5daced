//! The library's panic policy: a panic is a bug, and the library must not
//! unwind into its host. The hook writes the message with write(2) and
//! aborts, as `panic = "abort"` would; only the control thread, answering a
//! request inside [`catching_panics`], unwinds and answers with an error.

use std::sync::atomic::{AtomicI32, Ordering};

use crate::sys;

/// Installs the hook (the preload constructor does, once).
pub fn install_hook() {
    std::panic::set_hook(Box::new(on_panic));
}

/// The thread inside [`catching_panics`], 0 if none.
static CATCHING_TID: AtomicI32 = AtomicI32::new(0);

/// Runs `f` with a panic in it unwound and returned as an error, as
/// `catch_unwind` does; only the control thread does this, for requests,
/// where unwinding frees nothing another thread holds. Elsewhere the panic
/// hook aborts.
pub(crate) fn catching_panics<R>(
    f: impl FnOnce() -> R + std::panic::UnwindSafe,
) -> std::thread::Result<R> {
    CATCHING_TID.store(sys::gettid(), Ordering::Relaxed);
    let r = std::panic::catch_unwind(f);
    CATCHING_TID.store(0, Ordering::Relaxed);
    r
}

/// The panic hook: the message, formatted into a stack buffer and written
/// with write(2) (the panic may come from a signal handler that interrupted
/// malloc), then abort, before any unwinding starts: what `panic = "abort"`
/// does, for the library's copy of std only. (The profile setting cannot
/// be used: `cargo test` then fails to link test binaries built to unwind
/// against the dependencies built to abort.) Unwinding would run
/// destructors and allocate the exception in whatever context the panic
/// came from. Only [`catching_panics`] on the control thread unwinds.
fn on_panic(info: &std::panic::PanicHookInfo<'_>) {
    let mut buf = [0u8; 512];
    let mut out = std::io::Cursor::new(&mut buf[..]);
    let _ = std::io::Write::write_fmt(
        &mut out,
        format_args!("breakdance: internal error: {info}\n"),
    );
    let n = out.position() as usize;
    sys::write_stderr(&buf[..n]);
    if CATCHING_TID.load(Ordering::Relaxed) != sys::gettid() {
        crate::fatal(b"breakdance: aborting the process: the tracer cannot recover from this\n");
    }
}
