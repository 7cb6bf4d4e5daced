//! The application's handlers for asynchronous signals, run through one
//! wrapper that counts them, so that a process with such handlers can
//! still be quiet.
//!
//! A handler for SIGINT or SIGALRM may run between any two instructions of
//! the thread and change its private memory: a segment that read that
//! memory as the thread's own would then be wrong. Most programs install
//! such handlers (interpreters, compressors, servers: SIGINT, SIGTERM,
//! SIGCHLD) and almost never receive the signal. So instead of giving up
//! quietness for the handler, the library's `sigaction` and `signal`
//! interposers install [`wrapper`] in the kernel with the application's
//! flags and mask, and keep the application's action here. The wrapper
//! counts the run ([`runs`]) and calls the application's handler as the
//! kernel would have. A segment that relied on the process being quiet
//! counts only if no wrapped handler ran between its start and its end
//! (see ARCHITECTURE.md, "Quiet processes").
//!
//! The application sees its own actions: a query returns the action it
//! installed (or the kernel's, when the kernel no longer holds the
//! wrapper: SA_RESETHAND reset it, or a raw system call replaced it).
//! Handlers installed some other way are not wrapped, and the survey of
//! actions (`control::session`) finds them: the process is then noisy.
//!
//! Writers (the interposers, on application threads) are serialised by a
//! lock they take with every signal blocked, so that a handler calling
//! `signal` on the thread that holds the lock cannot wait for it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::sync::{Published, SpinLock};
use crate::sys;

/// Signals 1 to 64, by number (slot 0 unused).
const SLOTS: usize = 65;

/// The application's action for each wrapped signal (meaningful while the
/// kernel holds the wrapper for it).
static ACTIONS: [Published<libc::sigaction>; SLOTS] =
    // SAFETY: an all-zero sigaction is SIG_DFL with an empty mask.
    [const { Published::new(unsafe { std::mem::zeroed() }) }; SLOTS];

static WRITER: SpinLock<()> = SpinLock::new(());

/// Wrapped handlers run so far in the process (the wrapper's first
/// instruction adds 1: see `breakdance_signal_wrapper`).
static RUNS: AtomicU64 = AtomicU64::new(0);

/// Some handler was wrapped (sticky).
static ANY: AtomicBool = AtomicBool::new(false);

/// Times a wrapped handler has run in this process (counted by the
/// wrapper's first instruction). Async-signal-safe.
pub fn runs() -> u64 {
    RUNS.load(Ordering::Acquire)
}

/// Whether any handler was ever wrapped: only then need quiet segments be
/// settled (see [`runs`]).
pub fn any_wrapped() -> bool {
    ANY.load(Ordering::Acquire)
}

/// Whether an action for `sig` with `handler` is wrapped: a function (not
/// SIG_DFL or SIG_IGN) for an asynchronous signal the kernel lets a
/// program catch.
pub fn wraps(sig: i32, handler: libc::sighandler_t) -> bool {
    may_hold(sig)
        && sig != libc::SIGKILL
        && sig != libc::SIGSTOP
        && handler != libc::SIG_DFL
        && handler != libc::SIG_IGN
        && handler != libc::SIG_ERR
}

/// Whether `sig` is one this module may hold the action of (so that a
/// query must look here): every asynchronous signal.
pub fn may_hold(sig: i32) -> bool {
    sig > 0 && (sig as usize) < SLOTS && !super::synchronous(sig)
}

/// The interposers' sigaction for every signal [`may_hold`] covers:
/// installs `act` (wrapped when [`wraps`] says so, else as given) and
/// writes to `old` the action the application had, as it installed it.
/// None when `sig` is not one of those (the caller goes to the kernel).
pub fn sigaction(
    sig: i32,
    act: Option<&libc::sigaction>,
    old: Option<&mut libc::sigaction>,
) -> Option<Result<(), sys::Errno>> {
    if !may_hold(sig) {
        return None;
    }
    let slot = &ACTIONS[sig as usize];
    Some(sys::with_signals_blocked(|| {
        let _writer = WRITER.lock();
        // SAFETY: plain data, all-zero is valid.
        let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a query into a valid out-pointer.
        unsafe { sys::real_sigaction(sig, std::ptr::null(), &mut current)? };
        let held = current.sa_sigaction == wrapper();
        let had = if held { slot.load() } else { current };
        if let Some(a) = act {
            if wraps(sig, a.sa_sigaction) {
                let mut kernel = *a;
                kernel.sa_sigaction = wrapper();
                kernel.sa_flags |= libc::SA_SIGINFO;
                // The wrapper reads the new action from its first run on.
                slot.store(*a);
                // SAFETY: a valid action whose handler is async-signal-safe
                // as far as ours goes; the application's is its own.
                if let Err(e) = unsafe { sys::real_sigaction(sig, &kernel, std::ptr::null_mut()) } {
                    slot.store(had);
                    return Err(e);
                }
                ANY.store(true, Ordering::Release);
            } else {
                // SAFETY: the application's own action, as it gave it.
                unsafe { sys::real_sigaction(sig, a, std::ptr::null_mut())? };
            }
        }
        if let Some(o) = old {
            *o = had;
        }
        Ok(())
    }))
}

// What the kernel runs for a wrapped signal: its first instruction counts
// the run, so that a thread interrupted anywhere in a wrapped handler has
// either counted it or is exactly at this entry (`is_entering`). Then the
// body, with the kernel's arguments (rdi, rsi, rdx) and stack untouched.
std::arch::global_asm!(
    ".pushsection .text.breakdance_wrapper,\"ax\",@progbits",
    ".p2align 4",
    ".globl breakdance_signal_wrapper",
    ".hidden breakdance_signal_wrapper",
    ".type breakdance_signal_wrapper,@function",
    "breakdance_signal_wrapper:",
    "lock inc qword ptr [rip + {runs}]",
    "jmp {body}",
    ".size breakdance_signal_wrapper, . - breakdance_signal_wrapper",
    ".popsection",
    runs = sym RUNS,
    body = sym wrapper_body,
);

extern "C" {
    // Only its address is taken (never called from Rust).
    static breakdance_signal_wrapper: u8;
}

/// The wrapper's address, as installed in the kernel.
fn wrapper() -> usize {
    std::ptr::addr_of!(breakdance_signal_wrapper) as usize
}

/// Whether a thread interrupted at `pc` is entering a wrapped handler
/// whose run is not counted yet (its frame was set up, not one
/// instruction of it has run). Async-signal-safe.
pub fn is_entering(pc: u64) -> bool {
    pc == wrapper() as u64
}

/// The wrapper's body, after the count: calls the application's handler
/// under the mask and on the stack the kernel set up from the
/// application's own flags and mask. Async-signal-safe (a lock-free read)
/// up to the application's handler.
extern "C" fn wrapper_body(sig: i32, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let Some(slot) = usize::try_from(sig).ok().and_then(|s| ACTIONS.get(s)) else {
        return;
    };
    let action = slot.load();
    let handler = action.sa_sigaction;
    if handler == libc::SIG_IGN {
        return;
    }
    if handler == libc::SIG_DFL {
        // Not reached: the wrapper is installed only for a function.
        sys::reraise_default(sig);
        return;
    }
    // SAFETY: the application installed it with these flags; the
    // arguments are the kernel's.
    unsafe { sys::call_handler(handler, action.sa_flags, sig, info, ctx) };
}

/// In the child of a fork: the writer lock's holder, if any, was another
/// thread of the parent.
pub fn reset_after_fork() {
    WRITER.force_unlock();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_functions_for_asynchronous_catchable_signals_are_wrapped() {
        let f = 0x1234usize as libc::sighandler_t;
        assert!(wraps(libc::SIGINT, f));
        assert!(wraps(libc::SIGRTMAX(), f));
        assert!(!wraps(libc::SIGINT, libc::SIG_DFL));
        assert!(!wraps(libc::SIGINT, libc::SIG_IGN));
        assert!(!wraps(libc::SIGSEGV, f));
        assert!(!wraps(libc::SIGTRAP, f));
        assert!(!wraps(libc::SIGKILL, f));
        assert!(!wraps(0, f));
        assert!(!wraps(65, f));
    }
}
