//! The C-library functions the library exports in place of the C
//! library's, while it profiles, so that the application cannot take the
//! hooks' SIGTRAP away and cannot block it:
//!
//! - `sigaction` and `signal` on SIGTRAP record the application's action
//!   (ours stays installed and chains to it) and report the one recorded
//!   before; glibc's `signal` does not go through the exported `sigaction`.
//! - `sigaction` on any other signal drops SIGTRAP from the handler's mask,
//!   and `sigprocmask`/`pthread_sigmask` drop it from the set blocked: an
//!   int3 met with SIGTRAP blocked makes the kernel restore the default
//!   action and kill the process. The cost: an application that blocks
//!   SIGTRAP on purpose gets it delivered (see ARCHITECTURE.md).
//!
//! When the library does not profile (`EPHEMERAL_OUTPUT` unset) every call
//! goes straight to the C library.

use crate::{sys, trap};
use std::sync::atomic::Ordering;

fn profiling() -> bool {
    crate::ACTIVE.load(Ordering::Acquire)
}

/// `set` without SIGTRAP.
fn without_trap(set: &libc::sigset_t) -> libc::sigset_t {
    let mut copy = *set;
    // SAFETY: a valid set.
    unsafe { libc::sigdelset(&mut copy, libc::SIGTRAP) };
    copy
}

/// # Safety
/// As sigaction(2).
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: i32,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> i32 {
    if !profiling() {
        // SAFETY: forwarded contract.
        return unsafe { sys::real_sigaction(sig, act, old) };
    }
    if sig == libc::SIGTRAP {
        // SAFETY: null or valid, by contract.
        if let Some(old) = unsafe { old.as_mut() } {
            *old = trap::app_action();
        }
        // SAFETY: as above.
        if let Some(act) = unsafe { act.as_ref() } {
            trap::set_app_action(act);
        }
        return 0;
    }
    // SAFETY: as above.
    match unsafe { act.as_ref() } {
        Some(a) => {
            let mut copy = *a;
            copy.sa_mask = without_trap(&a.sa_mask);
            // SAFETY: a valid action; `old` forwarded.
            unsafe { sys::real_sigaction(sig, &copy, old) }
        }
        // SAFETY: forwarded contract.
        None => unsafe { sys::real_sigaction(sig, act, old) },
    }
}

/// # Safety
/// As signal(2).
#[no_mangle]
pub unsafe extern "C" fn signal(sig: i32, handler: libc::sighandler_t) -> libc::sighandler_t {
    if !profiling() || sig != libc::SIGTRAP {
        // SAFETY: forwarded contract (glibc's signal blocks nothing else).
        return unsafe { sys::real_signal(sig, handler) };
    }
    let before = trap::app_action().sa_sigaction;
    // SAFETY: plain data, all-zero is valid.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    // glibc's signal has BSD semantics.
    act.sa_flags = libc::SA_RESTART;
    trap::set_app_action(&act);
    before
}

/// # Safety
/// As sigprocmask(2).
#[no_mangle]
pub unsafe extern "C" fn sigprocmask(
    how: i32,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { mask(false, how, set, old) }
}

/// # Safety
/// As pthread_sigmask(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(
    how: i32,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { mask(true, how, set, old) }
}

/// # Safety
/// As sigprocmask(2).
unsafe fn mask(
    pthread: bool,
    how: i32,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> i32 {
    // SAFETY: null or valid, by contract.
    match unsafe { set.as_ref() } {
        Some(s) if profiling() && how != libc::SIG_UNBLOCK => {
            let copy = without_trap(s);
            // SAFETY: a valid set; `old` forwarded.
            unsafe { sys::real_sigmask(pthread, how, &copy, old) }
        }
        // SAFETY: forwarded contract.
        _ => unsafe { sys::real_sigmask(pthread, how, set, old) },
    }
}
