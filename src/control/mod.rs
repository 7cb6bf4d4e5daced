//! Session lifecycle and the ways to drive it: the control socket, the
//! environment (autostart), and the LD_PRELOAD surface.

pub mod config;
pub mod preload;
pub mod session;
pub mod socket;
pub mod socket_path;
pub mod terminate;

use std::sync::atomic::{AtomicBool, Ordering};

static PRELOADED: AtomicBool = AtomicBool::new(false);

/// Whether this library was loaded with LD_PRELOAD (and so is not part of
/// the application).
pub fn is_preloaded() -> bool {
    PRELOADED.load(Ordering::Acquire)
}

/// Marks the library as preloaded; true when it already was (the
/// constructor ran before).
pub(crate) fn mark_preloaded() -> bool {
    PRELOADED.swap(true, Ordering::AcqRel)
}
