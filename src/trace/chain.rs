//! The application's own SIGTRAP disposition while ours is installed.
//!
//! When a session starts, the application's SIGTRAP action is saved here and
//! ours installed. While ours is installed, the library's `sigaction` and
//! `signal` interposers store the application's new SIGTRAP actions here
//! instead of in the kernel, so neither side loses its handler. SIGTRAPs
//! that are not ours (int3, raise, ptrace) are forwarded to the saved action.
//!
//! Storage is two copies and an index: writers (serialised by `WRITER`)
//! fill the copy not in use and flip the index; the handler reads the
//! current copy without locks. A handler racing with two flips in a row
//! could see a half-written action; applications do not change their
//! SIGTRAP handler from inside their SIGTRAP handler in a loop.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::sys;

struct Saved {
    copies: UnsafeCell<[libc::sigaction; 2]>,
    current: AtomicUsize,
    /// Whether our handler is installed (and so this holds the app's).
    active: AtomicBool,
}

// SAFETY: see the module doc: one writer at a time, readers read the copy
// the index names.
unsafe impl Sync for Saved {}

static SAVED: Saved = Saved {
    // SAFETY: an all-zero sigaction is SIG_DFL with an empty mask.
    copies: UnsafeCell::new(unsafe { std::mem::zeroed() }),
    current: AtomicUsize::new(0),
    active: AtomicBool::new(false),
};

static WRITER: AtomicBool = AtomicBool::new(false);

fn with_writer<R>(f: impl FnOnce() -> R) -> R {
    while WRITER
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
    let r = f();
    WRITER.store(false, Ordering::Release);
    r
}

fn store(action: &libc::sigaction) {
    let next = 1 - SAVED.current.load(Ordering::Relaxed);
    // SAFETY: the writer lock is held; readers use the other copy.
    unsafe { (*SAVED.copies.get())[next] = *action };
    SAVED.current.store(next, Ordering::Release);
}

fn load() -> libc::sigaction {
    // SAFETY: reads the published copy (see the module doc).
    unsafe { (*SAVED.copies.get())[SAVED.current.load(Ordering::Acquire)] }
}

/// Installs our handler, saving the application's action.
pub fn install(handler: sys::SigactionFn, blocked: sys::Blocked) -> Result<(), sys::Errno> {
    with_writer(|| {
        if SAVED.active.load(Ordering::Acquire) {
            return Ok(());
        }
        let old = sys::install_handler(libc::SIGTRAP, handler, blocked)?;
        store(&old);
        SAVED.active.store(true, Ordering::Release);
        Ok(())
    })
}

/// Gives SIGTRAP back to the application's action.
pub fn uninstall() -> Result<(), sys::Errno> {
    with_writer(|| {
        if !SAVED.active.load(Ordering::Acquire) {
            return Ok(());
        }
        sys::restore_action(libc::SIGTRAP, &load())?;
        SAVED.active.store(false, Ordering::Release);
        Ok(())
    })
}

/// Forgets that ours is installed without touching the kernel (the child of
/// a fork keeps our handler; the caller reinstalls the app's).
pub fn reset_after_fork() {
    WRITER.store(false, Ordering::Release);
}

/// The interposers' path for SIGTRAP: while ours is installed, keep the
/// application's action here. Returns false when ours is not installed and
/// the call must go to the kernel.
pub fn intercept(act: Option<&libc::sigaction>, old: Option<&mut libc::sigaction>) -> bool {
    with_writer(|| {
        if !SAVED.active.load(Ordering::Acquire) {
            return false;
        }
        if let Some(old) = old {
            *old = load();
        }
        if let Some(act) = act {
            store(act);
        }
        true
    })
}

/// Passes a SIGTRAP that is not ours to the application's action, as the
/// kernel would have. Async-signal-safe.
pub fn forward(sig: i32, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let action = load();
    let handler = action.sa_sigaction;
    if handler == libc::SIG_IGN {
        return;
    }
    if handler == libc::SIG_DFL {
        // Default for SIGTRAP is to dump core: do exactly that by restoring
        // the default and re-sending; it is delivered when we return.
        sys::reraise_default(libc::SIGTRAP);
        return;
    }
    // Run it under the mask the kernel would have set for it: the mask of
    // the interrupted code plus its own sa_mask (and SIGTRAP unless
    // SA_NODEFER), not ours, which blocks every asynchronous signal.
    // SAFETY: the kernel passes a valid ucontext to an SA_SIGINFO handler.
    let mut mask = unsafe { (*ctx.cast::<libc::ucontext_t>()).uc_sigmask };
    // SAFETY: valid sigsets.
    unsafe {
        for s in 1..=64 {
            if libc::sigismember(&action.sa_mask, s) == 1 {
                libc::sigaddset(&mut mask, s);
            }
        }
        if action.sa_flags & libc::SA_NODEFER == 0 {
            libc::sigaddset(&mut mask, libc::SIGTRAP);
        }
    }
    let ours = sys::set_signal_mask(&mask);
    if action.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the application installed this as an SA_SIGINFO handler.
        let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the application installed this as a plain handler.
        let f: extern "C" fn(i32) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
    sys::set_signal_mask(&ours);
}
