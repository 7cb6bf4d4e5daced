//! Pools of the heavy per-thread state: decoded-block caches (paper,
//! verify), emulators (emulate, verify) and verify's predictions. The
//! trace buffers have their own pool (`buffer::BufferPool`), sized here by
//! the same rule.
//!
//! A thread registers with none of it. Its first sample takes what its
//! mode needs (`ends::begin_trace`, in the handler: a lock-free pop, no
//! allocation); closing its slot gives it back. So a thread that is never
//! sampled costs its two perf events and nothing else, and the pools are
//! sized by how many threads are sampled, not by how many exist.
//!
//! The worker keeps each pool's free list at [`Pool::target`]: a few spare
//! plus the most taken (or asked for and missing) in one of its passes
//! (every few milliseconds) over the last two windows of [`WINDOW_NS`],
//! never more than the pool's cap of states made; above twice the target
//! it frees the excess, so the pools follow the sampling rate down as well
//! as up. A sample that finds a pool empty starts no trace and is counted
//! (`no_free_state`, `no_free_buffer`); the worker's next pass grows the
//! pool.

use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_queue::ArrayQueue;

use crate::buffer::{pool_target, BufferPool, Demand};
use crate::decode::BlockCache;
use crate::emulate::{Emulator, Predictions};

use super::engine::Needs;
use super::ThreadTrace;

/// Spare states kept free whatever the demand, so that the first samples
/// of a session find one.
pub const MIN_SPARE: usize = 4;
/// How long a window of demand lasts (the worker's look at the table).
pub const WINDOW_NS: u64 = 200_000_000;
/// States of one kind made in all, for the life of the process: one per
/// slot of the thread table at most.
pub const MAX_STATES: usize = super::MAX_THREADS;

/// One pool of boxed states: a bounded lock-free free list, and how many
/// were made. Taking and giving back are async-signal-safe; only
/// `top_up` allocates and frees (the worker, the control thread).
pub struct Pool<T> {
    free: ArrayQueue<Box<T>>,
    made: AtomicUsize,
    cap: usize,
    demand: Demand,
}

impl<T> Pool<T> {
    pub fn new(cap: usize) -> Pool<T> {
        Pool {
            free: ArrayQueue::new(cap.max(1)),
            made: AtomicUsize::new(0),
            cap,
            demand: Demand::new(),
        }
    }

    /// A free state, if any. Async-signal-safe.
    pub fn take(&self) -> Option<Box<T>> {
        self.demand.count();
        self.free.pop()
    }

    /// Gives a state back. Never fails for a state the pool made (the list
    /// holds every one); a stranger that does not fit is dropped, so not
    /// from a handler. Async-signal-safe for the pool's own states.
    pub fn give(&self, state: Box<T>) {
        let _ = self.free.push(state);
    }

    /// Adds up to `n` states made by `make`, never past the cap. Returns
    /// how many were added. Allocates: never from a handler.
    pub fn grow(&self, n: usize, make: impl Fn() -> Box<T>) -> usize {
        let mut added = 0;
        for _ in 0..n {
            let claimed = self
                .made
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| {
                    (m < self.cap).then_some(m + 1)
                });
            if claimed.is_err() {
                break;
            }
            let _ = self.free.push(make());
            added += 1;
        }
        added
    }

    /// How many free states the worker keeps: [`MIN_SPARE`] plus the most
    /// taken in one of its passes lately.
    pub fn target(&self) -> usize {
        pool_target(&self.demand, MIN_SPARE)
    }

    /// The worker's pass: grows the free list to [`Pool::target`] (bounded
    /// by the cap), or frees what is above twice the target (states come
    /// back as threads end). Returns how many were added.
    pub fn top_up(&self, make: impl Fn() -> Box<T>) -> usize {
        self.demand.pass();
        let target = self.target();
        let free = self.free.len();
        if free > 2 * target {
            for _ in target..free {
                match self.free.pop() {
                    Some(s) => {
                        drop(s);
                        self.made.fetch_sub(1, Ordering::AcqRel);
                    }
                    None => break,
                }
            }
            return 0;
        }
        self.grow(target.saturating_sub(free), make)
    }

    /// Ends a window of demand.
    pub fn next_window(&self) {
        self.demand.next_window();
    }

    pub fn made(&self) -> usize {
        self.made.load(Ordering::Acquire)
    }

    pub fn free_len(&self) -> usize {
        self.free.len()
    }
}

/// The pools of a tracer.
pub struct StatePools {
    pub caches: Pool<BlockCache>,
    pub emulators: Pool<Emulator>,
    pub predictions: Pool<Predictions>,
}

impl StatePools {
    pub fn new() -> StatePools {
        StatePools {
            caches: Pool::new(MAX_STATES),
            emulators: Pool::new(MAX_STATES),
            predictions: Pool::new(MAX_STATES),
        }
    }
}

impl Default for StatePools {
    fn default() -> Self {
        Self::new()
    }
}

fn new_cache() -> Box<BlockCache> {
    Box::new(BlockCache::new())
}

fn new_emulator() -> Box<Emulator> {
    match super::tracer() {
        Some(st) => Emulator::new(st.exec),
        // Pools belong to the process's one tracer: it exists.
        None => unreachable!("state pools without a tracer"),
    }
}

/// Keeps every pool `needs` names, and the buffer pool, at its target
/// (the worker, each pass; the control thread at start). Allocates.
/// Returns how many were added in all.
pub fn top_up(pools: &StatePools, buffers: &BufferPool, needs: Needs) -> usize {
    let mut added = buffers.top_up();
    if needs.block_cache {
        added += pools.caches.top_up(new_cache);
    }
    if needs.emulator {
        added += pools.emulators.top_up(new_emulator);
    }
    if needs.predictions {
        added += pools.predictions.top_up(Predictions::new);
    }
    added
}

/// Ends a window of demand in every pool (the worker, every
/// [`WINDOW_NS`]).
pub fn next_window(pools: &StatePools, buffers: &BufferPool) {
    buffers.demand.next_window();
    pools.caches.next_window();
    pools.emulators.next_window();
    pools.predictions.next_window();
}

/// Takes what `needs` names and `t` lacks. False, with whatever was taken
/// kept by the thread, when a pool is empty. Async-signal-safe.
pub(super) fn take(pools: &StatePools, t: &mut ThreadTrace, needs: Needs) -> bool {
    if needs.block_cache && t.cache.is_none() {
        t.cache = pools.caches.take();
    }
    if needs.emulator && t.emu.is_none() {
        t.emu = pools.emulators.take();
    }
    if needs.predictions && t.predictions.is_none() {
        t.predictions = pools.predictions.take();
    }
    (!needs.block_cache || t.cache.is_some())
        && (!needs.emulator || t.emu.is_some())
        && (!needs.predictions || t.predictions.is_some())
}

/// Gives back every state `t` holds (closing its slot; not a handler).
pub(super) fn give_back(pools: &StatePools, t: &mut ThreadTrace) {
    if let Some(c) = t.cache.take() {
        pools.caches.give(c);
    }
    if let Some(e) = t.emu.take() {
        pools.emulators.give(e);
    }
    if let Some(p) = t.predictions.take() {
        pools.predictions.give(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_are_bounded_and_follow_demand() {
        let pool: Pool<u64> = Pool::new(16);
        assert_eq!(pool.top_up(|| Box::new(0)), MIN_SPARE);
        assert_eq!(pool.top_up(|| Box::new(0)), 0);
        let taken: Vec<_> = (0..6).filter_map(|_| pool.take()).collect();
        assert_eq!(taken.len(), MIN_SPARE);
        // Six asked for in one pass: the target is the spare plus six.
        assert_eq!(pool.target(), MIN_SPARE + 6);
        assert_eq!(pool.top_up(|| Box::new(0)), MIN_SPARE + 6);
        for t in taken {
            pool.give(t);
        }
        assert_eq!(pool.free_len(), 2 * MIN_SPARE + 6);
        // Two quiet windows: the target falls back to the spare, and what
        // is above twice it is freed.
        pool.next_window();
        pool.next_window();
        assert_eq!(pool.target(), MIN_SPARE);
        assert_eq!(pool.top_up(|| Box::new(0)), 0);
        assert_eq!(pool.free_len(), MIN_SPARE);
        assert_eq!(pool.made(), MIN_SPARE);
        // Never more made than the cap.
        (0..20).for_each(|_| drop(pool.take()));
        pool.top_up(|| Box::new(0));
        assert_eq!(pool.made(), 16);
    }
}
