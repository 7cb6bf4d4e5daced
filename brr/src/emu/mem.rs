//! Guest memory: the emulator's region-based memory behind the x86-sem
//! core's [`Memory`] trait.

use x86_sem::{MemError, Memory};

/// Page size of the guest (and of mapping granularity).
pub const PAGE: u64 = 4096;

/// Access rights of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prot {
    pub read: bool,
    pub write: bool,
    pub exec: bool,
}

impl Prot {
    pub const RW: Prot = Prot {
        read: true,
        write: true,
        exec: false,
    };
}

/// One contiguous mapping.
#[derive(Debug)]
pub struct Region {
    pub start: u64,
    pub prot: Prot,
    pub data: Vec<u8>,
    pub name: &'static str,
}

impl Region {
    fn end(&self) -> u64 {
        self.start + self.data.len() as u64
    }
}

/// Guest memory as a short list of regions (program segments, heap, stack,
/// anonymous mappings). Lookups try the last region hit first; static
/// programs touch only a handful of regions, so the list stays short.
#[derive(Debug, Default)]
pub struct GuestMemory {
    regions: Vec<Region>,
    last: usize,
    /// Bytes of executable memory written since the machine last looked
    /// (`take_code_write`): the union of the written ranges.
    code_written: Option<(u64, u64)>,
    /// Stores (and string-store steps) that hit executable memory.
    pub code_stores: u64,
}

impl GuestMemory {
    pub fn new() -> GuestMemory {
        GuestMemory::default()
    }

    /// Adds a zero-filled mapping of `len` bytes at `start` (page aligned).
    /// Fails if it overlaps an existing one.
    pub fn map(
        &mut self,
        start: u64,
        len: u64,
        prot: Prot,
        name: &'static str,
    ) -> Result<(), String> {
        let end = start
            .checked_add(len)
            .ok_or_else(|| format!("mapping {start:#x}+{len:#x} wraps"))?;
        if let Some(r) = self
            .regions
            .iter()
            .find(|r| r.start < end && start < r.end())
        {
            return Err(format!(
                "mapping {start:#x}..{end:#x} ({name}) overlaps {:#x}..{:#x} ({})",
                r.start,
                r.end(),
                r.name
            ));
        }
        self.regions.push(Region {
            start,
            prot,
            data: vec![0; len as usize],
            name,
        });
        Ok(())
    }

    /// Whether any executable mapping overlaps `start..end`.
    pub fn executable_in(&self, start: u64, end: u64) -> bool {
        self.regions
            .iter()
            .any(|r| r.prot.exec && r.start < end && start < r.end())
    }

    /// Removes `start..start+len` from the mappings, trimming or splitting
    /// regions that straddle it.
    pub fn unmap(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        let mut kept = Vec::with_capacity(self.regions.len() + 1);
        for mut r in std::mem::take(&mut self.regions) {
            let (rs, re) = (r.start, r.end());
            if re <= start || end <= rs {
                kept.push(r);
                continue;
            }
            if end < re {
                let tail = r.data.split_off((end - rs) as usize);
                kept.push(Region {
                    start: end,
                    prot: r.prot,
                    data: tail,
                    name: r.name,
                });
            }
            if rs < start {
                r.data.truncate((start - rs) as usize);
                kept.push(r);
            }
        }
        self.regions = kept;
        self.last = 0;
    }

    /// Changes the rights of every region that `start..start+len`
    /// overlaps (regions are not split: a program segment changes as a
    /// whole). Returns whether any of them was or becomes executable.
    pub fn protect(&mut self, start: u64, len: u64, prot: Prot) -> bool {
        let end = start.saturating_add(len);
        let mut code = false;
        for r in &mut self.regions {
            if r.start < end && start < r.end() {
                code |= r.prot.exec || prot.exec;
                r.prot = prot;
            }
        }
        code
    }

    /// Whether executable bytes were written since `take_code_write` last
    /// looked: one load and compare, and no store, for the step loop.
    #[inline(always)]
    pub fn code_write_pending(&self) -> bool {
        self.code_written.is_some()
    }

    /// The executable bytes written since the last call, if any.
    #[inline(always)]
    pub fn take_code_write(&mut self) -> Option<(u64, u64)> {
        self.code_written.take()
    }

    #[cold]
    fn note_code_write(&mut self, addr: u64, len: usize) {
        let end = addr + len as u64;
        self.code_stores += 1;
        self.code_written = Some(match self.code_written {
            Some((a, b)) => (a.min(addr), b.max(end)),
            None => (addr, end),
        });
    }

    /// Grows or shrinks the region starting at `start` to `len` bytes.
    pub fn resize(&mut self, start: u64, len: u64) -> Result<(), String> {
        let idx = self
            .regions
            .iter()
            .position(|r| r.start == start)
            .ok_or_else(|| format!("no region at {start:#x}"))?;
        let end = start + len;
        if self
            .regions
            .iter()
            .enumerate()
            .any(|(i, r)| i != idx && r.start < end && start < r.end())
        {
            return Err(format!(
                "growing {start:#x} to {end:#x} hits another mapping"
            ));
        }
        self.regions[idx].data.resize(len as usize, 0);
        Ok(())
    }

    /// The regions, for diagnostics.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// Copies bytes in without permission checks (loader, syscall layer).
    pub fn poke(&mut self, addr: u64, buf: &[u8]) -> Result<(), MemError> {
        let r = self.find(addr, buf.len(), true)?;
        let off = (addr - r.start) as usize;
        r.data[off..off + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    /// Copies bytes out without permission checks.
    pub fn peek(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let r = self.find(addr, buf.len(), false)?;
        let off = (addr - r.start) as usize;
        buf.copy_from_slice(&r.data[off..off + buf.len()]);
        Ok(())
    }

    /// Copies bytes out without moving the region cache: for observers,
    /// which see the machine only by shared reference. False when the
    /// bytes do not lie in one region.
    pub fn peek_data(&self, addr: u64, buf: &mut [u8]) -> bool {
        let end = addr.wrapping_add(buf.len() as u64);
        let hit = |r: &&Region| r.start <= addr && end <= r.end() && addr <= end;
        let Some(r) = self
            .regions
            .get(self.last)
            .filter(hit)
            .or_else(|| self.regions.iter().find(hit))
        else {
            return false;
        };
        let off = (addr - r.start) as usize;
        buf.copy_from_slice(&r.data[off..off + buf.len()]);
        true
    }

    /// A slice of guest memory, for syscall buffers; it must lie in one region.
    pub fn slice_mut(&mut self, addr: u64, len: usize) -> Result<&mut [u8], MemError> {
        let r = self.find(addr, len, true)?;
        let off = (addr - r.start) as usize;
        Ok(&mut r.data[off..off + len])
    }

    /// Up to 15 bytes of executable memory at `addr` (0 where it is not
    /// executable), read without moving the region cache: for observers
    /// that decode an instruction the machine ran.
    pub fn peek_code(&self, addr: u64, buf: &mut [u8; 15]) -> usize {
        let Some(r) = self
            .regions
            .iter()
            .find(|r| r.prot.exec && r.start <= addr && addr < r.end())
        else {
            return 0;
        };
        let off = (addr - r.start) as usize;
        let n = buf.len().min(r.data.len() - off);
        buf[..n].copy_from_slice(&r.data[off..off + n]);
        n
    }

    #[inline(always)]
    fn find(&mut self, addr: u64, len: usize, write: bool) -> Result<&mut Region, MemError> {
        let end = addr.wrapping_add(len as u64);
        let last = self.last;
        if let Some(r) = self.regions.get(last) {
            if r.start <= addr && end <= r.end() && addr <= end {
                // Re-borrow through the index to satisfy the borrow checker.
                return Ok(&mut self.regions[last]);
            }
        }
        self.find_slow(addr, end, write)
    }

    #[cold]
    fn find_slow(&mut self, addr: u64, end: u64, write: bool) -> Result<&mut Region, MemError> {
        let idx = self
            .regions
            .iter()
            .position(|r| r.start <= addr && end <= r.end() && addr <= end)
            .ok_or(MemError::Fault { addr, write })?;
        self.last = idx;
        Ok(&mut self.regions[idx])
    }
}

impl GuestMemory {
    /// The region holding `addr..addr+len` with the right permission.
    #[inline(always)]
    fn accessible(
        &mut self,
        addr: u64,
        len: usize,
        write: bool,
    ) -> Result<(&mut Region, usize), MemError> {
        let r = self.find(addr, len, write)?;
        let allowed = if write { r.prot.write } else { r.prot.read };
        if !allowed {
            return Err(MemError::Fault { addr, write });
        }
        let off = (addr - r.start) as usize;
        Ok((r, off))
    }
}

impl Memory for GuestMemory {
    #[inline(always)]
    fn load(&mut self, addr: u64, size: usize) -> Result<u64, MemError> {
        let (r, off) = self.accessible(addr, size, false)?;
        let d = &r.data[off..off + size];
        Ok(match size {
            1 => u64::from(d[0]),
            2 => u64::from(u16::from_le_bytes([d[0], d[1]])),
            4 => u64::from(u32::from_le_bytes([d[0], d[1], d[2], d[3]])),
            _ => u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]),
        })
    }

    #[inline(always)]
    fn store(&mut self, addr: u64, size: usize, value: u64) -> Result<(), MemError> {
        let (r, off) = self.accessible(addr, size, true)?;
        r.data[off..off + size].copy_from_slice(&value.to_le_bytes()[..size]);
        if r.prot.exec {
            self.note_code_write(addr, size);
        }
        Ok(())
    }

    /// All or nothing: the whole range is checked before any byte moves.
    #[inline(always)]
    fn load_bytes(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let (r, off) = self.accessible(addr, buf.len(), false)?;
        buf.copy_from_slice(&r.data[off..off + buf.len()]);
        Ok(())
    }

    /// All or nothing, as `load_bytes`.
    #[inline(always)]
    fn store_bytes(&mut self, addr: u64, buf: &[u8]) -> Result<(), MemError> {
        let (r, off) = self.accessible(addr, buf.len(), true)?;
        r.data[off..off + buf.len()].copy_from_slice(buf);
        if r.prot.exec {
            self.note_code_write(addr, buf.len());
        }
        Ok(())
    }

    fn fetch(&mut self, addr: u64, buf: &mut [u8; 15]) -> usize {
        let Ok(r) = self.find(addr, 1, false) else {
            return 0;
        };
        if !r.prot.exec {
            return 0;
        }
        let off = (addr - r.start) as usize;
        let n = buf.len().min(r.data.len() - off);
        buf[..n].copy_from_slice(&r.data[off..off + n]);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_check_bounds_and_permissions() {
        let mut m = GuestMemory::new();
        m.map(0x1000, 0x1000, Prot::RW, "a").unwrap();
        let ro = Prot {
            read: true,
            write: false,
            exec: true,
        };
        m.map(0x3000, 0x1000, ro, "b").unwrap();
        m.store(0x1ff8, 8, 0x1122_3344_5566_7788).unwrap();
        assert_eq!(m.load(0x1ff8, 4).unwrap(), 0x5566_7788);
        assert!(m.load(0x1ffc, 8).is_err(), "straddles the end");
        assert!(m.store(0x3000, 1, 0).is_err(), "read-only");
        assert!(m.map(0x1800, 0x1000, Prot::RW, "c").is_err(), "overlap");
        let mut buf = [0u8; 15];
        assert_eq!(m.fetch(0x3ff8, &mut buf), 8);
        assert_eq!(m.fetch(0x1000, &mut buf), 0, "not executable");
        m.store(0x1000, 1, 7).unwrap();
        m.unmap(0x1800, 0x400);
        assert_eq!(m.load(0x1000, 1).unwrap(), 7, "left part kept");
        assert!(m.load(0x1800, 1).is_err(), "hole");
        assert_eq!(m.load(0x1ff8, 4).unwrap(), 0x5566_7788, "right part kept");
        m.unmap(0x1000, 0x1000);
        assert!(m.load(0x1000, 1).is_err());
    }
}
