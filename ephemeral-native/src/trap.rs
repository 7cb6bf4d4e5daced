//! The SIGTRAP handler: it stands for a hooked branch, counts its
//! direction and unhooks the site after P executions in an epoch; every
//! other SIGTRAP goes to the application's action.
//!
//! The handler path (everything in this module below `on_sigtrap`) is
//! async-signal-safe by construction: no allocation, no lock, no
//! formatting; it reads the site table built before the handler was
//! installed, updates atomics, writes one byte of code and makes raw
//! system calls. errno is saved and restored.

use crate::sites::{Site, HOOKED, INT3, UNHOOKED, WRITING};
use crate::sys::{self, Mask};
use crate::Profile;
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

/// The application's SIGTRAP action, kept while ours is installed: the
/// handler (SIG_DFL, SIG_IGN or a function), its flags and its mask.
/// Written by the `sigaction`/`signal` interposers, read when chaining.
static APP_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static APP_FLAGS: AtomicI32 = AtomicI32::new(0);
static APP_MASK: AtomicU64 = AtomicU64::new(0);

/// Traps that were not ours, passed to the application's action.
pub static FOREIGN_TRAPS: AtomicU64 = AtomicU64::new(0);
/// Traps at a site that another thread had already unhooked (the thread
/// fetched the int3 before the original byte came back): still counted.
pub static LATE_TRAPS: AtomicU64 = AtomicU64::new(0);
pub static UNHOOKS: AtomicU64 = AtomicU64::new(0);

/// The application's SIGTRAP action as sigaction reports it.
pub fn app_action() -> libc::sigaction {
    // SAFETY: plain data, all-zero is valid.
    let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
    a.sa_sigaction = APP_HANDLER.load(Ordering::Acquire);
    a.sa_flags = APP_FLAGS.load(Ordering::Acquire);
    let mask = APP_MASK.load(Ordering::Acquire);
    // SAFETY: a valid set; signal numbers in range.
    unsafe {
        libc::sigemptyset(&mut a.sa_mask);
        for s in (1..=64).filter(|s| mask & sys::bit(*s) != 0) {
            libc::sigaddset(&mut a.sa_mask, s);
        }
    }
    a
}

/// Records the application's new SIGTRAP action (it is not installed:
/// ours stays, and chains to it).
pub fn set_app_action(a: &libc::sigaction) {
    APP_MASK.store(sys::mask_of(&a.sa_mask), Ordering::Release);
    APP_FLAGS.store(a.sa_flags, Ordering::Release);
    APP_HANDLER.store(a.sa_sigaction, Ordering::Release);
}

/// Installs `on_sigtrap`, keeping the action it replaces as the
/// application's.
///
/// SA_NODEFER: the application's handler, when chained, runs inside ours
/// and may itself reach a hooked branch; a SIGTRAP blocked at an int3
/// would make the kernel reset the action and kill the process.
/// SA_ONSTACK: an alternate stack the application set up is used.
pub fn install() -> Result<(), String> {
    // SAFETY: plain data, all-zero is valid.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = on_sigtrap as extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void) as usize;
    act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_NODEFER | libc::SA_ONSTACK;
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers; the handler lives as long as the process.
    if unsafe { sys::real_sigaction(libc::SIGTRAP, &act, &mut old) } != 0 {
        return Err("sigaction(SIGTRAP) failed".into());
    }
    set_app_action(&old);
    Ok(())
}

extern "C" fn on_sigtrap(sig: i32, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let saved = sys::errno();
    // SAFETY: the kernel passes a valid siginfo and ucontext.
    let ours = unsafe { emulate(info, ctx) };
    if !ours {
        FOREIGN_TRAPS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the same arguments the kernel gave us.
        unsafe { chain(sig, info, ctx) };
    }
    sys::set_errno(saved);
}

/// When the trap is an int3 at a site: counts the branch's direction, sets
/// rip where the branch goes, and unhooks at the P-th execution of the
/// epoch. Returns whether it was ours.
///
/// # Safety
/// `info` and `ctx` are a SIGTRAP handler's arguments.
unsafe fn emulate(info: *mut libc::siginfo_t, ctx: *mut c_void) -> bool {
    let Some(profile) = crate::PROFILE.get() else {
        return false;
    };
    // An int3 reports SI_KERNEL; raise(), kill() and sigqueue() others.
    // SAFETY: valid by contract.
    if unsafe { (*info).si_code } != libc::SI_KERNEL {
        return false;
    }
    // SAFETY: valid by contract; the handler was installed with SA_SIGINFO.
    let uc = unsafe { &mut *(ctx as *mut libc::ucontext_t) };
    let gregs = &mut uc.uc_mcontext.gregs;
    let at = (gregs[libc::REG_RIP as usize] as u64).wrapping_sub(1);
    let Some(site) = profile.site_at(at) else {
        return false;
    };
    let taken = site.condition.taken(
        gregs[libc::REG_EFL as usize] as u64,
        gregs[libc::REG_RCX as usize] as u64,
    );
    let next = if taken {
        site.target
    } else {
        site.fallthrough()
    };
    gregs[libc::REG_RIP as usize] = next.wrapping_add(profile.bias) as i64;
    count(profile, site, taken);
    true
}

/// Counts one execution of `site` and unhooks it at the P-th of the epoch.
fn count(profile: &Profile, site: &Site, taken: bool) {
    if taken {
        site.taken.fetch_add(1, Ordering::Relaxed);
    } else {
        site.not_taken.fetch_add(1, Ordering::Relaxed);
    }
    let n = site.epoch_executions.fetch_add(1, Ordering::AcqRel) + 1;
    if n < profile.persistence {
        return;
    }
    if n > profile.persistence {
        LATE_TRAPS.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if site
        .state
        .compare_exchange(HOOKED, WRITING, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        // SAFETY: the site's first byte, in code made writable at start-up.
        unsafe { sys::write_code_byte(site.vaddr.wrapping_add(profile.bias), site.original) };
        site.unhooks.fetch_add(1, Ordering::Relaxed);
        UNHOOKS.fetch_add(1, Ordering::Relaxed);
        site.state.store(UNHOOKED, Ordering::Release);
    }
}

/// Hooks `site` again if it is unhooked: a fresh epoch count, then the
/// int3. Returns whether it did. Called by the epoch thread (and at
/// start-up); never blocks.
pub fn rehook(profile: &Profile, site: &Site) -> bool {
    if site
        .state
        .compare_exchange(UNHOOKED, WRITING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return false;
    }
    site.epoch_executions.store(0, Ordering::Release);
    // SAFETY: as in `count`.
    unsafe { sys::write_code_byte(site.vaddr.wrapping_add(profile.bias), INT3) };
    site.hooks.fetch_add(1, Ordering::Relaxed);
    site.state.store(HOOKED, Ordering::Release);
    true
}

/// Passes a SIGTRAP that is not ours to the application's action: its
/// handler (with its flags and its mask, less SIGTRAP: see `install`),
/// nothing for SIG_IGN, and for SIG_DFL the default action, by restoring
/// it and raising the signal again.
///
/// # Safety
/// A SIGTRAP handler's arguments.
unsafe fn chain(sig: i32, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let handler = APP_HANDLER.load(Ordering::Acquire);
    let flags = APP_FLAGS.load(Ordering::Acquire);
    match handler {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // SAFETY: plain data, all-zero is valid (SIG_DFL, no flags).
            let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a valid action.
            unsafe { sys::real_sigaction(libc::SIGTRAP, &dfl, std::ptr::null_mut()) };
            // Not blocked (SA_NODEFER): delivered before this returns.
            sys::raise_here(libc::SIGTRAP);
        }
        f => {
            let mut mask: Mask = APP_MASK.load(Ordering::Acquire) & !sys::bit(libc::SIGTRAP);
            if flags & libc::SA_NODEFER == 0 {
                // The signal itself is blocked during its handler, except
                // SIGTRAP (see above).
                mask |= sys::bit(sig) & !sys::bit(libc::SIGTRAP);
            }
            let before = sys::thread_mask(libc::SIG_BLOCK, mask);
            if flags & libc::SA_RESETHAND != 0 {
                APP_HANDLER.store(libc::SIG_DFL, Ordering::Release);
            }
            if flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the application registered this three-argument handler.
                let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(f) };
                f(sig, info, ctx);
            } else {
                // SAFETY: the application registered this one-argument handler.
                let f: extern "C" fn(i32) = unsafe { std::mem::transmute(f) };
                f(sig);
            }
            sys::thread_mask(libc::SIG_SETMASK, before);
        }
    }
}
