//! The epoch: every `epoch` of the process's CPU time, every site that
//! was unhooked is hooked again (Traub, Schechter and Smith, §3: the
//! periodic re-instrumentation that lets a profile follow phases).
//!
//! The timer is a POSIX CPU-time timer of the whole process
//! (CLOCK_PROCESS_CPUTIME_ID) whose signal, `EPOCH_SIGNAL`, is directed
//! with SIGEV_THREAD_ID at one thread of the library's own, which blocks
//! every signal and takes it with sigwaitinfo. So no handler runs for it
//! in an application thread: no system call of theirs is interrupted
//! (no EINTR, whatever the call), and SIGPROF and ITIMER_PROF stay the
//! application's. The re-hooking runs in that thread, in a normal context.

use crate::{sys, trap, Profile};
use std::sync::atomic::{AtomicU64, Ordering};

/// SIGRTMAX - 3: a real-time signal glibc does not reserve (it keeps the
/// lowest ones for itself), directed at our thread only. The limit: an
/// application that sends this signal number to the whole process may
/// have one taken by our thread's sigwaitinfo (it counts no epoch for it,
/// its si_code not being SI_TIMER); none of the workloads uses it.
pub fn epoch_signal() -> i32 {
    libc::SIGRTMAX() - 3
}

pub static EPOCHS: AtomicU64 = AtomicU64::new(0);
pub static HOOKS: AtomicU64 = AtomicU64::new(0);

/// Hooks every unhooked site of `profile`; returns how many.
pub fn rehook_all(profile: &Profile) -> u64 {
    let n = profile
        .sites
        .iter()
        .filter(|s| trap::rehook(profile, s))
        .count() as u64;
    HOOKS.fetch_add(n, Ordering::Relaxed);
    n
}

/// Starts the epoch thread and its timer; returns once the timer runs.
pub fn start(profile: &'static Profile, epoch_ns: u64) -> Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("ephemeral-epoch".into())
        .spawn(move || {
            // Nothing of the application's is delivered here, and the
            // timer's signal waits for sigwaitinfo.
            sys::thread_mask(libc::SIG_BLOCK, !0);
            let sig = epoch_signal();
            let timer = sys::process_cpu_timer(sig, sys::gettid(), epoch_ns);
            let ok = timer.is_ok();
            let _ = tx.send(timer.map(|_| ()));
            if !ok {
                return;
            }
            loop {
                if sys::wait_signal(sig) == libc::SI_TIMER {
                    rehook_all(profile);
                    EPOCHS.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
        .map_err(|e| format!("cannot start the epoch thread: {e}"))?;
    rx.recv()
        .map_err(|_| "the epoch thread ended before its timer started".to_string())?
}
