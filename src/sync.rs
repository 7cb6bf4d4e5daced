//! The library's own locks, below every other room: a spin lock a fork
//! child can reset, and the fork guard; the worker's doorbell, which
//! handlers ring (it takes no lock); and a value published to handlers,
//! which they read without one.
//!
//! None of these locks is ever taken in a signal handler: a handler that
//! found one held by the thread it interrupted would wait for ever. They
//! are held for microseconds by the library's threads and by application
//! threads while they register or end.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// The worker's doorbell: a word that handlers and the control thread set
/// bits in to wake the worker before its timed pass (it sleeps longer
/// while the process gives it nothing to do). Ringing is async-signal-safe:
/// an atomic or, and one futex wake when the word was clear.
pub struct Doorbell {
    word: std::sync::atomic::AtomicU32,
}

impl Doorbell {
    /// Code may have been mapped since the last look at the maps.
    pub const REFRESH: u32 = 1;
    /// A pool was drawn on, a buffer filled, or the session is stopping:
    /// a pass is due.
    pub const WORK: u32 = 2;

    pub const fn new() -> Doorbell {
        Doorbell {
            word: std::sync::atomic::AtomicU32::new(0),
        }
    }

    pub fn ring(&self, bits: u32) {
        if self.word.fetch_or(bits, Ordering::AcqRel) == 0 {
            crate::sys::futex_wake(&self.word);
        }
    }

    /// The worker's wait: until a ring, at most `timeout`. Returns the bits
    /// rung (and clears them); 0 when the time ran out.
    pub fn wait(&self, timeout: Duration) -> u32 {
        if self.word.load(Ordering::Acquire) == 0 {
            crate::sys::futex_wait(&self.word, 0, timeout);
        }
        self.word.swap(0, Ordering::AcqRel)
    }
}

impl Default for Doorbell {
    fn default() -> Self {
        Self::new()
    }
}

/// A small value that signal handlers read without a lock while a writer
/// may replace it: two copies and the index of the current one. The
/// writer fills the copy not in use and flips the index. Writers must be
/// serialised by the caller, and no writer may store twice while a reader
/// is between its index load and its copy (a reader racing with two flips
/// in a row could see a half-written value): the values kept here are
/// signal actions, replaced rarely and never in a loop.
pub struct Published<T: Copy> {
    copies: UnsafeCell<[T; 2]>,
    current: AtomicUsize,
}

// SAFETY: see the type's doc: one writer at a time writes the copy
// readers are not told to read.
unsafe impl<T: Copy + Send> Sync for Published<T> {}

impl<T: Copy> Published<T> {
    pub const fn new(value: T) -> Self {
        Published {
            copies: UnsafeCell::new([value; 2]),
            current: AtomicUsize::new(0),
        }
    }

    /// Replaces the value. The caller serialises writers.
    pub fn store(&self, value: T) {
        let next = 1 - self.current.load(Ordering::Relaxed);
        // SAFETY: the one writer writes the copy readers are not using.
        unsafe { (*self.copies.get())[next] = value };
        self.current.store(next, Ordering::Release);
    }

    /// The current value. Async-signal-safe.
    pub fn load(&self) -> T {
        // SAFETY: reads the copy the index publishes.
        unsafe { (*self.copies.get())[self.current.load(Ordering::Acquire)] }
    }
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

    #[test]
    fn the_doorbell_wakes_its_waiter_with_the_bits_rung() {
        use std::sync::Arc;
        let bell = Arc::new(Doorbell::new());
        // Nothing rung: the wait runs out and returns nothing.
        assert_eq!(bell.wait(Duration::from_millis(1)), 0);
        // Rung before the wait: returned at once, then cleared.
        bell.ring(Doorbell::REFRESH);
        bell.ring(Doorbell::WORK);
        assert_eq!(
            bell.wait(Duration::from_secs(60)),
            Doorbell::REFRESH | Doorbell::WORK
        );
        assert_eq!(bell.wait(Duration::from_millis(1)), 0);
        // Rung by another thread while the waiter sleeps: it wakes (a lost
        // wake would have it wait the whole minute and see 0).
        let ringer = {
            let bell = Arc::clone(&bell);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                bell.ring(Doorbell::WORK);
            })
        };
        assert_eq!(bell.wait(Duration::from_secs(60)), Doorbell::WORK);
        ringer.join().unwrap();
    }
}
