//! The machine: registers, memory, the decoded-instruction cache and the step
//! function.
//!
//! `Machine::step` is the contract the tracer will reuse in a signal handler:
//! it never allocates (the cache and tables are built in `Machine::new`),
//! takes no locks, and reaches registers and memory only through the
//! [`Registers`] and [`Memory`] traits.

use super::mem::{MemFault, Memory};
use super::ops;
use super::regs::{RegSlot, Registers};
use crate::lfsr::Lfsr;
use iced_x86::{Code, Decoder, DecoderOptions, Instruction, Register};

/// Semantics of one instruction form; `Machine::next_ip` already holds the
/// fall-through address.
pub type Handler<R, M> = fn(&mut Machine<R, M>, &Instruction) -> Result<(), Stop>;

/// Entries of the direct-mapped decoded-instruction cache (a power of two).
pub const ICACHE_ENTRIES: usize = 1 << 16;

/// Why `step` did not simply retire an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// A `syscall` retired: the caller services it and continues.
    Syscall,
    /// An instruction form the emulator does not implement.
    Unsupported { ip: u64, code: Code },
    /// A data access outside the guest's mappings or rights.
    Fault { ip: u64, addr: u64, write: bool },
    /// The pc is not in executable memory or the bytes do not decode.
    BadFetch { ip: u64 },
    /// #DE: division by zero or quotient overflow.
    DivideError { ip: u64 },
    /// hlt, ud2 or another trap the guest raised deliberately.
    Trap { ip: u64, code: Code },
}

/// Control-flow class of a retired instruction, for the timing model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BranchKind {
    #[default]
    None,
    /// jcc, jrcxz, loop.
    Conditional,
    DirectJump,
    IndirectJump,
    DirectCall,
    IndirectCall,
    Return,
    /// branch-on-random.
    Brr,
}

/// What the last `step` retired.
#[derive(Clone, Copy, Debug, Default)]
pub struct Retired {
    pub ip: u64,
    pub len: u8,
    pub kind: BranchKind,
    pub taken: bool,
    /// Branch target (taken or not) when `kind` is a branch.
    pub target: u64,
    /// Last data address accessed, 0 if none.
    pub mem_addr: u64,
    pub mem_write: bool,
}

struct CacheEntry<R: Registers, M: Memory> {
    ip: u64,
    instr: Instruction,
    handler: Handler<R, M>,
}

// Manual impls: a derive would demand `R: Copy, M: Copy`.
impl<R: Registers, M: Memory> Clone for CacheEntry<R, M> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<R: Registers, M: Memory> Copy for CacheEntry<R, M> {}

/// An x86-64 user-mode machine.
pub struct Machine<R: Registers, M: Memory> {
    pub regs: R,
    pub mem: M,
    /// The brr outcome generator, clocked once per executed brr.
    pub lfsr: Lfsr,
    /// Fall-through address of the instruction being executed; branch
    /// handlers overwrite it.
    pub next_ip: u64,
    pub retired: Retired,
    /// Instructions retired so far.
    pub icount: u64,
    /// brr instructions executed and taken.
    pub brr_executed: u64,
    pub brr_taken: u64,
    pub(crate) slots: Vec<RegSlot>,
    table: Vec<Handler<R, M>>,
    cache: Vec<CacheEntry<R, M>>,
}

impl<R: Registers, M: Memory> Machine<R, M> {
    /// Builds the tables and the empty cache (all allocation happens here).
    pub fn new(regs: R, mem: M, lfsr: Lfsr) -> Self {
        let table: Vec<Handler<R, M>> = Code::values().map(ops::handler_for::<R, M>).collect();
        let empty = CacheEntry {
            ip: u64::MAX,
            instr: Instruction::default(),
            handler: ops::invalid::<R, M>,
        };
        // Build one decoder now: iced initialises its tables lazily.
        let _ = Decoder::with_ip(64, &[0x90], 0, DecoderOptions::NONE).decode();
        Machine {
            regs,
            mem,
            lfsr,
            next_ip: 0,
            retired: Retired::default(),
            icount: 0,
            brr_executed: 0,
            brr_taken: 0,
            slots: super::regs::register_slots(),
            table,
            cache: vec![empty; ICACHE_ENTRIES],
        }
    }

    /// The decoded instruction at `ip` if it is in the cache (the one just
    /// retired always is).
    pub fn decoded(&self, ip: u64) -> Option<&Instruction> {
        let e = &self.cache[(ip ^ (ip >> 16)) as usize & (ICACHE_ENTRIES - 1)];
        (e.ip == ip).then_some(&e.instr)
    }

    /// Drops every decoded instruction (after the guest's code changes).
    pub fn flush_cache(&mut self) {
        for e in &mut self.cache {
            e.ip = u64::MAX;
        }
    }

    /// Executes one instruction. Does not allocate; see the module doc.
    #[inline]
    pub fn step(&mut self) -> Result<(), Stop> {
        let ip = self.regs.rip();
        let slot = (ip ^ (ip >> 16)) as usize & (ICACHE_ENTRIES - 1);
        let mut entry = self.cache[slot];
        if entry.ip != ip {
            entry = self.decode_at(ip)?;
            self.cache[slot] = entry;
        }
        let len = entry.instr.len() as u64;
        self.next_ip = ip.wrapping_add(len);
        self.retired = Retired {
            ip,
            len: len as u8,
            ..Retired::default()
        };
        let result = (entry.handler)(self, &entry.instr);
        if matches!(result, Ok(()) | Err(Stop::Syscall)) {
            self.regs.set_rip(self.next_ip);
            self.icount += 1;
        }
        result
    }

    #[cold]
    fn decode_at(&mut self, ip: u64) -> Result<CacheEntry<R, M>, Stop> {
        let mut bytes = [0u8; 15];
        let n = self.mem.fetch(ip, &mut bytes);
        if n == 0 {
            return Err(Stop::BadFetch { ip });
        }
        let mut decoder = Decoder::with_ip(64, &bytes[..n], ip, DecoderOptions::NONE);
        let mut instr = Instruction::default();
        decoder.decode_out(&mut instr);
        if instr.is_invalid() {
            return Err(Stop::BadFetch { ip });
        }
        let mut handler = self.table[instr.code() as usize];
        if instr.code() == Code::Ud1_r32_rm32 && crate::encoding::Brr::decode(&bytes[..n]).is_some()
        {
            handler = ops::brr::<R, M>;
        }
        Ok(CacheEntry { ip, instr, handler })
    }

    // ---- operand access, shared by the handlers ----

    /// Reads a register operand, zero-extended.
    #[inline(always)]
    pub fn read_reg(&self, r: Register) -> u64 {
        match self.slots[r as usize] {
            RegSlot::Gpr { index, size } => {
                self.regs.gpr(index as usize) & size_mask(size as usize)
            }
            RegSlot::GprHigh8 { index } => (self.regs.gpr(index as usize) >> 8) & 0xff,
            RegSlot::Rip => self.next_ip,
            RegSlot::Xmm { index } => self.regs.xmm(index as usize) as u64,
            RegSlot::Unsupported => 0,
        }
    }

    /// Writes a register operand with x86-64 rules: 32-bit writes zero the
    /// upper half, 8- and 16-bit writes keep the rest.
    #[inline(always)]
    pub fn write_reg(&mut self, r: Register, value: u64) {
        match self.slots[r as usize] {
            RegSlot::Gpr { index, size } => {
                let i = index as usize;
                let v = match size {
                    8 => value,
                    4 => value & 0xffff_ffff,
                    _ => {
                        let m = size_mask(size as usize);
                        (self.regs.gpr(i) & !m) | (value & m)
                    }
                };
                self.regs.set_gpr(i, v);
            }
            RegSlot::GprHigh8 { index } => {
                let i = index as usize;
                let old = self.regs.gpr(i);
                self.regs
                    .set_gpr(i, (old & !0xff00) | ((value & 0xff) << 8));
            }
            RegSlot::Xmm { index } => self.regs.set_xmm(index as usize, value as u128),
            RegSlot::Rip | RegSlot::Unsupported => {}
        }
    }

    /// Size in bytes of a register.
    #[inline(always)]
    pub fn reg_size(&self, r: Register) -> usize {
        match self.slots[r as usize] {
            RegSlot::Gpr { size, .. } => size as usize,
            RegSlot::GprHigh8 { .. } => 1,
            RegSlot::Xmm { .. } => 16,
            _ => 8,
        }
    }

    /// Effective address of the memory operand (segment base included).
    #[inline(always)]
    pub fn ea(&mut self, ins: &Instruction) -> u64 {
        let base = ins.memory_base();
        let mut addr = ins.memory_displacement64();
        if base != Register::RIP {
            if base != Register::None {
                addr = addr.wrapping_add(self.read_reg(base));
            }
            let index = ins.memory_index();
            if index != Register::None {
                addr = addr.wrapping_add(
                    self.read_reg(index)
                        .wrapping_mul(ins.memory_index_scale() as u64),
                );
            }
            if base != Register::None && self.reg_size(base) == 4 {
                addr &= 0xffff_ffff;
            }
        }
        match ins.segment_prefix() {
            Register::FS => addr = addr.wrapping_add(self.regs.fs_base()),
            Register::GS => addr = addr.wrapping_add(self.regs.gs_base()),
            _ => {}
        }
        self.retired.mem_addr = addr;
        addr
    }

    /// Reads `size` bytes of memory.
    #[inline(always)]
    pub fn load(&mut self, addr: u64, size: usize) -> Result<u64, Stop> {
        let ip = self.retired.ip;
        self.mem.read_u64(addr, size).map_err(|f| fault(ip, f))
    }

    /// Writes `size` bytes of memory.
    #[inline(always)]
    pub fn store(&mut self, addr: u64, size: usize, value: u64) -> Result<(), Stop> {
        let ip = self.retired.ip;
        self.retired.mem_write = true;
        self.mem
            .write_u64(addr, size, value)
            .map_err(|f| fault(ip, f))
    }

    /// Size in bytes of operand `n` (register or memory).
    #[inline(always)]
    pub fn op_size(&self, ins: &Instruction, n: u32) -> usize {
        match ins.op_kind(n) {
            iced_x86::OpKind::Register => self.reg_size(ins.op_register(n)),
            _ => ins.memory_size().size(),
        }
    }

    /// Reads operand `n` (register, memory or immediate), zero-extended from
    /// `size` bytes; immediates come sign-extended and are masked to `size`.
    #[inline(always)]
    pub fn read_op(&mut self, ins: &Instruction, n: u32, size: usize) -> Result<u64, Stop> {
        use iced_x86::OpKind;
        match ins.op_kind(n) {
            OpKind::Register => Ok(self.read_reg(ins.op_register(n)) & size_mask(size)),
            OpKind::Memory => {
                let a = self.ea(ins);
                self.load(a, size)
            }
            _ => Ok(ins.immediate(n) & size_mask(size)),
        }
    }

    /// Writes operand `n` (register or memory) with `size` bytes of `value`.
    #[inline(always)]
    pub fn write_op(
        &mut self,
        ins: &Instruction,
        n: u32,
        size: usize,
        value: u64,
    ) -> Result<(), Stop> {
        match ins.op_kind(n) {
            iced_x86::OpKind::Register => {
                self.write_reg(ins.op_register(n), value);
                Ok(())
            }
            _ => {
                // The address was computed by a read of the same operand or
                // is computed here; computing it twice is harmless.
                let a = self.ea(ins);
                self.store(a, size, value)
            }
        }
    }

    #[inline(always)]
    pub fn push(&mut self, value: u64) -> Result<(), Stop> {
        let sp = self.regs.gpr(super::regs::gpr::RSP).wrapping_sub(8);
        self.store(sp, 8, value)?;
        self.regs.set_gpr(super::regs::gpr::RSP, sp);
        Ok(())
    }

    #[inline(always)]
    pub fn pop(&mut self) -> Result<u64, Stop> {
        let sp = self.regs.gpr(super::regs::gpr::RSP);
        let v = self.load(sp, 8)?;
        self.regs.set_gpr(super::regs::gpr::RSP, sp.wrapping_add(8));
        Ok(v)
    }
}

/// All-ones mask of `size` bytes (1, 2, 4 or 8).
#[inline(always)]
pub fn size_mask(size: usize) -> u64 {
    if size >= 8 {
        u64::MAX
    } else {
        (1u64 << (size * 8)) - 1
    }
}

#[inline(always)]
fn fault(ip: u64, f: MemFault) -> Stop {
    Stop::Fault {
        ip,
        addr: f.addr,
        write: f.write,
    }
}
