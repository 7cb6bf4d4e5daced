//! Decoded code, shared by the process's threads.
//!
//! The emulation steps through instructions the handler has usually run
//! before, on this thread or another: SQLite's traces decode about one
//! instruction in five afresh with a 4096-entry cache per thread, and that
//! cache (512 KiB a thread) was cold in the CPU's caches at every sample,
//! since the application runs between samples. Here one process-wide
//! table holds every instruction any handler decoded, as 48-byte records in
//! the order they were decoded, so that a block's instructions lie next to
//! each other and a step usually reads the line its predecessor brought in:
//!
//! - **Records** are appended by whichever handler decodes first (a bump
//!   allocation, the record written, then its tag published with a
//!   release store) and never change afterwards until a reset. A reader
//!   trusts a record only after an acquire load of its tag equal to the
//!   address it wants. A handler that meets a new instruction decodes the
//!   rest of its block with it (up to [`RUN`] instructions, stopping at
//!   one already decoded), so that a block costs one fetch of its bytes,
//!   one decoder and index probes that overlap, not one of each per
//!   instruction.
//! - **Finding** the record of the next instruction: the one after the
//!   current record (its fall-through, when decoded in that order), then
//!   the current record's `taken` hint (the other successor last seen from
//!   there: a relaxed hint, checked by its tag), and only then the index,
//!   an open-addressed table of record numbers filled by compare-and-swap.
//! - **Resets** (when the records run out, or the code mappings changed:
//!   the [`ExecMap`](crate::exec_map::ExecMap) generation moved) are made by
//!   the worker thread in [`maintain`], never by a handler, and only when no
//!   handler is using the table: a handler announces itself in `users`
//!   before it reads (and checks `closed` after), the worker closes the
//!   table before it reads `users` (both sequentially consistent, so one
//!   sees the other). While the table is closed or of another generation,
//!   handlers decode into their thread's small private cache.
//!
//! Nothing here allocates after [`warm`]; the records' pages are touched
//! only as they fill (the allocation is zeroed lazily by the kernel).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

use x86_sem::{
    DecodeCache, Handler, HandlerSource, Insn, InsnSource, Machine, Memory, Stop, Table,
};

use super::SpecCpu;

/// Instructions the shared table holds until the worker resets it.
pub const RECORDS: usize = 1 << 16;
/// Slots of the index (twice the records: open addressing stays short).
const INDEX_SLOTS: usize = 2 * RECORDS;
/// Slots of one line of the index. The instructions of one 64-byte line of
/// code have their homes in one line of the index, so that a block's
/// instructions, decoded together and run together, probe one line, not
/// one each (SQLite's traces touched 4-11 KiB of index at N = 128 when
/// homes were spread over the whole index).
const LINE_SLOTS: usize = 16;
/// Slots the index probes from an address's home before giving up: four
/// lines, since a line of code may hold up to 64 instructions, and lines
/// of code may share a line of the index. A probe stops at the first empty
/// slot, so a miss seldom reads more than its home line.
const PROBES: usize = 4 * LINE_SLOTS;
/// A slot holds `USED | check << 16 | record`: a record number fits in 16
/// bits, and a 15-bit check of the address skips the tag reads of the other
/// instructions that share the line.
const USED: u32 = 1 << 31;
const _: () = assert!(RECORDS <= 1 << 16);
/// Instructions decoded at once when a handler meets a new one: it and
/// those after it, to the end of its block (see `Insn::decode_run`). On
/// SQLite four decodes in five followed an instruction that falls
/// through, and each cost a probe of a cold index line, a fetch and a
/// decoder of its own (results/speed, ninth round).
const RUN: usize = 8;
/// Code bytes read for a run (the longest instruction is 15).
const RUN_BYTES: usize = 64;
/// Entries of each thread's private cache, used while the shared table is
/// closed or stale (40 bytes each).
pub const PRIVATE_ENTRIES: usize = 256;
/// No current record.
const NO_RECORD: u32 = u32::MAX;
/// The generation of a table no handler may use yet.
const NO_GENERATION: u32 = u32::MAX;

/// One decoded instruction, 48 bytes.
#[repr(C)]
struct Record {
    /// The instruction. Its address is the record's tag (see
    /// [`Record::tag`]): 0 until the rest is written (no instruction
    /// starts at 0: nothing maps the zero page), then published with a
    /// release store.
    insn: UnsafeCell<Insn>,
    /// Record number + 1 of the instruction that followed this one last
    /// time it was not the next record (0: none); a hint, checked by the
    /// tag it names.
    taken: AtomicU32,
    /// The instruction's handler in the emulator's dispatch table, as an
    /// offset from the table's first handler (0: read the table), written
    /// before the tag is published. A step then reads no line of the
    /// table, which is 39 KiB: 2.3-3.2 KiB of a trace's working set was
    /// its lines (results/speed, tenth round).
    handler: AtomicI32,
}

// The tag is the Insn's first 8 bytes; the record packs in 48.
const _: () = assert!(Insn::IP_OFFSET == 0 && std::mem::size_of::<Record>() == 48);

impl Record {
    /// The instruction, once published: only for a record whose tag was
    /// read (with acquire) equal to the address looked up, whose insn is
    /// then written and stays unchanged while this handler is a user
    /// (module doc).
    #[inline(always)]
    fn insn(&self) -> &Insn {
        // SAFETY: see above.
        unsafe { &*self.insn.get() }
    }

    /// The instruction's address as an atomic: every access to it that
    /// may race with a handler goes through this (a reader's `&Insn` reads
    /// it only after an acquire load here found it published, and nothing
    /// writes it again before a reset, which runs with no handler in the
    /// table).
    #[inline(always)]
    fn tag(&self) -> &AtomicU64 {
        // SAFETY: the Insn is repr(C) with its u64 address at offset 0
        // (asserted above), so the pointer is valid and 8-aligned for as
        // long as `self` lives; see above for why no access races.
        unsafe { AtomicU64::from_ptr(self.insn.get().cast::<u64>()) }
    }
}

/// Asks for the line holding `at` ahead of a read (no fault, no effect
/// but on the caches).
#[inline(always)]
fn prefetch<T>(at: &T) {
    // SAFETY: a prefetch has no architectural effect; SSE is in the
    // x86-64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch(
            std::ptr::from_ref(at).cast::<i8>(),
            std::arch::x86_64::_MM_HINT_T0,
        );
    }
}

/// The process's decoded code: see the module doc.
pub struct SharedCode {
    records: &'static [Record],
    /// Slots made by `SharedCode::entry`, 0 for an empty one.
    index: &'static [AtomicU32],
    /// Records handed out (may pass `RECORDS` by the failed claims).
    next: AtomicU32,
    /// Handlers reading the table now.
    users: AtomicU32,
    /// The worker wants the table to itself: new handlers stay away.
    closed: AtomicBool,
    /// The code mappings' generation the records were decoded in.
    generation: AtomicU32,
    /// Times the worker emptied the table.
    resets: AtomicU64,
    /// The dispatch table the records' handlers are from, and the address
    /// their offsets count from (its first handler).
    table: &'static Table<SpecCpu>,
    anchor: usize,
    /// The 2 MiB regions of the index (bit 0) and of the records (bits 1
    /// and 2) the kernel backs by huge pages at the worker's request.
    collapsed: AtomicU32,
    /// Upkeeps that asked for a region and did not get it all.
    collapse_tries: AtomicU32,
    /// The worker has asked for the index's pages (see
    /// [`SharedCode::upkeep`]).
    index_made: AtomicBool,
}

// SAFETY: a record's `insn` is written only by the handler that claimed
// the record (a unique number from `next`) before its tag is published,
// and rewritten only by `maintain` when no handler can hold a reference
// (see the module doc); every other field is atomic.
unsafe impl Sync for SharedCode {}
// SAFETY: the tables are the table's own (mappings no one else holds or
// frees), as a Box's would be; sending it moves nothing a thread owns.
unsafe impl Send for SharedCode {}

/// A huge page, the unit [`SharedCode::collapse`] works in.
const HUGE_PAGE: usize = 2 << 20;
/// Upkeeps that may ask for huge pages the kernel did not give.
const COLLAPSE_TRIES: u32 = 8;
/// Traces the session writes before the worker asks for huge pages.
/// `MADV_COLLAPSE` copies the regions into fresh huge pages, compacting
/// memory to find them: 0.4 ms of the worker's CPU at the median on SQLite
/// and up to 8 ms (the Zen 5 guest, results/speed's thirteenth round),
/// where huge pages take 6–9% off a cold step, 3–4 µs of a trace on
/// SQLite. A short run would pay more than it gets back.
pub const COLLAPSE_AFTER_TRACES: u64 = 1000;
/// `madvise` advice: make huge pages of the range now, in the caller
/// (Linux 6.1 and later; include/uapi/asm-generic/mman-common.h).
const MADV_COLLAPSE: libc::c_int = 25;

/// A zeroed slice of `n` `T`s on a 2 MiB boundary, padded to a whole
/// number of 2 MiB regions (see `sys::zeroed_static_slice`), so that its
/// regions can become huge pages (see [`SharedCode::collapse`]).
///
/// # Safety
/// All-zero bytes must be a valid `T`.
unsafe fn zeroed_slice<T>(n: usize) -> &'static [T] {
    // SAFETY: the caller vouches for T.
    unsafe { crate::sys::zeroed_static_slice::<T>(n, HUGE_PAGE) }
}

/// Asks the kernel to back the 2 MiB region at `at` by a huge page now
/// (false where it cannot: before Linux 6.1, THP off, no huge page free).
fn collapse_region(at: usize) -> bool {
    // SAFETY: madvise changes no memory contents; the region lies in one of
    // this module's mappings (see `zeroed_slice`).
    unsafe { libc::madvise(at as *mut libc::c_void, HUGE_PAGE, MADV_COLLAPSE) == 0 }
}

impl SharedCode {
    fn new() -> SharedCode {
        let table = super::table();
        SharedCode {
            table,
            anchor: table.handler(0) as usize,
            // SAFETY: a zero Record is an empty one: atomics at 0, and an
            // Insn of zero bytes (Code 0 is INVALID; every field is plain).
            records: unsafe { zeroed_slice::<Record>(RECORDS) },
            // SAFETY: a zero AtomicU32 is 0.
            index: unsafe { zeroed_slice::<AtomicU32>(INDEX_SLOTS) },
            next: AtomicU32::new(0),
            users: AtomicU32::new(0),
            closed: AtomicBool::new(false),
            generation: AtomicU32::new(NO_GENERATION),
            resets: AtomicU64::new(0),
            collapsed: AtomicU32::new(0),
            collapse_tries: AtomicU32::new(0),
            index_made: AtomicBool::new(false),
        }
    }

    /// In the worker, once handlers have published code: makes every page
    /// of the index resident, without writing it (`MADV_POPULATE_WRITE`;
    /// a handler may be publishing). Records hash all over the index, so a
    /// traced run soon touches each of its 64 pages, each first touch a
    /// page fault in a handler: with none made ahead, a decode cost 379 ns
    /// against 284 at the default on SQLite (results/speed, round 16).
    /// Until code is published the index costs nothing: a process never
    /// sampled no longer pays the clearing of an empty index (SQLite: the
    /// worker 0.98 -> 0.72 ms, peak RSS 0.3 MB less).
    fn make_index(&self) {
        if self.index_made.swap(true, Ordering::Relaxed) {
            return;
        }
        // SAFETY: the range is the index's own mapping (`zeroed_slice`);
        // the advice changes no contents. Refused (before Linux 5.14),
        // the pages are made at first use, as without it.
        unsafe {
            libc::madvise(
                self.index.as_ptr() as *mut libc::c_void,
                std::mem::size_of_val(self.index),
                libc::MADV_POPULATE_WRITE,
            );
        }
    }

    /// In the worker: asks for huge pages under the regions of the index
    /// and of the records in use, each until it is made. A trace touches a few hundred
    /// records and index lines spread over as many 4 KiB pages, each a
    /// TLB miss after the application ran (a two-level walk in a VM). On
    /// huge pages a step took 6-9% less on SQLite with cold caches, nothing
    /// with warm ones (results/speed, tenth round). Made here and not by
    /// `MADV_HUGEPAGE`, which would have a handler's first touch fault in
    /// and zero a whole 2 MiB page; the price is the rest of each region
    /// made resident (up to 6 MiB, about 4 MiB when the records stay under
    /// 43,690). A region the kernel could not make (busy, no huge page
    /// free) is asked for again at later upkeeps, [`COLLAPSE_TRIES`] in
    /// all. Returns the regions collapsed in this call.
    fn collapse(&self) -> u32 {
        let used = self.len();
        if used == 0 || self.collapse_tries.load(Ordering::Relaxed) >= COLLAPSE_TRIES {
            return 0;
        }
        let done = self.collapsed.load(Ordering::Relaxed);
        let base = self.records.as_ptr() as usize;
        let record_regions = (used * std::mem::size_of::<Record>()).div_ceil(HUGE_PAGE);
        let mut want = 1u32;
        for r in 0..record_regions {
            want |= 2 << r;
        }
        if want & !done == 0 {
            return 0;
        }
        let mut made = 0;
        let mut got = done;
        for bit in 0..u32::BITS {
            if (want & !done) >> bit & 1 == 0 {
                continue;
            }
            let at = if bit == 0 {
                self.index.as_ptr() as usize
            } else {
                base + (bit as usize - 1) * HUGE_PAGE
            };
            if collapse_region(at) {
                made += 1;
                got |= 1 << bit;
            }
        }
        self.collapsed.store(got, Ordering::Relaxed);
        if got & want != want {
            self.collapse_tries.fetch_add(1, Ordering::Relaxed);
        }
        made
    }

    /// The first slot `ip` may be in: a line of the index picked by its
    /// line of code, and the slot in it by its low bits.
    #[inline(always)]
    fn home(ip: u64) -> usize {
        let line = ((ip >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize;
        (line * LINE_SLOTS + (ip as usize & (LINE_SLOTS - 1))) & (INDEX_SLOTS - 1)
    }

    /// The slot that names record `n` for `ip`.
    #[inline(always)]
    fn entry(ip: u64, n: u32) -> u32 {
        let check = (ip ^ ip >> 15 ^ ip >> 30) as u32 & 0x7fff;
        USED | check << 16 | n
    }

    /// The record a slot names, when its check matches `ip` (its tag is
    /// still to be read).
    #[inline(always)]
    fn named(v: u32, ip: u64) -> Option<u32> {
        (v >> 16 == Self::entry(ip, 0) >> 16).then_some(v & 0xffff)
    }

    /// The record number holding `ip`, if published.
    #[inline]
    fn find(&self, ip: u64) -> Option<u32> {
        let home = Self::home(ip);
        for p in 0..PROBES {
            let slot = &self.index[(home + p) & (INDEX_SLOTS - 1)];
            census!(crate::census::touch(slot, crate::census::Part::Index));
            let v = slot.load(Ordering::Acquire);
            if v == 0 {
                return None;
            }
            if let Some(n) = Self::named(v, ip) {
                if self.holds(n, ip) {
                    return Some(n);
                }
            }
        }
        None
    }

    /// The instruction of a published record.
    #[inline(always)]
    fn insn(&self, n: u32) -> &Insn {
        self.records[n as usize].insn()
    }

    /// Whether record `n` holds `ip` (an acquire read of its tag).
    #[inline(always)]
    fn holds(&self, n: u32, ip: u64) -> bool {
        self.holding(n, ip).is_some()
    }

    /// Record `n`, if it holds `ip` (an acquire read of its tag).
    #[inline(always)]
    fn holding(&self, n: u32, ip: u64) -> Option<&Record> {
        let r = self.records.get(n as usize)?;
        census!(crate::census::touch(r.tag(), crate::census::Part::Code));
        (r.tag().load(Ordering::Acquire) == ip).then_some(r)
    }

    /// Decodes the instruction at `ip` into a new record and publishes it,
    /// with the rest of its run (see [`RUN`]); `Ok(None)` when the records
    /// have run out (the worker will reset). Returns the record of `ip`
    /// and the instructions published.
    #[cold]
    #[inline(never)]
    fn insert<M: Memory>(&self, ip: u64, mem: &mut M) -> Result<(Option<u32>, u32), Stop> {
        if self.next.load(Ordering::Relaxed) as usize >= RECORDS {
            return Ok((None, 0));
        }
        let mut bytes = [0u8; RUN_BYTES];
        let got = mem.fetch_run(ip, &mut bytes);
        let mut run = [Insn::empty(); RUN];
        let n = Insn::decode_run(ip, &bytes[..got], &mut run);
        if n == 0 {
            return Err(Stop::BadFetch);
        }
        // Each follower's index line is as cold as the first one's was,
        // and its probe below would wait for it: ask for them all at once.
        for insn in &run[1..n] {
            let slot = &self.index[Self::home(insn.ip())];
            census!(crate::census::touch(slot, crate::census::Part::Index));
            prefetch(slot);
        }
        let Some(first) = self.publish(&run[0]) else {
            return Ok((None, 0));
        };
        let mut published = 1;
        for insn in &run[1..n] {
            // Decoded already (a branch led into the block here before):
            // so is, most likely, the rest of it.
            if self.find(insn.ip()).is_some() {
                break;
            }
            if self.publish(insn).is_none() {
                break;
            }
            published += 1;
        }
        Ok((Some(first), published))
    }

    /// Copies `insn` into a new record, publishes it and enters it in the
    /// index; `None` when the records have run out.
    fn publish(&self, insn: &Insn) -> Option<u32> {
        let ip = insn.ip();
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let record = self.records.get(n as usize)?;
        // SAFETY: record `n` is this handler's alone (the number came from
        // `next`), unpublished (tag 0), and no reader trusts it before the
        // release store of its tag below. Everything but the tag (the
        // first 8 bytes) is copied plainly: readers may load the tag
        // meanwhile, atomically.
        unsafe {
            let from = std::ptr::from_ref(insn).cast::<u8>();
            let to = record.insn.get().cast::<u8>();
            std::ptr::copy_nonoverlapping(from.add(8), to.add(8), std::mem::size_of::<Insn>() - 8);
        }
        let handler = self.table.handler(insn.code() as u16) as usize;
        let offset = i32::try_from(handler.wrapping_sub(self.anchor) as isize).unwrap_or(0);
        record.handler.store(offset, Ordering::Relaxed);
        census!(crate::census::touch(record, crate::census::Part::Code));
        record.tag().store(ip, Ordering::Release);
        let home = Self::home(ip);
        for p in 0..PROBES {
            let slot = &self.index[(home + p) & (INDEX_SLOTS - 1)];
            census!(crate::census::touch(slot, crate::census::Part::Index));
            match slot.compare_exchange(0, Self::entry(ip, n), Ordering::Release, Ordering::Acquire)
            {
                Ok(_) => break,
                // Another handler published the same address first: its
                // record serves; this one stays reachable by its hints.
                Err(v) if Self::named(v, ip).is_some_and(|m| self.holds(m, ip)) => break,
                Err(_) => {}
            }
        }
        Some(n)
    }

    /// Records in use.
    pub fn len(&self) -> usize {
        (self.next.load(Ordering::Relaxed) as usize).min(RECORDS)
    }

    /// Whether no record is in use.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Times the worker emptied the table.
    pub fn resets(&self) -> u64 {
        self.resets.load(Ordering::Relaxed)
    }
}

static SHARED: OnceLock<SharedCode> = OnceLock::new();

/// The process's table, made on first use (in `emulate::warm`, before any
/// signal is armed).
pub fn shared() -> &'static SharedCode {
    SHARED.get_or_init(SharedCode::new)
}

/// Makes the table (allocation only; its pages fill as records do).
pub fn warm() {
    shared();
}

/// The worker's upkeep, every pass of its loop: empties the table when its
/// records ran out or the code mappings changed (`generation` is the
/// current [`ExecMap`](crate::exec_map::ExecMap) generation), once no
/// handler uses it. Until then the table stays closed and handlers decode
/// privately. Once the session has written `traces` past
/// [`COLLAPSE_AFTER_TRACES`], it asks for huge pages under the table.
pub fn maintain(generation: u32, traces: u64) {
    if let Some(s) = SHARED.get() {
        s.upkeep(generation, traces);
    }
}

impl SharedCode {
    /// See [`maintain`].
    fn upkeep(&self, generation: u32, traces: u64) {
        self.maintain(generation);
        if !self.is_empty() {
            self.make_index();
        }
        if traces >= COLLAPSE_AFTER_TRACES {
            self.collapse();
        }
    }

    /// See [`maintain`]; true when the table was emptied.
    fn maintain(&self, generation: u32) -> bool {
        let s = self;
        let full = s.next.load(Ordering::Relaxed) as usize >= RECORDS;
        if !full && s.generation.load(Ordering::Relaxed) == generation {
            return false;
        }
        s.closed.store(true, Ordering::SeqCst);
        if s.users.load(Ordering::SeqCst) != 0 {
            return false;
        }
        let used = s.len();
        if used > 0 {
            // (A table nothing was published in has an index of zeros,
            // its pages never written: clearing it at the session's first
            // pass, which finds the table of no generation, made all 256
            // KiB of it resident in every process, sampled or not. See
            // `make_index`.)
            for slot in s.index.iter() {
                slot.store(0, Ordering::Relaxed);
            }
        }
        for r in &s.records[..used] {
            r.tag().store(0, Ordering::Relaxed);
            r.taken.store(0, Ordering::Relaxed);
            r.handler.store(0, Ordering::Relaxed);
        }
        s.next.store(0, Ordering::Relaxed);
        s.generation.store(generation, Ordering::Relaxed);
        s.resets.fetch_add(1, Ordering::Relaxed);
        s.closed.store(false, Ordering::SeqCst);
        true
    }
}

/// In a forked child: handlers of threads that did not survive the fork
/// never leave the table.
pub fn reset_after_fork() {
    if let Some(s) = SHARED.get() {
        s.users.store(0, Ordering::SeqCst);
    }
}

/// One thread's access to decoded code: the shared table between
/// [`Code::enter`] and [`Code::leave`], else its own small cache.
pub struct Code {
    shared: &'static SharedCode,
    private: DecodeCache<Box<[Insn]>>,
    private_generation: u32,
    /// Between enter and leave, with the shared table open to this handler.
    entered: bool,
    /// The record of the instruction last looked up, or [`NO_RECORD`].
    last: u32,
    /// Instructions decoded, and the time it took by the handler's clock
    /// (see [`Code::take_decodes`]).
    decodes: u64,
    decode_ns: u64,
}

impl Code {
    /// A thread's access (its private cache on the heap, 10 KiB).
    pub fn new() -> Code {
        Code::on(shared())
    }

    fn on(shared: &'static SharedCode) -> Code {
        let storage = vec![Insn::empty(); PRIVATE_ENTRIES].into_boxed_slice();
        Code {
            shared,
            private: DecodeCache::new(storage).expect("a power-of-two cache"),
            private_generation: NO_GENERATION,
            entered: false,
            last: NO_RECORD,
            decodes: 0,
            decode_ns: 0,
        }
    }

    /// Instructions decoded since the last call, and the time that took:
    /// the handler's clock read around each run decoded, from the index
    /// probe that found nothing to the last record published. A new
    /// instruction costs hundreds of nanoseconds in a handler against
    /// tens for the two clock reads (results/speed, eighth and ninth
    /// rounds).
    pub fn take_decodes(&mut self) -> (u64, u64) {
        (
            std::mem::take(&mut self.decodes),
            std::mem::take(&mut self.decode_ns),
        )
    }

    /// Starts a handler's use, for code mappings of `generation`.
    pub fn enter(&mut self, generation: u32) {
        if self.private_generation != generation {
            self.private.flush();
            self.private_generation = generation;
        }
        self.last = NO_RECORD;
        let s = self.shared;
        s.users.fetch_add(1, Ordering::SeqCst);
        if s.closed.load(Ordering::SeqCst) || s.generation.load(Ordering::Relaxed) != generation {
            s.users.fetch_sub(1, Ordering::SeqCst);
            self.entered = false;
        } else {
            self.entered = true;
        }
    }

    /// Ends it (no reference into the shared table may outlive this).
    pub fn leave(&mut self) {
        if self.entered {
            self.shared.users.fetch_sub(1, Ordering::SeqCst);
            self.entered = false;
        }
        self.last = NO_RECORD;
    }

    /// Whether this handler reads the shared table.
    pub fn is_shared(&self) -> bool {
        self.entered
    }

    /// The instruction at `ip` as last looked up (the one a step just ran),
    /// without decoding.
    pub fn get(&self, ip: u64) -> Option<&Insn> {
        if self.entered && self.last != NO_RECORD && self.shared.holds(self.last, ip) {
            return Some(self.shared.insn(self.last));
        }
        self.private.get(ip)
    }

    #[inline(always)]
    fn shared_lookup<M: Memory>(
        &mut self,
        ip: u64,
        mem: &mut M,
    ) -> Result<Option<(u32, &'static Record)>, Stop> {
        let s = self.shared;
        let last = self.last;
        if last != NO_RECORD {
            // The record decoded after the last one (its fall-through, when
            // it was decoded in order), then the other way out of it, as
            // last seen.
            let next = last.wrapping_add(1);
            if let Some(r) = s.holding(next, ip) {
                return Ok(Some((next, r)));
            }
            census!(crate::census::touch(
                &s.records[last as usize].taken,
                crate::census::Part::Code
            ));
            let hint = s.records[last as usize]
                .taken
                .load(Ordering::Relaxed)
                .wrapping_sub(1);
            if let Some(r) = s.holding(hint, ip) {
                return Ok(Some((hint, r)));
            }
        }
        // The index is read only on a miss of both guesses (about one
        // lookup in twenty on SQLite); when it misses too, its probe (a
        // cold line, 250-300 ns in a handler) is part of what the new
        // instruction costs, and is timed with its decoding.
        let t0 = crate::sys::raw::clock_ns();
        let found = match s.find(ip) {
            Some(n) => Some(n),
            None => {
                let inserted = s.insert(ip, mem);
                self.decode_ns += crate::sys::raw::clock_ns().saturating_sub(t0);
                let (found, published) = inserted?;
                self.decodes += u64::from(published);
                found
            }
        };
        if let (true, Some(n)) = (last != NO_RECORD, found) {
            s.records[last as usize]
                .taken
                .store(n + 1, Ordering::Relaxed);
        }
        Ok(found.map(|n| (n, &s.records[n as usize])))
    }
}

impl Default for Code {
    fn default() -> Self {
        Self::new()
    }
}

impl InsnSource for Code {
    #[inline(always)]
    fn lookup<M: Memory>(&mut self, ip: u64, mem: &mut M) -> Result<&Insn, Stop> {
        if self.entered && ip != 0 {
            if let Some((n, record)) = self.shared_lookup(ip, mem)? {
                self.last = n;
                census!(crate::census::touch(
                    record.insn(),
                    crate::census::Part::Code
                ));
                return Ok(record.insn());
            }
        }
        self.private_lookup(ip, mem)
    }
}

impl Code {
    /// The private cache: used while the shared table is closed or stale,
    /// or has no record left.
    fn private_lookup<M: Memory>(&mut self, ip: u64, mem: &mut M) -> Result<&Insn, Stop> {
        self.last = NO_RECORD;
        let t0 = if self.private.get(ip).is_none() {
            Some(crate::sys::raw::clock_ns())
        } else {
            None
        };
        let insn = self.private.lookup(ip, mem);
        if let Some(t0) = t0 {
            self.decode_ns += crate::sys::raw::clock_ns().saturating_sub(t0);
            self.decodes += 1;
        }
        census!(if let Ok(i) = &insn {
            crate::census::touch(*i, crate::census::Part::Code);
        });
        insn
    }
}

impl HandlerSource<SpecCpu> for Code {
    #[inline(always)]
    fn lookup_handler(
        &mut self,
        ip: u64,
        mem: &mut <SpecCpu as Machine>::Mem,
        table: &Table<SpecCpu>,
    ) -> Result<(&Insn, Handler<SpecCpu>), Stop> {
        self.lookup_handler_in(ip, mem, table)
    }
}

impl Code {
    /// See [`HandlerSource::lookup_handler`] (here for any memory).
    #[inline(always)]
    fn lookup_handler_in<M: Memory>(
        &mut self,
        ip: u64,
        mem: &mut M,
        table: &Table<SpecCpu>,
    ) -> Result<(&Insn, Handler<SpecCpu>), Stop> {
        let s = self.shared;
        if self.entered && ip != 0 {
            if let Some((n, record)) = self.shared_lookup(ip, mem)? {
                self.last = n;
                census!(crate::census::touch(record, crate::census::Part::Code));
                let insn = record.insn();
                let offset = record.handler.load(Ordering::Relaxed);
                if offset != 0 && std::ptr::eq(table, s.table) {
                    let at = s.anchor.wrapping_add(offset as isize as usize);
                    // SAFETY: `publish` made `offset` from a handler of this
                    // same table (checked just now) as its distance from the
                    // table's first handler, so `at` is that handler's
                    // address: a function of this very type.
                    let handler = unsafe { std::mem::transmute::<usize, Handler<SpecCpu>>(at) };
                    return Ok((insn, handler));
                }
                return Ok((insn, dispatch(table, insn)));
            }
        }
        let insn = self.private_lookup(ip, mem)?;
        Ok((insn, dispatch(table, insn)))
    }
}

/// `insn`'s handler, read from the dispatch table.
#[inline(always)]
fn dispatch(table: &Table<SpecCpu>, insn: &Insn) -> Handler<SpecCpu> {
    census!(crate::census::touch(
        table.handler_slot(insn.code() as u16),
        crate::census::Part::Dispatch
    ));
    table.handler(insn.code() as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use x86_sem::MemError;

    const BASE: u64 = 0x40_0000;

    /// Code at BASE: a loop of `len` instructions, `inc eax` (2 bytes)
    /// then `jmp BASE` (2 bytes), with fetches counted.
    struct Text {
        bytes: Vec<u8>,
        fetches: u32,
    }

    impl Text {
        fn new(incs: usize) -> Text {
            let mut bytes = Vec::new();
            for _ in 0..incs {
                bytes.extend([0xff, 0xc0]);
            }
            let back = -(bytes.len() as i64 + 2);
            bytes.extend([0xeb, back as i8 as u8]);
            Text { bytes, fetches: 0 }
        }
    }

    impl Memory for Text {
        fn load(&mut self, addr: u64, _: usize) -> Result<u64, MemError> {
            Err(MemError::Fault { addr, write: false })
        }
        fn store(&mut self, addr: u64, _: usize, _: u64) -> Result<(), MemError> {
            Err(MemError::Fault { addr, write: true })
        }
        fn fetch(&mut self, addr: u64, buf: &mut [u8; 15]) -> usize {
            self.fetch_run(addr, buf)
        }
        fn fetch_run(&mut self, addr: u64, buf: &mut [u8]) -> usize {
            self.fetches += 1;
            let Some(off) = addr.checked_sub(BASE).map(|o| o as usize) else {
                return 0;
            };
            let rest = self.bytes.get(off..).unwrap_or(&[]);
            let n = rest.len().min(buf.len());
            buf[..n].copy_from_slice(&rest[..n]);
            n
        }
    }

    fn table() -> &'static SharedCode {
        Box::leak(Box::new(SharedCode::new()))
    }

    /// Runs the loop `rounds` times through `code`, checking each address.
    fn walk(code: &mut Code, text: &mut Text, rounds: usize) {
        let n = text.bytes.len() as u64;
        for _ in 0..rounds {
            let mut ip = BASE;
            while ip < BASE + n {
                let insn = code.lookup(ip, text).expect("decodes");
                assert_eq!(insn.ip(), ip);
                ip += insn.len() as u64;
            }
        }
    }

    #[test]
    fn threads_share_one_decoding_and_follow_it_without_the_index() {
        let shared = table();
        assert!(shared.maintain(1), "a new table opens at the first upkeep");
        let mut a = Code::on(shared);
        let mut text = Text::new(30);
        a.enter(1);
        assert!(a.is_shared());
        walk(&mut a, &mut text, 5);
        a.leave();
        assert_eq!(a.take_decodes().0, 31, "each instruction decoded once");
        assert_eq!(shared.len(), 31);
        assert_eq!(text.fetches, 4, "in runs of {RUN}");
        // Another thread finds them all decoded.
        let mut b = Code::on(shared);
        b.enter(1);
        walk(&mut b, &mut text, 3);
        b.leave();
        assert_eq!((text.fetches, b.take_decodes().0), (4, 0));
        // With the index emptied, the fall-through order and the jump's
        // hint alone still find every record (from the first, via the index).
        let first = SharedCode::home(BASE);
        for (i, slot) in shared.index.iter().enumerate() {
            if i != first {
                slot.store(0, Ordering::Relaxed);
            }
        }
        shared.index[first].store(SharedCode::entry(BASE, 0), Ordering::Relaxed);
        b.enter(1);
        walk(&mut b, &mut text, 3);
        b.leave();
        assert_eq!(text.fetches, 4, "no decoding once the path is known");
    }

    #[test]
    fn a_line_of_one_byte_instructions_is_all_in_the_index() {
        // 120 nops then a jmp back: 64 instructions in one line of code,
        // whose homes are all in one line of the index.
        let shared = table();
        shared.maintain(1);
        let mut bytes = vec![0x90; 120];
        bytes.extend([0xeb, (-122i8) as u8]);
        let mut text = Text { bytes, fetches: 0 };
        let mut code = Code::on(shared);
        code.enter(1);
        walk(&mut code, &mut text, 2);
        code.leave();
        assert_eq!(code.take_decodes().0, 121, "each decoded once");
        for i in 0..121 {
            let n = shared.find(BASE + i).expect("in the index");
            assert_eq!(shared.insn(n).ip(), BASE + i);
        }
        assert_eq!(
            SharedCode::home(BASE) / LINE_SLOTS,
            SharedCode::home(BASE + 63) / LINE_SLOTS
        );
    }

    #[test]
    fn records_keep_the_handler_the_table_has() {
        let shared = table();
        shared.maintain(1);
        let dispatch = super::super::table();
        let mut text = Text::new(6);
        let mut code = Code::on(shared);
        code.enter(1);
        for round in 0..2 {
            let mut ip = BASE;
            while ip < BASE + text.bytes.len() as u64 {
                let (insn, handler) = code
                    .lookup_handler_in(ip, &mut text, dispatch)
                    .expect("decodes");
                let (len, form) = (insn.len() as u64, insn.code() as u16);
                assert_eq!(handler as usize, dispatch.handler(form) as usize, "{ip:#x}");
                let n = code.last as usize;
                assert_ne!(
                    shared.records[n].handler.load(Ordering::Relaxed),
                    0,
                    "round {round}: kept in the record"
                );
                ip += len;
            }
        }
        code.leave();
    }

    /// The `AnonHugePages` of the mapping holding `at`, in KiB.
    fn huge_kib_at(at: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        inside = lo <= at && at < hi;
                        continue;
                    }
                }
            }
            if let (true, Some(rest)) = (inside, line.strip_prefix("AnonHugePages:")) {
                return rest
                    .trim()
                    .trim_end_matches(" kB")
                    .parse()
                    .expect("a number");
            }
        }
        0
    }

    #[test]
    fn the_worker_asks_for_huge_pages_once_per_region_in_use() {
        let shared = table();
        shared.maintain(1);
        assert_eq!(shared.collapse(), 0, "nothing in use yet");
        assert_eq!(shared.collapsed.load(Ordering::Relaxed), 0);
        let mut code = Code::on(shared);
        let mut text = Text::new(30);
        code.enter(1);
        walk(&mut code, &mut text, 1);
        code.leave();
        let made = shared.collapse();
        // The index's region and the records' first, each once.
        let got = shared.collapsed.load(Ordering::Relaxed);
        assert_eq!(got.count_ones(), made);
        assert_eq!(got & !0b11, 0, "{got:#b}");
        if made == 2 {
            assert_eq!(shared.collapse(), 0, "each region once");
        } else {
            assert_eq!(shared.collapse_tries.load(Ordering::Relaxed), 1);
        }
        // Where the kernel made them (Linux 6.1 and later, THP not off, a
        // huge page free), the mappings show them.
        if made > 0 {
            let huge = huge_kib_at(shared.index.as_ptr() as usize)
                + huge_kib_at(shared.records.as_ptr() as usize);
            assert!(huge >= 2048, "{made} made, {huge} KiB of huge pages");
        }
        // The records still read as they were.
        code.enter(1);
        walk(&mut code, &mut text, 1);
        code.leave();
        assert_eq!(code.take_decodes().0, 31);
    }

    #[test]
    fn huge_pages_wait_for_the_traces_that_pay_for_them() {
        let shared = table();
        let mut code = Code::on(shared);
        let mut text = Text::new(30);
        shared.upkeep(1, 0);
        code.enter(1);
        walk(&mut code, &mut text, 1);
        code.leave();
        shared.upkeep(1, COLLAPSE_AFTER_TRACES - 1);
        assert_eq!(shared.collapsed.load(Ordering::Relaxed), 0);
        assert_eq!(shared.collapse_tries.load(Ordering::Relaxed), 0);
        shared.upkeep(1, COLLAPSE_AFTER_TRACES);
        // Asked for: made, or counted as a try where the kernel cannot.
        let asked = shared.collapsed.load(Ordering::Relaxed) != 0
            || shared.collapse_tries.load(Ordering::Relaxed) != 0;
        assert!(asked, "no huge page asked for after enough traces");
    }

    #[test]
    fn a_run_stops_where_the_code_is_decoded_already() {
        let shared = table();
        shared.maintain(1);
        let mut code = Code::on(shared);
        // 5 incs and a jmp: entered at the fourth inc first (a jump
        // target), then at the first.
        let mut text = Text::new(5);
        code.enter(1);
        assert_eq!(
            code.lookup(BASE + 6, &mut text).expect("decodes").ip(),
            BASE + 6
        );
        assert_eq!(code.take_decodes().0, 3, "the fourth inc to the jmp");
        code.leave();
        code.enter(1);
        walk(&mut code, &mut text, 2);
        code.leave();
        assert_eq!(code.take_decodes().0, 3, "the first three incs only");
        assert_eq!(shared.len(), 6, "no instruction twice");
        assert_eq!(text.fetches, 2);
    }

    /// Pages of `s`'s index the process holds in memory (mincore).
    fn resident_index_pages(s: &SharedCode) -> usize {
        let len = std::mem::size_of_val(s.index);
        let pages = len.div_ceil(4096);
        let mut v = vec![0u8; pages];
        // SAFETY: the index is one mapping of its own (`zeroed_slice`),
        // page-aligned, and `v` has a byte per page of it.
        let rc =
            unsafe { libc::mincore(s.index.as_ptr() as *mut libc::c_void, len, v.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        v.iter().filter(|&&b| b & 1 != 0).count()
    }

    #[test]
    fn the_index_is_made_once_code_is_published() {
        let shared = table();
        shared.upkeep(1, 0);
        assert_eq!(resident_index_pages(shared), 0, "256 KiB of zeros written");
        let mut code = Code::on(shared);
        let mut text = Text::new(4);
        code.enter(1);
        walk(&mut code, &mut text, 1);
        code.leave();
        let pages = std::mem::size_of_val(shared.index) / 4096;
        shared.upkeep(1, 0);
        assert_eq!(resident_index_pages(shared), pages, "the index made whole");
        // Records in use: a change of code clears the index.
        assert!(shared.maintain(2));
        assert_eq!(shared.len(), 0);
        code.enter(2);
        walk(&mut code, &mut text, 1);
        code.leave();
        assert_eq!(shared.len(), 5, "found nothing of generation 1");
    }

    #[test]
    fn upkeep_waits_for_readers_and_new_code_goes_private_until_then() {
        let shared = table();
        shared.maintain(1);
        let mut a = Code::on(shared);
        let mut text = Text::new(4);
        a.enter(1);
        walk(&mut a, &mut text, 1);
        // The code changed (generation 2) while `a` still reads.
        assert!(!shared.maintain(2), "no reset under a reader");
        let mut b = Code::on(shared);
        b.enter(2);
        assert!(!b.is_shared(), "closed: the private cache serves");
        walk(&mut b, &mut text, 2);
        b.leave();
        a.leave();
        assert!(shared.maintain(2));
        // Two resets: the first upkeep's, and this one.
        assert_eq!((shared.len(), shared.resets()), (0, 2));
        b.enter(2);
        assert!(b.is_shared());
        walk(&mut b, &mut text, 1);
        b.leave();
        assert_eq!(shared.len(), 5);
        // A thread still on the old generation never reads the new table.
        a.enter(1);
        assert!(!a.is_shared());
        a.leave();
    }

    #[test]
    fn concurrent_fills_publish_whole_instructions() {
        let shared = table();
        shared.maintain(1);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    let mut code = Code::on(shared);
                    let mut text = Text::new(500);
                    for _ in 0..20 {
                        code.enter(1);
                        walk(&mut code, &mut text, 2);
                        code.leave();
                    }
                });
            }
        });
        assert_eq!(shared.users.load(Ordering::SeqCst), 0);
        // Every address is findable, and holds the right instruction.
        for i in 0..=500u64 {
            let n = shared.find(BASE + 2 * i).expect("published");
            assert_eq!(shared.insn(n).ip(), BASE + 2 * i);
        }
        assert!(shared.len() <= 4 * 501);
    }

    #[test]
    fn a_full_table_leaves_decoding_to_the_thread() {
        let shared = table();
        shared.maintain(1);
        shared.next.store(RECORDS as u32, Ordering::Relaxed);
        let mut code = Code::on(shared);
        let mut text = Text::new(3);
        code.enter(1);
        walk(&mut code, &mut text, 2);
        code.leave();
        assert_eq!(text.fetches, 4, "the private cache keeps them");
        assert_eq!(code.take_decodes().0, 4);
        assert!(shared.maintain(1), "the worker empties a full table");
        assert_eq!(shared.len(), 0);
    }
}
