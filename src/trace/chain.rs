//! The application's own dispositions of the signals the tracer handles:
//! SIGTRAP (sampling and breakpoint stops) and, in emulate mode, SIGSEGV
//! and SIGBUS (faults of the emulator's fault-safe loads).
//!
//! When a session starts, the application's action for each such signal is
//! saved here and ours installed. While ours is installed, the library's
//! `sigaction` and `signal` interposers store the application's new actions
//! here instead of in the kernel, so neither side loses its handler. Signals
//! that are not ours (int3, raise, ptrace for SIGTRAP; every fault but the
//! emulator's own for SIGSEGV/SIGBUS) are forwarded to the saved action.
//!
//! Each action is a `sync::Published` value: writers (serialised by
//! `WRITER`) replace it, the handler reads it without locks.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::sync::Published;
use crate::sys;

/// The signals whose actions are kept here, in slot order.
pub const CHAINED: [i32; 3] = [libc::SIGTRAP, libc::SIGSEGV, libc::SIGBUS];

/// The application's action for one chained signal, and whether ours is
/// installed (and so the kernel holds ours, and this the app's).
struct Saved {
    action: Published<libc::sigaction>,
    active: AtomicBool,
}

impl Saved {
    const fn new() -> Saved {
        Saved {
            // SAFETY: an all-zero sigaction is SIG_DFL with an empty mask.
            action: Published::new(unsafe { std::mem::zeroed() }),
            active: AtomicBool::new(false),
        }
    }

    fn store(&self, action: &libc::sigaction) {
        self.action.store(*action);
    }

    fn load(&self) -> libc::sigaction {
        self.action.load()
    }
}

static SAVED: [Saved; CHAINED.len()] = [Saved::new(), Saved::new(), Saved::new()];

static WRITER: AtomicBool = AtomicBool::new(false);

fn slot(sig: i32) -> Option<&'static Saved> {
    CHAINED.iter().position(|&s| s == sig).map(|i| &SAVED[i])
}

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

/// How our handler is installed.
#[derive(Clone, Copy)]
pub enum Kind {
    /// The tracer's SIGTRAP handler: on the interrupted thread's own stack
    /// (it needs more room than an application's alternate stack may
    /// have), with the given signals blocked.
    Trap,
    /// A fault handler: on the alternate stack when the thread has one (a
    /// fault may be a stack overflow), and with nothing blocked by the
    /// kernel, so that [`forward`] can give the application's handler
    /// exactly the mask its own action asks for.
    Fault,
}

/// Installs our `handler` for `sig` (one of [`CHAINED`]), saving the
/// application's action. Installing twice keeps the first.
pub fn install(
    sig: i32,
    handler: sys::SigactionFn,
    blocked: sys::Blocked,
    kind: Kind,
) -> Result<(), sys::Errno> {
    let saved = slot(sig).expect("a chained signal");
    with_writer(|| {
        if saved.active.load(Ordering::Acquire) {
            return Ok(());
        }
        let flags = match kind {
            Kind::Trap => 0,
            Kind::Fault => libc::SA_ONSTACK | libc::SA_NODEFER,
        };
        let old = sys::install_handler(sig, handler, blocked, flags)?;
        saved.store(&old);
        saved.active.store(true, Ordering::Release);
        Ok(())
    })
}

/// Gives `sig` back to the application's action.
pub fn uninstall(sig: i32) -> Result<(), sys::Errno> {
    let saved = slot(sig).expect("a chained signal");
    with_writer(|| {
        if !saved.active.load(Ordering::Acquire) {
            return Ok(());
        }
        sys::restore_action(sig, &saved.load())?;
        saved.active.store(false, Ordering::Release);
        Ok(())
    })
}

/// Forgets that ours is installed without touching the kernel (the child of
/// a fork keeps our handler; the caller reinstalls the app's).
pub fn reset_after_fork() {
    WRITER.store(false, Ordering::Release);
}

/// The interposers' path: while ours is installed for `sig`, keep the
/// application's action here. Returns false when `sig` is not chained or
/// ours is not installed, and the call must go to the kernel.
pub fn intercept(
    sig: i32,
    act: Option<&libc::sigaction>,
    old: Option<&mut libc::sigaction>,
) -> bool {
    let Some(saved) = slot(sig) else {
        return false;
    };
    with_writer(|| {
        if !saved.active.load(Ordering::Acquire) {
            return false;
        }
        if let Some(old) = old {
            *old = saved.load();
        }
        if let Some(act) = act {
            saved.store(act);
        }
        true
    })
}

/// Passes a signal that is not ours to the application's action, as the
/// kernel would have. Async-signal-safe.
pub(crate) fn forward(sig: i32, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let Some(saved) = slot(sig) else {
        return;
    };
    let action = saved.load();
    let handler = action.sa_sigaction;
    // SAFETY: the kernel passes a valid siginfo.
    let code = unsafe { info.as_ref() }.map_or(0, |i| i.si_code);
    // A fault the kernel raised (si_code > 0) happens again when the
    // instruction is retried: giving the signal its default action and
    // returning ends the process exactly as without us, core dump and
    // fault address included. The kernel does the same for an ignored
    // synchronous fault.
    let synchronous_fault = sig != libc::SIGTRAP && code > 0;
    if handler == libc::SIG_DFL || (handler == libc::SIG_IGN && synchronous_fault) {
        if synchronous_fault {
            sys::set_default_action(sig);
        } else {
            sys::reraise_default(sig);
        }
        return;
    }
    if handler == libc::SIG_IGN {
        return;
    }
    if action.sa_flags & libc::SA_RESETHAND != 0 {
        // SAFETY: plain data, all-zero is SIG_DFL.
        saved.store(&unsafe { std::mem::zeroed() });
    }
    // Run it under the mask the kernel would have set for it: the mask of
    // the interrupted code plus its own sa_mask (and the signal itself
    // unless SA_NODEFER), not ours (the SIGTRAP handler blocks every
    // asynchronous signal; the fault handlers block nothing). A handler
    // that leaves by siglongjmp finds the mask the kernel would have left.
    // SAFETY: the kernel passes a valid ucontext to an SA_SIGINFO handler.
    let mut mask = unsafe { (*ctx.cast::<libc::ucontext_t>()).uc_sigmask };
    sys::sigset_union(&mut mask, &action.sa_mask);
    if action.sa_flags & libc::SA_NODEFER == 0 {
        sys::sigset_add(&mut mask, sig);
    }
    let ours = sys::set_signal_mask(&mask);
    // SAFETY: the application installed it with these flags; the
    // arguments are the kernel's.
    unsafe { sys::call_handler(handler, action.sa_flags, sig, info, ctx) };
    sys::set_signal_mask(&ours);
}

/// Our SIGSEGV and SIGBUS handler: a fault of the emulator's fault-safe
/// load is turned into its error return; every other fault goes to the
/// application's action. Async-signal-safe.
pub(crate) extern "C" fn on_fault(sig: i32, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes the handler's own ucontext.
    if unsafe { sys::probe::fixup(ctx) } {
        return;
    }
    forward(sig, info, ctx);
}
