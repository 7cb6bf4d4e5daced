//! Memory as the semantics see it: the [`Memory`] trait.

/// Why a memory access did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemError {
    /// The CPU would fault here: no mapping, no permission, or (for the
    /// aligned vector moves) a misaligned address. `addr` is the first
    /// byte of the access.
    Fault {
        /// First byte of the access.
        addr: u64,
        /// A store (or the store half of a read-modify-write).
        write: bool,
    },
    /// The implementation declines the access, though the CPU could make
    /// it (the tracer's data-flow mode refuses loads of mutable memory).
    Refused {
        /// First byte of the access.
        addr: u64,
    },
}

/// Byte-addressed little-endian memory.
///
/// The step function calls these from a signal-handler-safe path:
/// implementations must not allocate, lock or block. `&mut self` because an
/// implementation may log every access (the tracer records each load).
pub trait Memory {
    /// Reads `size` bytes (1, 2, 4 or 8) at `addr`, zero-extended.
    ///
    /// # Errors
    /// [`MemError::Fault`] where the CPU would fault, [`MemError::Refused`]
    /// where the implementation declines.
    fn load(&mut self, addr: u64, size: usize) -> Result<u64, MemError>;

    /// Writes the low `size` bytes (1, 2, 4 or 8) of `value` at `addr`.
    ///
    /// # Errors
    /// As [`Memory::load`]. A failed store must have written nothing.
    fn store(&mut self, addr: u64, size: usize, value: u64) -> Result<(), MemError>;

    /// Copies up to 15 code bytes at `addr` into `buf` for the decoder;
    /// returns how many are executable (0 if `addr` is not).
    fn fetch(&mut self, addr: u64, buf: &mut [u8; 15]) -> usize;

    /// Copies up to `buf.len()` code bytes at `addr`, for decoding a run of
    /// instructions at once (see [`Insn::decode_run`](crate::Insn::decode_run));
    /// returns how many are executable. The default reads through
    /// [`Memory::fetch`], 15 bytes at most.
    fn fetch_run(&mut self, addr: u64, buf: &mut [u8]) -> usize {
        let mut first = [0u8; 15];
        let n = self.fetch(addr, &mut first).min(buf.len()).min(15);
        buf[..n].copy_from_slice(&first[..n]);
        n
    }

    /// Reads `buf.len()` bytes (16, 32 or 64 for vector operands) at `addr`.
    /// The default reads 8-byte pieces with [`Memory::load`].
    ///
    /// # Errors
    /// As [`Memory::load`]; `buf` is unspecified after an error.
    #[inline]
    fn load_bytes(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let mut off = 0;
        while off < buf.len() {
            let n = piece(buf.len() - off);
            let v = self.load(addr.wrapping_add(off as u64), n)?;
            buf[off..off + n].copy_from_slice(&v.to_le_bytes()[..n]);
            off += n;
        }
        Ok(())
    }

    /// Writes `buf` at `addr`. The default writes 8-byte pieces with
    /// [`Memory::store`], so a store that faults half-way has written the
    /// pieces before the fault; implementations that can check the whole
    /// range first should override it.
    ///
    /// # Errors
    /// As [`Memory::store`].
    #[inline]
    fn store_bytes(&mut self, addr: u64, buf: &[u8]) -> Result<(), MemError> {
        let mut off = 0;
        while off < buf.len() {
            let n = piece(buf.len() - off);
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&buf[off..off + n]);
            self.store(addr.wrapping_add(off as u64), n, u64::from_le_bytes(b))?;
            off += n;
        }
        Ok(())
    }
}

/// The largest access size (8, 4, 2 or 1) that fits in `left` bytes.
#[inline(always)]
fn piece(left: usize) -> usize {
    match left {
        8.. => 8,
        4..=7 => 4,
        2..=3 => 2,
        _ => 1,
    }
}

/// Memory with nothing in it: every load and store is refused and no code
/// can be fetched. For owners that only ask a [`crate::Table`] what it
/// implements (coverage checks over a binary's code), which still need a
/// machine type to name the table by.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMemory;

impl Memory for NoMemory {
    fn load(&mut self, addr: u64, _: usize) -> Result<u64, MemError> {
        Err(MemError::Refused { addr })
    }
    fn store(&mut self, addr: u64, _: usize, _: u64) -> Result<(), MemError> {
        Err(MemError::Refused { addr })
    }
    fn fetch(&mut self, _: u64, _: &mut [u8; 15]) -> usize {
        0
    }
}
