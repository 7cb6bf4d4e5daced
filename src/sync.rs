//! The library's own locks, below every other room: a spin lock a fork
//! child can reset, and the fork guard.
//!
//! None of these is ever taken in a signal handler: a handler that found
//! one held by the thread it interrupted would wait for ever. They are held
//! for microseconds by the library's threads and by application threads
//! while they register or end.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A lock a fork child can reset ([`SpinLock::force_unlock`]); std's
/// mutex cannot be, and a fork can copy a process while another thread
/// holds one.
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialised by `locked`.
unsafe impl<T: Send> Sync for SpinLock<T> {}

pub struct SpinGuard<'a, T>(&'a SpinLock<T>);

impl<T> SpinLock<T> {
    pub const fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Spins a little, then sleeps 50 µs between tries: a holder that was
    /// preempted gets the CPU back.
    pub fn lock(&self) -> SpinGuard<'_, T> {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        SpinGuard(self)
    }

    /// Runs `f` holding the lock.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.lock())
    }

    /// Forgets any holder. Only for the child of a fork, where the holder
    /// does not exist.
    pub fn force_unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock.
        unsafe { &*self.0.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock.
        unsafe { &mut *self.0.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.0.locked.store(false, Ordering::Release);
    }
}

/// Held by the worker while it has files of its own open (reading the
/// maps and the modules' ELF files), by a thread registering while it opens
/// its perf events, and by a fork while it copies the process: a forked
/// child never inherits one of those descriptors unaccounted for.
static FORK_GUARD: SpinLock<()> = SpinLock::new(());

/// The fork hooks' side of the guard: taken before fork, released after
/// it in the parent; the child resets it ([`reset_fork_guard`]).
pub fn before_fork() {
    std::mem::forget(FORK_GUARD.lock());
}

pub fn after_fork_in_parent() {
    FORK_GUARD.force_unlock();
}

/// In the child of a fork: the guard's holder was the forking thread's
/// hook in the parent.
pub fn reset_fork_guard() {
    FORK_GUARD.force_unlock();
}

/// Runs `f` with no fork copying the process meanwhile: for code that
/// opens descriptors and files them where a forked child's clean-up finds
/// them. Not for signal handlers (the forking thread may hold the guard).
pub fn without_fork<R>(f: impl FnOnce() -> R) -> R {
    let _no_fork = FORK_GUARD.lock();
    f()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_lock_serialises_and_a_fork_child_can_reset_it() {
        let lock = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        lock.with(|v| *v += 1);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 40_000);
        // A holder that will never release it (as in a fork child).
        std::mem::forget(lock.lock());
        lock.force_unlock();
        assert_eq!(lock.with(|v| *v), 40_000);
    }
}
