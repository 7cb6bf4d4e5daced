//! The decoded-instruction cache: direct-mapped, of a fixed power-of-two
//! capacity, on storage the owner allocates (the core never allocates).

use crate::insn::Insn;
use crate::mem::Memory;
use crate::Stop;

/// Where [`step`](crate::step) gets the decoded instruction at rip: a
/// [`DecodeCache`], or an owner's own cache (the tracer shares one among a
/// process's threads).
pub trait InsnSource {
    /// The instruction at `ip`, decoded from `mem` when not cached.
    ///
    /// # Errors
    /// [`Stop::BadFetch`] when `ip` is not executable or the bytes there do
    /// not decode.
    fn lookup<M: Memory>(&mut self, ip: u64, mem: &mut M) -> Result<&Insn, Stop>;
}

impl<S: AsRef<[Insn]> + AsMut<[Insn]>> InsnSource for DecodeCache<S> {
    #[inline(always)]
    fn lookup<M: Memory>(&mut self, ip: u64, mem: &mut M) -> Result<&Insn, Stop> {
        DecodeCache::lookup(self, ip, mem)
    }
}

/// The storage length given to [`DecodeCache::new`] is not a non-zero
/// power of two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSizeError(pub usize);

impl core::fmt::Display for CacheSizeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "decoded-instruction cache of {} entries: the size must be a non-zero power of two",
            self.0
        )
    }
}

/// Decoded instructions keyed by address. Each address maps to one entry
/// (`(ip ^ ip >> 16) & (capacity - 1)`); a miss decodes and replaces it.
///
/// The cache trusts that code does not change under it: the owner calls
/// [`DecodeCache::flush`] or [`DecodeCache::flush_range`] when it does
/// (mprotect, munmap, a JIT writing code).
#[derive(Debug)]
pub struct DecodeCache<S> {
    entries: S,
    mask: usize,
}

impl<S: AsRef<[Insn]> + AsMut<[Insn]>> DecodeCache<S> {
    /// A cache on `storage` (for example `vec![Insn::empty(); 1 << 14]`
    /// boxed), emptied here.
    ///
    /// # Errors
    /// [`CacheSizeError`] unless the storage holds a power of two entries.
    pub fn new(mut storage: S) -> Result<Self, CacheSizeError> {
        let n = storage.as_ref().len();
        if !n.is_power_of_two() {
            return Err(CacheSizeError(n));
        }
        for e in storage.as_mut() {
            e.ip = Insn::EMPTY_IP;
        }
        Ok(DecodeCache {
            entries: storage,
            mask: n - 1,
        })
    }

    /// Number of entries.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    #[inline(always)]
    fn slot(&self, ip: u64) -> usize {
        (ip ^ (ip >> 16)) as usize & self.mask
    }

    /// The decoded instruction at `ip`, if cached (the one `step` just ran
    /// always is).
    #[must_use]
    #[inline]
    pub fn get(&self, ip: u64) -> Option<&Insn> {
        let e = &self.entries.as_ref()[self.slot(ip)];
        (e.ip == ip).then_some(e)
    }

    /// Forgets every instruction.
    pub fn flush(&mut self) {
        for e in self.entries.as_mut() {
            e.ip = Insn::EMPTY_IP;
        }
    }

    /// Forgets the instructions with a byte in `start..end` (a scan of the
    /// whole cache).
    pub fn flush_range(&mut self, start: u64, end: u64) {
        for e in self.entries.as_mut() {
            if e.ip != Insn::EMPTY_IP && e.ip < end && start < e.ip.wrapping_add(e.len as u64) {
                e.ip = Insn::EMPTY_IP;
            }
        }
    }

    /// Forgets the instructions with a byte in `start..end`, looking only
    /// at the entries of the addresses that can hold one (an instruction
    /// is at most 15 bytes): for a store into code, where
    /// [`DecodeCache::flush_range`]'s scan of the whole cache is too slow.
    pub fn forget_range(&mut self, start: u64, end: u64) {
        for ip in start.saturating_sub(15)..end {
            let slot = self.slot(ip);
            let e = &mut self.entries.as_mut()[slot];
            if e.ip == ip && ip.wrapping_add(e.len as u64) > start {
                e.ip = Insn::EMPTY_IP;
            }
        }
    }

    /// The instruction at `ip`, decoded from `mem` on a miss.
    ///
    /// # Errors
    /// [`Stop::BadFetch`] when `ip` is not executable or the bytes there do
    /// not decode.
    #[inline(always)]
    pub fn lookup<M: Memory>(&mut self, ip: u64, mem: &mut M) -> Result<&Insn, Stop> {
        let slot = self.slot(ip);
        if self.entries.as_ref()[slot].ip != ip {
            self.fill(slot, ip, mem)?;
        }
        Ok(&self.entries.as_ref()[slot])
    }

    #[cold]
    #[inline(never)]
    fn fill<M: Memory>(&mut self, slot: usize, ip: u64, mem: &mut M) -> Result<(), Stop> {
        self.entries.as_mut()[slot] = Insn::fetch(ip, mem)?;
        Ok(())
    }
}
