//! The library's own heap: every allocation of the library's Rust code,
//! on any thread, comes from here and never from the C library's malloc.
//!
//! Why: in a quiet process (one application thread, see `crate::quiet`)
//! the emulation takes the application's private memory as changed by its
//! own instructions alone, and glibc's malloc state (`main_arena`, `mp_`
//! in libc's data, the chunk headers of the brk heap) is such memory. The
//! library's threads used to change it through the same malloc: the
//! worker freed chunks the application's thread had allocated (taking
//! `main_arena`'s lock), and large buffers went through glibc's mmap path
//! (`mp_.n_mmaps`). Verify mode caught the application's malloc reading
//! what the worker had written (results/verify/indeterminate: the unlock
//! at `__libc_malloc+170` finding a waiter, `sysmalloc`'s compare of
//! `mp_.n_mmaps`), and a proven segment through that code could have
//! recorded a branch the program never took.
//!
//! The heap is dlmalloc (the `dlmalloc` crate, the allocator Rust's own
//! standard library uses where there is no C library), getting its pages
//! straight from mmap, behind one [`SpinLock`] that the fork hooks take
//! across a fork ([`before_fork`], [`after_fork`]), so a child never
//! inherits it held. What the library's threads still ask of glibc's
//! malloc is the C library's own doing (thread start-up and TLS
//! destructors), served from those threads' own arenas, which the
//! application's thread never reads (ARCHITECTURE.md, "The library's own
//! heap"); `tests/programs/malloc_owners.c` counts it.
//!
//! Never called from a signal handler: the handler path allocates nothing
//! (`tests/handler_alloc.rs` counts through [`watch_thread`]).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use crate::sync::SpinLock;

/// dlmalloc behind a lock a fork child can reset.
pub struct OwnHeap {
    heap: SpinLock<dlmalloc::Dlmalloc>,
}

impl OwnHeap {
    const fn new() -> OwnHeap {
        OwnHeap {
            heap: SpinLock::new(dlmalloc::Dlmalloc::new()),
        }
    }
}

#[global_allocator]
static HEAP: OwnHeap = OwnHeap::new();

/// The thread whose allocations are counted (0: none), for the test that
/// the handler path allocates nothing.
static WATCHED_TID: AtomicI32 = AtomicI32::new(0);
static WATCHED_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// Counts from now on every allocation made on thread `tid` (0 stops
/// counting). A test seam: one relaxed load per allocation while unused.
pub fn watch_thread(tid: i32) {
    WATCHED_ALLOCATIONS.store(0, Ordering::Relaxed);
    WATCHED_TID.store(tid, Ordering::Relaxed);
}

/// Allocations (and reallocations) counted on the watched thread since
/// [`watch_thread`].
pub fn watched_allocations() -> u64 {
    WATCHED_ALLOCATIONS.load(Ordering::Relaxed)
}

#[inline]
fn note_allocation() {
    let watched = WATCHED_TID.load(Ordering::Relaxed);
    if watched != 0 && crate::sys::gettid() == watched {
        WATCHED_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Blocks of this size or more (glibc's first mmap threshold), aligned to
/// a page at most, are mappings of their own: zero without a write (a
/// zeroed allocation from dlmalloc's segments is cleared by writing, which
/// took SQLite's peak RSS from 24 to 35 MB and doubled the worker's CPU),
/// given back whole when freed, and grown by mremap without a copy.
const LARGE: usize = 128 * 1024;
const PAGE: usize = 4096;

fn is_large(size: usize, align: usize) -> bool {
    size >= LARGE && align <= PAGE
}

fn whole_pages(size: usize) -> usize {
    size.div_ceil(PAGE) * PAGE
}

// SAFETY: every call into dlmalloc holds the lock, which serialises the
// heap; dlmalloc's contracts are GlobalAlloc's (its docs), and each
// dealloc and realloc passes the layout the block was allocated with, so
// a block's size alone says whether it is a mapping of its own (large)
// or dlmalloc's.
unsafe impl GlobalAlloc for OwnHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        if is_large(layout.size(), layout.align()) {
            return crate::sys::map_pages(whole_pages(layout.size()));
        }
        // SAFETY: see the impl.
        unsafe { self.heap.lock().malloc(layout.size(), layout.align()) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        if is_large(layout.size(), layout.align()) {
            // Fresh pages are zero.
            return crate::sys::map_pages(whole_pages(layout.size()));
        }
        // SAFETY: see the impl.
        unsafe { self.heap.lock().calloc(layout.size(), layout.align()) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_large(layout.size(), layout.align()) {
            // SAFETY: a large block is a whole mapping of these pages.
            return unsafe { crate::sys::unmap_pages(ptr, whole_pages(layout.size())) };
        }
        // SAFETY: see the impl.
        unsafe { self.heap.lock().free(ptr, layout.size(), layout.align()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (old, align) = (layout.size(), layout.align());
        match (is_large(old, align), is_large(new_size, align)) {
            (false, false) => {
                note_allocation();
                // SAFETY: see the impl.
                unsafe { self.heap.lock().realloc(ptr, old, align, new_size) }
            }
            (true, true) => {
                note_allocation();
                let (from, to) = (whole_pages(old), whole_pages(new_size));
                if from == to {
                    return ptr;
                }
                // SAFETY: a large block is a whole mapping of its pages.
                unsafe { crate::sys::remap_pages(ptr, from, to) }
            }
            _ => {
                // Across the threshold: a new block, the bytes copied.
                // SAFETY: GlobalAlloc's contract makes new_size with the
                // old alignment a valid layout.
                let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, align) };
                // SAFETY: a non-zero size (realloc's contract).
                let q = unsafe { self.alloc(new_layout) };
                if !q.is_null() {
                    // SAFETY: both blocks hold at least the bytes copied,
                    // and they are distinct.
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, q, old.min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                q
            }
        }
    }
}

/// The fork hook's side, taken last before the fork: no other thread is
/// inside the heap when the process is copied.
pub fn before_fork() {
    std::mem::forget(HEAP.heap.lock());
}

/// After the fork, in the parent and in the child (where the holder was
/// the forking thread's hook).
pub fn after_fork() {
    HEAP.heap.force_unlock();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_of_every_size_and_alignment_come_back_intact() {
        // From a few bytes to past dlmalloc's mmap threshold, aligned up
        // to a page; each block filled, grown, checked, freed.
        let mut blocks = Vec::new();
        for (i, &(size, align)) in [
            (1usize, 1usize),
            (24, 8),
            (100, 16),
            (4096, 64),
            (70_000, 4096),
            (100_000, 16),
            (LARGE, 8),
            (3 << 20, 32),
            (LARGE, 8192),
        ]
        .iter()
        .enumerate()
        {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: a non-zero size; the block is written within it.
            let p = unsafe { HEAP.alloc(layout) };
            assert!(!p.is_null() && p as usize % align == 0, "{size} / {align}");
            // SAFETY: p holds `size` bytes.
            unsafe { std::ptr::write_bytes(p, i as u8 + 1, size) };
            // SAFETY: grown from its own layout.
            let q = unsafe { HEAP.realloc(p, layout, size * 2) };
            assert!(!q.is_null());
            // SAFETY: q holds at least the `size` bytes copied.
            let kept = unsafe { std::slice::from_raw_parts(q, size) };
            assert!(
                kept.iter().all(|&b| b == i as u8 + 1),
                "{size}: contents lost"
            );
            blocks.push((q, Layout::from_size_align(size * 2, align).unwrap()));
        }
        // Zeroed, below and above the threshold.
        for size in [1 << 16, 1 << 20] {
            let zeroed = Layout::from_size_align(size, 8).unwrap();
            // SAFETY: non-zero size.
            let z = unsafe { HEAP.alloc_zeroed(zeroed) };
            // SAFETY: z holds `size` bytes.
            assert!(unsafe { std::slice::from_raw_parts(z, size) }
                .iter()
                .all(|&b| b == 0));
            blocks.push((z, zeroed));
        }
        // Shrunk from a mapping of its own into dlmalloc's.
        let big = Layout::from_size_align(1 << 20, 8).unwrap();
        // SAFETY: non-zero size; written within it.
        let p = unsafe { HEAP.alloc(big) };
        // SAFETY: p holds 1 MiB.
        unsafe { std::ptr::write_bytes(p, 0xa5, 1 << 20) };
        // SAFETY: shrunk from its own layout.
        let q = unsafe { HEAP.realloc(p, big, 1000) };
        // SAFETY: q holds 1000 bytes.
        assert!(unsafe { std::slice::from_raw_parts(q, 1000) }
            .iter()
            .all(|&b| b == 0xa5));
        blocks.push((q, Layout::from_size_align(1000, 8).unwrap()));
        for (p, layout) in blocks {
            // SAFETY: each block with the layout it has now.
            unsafe { HEAP.dealloc(p, layout) };
        }
    }

    #[test]
    fn a_watched_thread_has_its_allocations_counted_and_no_other() {
        // The seam handler_alloc.rs relies on. A helper thread, started
        // before the count, allocates while this thread is watched; only
        // this thread's one allocation may be counted.
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let go = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let helper = {
            let (go, done) = (go.clone(), done.clone());
            std::thread::spawn(move || {
                while !go.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                for _ in 0..100 {
                    drop(std::hint::black_box(vec![0u8; 100]));
                }
                done.store(true, Ordering::Release);
            })
        };
        watch_thread(crate::sys::gettid());
        let v: Vec<u64> = std::hint::black_box(Vec::with_capacity(100));
        go.store(true, Ordering::Release);
        while !done.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let counted = watched_allocations();
        watch_thread(0);
        drop(v);
        helper.join().unwrap();
        assert_eq!(counted, 1, "the watched thread made one allocation");
    }
}
