//! The emulator's view of the thread's memory during one speculative
//! segment: real memory read through fault-safe loads, a private store
//! overlay, and the log the checkpoint validates.
//!
//! Invariants, for the segment since the last [`LiveMemory::reset`]:
//! - Real memory is never written: every store goes to the overlay.
//! - Real memory is read at 8-byte-aligned qword granularity, each qword at
//!   most once: a second load of the same qword sees the value of the first
//!   (so the emulation is a function of one snapshot value per qword, and
//!   the log holds exactly those values).
//! - A load's bytes come from the overlay where the segment stored them,
//!   else from the logged qword; `used` records which logged bytes the
//!   emulation consumed.
//!
//! At the checkpoint ([`LiveMemory::validate`]) every logged qword is read
//! again: each consumed byte must still hold the loaded value, unless the
//! thread itself stored it later in the window, in which case it (like
//! every stored byte) must hold the overlay's final value.
//!
//! Async-signal-safe: fixed arrays, no allocation.

/// Real qwords one segment may read; one more ends the segment (the
/// checkpoint goes there, and the next segment starts with an empty log).
pub const LOAD_LOG_ENTRIES: usize = 512;
/// Qwords one segment may store.
pub const OVERLAY_ENTRIES: usize = 256;
/// Hash slots of each index (a power of two, at least twice the entries).
const LOAD_SLOTS: usize = 1024;
const OVERLAY_SLOTS: usize = 512;
/// Stored qwords a proven tail may change after the seal (see
/// [`LiveMemory::seal`]); one more ends the tail.
pub const UNDO_ENTRIES: usize = 64;

/// Reads real memory. The handler's implementation is the fault-safe load;
/// tests use a table.
pub trait Probe {
    /// The 8 bytes at the 8-byte-aligned `addr`, or `None` if unreadable.
    fn read_qword(&self, addr: u64) -> Option<u64>;
}

/// Why an access did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessError {
    /// The qword at this address cannot be read.
    Fault(u64),
    /// The load log or the overlay is full.
    LogFull,
    /// The load needs bytes of the qword at this address that lie in the
    /// stack the program did not own at the last signal (see
    /// [`LiveMemory::set_scratch`]) and that it has not stored since: the
    /// CPU will read whatever the signal's frame left there.
    Indeterminate(u64),
}

/// What the checkpoint found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryCheck {
    Match,
    /// A logged qword holds another value (or cannot be read) now.
    Differs {
        addr: u64,
    },
}

#[derive(Clone, Copy, Default, bytemuck::Zeroable)]
struct Logged {
    addr: u64,
    value: u64,
    /// Bytes the emulation consumed from `value`.
    used: u8,
}

#[derive(Clone, Copy, Default, bytemuck::Zeroable)]
struct Stored {
    addr: u64,
    /// The bytes stored; 0 in every byte outside `mask`.
    value: u64,
    /// Bytes the segment stored.
    mask: u8,
    /// Its value at the seal is in the undo log.
    saved: bool,
    /// Bytes of `mask` stored before a signal frame was written over them
    /// (see [`LiveMemory::note_signal_frame`]), and not stored again.
    stale: u8,
}

/// A stored qword as it was at the seal.
#[derive(Clone, Copy, Default, bytemuck::Zeroable)]
struct Undo {
    pos: u32,
    value: u64,
    mask: u8,
}

/// Open-addressing index from qword address to a position in a log, with
/// generation tags so that resetting it is O(1).
#[derive(bytemuck::Zeroable)]
struct Index<const SLOTS: usize> {
    slots: [(u32, u32); SLOTS],
    generation: u32,
}

impl<const SLOTS: usize> Index<SLOTS> {
    fn reset(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // Once every 2^32 segments: old tags could alias. Cleared in
            // place: a handler runs this, on the application's stack.
            self.slots.fill((0, 0));
            self.generation = 1;
        }
    }

    fn home(addr: u64) -> usize {
        ((addr >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize & (SLOTS - 1)
    }

    /// The position stored for `addr`, probing with `key_at` to compare.
    fn find(&self, addr: u64, key_at: impl Fn(usize) -> u64) -> Result<usize, usize> {
        let mut i = Self::home(addr);
        loop {
            census!(crate::census::touch(
                &self.slots[i],
                crate::census::Part::Memory
            ));
            let (generation, pos) = self.slots[i];
            if generation != self.generation {
                return Err(i);
            }
            if key_at(pos as usize) == addr {
                return Ok(pos as usize);
            }
            i = (i + 1) & (SLOTS - 1);
        }
    }

    fn insert_at(&mut self, slot: usize, pos: usize) {
        census!(crate::census::touch(
            &self.slots[slot],
            crate::census::Part::Memory
        ));
        self.slots[slot] = (self.generation, pos as u32);
    }
}

/// One segment's memory: see the module doc. All zeroes is an empty log
/// (with index generation 0, which [`LiveMemory::new`] moves to 1).
#[derive(bytemuck::Zeroable)]
pub struct LiveMemory {
    loads: [Logged; LOAD_LOG_ENTRIES],
    n_loads: usize,
    load_index: Index<LOAD_SLOTS>,
    stores: [Stored; OVERLAY_ENTRIES],
    n_stores: usize,
    store_index: Index<OVERLAY_SLOTS>,
    /// Sealed (see [`LiveMemory::seal`]): the logs' lengths then, and the
    /// stored qwords changed since, as they were.
    sealed: bool,
    /// The seal may be forgotten (`LiveMemory::seal_soft`).
    soft: bool,
    seal_loads: usize,
    seal_stores: usize,
    undo: [Undo; UNDO_ENTRIES],
    n_undo: usize,
    /// Stack whose bytes the thread will not find as they are now
    /// (`[start, end)`, empty when `start == end`): at the segment's start
    /// (`scratch_start`, see [`LiveMemory::set_scratch`]), and grown by
    /// the signal frames predicted since ([`LiveMemory::note_signal_frame`]).
    scratch: (u64, u64),
    scratch_start: (u64, u64),
    /// The lowest qword stored since the last
    /// [`LiveMemory::note_signal_frame`] (or the reset).
    fresh_low: u64,
}

/// The address of entry `p` of a log whose first `n` entries are current;
/// `u64::MAX` past them (no qword address is: see
/// [`LiveMemory::store_pos`]).
#[inline]
fn address_at<T>(entries: &[T], n: usize, p: usize, addr: impl Fn(&T) -> u64) -> u64 {
    if p >= n {
        return u64::MAX;
    }
    census!(crate::census::touch(
        &entries[p],
        crate::census::Part::Memory
    ));
    addr(&entries[p])
}

/// The bytes `[addr, addr + size)` split over at most two qwords:
/// (qword address, byte mask within it, shift of the value's first byte).
fn chunks(addr: u64, size: usize) -> [(u64, u8, u32); 2] {
    let q0 = addr & !7;
    let off = (addr & 7) as u32;
    let first = (8 - off as usize).min(size);
    let mask0 = (((1u16 << first) - 1) << off) as u8;
    let rest = size - first;
    let mask1 = ((1u16 << rest) - 1) as u8;
    [(q0, mask0, off), (q0.wrapping_add(8), mask1, 0)]
}

/// The byte mask, within its qword, of an access of `size` bytes at `addr`
/// that does not cross into the next qword.
#[inline(always)]
fn within_mask(addr: u64, size: usize) -> u8 {
    debug_assert!((addr & 7) as usize + size <= 8);
    ((((1u16 << size) - 1) << (addr & 7)) & 0xff) as u8
}

/// The `n` (0 to 64) lowest bits set.
#[inline(always)]
fn low_bits(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1 << n) - 1
    }
}

/// The byte mask of the bytes of the qword at `q` that lie below `end`.
#[inline]
fn bytes_below(q: u64, end: u64) -> u8 {
    match end.saturating_sub(q) {
        0 => 0,
        n if n >= 8 => 0xff,
        n => (1u8 << n) - 1,
    }
}

/// Spreads a byte mask to a bit mask: bit i of `mask` becomes byte i.
/// Branch-free (each access runs it several times): the bits move apart
/// in three steps, to every 32nd, 16th and 8th position, then each becomes
/// a byte of ones.
#[inline]
fn bits(mask: u8) -> u64 {
    let mut x = u64::from(mask);
    x = (x | x << 28) & 0x0000_000f_0000_000f;
    x = (x | x << 14) & 0x0003_0003_0003_0003;
    x = (x | x << 7) & 0x0101_0101_0101_0101;
    x * 0xff
}

impl LiveMemory {
    /// An empty log, zeroed on the heap directly: at about 30 KiB it
    /// would not fit on a small thread stack, where registration runs.
    pub fn new() -> Box<LiveMemory> {
        let mut log = bytemuck::zeroed_box::<LiveMemory>();
        // Slots are tagged with generation 0: none is current.
        log.load_index.generation = 1;
        log.store_index.generation = 1;
        log
    }

    /// Starts a new segment.
    pub fn reset(&mut self) {
        self.n_loads = 0;
        self.n_stores = 0;
        self.load_index.reset();
        self.store_index.reset();
        self.sealed = false;
        self.soft = false;
        self.n_undo = 0;
        self.fresh_low = u64::MAX;
        self.scratch = self.scratch_start;
    }

    /// Marks `[start, end)` as stack that changes under the emulation:
    /// the stack of the handler that runs it, below its signal frame and
    /// the red zone of the interrupted rsp. The thread, once resumed, reads
    /// there what the handler left. A program cannot rely on such bytes (a
    /// signal may come at any time), but it may read them: a `pop` of
    /// padding that `sub rsp` made, an uninitialised local. A load that
    /// needs any of them, and that the segment did not store, is
    /// [`AccessError::Indeterminate`]: the emulation stops before it
    /// instead of guessing. Each [`LiveMemory::reset`] starts from this
    /// range again.
    pub fn set_scratch(&mut self, start: u64, end: u64) {
        self.scratch = (start, end);
        self.scratch_start = (start, end);
    }

    /// Another signal frame, written at a stop the emulation predicts,
    /// below the red zone at that stop's rsp (`[start, end)`): those
    /// bytes join the scratch stack, and what the segment stored there
    /// before is indeterminate too until it stores it again.
    pub fn note_signal_frame(&mut self, start: u64, end: u64) {
        let (s, e) = self.scratch;
        self.scratch = if s == e {
            (start, end)
        } else {
            (s.min(start), e.max(end))
        };
        if self.fresh_low >= end {
            return;
        }
        self.fresh_low = u64::MAX;
        for st in &mut self.stores[..self.n_stores] {
            if st.addr < end && st.addr.saturating_add(8) > start {
                st.stale |= st.mask & bytes_below(st.addr, end) & !bytes_below(st.addr, start);
            }
        }
    }

    /// Whether the bytes `used` of the qword at `q` touch the scratch
    /// stack.
    #[inline(always)]
    fn in_scratch(&self, q: u64, used: u8) -> bool {
        let first = q + u64::from(used.trailing_zeros());
        let last = q + 7 - u64::from(used.leading_zeros());
        first < self.scratch.1 && last >= self.scratch.0
    }

    /// Marks the point the checkpoint will validate: the segment goes on
    /// past it (a proven tail, whose reads need no check), but
    /// [`LiveMemory::rewind_to_seal`] gives back the logs as they are now.
    /// Loads after the seal append to the log; stores after it append, or
    /// save the qword's sealed value before changing it (at most
    /// [`UNDO_ENTRIES`] such qwords: one more is [`AccessError::LogFull`]).
    pub fn seal(&mut self) {
        self.forget_undo();
        self.sealed = true;
        self.soft = false;
        self.seal_loads = self.n_loads;
        self.seal_stores = self.n_stores;
    }

    /// [`LiveMemory::seal`], for a checkpoint the segment may do without:
    /// a store that would overflow the undo log forgets the seal (see
    /// [`LiveMemory::is_sealed`]) instead of failing.
    pub fn seal_soft(&mut self) {
        self.seal();
        self.soft = true;
    }

    /// Whether the logs are sealed (a soft seal may have been forgotten).
    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// Forgets the seal: the checkpoint goes where the segment ends, and
    /// checks every read and store.
    pub fn unseal(&mut self) {
        self.forget_undo();
        self.sealed = false;
    }

    /// Empties the undo log, so that a later seal saves every qword again.
    fn forget_undo(&mut self) {
        for u in &self.undo[..self.n_undo] {
            self.stores[u.pos as usize].saved = false;
        }
        self.n_undo = 0;
    }

    /// The logs as they were at [`LiveMemory::seal`], for the checkpoint
    /// there: what came after is dropped, and the qwords changed since get
    /// their sealed values back. No access may follow until the next
    /// [`LiveMemory::reset`] (the index still names dropped entries;
    /// lookups ignore them).
    pub fn rewind_to_seal(&mut self) {
        if !self.sealed {
            return;
        }
        for u in self.undo[..self.n_undo].iter().rev() {
            let s = &mut self.stores[u.pos as usize];
            s.value = u.value;
            s.mask = u.mask;
            s.saved = false;
        }
        self.n_undo = 0;
        self.n_loads = self.seal_loads;
        self.n_stores = self.seal_stores;
        self.sealed = false;
    }

    /// Real qwords read and qwords stored so far.
    pub fn logged(&self) -> (usize, usize) {
        (self.n_loads, self.n_stores)
    }

    /// The overlay's position of the qword at `addr`. Positions past the
    /// log's length (dropped by [`LiveMemory::rewind_to_seal`]) match no
    /// address: a qword address is 8-aligned, `u64::MAX` is not.
    fn store_pos(&self, addr: u64) -> Result<usize, usize> {
        let (stores, n) = (&self.stores[..], self.n_stores);
        self.store_index
            .find(addr, |p| address_at(stores, n, p, |s| s.addr))
    }

    fn stored(&self, addr: u64) -> Option<&Stored> {
        self.store_pos(addr).ok().map(|p| &self.stores[p])
    }

    /// The load log's position of the qword at `addr` (as
    /// [`LiveMemory::store_pos`]).
    fn load_pos(&self, addr: u64) -> Result<usize, usize> {
        let (loads, n) = (&self.loads[..], self.n_loads);
        self.load_index
            .find(addr, |p| address_at(loads, n, p, |l| l.addr))
    }

    /// The qword at `addr` as first read in this segment, reading and
    /// logging it now if it was not; `used` is or-ed into its consumed
    /// bytes.
    fn real_qword(&mut self, probe: &impl Probe, addr: u64, used: u8) -> Result<u64, AccessError> {
        match self.load_pos(addr) {
            Ok(p) => {
                self.loads[p].used |= used;
                Ok(self.loads[p].value)
            }
            Err(slot) => {
                if self.n_loads == LOAD_LOG_ENTRIES {
                    return Err(AccessError::LogFull);
                }
                let value = probe.read_qword(addr).ok_or(AccessError::Fault(addr))?;
                self.loads[self.n_loads] = Logged { addr, value, used };
                census!(crate::census::touch(
                    &self.loads[self.n_loads],
                    crate::census::Part::Memory
                ));
                self.load_index.insert_at(slot, self.n_loads);
                self.n_loads += 1;
                Ok(value)
            }
        }
    }

    /// Loads `size` (1 to 8) bytes at `addr`, little-endian.
    pub fn load(&mut self, probe: &impl Probe, addr: u64, size: usize) -> Result<u64, AccessError> {
        self.load_noting(probe, addr, size, true)
            .map(|(value, _)| value)
    }

    /// [`LiveMemory::load`], saying also whether any byte came from real
    /// memory (not all of them from the overlay: see [`LiveMemory::covers`]).
    ///
    /// With `log` false the bytes read from real memory are neither logged
    /// nor checked later: memory that cannot change while the segment runs
    /// (immutable, or private to a quiet process), read afresh each time.
    #[inline(always)]
    pub fn load_noting(
        &mut self,
        probe: &impl Probe,
        addr: u64,
        size: usize,
        log: bool,
    ) -> Result<(u64, bool), AccessError> {
        debug_assert!((1..=8).contains(&size));
        if (addr & 7) as usize + size > 8 {
            return self.load_parts(probe, addr, size, log);
        }
        // Within one qword (nearly every load): one look at each index,
        // nothing to merge.
        let mask = within_mask(addr, size);
        let (qword, real) = self.seen(probe, addr & !7, mask, log)?;
        Ok(((qword >> (8 * (addr & 7))) & low_bits(8 * size), real))
    }

    /// [`LiveMemory::load_noting`], any access: each qword it touches in
    /// turn.
    fn load_parts(
        &mut self,
        probe: &impl Probe,
        addr: u64,
        size: usize,
        log: bool,
    ) -> Result<(u64, bool), AccessError> {
        let mut value = 0u64;
        let mut got = 0u32;
        let mut any_real = false;
        for (q, mask, shift) in chunks(addr, size) {
            if mask == 0 {
                continue;
            }
            let (qword, real) = self.seen(probe, q, mask, log)?;
            any_real |= real;
            value |= ((qword & bits(mask)) >> (8 * shift)) << got;
            got += 8 * mask.count_ones();
        }
        Ok((value, any_real))
    }

    /// The qword at the 8-byte-aligned `q` as the segment sees it, for a
    /// load of its bytes `mask`: the segment's stores over real memory,
    /// read (and logged, with `log`) only where the load needs bytes the
    /// segment did not store; and whether it read real memory.
    #[inline(always)]
    fn seen(
        &mut self,
        probe: &impl Probe,
        q: u64,
        mask: u8,
        log: bool,
    ) -> Result<(u64, bool), AccessError> {
        let (ov_value, ov_mask, stale) = self
            .stored(q)
            .map_or((0, 0, 0), |s| (s.value, s.mask, s.stale));
        let from_real = mask & !ov_mask;
        let unknown = from_real | (mask & stale);
        if unknown != 0 && self.in_scratch(q, unknown) {
            return Err(AccessError::Indeterminate(q));
        }
        if from_real == 0 {
            // (Bytes outside the stored ones are 0: see `Stored::value`.)
            return Ok((ov_value, false));
        }
        let real = if log {
            self.real_qword(probe, q, from_real)?
        } else {
            probe.read_qword(q).ok_or(AccessError::Fault(q))?
        };
        if ov_mask == 0 {
            // Nothing stored there (most loads): nothing to merge.
            return Ok((real, true));
        }
        Ok((ov_value | (real & !bits(ov_mask)), true))
    }

    /// The qword at the 8-byte-aligned `addr` as the segment sees it now
    /// (its stores over the value it read, or over real memory), without
    /// logging it: the call-stack walk reads the thread's older frames,
    /// which the checkpoint need not check. `None` if unreadable.
    pub fn peek(&self, probe: &impl Probe, addr: u64) -> Option<u64> {
        debug_assert_eq!(addr & 7, 0);
        let (ov_value, ov_mask) = self.stored(addr).map_or((0, 0), |s| (s.value, s.mask));
        if ov_mask == 0xff {
            return Some(ov_value);
        }
        let real = match self.load_pos(addr) {
            Ok(p) => self.loads[p].value,
            Err(_) => probe.read_qword(addr)?,
        };
        Some((ov_value & bits(ov_mask)) | (real & !bits(ov_mask)))
    }

    /// Writes the segment's stores over `words`, a copy of real memory
    /// from the 8-byte-aligned `base` up (a stack snapshot).
    pub fn overlay_onto(&self, base: u64, words: &mut [u64]) {
        if base & 7 != 0 {
            return;
        }
        let end = base.saturating_add(8 * words.len() as u64);
        for s in &self.stores[..self.n_stores] {
            if s.addr >= base && s.addr < end {
                let w = &mut words[((s.addr - base) / 8) as usize];
                *w = (s.value & bits(s.mask)) | (*w & !bits(s.mask));
            }
        }
    }

    /// Stores the low `size` (1 to 8) bytes of `value` at `addr` into the
    /// overlay.
    pub fn store(&mut self, addr: u64, size: usize, value: u64) -> Result<(), AccessError> {
        debug_assert!((1..=8).contains(&size));
        if (addr & 7) as usize + size <= 8 {
            self.store_within(addr, size, value)
        } else {
            self.store_parts(addr, size, value)
        }
    }

    /// Stores `buf` (a vector or x87 operand, 10 to 64 bytes) at `addr`:
    /// room for every qword it touches is checked first, so that a full
    /// overlay (or undo log) leaves none of it stored. Stored piece by
    /// piece, a store that did not fit would leave its first pieces in the
    /// overlay while the pass ends before the instruction: the checkpoint
    /// would then find real memory without them.
    pub fn store_bytes(&mut self, addr: u64, buf: &[u8]) -> Result<(), AccessError> {
        if buf.is_empty() {
            return Ok(());
        }
        self.make_room(addr, buf.len())?;
        for (k, piece) in buf.chunks(8).enumerate() {
            let mut b = [0u8; 8];
            b[..piece.len()].copy_from_slice(piece);
            let at = addr.wrapping_add(8 * k as u64);
            self.store(at, piece.len(), u64::from_le_bytes(b))?;
        }
        Ok(())
    }

    /// Whether the overlay, and the undo log, have room for a store of
    /// `len` (at least 1) bytes at `addr`: a new entry for each qword it
    /// touches that has none, a saved value for each sealed one not yet
    /// saved. A soft seal gives way to a full undo log.
    fn make_room(&mut self, addr: u64, len: usize) -> Result<(), AccessError> {
        let last = addr.wrapping_add(len as u64 - 1) & !7;
        let (mut needed, mut saves) = (0, 0);
        let mut q = addr & !7;
        loop {
            match self.store_pos(q) {
                Err(_) => needed += 1,
                Ok(p) if self.must_save(p) => saves += 1,
                Ok(_) => {}
            }
            if q == last {
                break;
            }
            q = q.wrapping_add(8);
        }
        if self.n_undo + saves > UNDO_ENTRIES && self.soft {
            self.unseal();
            saves = 0;
        }
        if self.n_stores + needed > OVERLAY_ENTRIES || self.n_undo + saves > UNDO_ENTRIES {
            return Err(AccessError::LogFull);
        }
        Ok(())
    }

    /// [`LiveMemory::store`], any access: room for every qword checked
    /// first, then each stored in turn.
    fn store_parts(&mut self, addr: u64, size: usize, value: u64) -> Result<(), AccessError> {
        // Check room first, so that a full overlay (or undo log) leaves no
        // half store.
        self.make_room(addr, size)?;
        let mut consumed = 0u32;
        for (q, mask, shift) in chunks(addr, size) {
            if mask == 0 {
                continue;
            }
            let part = (value >> consumed) << (8 * shift);
            consumed += 8 * mask.count_ones();
            let p = match self.store_pos(q) {
                Ok(p) => {
                    if self.must_save(p) {
                        self.save(p);
                    }
                    p
                }
                Err(slot) => self.new_store(q, slot),
            };
            self.merge_store(p, mask, part);
        }
        Ok(())
    }

    /// Keeps the sealed value of the overlay's entry `p` in the undo log
    /// (which has room).
    #[inline]
    fn save(&mut self, p: usize) {
        let s = &mut self.stores[p];
        s.saved = true;
        self.undo[self.n_undo] = Undo {
            pos: p as u32,
            value: s.value,
            mask: s.mask,
        };
        census!(crate::census::touch(
            &self.undo[self.n_undo],
            crate::census::Part::Memory
        ));
        self.n_undo += 1;
    }

    /// A new, empty overlay entry for the qword at `q` (the overlay has
    /// room), indexed at `slot`; its position.
    #[inline]
    fn new_store(&mut self, q: u64, slot: usize) -> usize {
        self.stores[self.n_stores] = Stored {
            addr: q,
            value: 0,
            mask: 0,
            saved: false,
            stale: 0,
        };
        census!(crate::census::touch(
            &self.stores[self.n_stores],
            crate::census::Part::Memory
        ));
        self.store_index.insert_at(slot, self.n_stores);
        self.n_stores += 1;
        self.n_stores - 1
    }

    /// Writes the bytes `mask` of `part` into the overlay's entry `p`.
    #[inline]
    fn merge_store(&mut self, p: usize, mask: u8, part: u64) {
        let s = &mut self.stores[p];
        if mask == 0xff {
            // A whole qword (a push, a call, a spill): nothing to keep.
            s.value = part;
        } else {
            let b = bits(mask);
            s.value = (s.value & !b) | (part & b);
        }
        s.mask |= mask;
        s.stale &= !mask;
        if s.addr < self.fresh_low {
            self.fresh_low = s.addr;
        }
        debug_assert_eq!(s.value & !bits(s.mask), 0);
    }

    /// [`LiveMemory::store`] of bytes within one qword (nearly every
    /// store): one look at the index where the general path takes two.
    #[inline]
    fn store_within(&mut self, addr: u64, size: usize, value: u64) -> Result<(), AccessError> {
        let q = addr & !7;
        let mask = within_mask(addr, size);
        let p = match self.store_pos(q) {
            Ok(p) => {
                if self.must_save(p) {
                    if self.n_undo < UNDO_ENTRIES {
                        self.save(p);
                    } else if self.soft {
                        self.unseal();
                    } else {
                        return Err(AccessError::LogFull);
                    }
                }
                p
            }
            Err(_) if self.n_stores == OVERLAY_ENTRIES => return Err(AccessError::LogFull),
            Err(slot) => self.new_store(q, slot),
        };
        self.merge_store(p, mask, value << (8 * (addr & 7)));
        Ok(())
    }

    /// Whether a store to the overlay's entry `p` must first save its
    /// sealed value.
    fn must_save(&self, p: usize) -> bool {
        self.sealed && p < self.seal_stores && !self.stores[p].saved
    }

    /// Whether every byte of `[addr, addr + size)` was stored by this
    /// segment (a load of them reads no real memory).
    pub fn covers(&self, addr: u64, size: usize) -> bool {
        chunks(addr, size)
            .iter()
            .all(|&(q, mask, _)| mask == 0 || self.stored(q).is_some_and(|s| s.mask & mask == mask))
    }

    /// Reads every logged address again (see the module doc), except
    /// those in `dead`: stack below the red zone at the checkpoint, which
    /// the program no longer owns and where the checkpoint's own signal
    /// frame now lies.
    pub fn validate(&self, probe: &impl Probe, dead: std::ops::Range<u64>) -> MemoryCheck {
        census!(crate::census::touch(
            &self.stores[..self.n_stores],
            crate::census::Part::Memory
        ));
        census!(crate::census::touch(
            &self.loads[..self.n_loads],
            crate::census::Part::Memory
        ));
        for s in &self.stores[..self.n_stores] {
            if dead.contains(&s.addr) {
                continue;
            }
            match probe.read_qword(s.addr) {
                Some(now) if (now ^ s.value) & bits(s.mask) == 0 => {}
                _ => return MemoryCheck::Differs { addr: s.addr },
            }
        }
        for l in &self.loads[..self.n_loads] {
            if dead.contains(&l.addr) {
                continue;
            }
            // Bytes the thread stored later are checked above.
            let ov_mask = self.stored(l.addr).map_or(0, |s| s.mask);
            let check = bits(l.used & !ov_mask);
            if check == 0 {
                continue;
            }
            match probe.read_qword(l.addr) {
                Some(now) if (now ^ l.value) & check == 0 => {}
                _ => return MemoryCheck::Differs { addr: l.addr },
            }
        }
        MemoryCheck::Match
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    /// Real memory as a table of qwords; unlisted qwords fault.
    #[derive(Default)]
    struct Table(RefCell<HashMap<u64, u64>>, RefCell<usize>);

    impl Table {
        fn with(words: &[(u64, u64)]) -> Table {
            let t = Table::default();
            t.0.borrow_mut().extend(words.iter().copied());
            t
        }
        fn set(&self, addr: u64, v: u64) {
            self.0.borrow_mut().insert(addr, v);
        }
    }

    impl Probe for Table {
        fn read_qword(&self, addr: u64) -> Option<u64> {
            *self.1.borrow_mut() += 1;
            self.0.borrow().get(&addr).copied()
        }
    }

    /// The within-qword paths against the general ones: the same random
    /// accesses (all sizes, every offset, faults, seals, soft seals, a
    /// full undo log) through `load_noting`/`store` and through
    /// `load_parts`/`store_parts` only give the same results, logs and
    /// checkpoint answers, and every load sees the bytes stored before it
    /// over real memory.
    #[test]
    fn accesses_within_a_qword_match_the_general_path() {
        // 160 qwords from 0x1000, but for a hole that faults.
        let words: Vec<(u64, u64)> = (0..160u64)
            .filter(|i| !(40..44).contains(i))
            .map(|i| (0x1000 + 8 * i, 0x0102_0304_0506_0708u64.wrapping_mul(i + 3)))
            .collect();
        let mem = Table::with(&words);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let real: std::collections::HashMap<u64, u64> = words.iter().copied().collect();
        let (mut within, mut refused) = (0, 0);
        for round in 0..100u64 {
            let (mut a, mut b) = (LiveMemory::new(), LiveMemory::new());
            // The bytes stored so far: what a load must see over real memory.
            let mut model = std::collections::HashMap::<u64, u8>::new();
            // Some rounds crowd a few qwords, others spread over many
            // (enough to fill the undo log after a seal).
            let span = if round % 2 == 0 { 0x40 } else { 0x500 };
            for _ in 0..1500 {
                let r = next();
                let size = 1 + (r % 8) as usize;
                let addr = 0x1000 + (r >> 8) % span;
                if (addr & 7) as usize + size <= 8 {
                    within += 1;
                }
                match (r >> 20) % 600 {
                    0..=289 => {
                        let log = (r >> 30) % 4 != 0;
                        let loaded = a.load_noting(&mem, addr, size, log);
                        assert_eq!(
                            loaded,
                            b.load_parts(&mem, addr, size, log),
                            "load {addr:#x} {size}"
                        );
                        if let Ok((value, _)) = loaded {
                            let want = (0..size as u64).fold(0u64, |v, i| {
                                let at = addr + i;
                                let byte = model
                                    .get(&at)
                                    .copied()
                                    .unwrap_or_else(|| (real[&(at & !7)] >> (8 * (at & 7))) as u8);
                                v | u64::from(byte) << (8 * i)
                            });
                            assert_eq!(value, want, "load {addr:#x} {size} against the model");
                        }
                    }
                    290..=579 => {
                        let v = next();
                        let stored = a.store(addr, size, v);
                        refused += usize::from(stored.is_err());
                        assert_eq!(stored, b.store_parts(addr, size, v));
                        if stored.is_ok() {
                            for i in 0..size as u64 {
                                model.insert(addr + i, (v >> (8 * i)) as u8);
                            }
                        }
                    }
                    580..=581 => {
                        let soft = (r >> 30) % 2 == 0;
                        for m in [&mut a, &mut b] {
                            if soft {
                                m.seal_soft();
                            } else {
                                m.seal();
                            }
                        }
                    }
                    _ => {
                        assert_eq!(a.is_sealed(), b.is_sealed());
                        assert_eq!(a.logged(), b.logged());
                    }
                }
            }
            assert_eq!(a.is_sealed(), b.is_sealed());
            assert_eq!(a.validate(&mem, 0..0), b.validate(&mem, 0..0));
            a.rewind_to_seal();
            b.rewind_to_seal();
            assert_eq!(a.logged(), b.logged());
            for q in (0x1000..0x1500).step_by(8) {
                assert_eq!(a.peek(&mem, q), b.peek(&mem, q), "{q:#x}");
            }
        }
        assert!(within > 10_000, "{within} accesses within a qword");
        assert!(refused > 100, "{refused} stores refused");
    }

    #[test]
    fn bits_spreads_every_byte_mask() {
        for mask in 0..=255u8 {
            let mut want = 0u64;
            for i in 0..8 {
                if mask & (1 << i) != 0 {
                    want |= 0xff << (8 * i);
                }
            }
            assert_eq!(bits(mask), want, "mask {mask:#04x}");
        }
    }

    #[test]
    fn loads_read_real_memory_once_per_qword() {
        let mem = Table::with(&[(0x1000, 0x8877_6655_4433_2211)]);
        let mut m = LiveMemory::new();
        assert_eq!(m.load(&mem, 0x1000, 8), Ok(0x8877_6655_4433_2211));
        mem.set(0x1000, 0);
        // The second load sees the snapshot, not the new value.
        assert_eq!(m.load(&mem, 0x1002, 2), Ok(0x4433));
        assert_eq!(*mem.1.borrow(), 1);
        assert_eq!(m.logged(), (1, 0));
    }

    #[test]
    fn unaligned_loads_span_two_qwords() {
        let mem = Table::with(&[
            (0x1000, 0x8877_6655_4433_2211),
            (0x1008, 0x00ff_eedd_ccbb_aa99),
        ]);
        let mut m = LiveMemory::new();
        assert_eq!(m.load(&mem, 0x1006, 4), Ok(0xaa99_8877));
        assert_eq!(m.load(&mem, 0x1007, 8), Ok(0xffee_ddcc_bbaa_9988));
    }

    #[test]
    fn stores_stay_private_and_forward_to_loads() {
        let mem = Table::with(&[(0x1000, 0x8877_6655_4433_2211)]);
        let mut m = LiveMemory::new();
        m.store(0x1002, 2, 0xbeef).unwrap();
        assert_eq!(m.load(&mem, 0x1000, 8), Ok(0x8877_6655_beef_2211));
        // A load wholly inside the stored bytes reads no real memory.
        let mut fresh = LiveMemory::new();
        fresh.store(0x2000, 8, 7).unwrap();
        assert_eq!(fresh.load(&mem, 0x2004, 4), Ok(0));
        assert_eq!(fresh.logged(), (0, 1));
        assert_eq!(mem.0.borrow()[&0x1000], 0x8877_6655_4433_2211);
    }

    #[test]
    fn covers_says_whether_the_overlay_holds_every_byte() {
        let mut m = LiveMemory::new();
        m.store(0x1004, 4, 1).unwrap();
        assert!(m.covers(0x1004, 4));
        assert!(m.covers(0x1006, 2));
        assert!(!m.covers(0x1002, 4));
        assert!(!m.covers(0x1000, 8));
        m.store(0x1008, 8, 2).unwrap();
        assert!(m.covers(0x1004, 8));
    }

    #[test]
    fn rewinding_to_the_seal_gives_back_the_logs_as_they_were() {
        let mem = Table::with(&[(0x1000, 0x11), (0x2000, 0x22), (0x3000, 0x33)]);
        let mut m = LiveMemory::new();
        m.load(&mem, 0x1000, 8).unwrap();
        m.store(0x2000, 8, 0xaa).unwrap();
        m.seal();
        // After the seal: a new load, a new store, and a change to a qword
        // stored before it.
        m.load(&mem, 0x3000, 8).unwrap();
        m.store(0x1000, 8, 0x99).unwrap();
        m.store(0x2000, 4, 0xbb).unwrap();
        m.store(0x2000, 1, 0xcc).unwrap();
        assert_eq!(m.load(&mem, 0x2000, 8), Ok(0xcc));
        assert_eq!(m.logged(), (2, 2));
        m.rewind_to_seal();
        assert_eq!(m.logged(), (1, 1));
        // The checkpoint at the seal: real memory holds the stores made
        // before it, and 0x3000 (read after it) may hold anything.
        mem.set(0x2000, 0xaa);
        mem.set(0x3000, 0);
        assert_eq!(m.validate(&mem, 0..0), MemoryCheck::Match);
        // The store after the seal to 0x1000 no longer hides its load.
        mem.set(0x1000, 0x12);
        assert_eq!(
            m.validate(&mem, 0..0),
            MemoryCheck::Differs { addr: 0x1000 }
        );
        mem.set(0x1000, 0x11);
        // The sealed value of 0x2000 is checked, not the later one.
        mem.set(0x2000, 0xcc);
        assert_eq!(
            m.validate(&mem, 0..0),
            MemoryCheck::Differs { addr: 0x2000 }
        );
    }

    #[test]
    fn a_full_undo_log_refuses_the_store_whole() {
        let mut m = LiveMemory::new();
        for i in 0..=UNDO_ENTRIES as u64 {
            m.store(0x10_000 + 8 * i, 8, i).unwrap();
        }
        m.seal();
        for i in 0..UNDO_ENTRIES as u64 {
            m.store(0x10_000 + 8 * i, 8, 100 + i).unwrap();
        }
        // A second change to a saved qword needs no room.
        m.store(0x10_000, 8, 7).unwrap();
        let last = 0x10_000 + 8 * UNDO_ENTRIES as u64;
        assert_eq!(m.store(last, 8, 1), Err(AccessError::LogFull));
        m.rewind_to_seal();
        let mem = Table::with(&[]);
        assert_eq!(m.load(&mem, last, 8), Ok(UNDO_ENTRIES as u64));
        assert_eq!(m.load(&mem, 0x10_000, 8), Ok(0));
    }

    #[test]
    fn a_full_overlay_refuses_a_vector_store_whole() {
        let mut m = LiveMemory::new();
        for i in 0..OVERLAY_ENTRIES as u64 - 2 {
            m.store(0x10_000 + 8 * i, 8, i).unwrap();
        }
        // 16 bytes at an odd address touch three new qwords; two fit.
        let at = 0x20_004;
        assert_eq!(m.store_bytes(at, &[0xab; 16]), Err(AccessError::LogFull));
        assert!(!m.covers(at, 1), "the store's first bytes went in");
        // Two fit exactly, and a 64-byte store over qwords already there
        // needs no room.
        m.store_bytes(0x20_000, &[0xcd; 16]).unwrap();
        m.store_bytes(0x10_000, &[0xef; 64]).unwrap();
        assert!(m.covers(0x20_000, 16) && m.covers(0x10_000, 64));
        let mem = Table::with(&[]);
        assert_eq!(m.load(&mem, 0x20_008, 8), Ok(0xcdcd_cdcd_cdcd_cdcd));
        assert_eq!(m.load(&mem, 0x10_038, 8), Ok(0xefef_efef_efef_efef));
        // An x87 operand: 10 bytes, the last two in a qword of their own.
        assert_eq!(m.store_bytes(0x30_000, &[1; 10]), Err(AccessError::LogFull));
    }

    #[test]
    fn a_soft_seal_gives_way_to_a_full_undo_log() {
        let mut m = LiveMemory::new();
        for i in 0..=UNDO_ENTRIES as u64 {
            m.store(0x10_000 + 8 * i, 8, i).unwrap();
        }
        m.seal_soft();
        for i in 0..UNDO_ENTRIES as u64 {
            m.store(0x10_000 + 8 * i, 8, 100 + i).unwrap();
        }
        assert!(m.is_sealed());
        // One more save: the store goes in, the seal is forgotten.
        let last = 0x10_000 + 8 * UNDO_ENTRIES as u64;
        m.store(last, 8, 1).unwrap();
        assert!(!m.is_sealed());
        // Rewinding does nothing now: the logs are the segment's.
        m.rewind_to_seal();
        let mem = Table::with(&[]);
        assert_eq!(m.load(&mem, last, 8), Ok(1));
        assert_eq!(m.load(&mem, 0x10_000, 8), Ok(100));
    }

    #[test]
    fn a_second_seal_saves_every_qword_again() {
        let mut m = LiveMemory::new();
        m.store(0x1000, 8, 1).unwrap();
        m.seal_soft();
        m.store(0x1000, 8, 2).unwrap();
        // Sealed again later: 0x1000 changes once more, and the rewind
        // must give back the value at the second seal, not the first.
        m.seal();
        m.store(0x1000, 8, 3).unwrap();
        m.rewind_to_seal();
        let mem = Table::with(&[]);
        assert_eq!(m.load(&mem, 0x1000, 8), Ok(2));
    }

    #[test]
    fn faults_and_full_logs_are_reported() {
        let mem = Table::with(&[]);
        let mut m = LiveMemory::new();
        assert_eq!(m.load(&mem, 0x5000, 8), Err(AccessError::Fault(0x5000)));
        for i in 0..OVERLAY_ENTRIES as u64 {
            m.store(0x10_000 + 8 * i, 8, i).unwrap();
        }
        assert_eq!(m.store(0x9_000, 1, 1), Err(AccessError::LogFull));
        // Stores to qwords already in the overlay still fit.
        m.store(0x10_000, 4, 9).unwrap();
    }

    #[test]
    fn stack_under_a_signal_frame_is_read_only_where_the_segment_stored_it() {
        let words: Vec<(u64, u64)> = (0..8).map(|i| (0x7000 + 8 * i, 0x5a)).collect();
        let mem = Table::with(&words);
        let mut m = LiveMemory::new();
        // The sample's rsp was 0x7030: the frame lies below 0x7030 - 16
        // (a red zone of 16 here), down to 0x7000.
        m.set_scratch(0x7000, 0x7020);
        assert_eq!(
            m.load(&mem, 0x7008, 8),
            Err(AccessError::Indeterminate(0x7008))
        );
        // The last byte under the frame, and a load that straddles its top.
        assert_eq!(
            m.load(&mem, 0x701f, 1),
            Err(AccessError::Indeterminate(0x7018))
        );
        assert_eq!(
            m.load(&mem, 0x701c, 8),
            Err(AccessError::Indeterminate(0x7018))
        );
        // The red zone and above are the program's.
        assert_eq!(m.load(&mem, 0x7020, 8), Ok(0x5a));
        // What the segment stored there it reads back; a byte it did not
        // store is still refused.
        m.store(0x7008, 4, 0x1234).unwrap();
        assert_eq!(m.load(&mem, 0x7008, 4), Ok(0x1234));
        assert_eq!(
            m.load(&mem, 0x7008, 8),
            Err(AccessError::Indeterminate(0x7008))
        );
        // A reset starts a segment with the same frame below, and without
        // the frames predicted since.
        m.note_signal_frame(0x6000, 0x7100);
        assert_eq!(
            m.load(&mem, 0x7020, 8),
            Err(AccessError::Indeterminate(0x7020))
        );
        m.reset();
        assert_eq!(m.load(&mem, 0x7020, 8), Ok(0x5a));
        assert_eq!(
            m.load(&mem, 0x7008, 4),
            Err(AccessError::Indeterminate(0x7008))
        );
    }

    #[test]
    fn a_later_signal_frame_makes_earlier_stores_under_it_indeterminate() {
        let words: Vec<(u64, u64)> = (0..16).map(|i| (0x7000 + 8 * i, 0)).collect();
        let mem = Table::with(&words);
        let mut m = LiveMemory::new();
        m.set_scratch(0x6000, 0x7000);
        // A callee's locals, deeper than the sample's frame.
        m.store(0x7040, 8, 1).unwrap();
        m.store(0x7058, 8, 2).unwrap();
        assert_eq!(m.load(&mem, 0x7040, 8), Ok(1));
        // A stop with rsp 0x7070 after the callee returned: a frame below
        // 0x7070 - 0x14 = 0x705c, over the first local and half the second.
        m.note_signal_frame(0x6070, 0x705c);
        assert_eq!(
            m.load(&mem, 0x7040, 8),
            Err(AccessError::Indeterminate(0x7040))
        );
        assert_eq!(
            m.load(&mem, 0x7058, 4),
            Err(AccessError::Indeterminate(0x7058))
        );
        assert_eq!(m.load(&mem, 0x705c, 4), Ok(0));
        // Stored again after the stop, it is known again.
        m.store(0x7040, 8, 3).unwrap();
        assert_eq!(m.load(&mem, 0x7040, 8), Ok(3));
        // The frames' ranges join: below the first one is refused still.
        assert_eq!(
            m.load(&mem, 0x6ff8, 8),
            Err(AccessError::Indeterminate(0x6ff8))
        );
    }

    #[test]
    fn validation_checks_consumed_and_stored_bytes() {
        let mem = Table::with(&[(0x1000, 0x1111), (0x2000, 0xaaaa_bbbb)]);
        let mut m = LiveMemory::new();
        m.load(&mem, 0x1000, 2).unwrap();
        m.load(&mem, 0x2000, 4).unwrap();
        m.store(0x2000, 4, 0x5555).unwrap();
        // The thread did store 0x5555, and nobody touched 0x1000.
        mem.set(0x2000, 0x5555);
        assert_eq!(m.validate(&mem, 0..0), MemoryCheck::Match);
        // A byte the emulation never consumed may change.
        mem.set(0x1000, 0xff00_0000_0000_1111);
        assert_eq!(m.validate(&mem, 0..0), MemoryCheck::Match);
        // A consumed byte may not.
        mem.set(0x1000, 0x1112);
        assert_eq!(
            m.validate(&mem, 0..0),
            MemoryCheck::Differs { addr: 0x1000 }
        );
        mem.set(0x1000, 0x1111);
        // Nor may a stored one.
        mem.set(0x2000, 0x5556);
        assert_eq!(
            m.validate(&mem, 0..0),
            MemoryCheck::Differs { addr: 0x2000 }
        );
        // Dead stack is not checked.
        assert_eq!(m.validate(&mem, 0x2000..0x2008), MemoryCheck::Match);
        // Reset forgets everything.
        m.reset();
        assert_eq!(m.validate(&mem, 0..0), MemoryCheck::Match);
    }
}
