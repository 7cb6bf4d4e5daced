//! Guest memory behind a small trait, and the emulator's region-based memory.

/// A guest access that hit no mapping or a mapping without the permission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemFault {
    pub addr: u64,
    pub write: bool,
}

/// Byte-addressed guest memory. Implementations must not allocate in `read`
/// and `write`: the step function is meant to run in a signal handler too.
pub trait Memory {
    /// Fills `buf` from guest address `addr`.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault>;
    /// Stores `buf` at guest address `addr`.
    fn write(&mut self, addr: u64, buf: &[u8]) -> Result<(), MemFault>;
    /// Copies up to `buf.len()` executable bytes at `addr` for the decoder;
    /// returns how many were available (0 if `addr` is not executable).
    fn fetch(&mut self, addr: u64, buf: &mut [u8]) -> usize;

    #[inline(always)]
    fn read_u64(&mut self, addr: u64, size: usize) -> Result<u64, MemFault> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b[..size])?;
        Ok(u64::from_le_bytes(b))
    }
    #[inline(always)]
    fn write_u64(&mut self, addr: u64, size: usize, value: u64) -> Result<(), MemFault> {
        self.write(addr, &value.to_le_bytes()[..size])
    }
    #[inline(always)]
    fn read_u128(&mut self, addr: u64, size: usize) -> Result<u128, MemFault> {
        let mut b = [0u8; 16];
        self.read(addr, &mut b[..size])?;
        Ok(u128::from_le_bytes(b))
    }
    #[inline(always)]
    fn write_u128(&mut self, addr: u64, size: usize, value: u128) -> Result<(), MemFault> {
        self.write(addr, &value.to_le_bytes()[..size])
    }
}

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

    /// Changes the rights of whole regions inside `start..start+len`.
    pub fn protect(&mut self, start: u64, len: u64, prot: Prot) {
        let end = start.saturating_add(len);
        for r in &mut self.regions {
            if start <= r.start && r.end() <= end {
                r.prot = prot;
            }
        }
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
    pub fn poke(&mut self, addr: u64, buf: &[u8]) -> Result<(), MemFault> {
        let r = self.find(addr, buf.len(), true)?;
        let off = (addr - r.start) as usize;
        r.data[off..off + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    /// Copies bytes out without permission checks.
    pub fn peek(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        let r = self.find(addr, buf.len(), false)?;
        let off = (addr - r.start) as usize;
        buf.copy_from_slice(&r.data[off..off + buf.len()]);
        Ok(())
    }

    /// A slice of guest memory, for syscall buffers; it must lie in one region.
    pub fn slice_mut(&mut self, addr: u64, len: usize) -> Result<&mut [u8], MemFault> {
        let r = self.find(addr, len, true)?;
        let off = (addr - r.start) as usize;
        Ok(&mut r.data[off..off + len])
    }

    #[inline(always)]
    fn find(&mut self, addr: u64, len: usize, write: bool) -> Result<&mut Region, MemFault> {
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
    fn find_slow(&mut self, addr: u64, end: u64, write: bool) -> Result<&mut Region, MemFault> {
        let idx = self
            .regions
            .iter()
            .position(|r| r.start <= addr && end <= r.end() && addr <= end)
            .ok_or(MemFault { addr, write })?;
        self.last = idx;
        Ok(&mut self.regions[idx])
    }
}

impl Memory for GuestMemory {
    #[inline(always)]
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        let r = self.find(addr, buf.len(), false)?;
        if !r.prot.read {
            return Err(MemFault { addr, write: false });
        }
        let off = (addr - r.start) as usize;
        buf.copy_from_slice(&r.data[off..off + buf.len()]);
        Ok(())
    }

    #[inline(always)]
    fn write(&mut self, addr: u64, buf: &[u8]) -> Result<(), MemFault> {
        let r = self.find(addr, buf.len(), true)?;
        if !r.prot.write {
            return Err(MemFault { addr, write: true });
        }
        let off = (addr - r.start) as usize;
        r.data[off..off + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    fn fetch(&mut self, addr: u64, buf: &mut [u8]) -> usize {
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
        m.write_u64(0x1ff8, 8, 0x1122_3344_5566_7788).unwrap();
        assert_eq!(m.read_u64(0x1ff8, 4).unwrap(), 0x5566_7788);
        assert!(m.read_u64(0x1ffc, 8).is_err(), "straddles the end");
        assert!(m.write_u64(0x3000, 1, 0).is_err(), "read-only");
        assert!(m.map(0x1800, 0x1000, Prot::RW, "c").is_err(), "overlap");
        let mut buf = [0u8; 16];
        assert_eq!(m.fetch(0x3ff8, &mut buf), 8);
        assert_eq!(m.fetch(0x1000, &mut buf), 0, "not executable");
        m.write_u64(0x1000, 1, 7).unwrap();
        m.unmap(0x1800, 0x400);
        assert_eq!(m.read_u64(0x1000, 1).unwrap(), 7, "left part kept");
        assert!(m.read_u64(0x1800, 1).is_err(), "hole");
        assert_eq!(
            m.read_u64(0x1ff8, 4).unwrap(),
            0x5566_7788,
            "right part kept"
        );
        m.unmap(0x1000, 0x1000);
        assert!(m.read_u64(0x1000, 1).is_err());
    }
}
