//! Session lifecycle and the ways to drive it: the control socket, the
//! environment (autostart), and the LD_PRELOAD surface.

pub mod config;
pub mod preload;
pub mod session;
pub mod socket;
pub mod socket_path;
pub mod terminate;
