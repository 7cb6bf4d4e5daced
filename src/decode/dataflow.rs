//! Data-flow look-ahead: evaluating branches ahead from the CPU state the
//! breakpoint handler already has, without another breakpoint (the paper's
//! second proposed optimisation, §3.1, which it did not build).
//!
//! From a stop the handler knows every register. If the straight-line code
//! up to the next transfer is made of instructions modelled here exactly
//! (moves, add/sub/cmp, logic, shifts, lea, cmov, push, pop, leave, plain
//! stores), the registers and flags at that transfer are known, and a jcc, a
//! return or an indirect jump can be resolved at once.
//!
//! What the model reads, and why that is safe: registers; its own stores
//! (kept in a small log); the thread's stack slots that `pop`, `leave` and
//! `ret` read (saved registers and return addresses, which no other thread
//! writes); and memory mapped without write permission (jump tables, the
//! GOT after RELRO), which nothing can change. It never reads other memory:
//! another thread could change it between now and the real execution, and
//! a recorded branch the program did not take is a bug. Anything outside the
//! model (another load, a syscall, a flag it leaves undefined, a partial
//! register write, a store it cannot log) makes the tracer fall back to a
//! breakpoint.
//!
//! Async-signal-safe: arithmetic on a copy of the registers, no allocation.

use iced_x86::{Instruction, Mnemonic, OpKind, Register};

use super::form::{Condition, Gpr, Memory, RegisterFile};

const CF: u64 = 1 << 0;
const PF: u64 = 1 << 2;
const ZF: u64 = 1 << 6;
const SF: u64 = 1 << 7;
const OF: u64 = 1 << 11;
const STATUS: u64 = CF | PF | ZF | SF | OF;

/// Stores the model made, so that a later load of the same slot (a `ret`
/// after a `call`, a `pop` after a `push`) sees them.
pub const STORE_LOG_ENTRIES: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreLog {
    len: usize,
    /// (address, size, value), oldest first.
    entries: [(u64, u8, u64); STORE_LOG_ENTRIES],
}

impl StoreLog {
    const EMPTY: StoreLog = StoreLog {
        len: 0,
        entries: [(0, 0, 0); STORE_LOG_ENTRIES],
    };

    /// False when the log is full (the model then stops).
    fn record(&mut self, addr: u64, size: u8, value: u64) -> bool {
        if self.len == STORE_LOG_ENTRIES {
            return false;
        }
        self.entries[self.len] = (addr, size, value & mask(size as u32 * 8));
        self.len += 1;
        true
    }

    /// The newest store to exactly [addr, addr + size): `Some(Some(v))`;
    /// one overlapping it otherwise: `Some(None)`; none: `None`.
    fn lookup(&self, addr: u64, size: u8) -> Option<Option<u64>> {
        let end = addr.wrapping_add(size as u64);
        self.entries[..self.len]
            .iter()
            .rev()
            .find_map(|&(a, n, v)| {
                let e = a.wrapping_add(n as u64);
                if a == addr && n == size {
                    Some(Some(v))
                } else if a < end && addr < e {
                    Some(None)
                } else {
                    None
                }
            })
    }
}

/// Registers and the status flags, with the flags the model could not
/// define (OF after a multi-bit shift) marked, and the stores made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegState {
    pub gpr: [u64; 16],
    pub flags: u64,
    /// Flags whose value is not known (never read by an evaluation).
    pub undefined: u64,
    pub log: StoreLog,
}

/// Memory that reads as zeroes everywhere and is all immutable: lets
/// `step` check an instruction's shape at decode time.
pub struct Zeroes;

impl Memory for Zeroes {
    fn read(&self, _addr: u64, _size: u8) -> u64 {
        0
    }
    fn read_immutable(&self, _addr: u64, _size: u8) -> Option<u64> {
        Some(0)
    }
}

impl RegState {
    pub fn from_registers(regs: &impl RegisterFile) -> RegState {
        RegState {
            gpr: std::array::from_fn(|i| regs.gpr(i as Gpr)),
            flags: regs.rflags(),
            undefined: 0,
            log: StoreLog::EMPTY,
        }
    }

    pub fn zeroed() -> RegState {
        RegState {
            gpr: [0; 16],
            flags: 0,
            undefined: 0,
            log: StoreLog::EMPTY,
        }
    }

    /// Pushes a 64-bit value (a call's return address, a push).
    pub fn push(&mut self, value: u64) -> bool {
        self.gpr[4] = self.gpr[4].wrapping_sub(8);
        self.log.record(self.gpr[4], 8, value)
    }

    /// Reads a stack slot of this thread: from the log when the model
    /// stored it, from memory when nothing in the log overlaps it, `None`
    /// when a logged store overlaps it only in part.
    pub fn load_stack(&self, addr: u64, size: u8, mem: &impl Memory) -> Option<u64> {
        match self.log.lookup(addr, size) {
            Some(hit) => hit,
            None => Some(mem.read(addr, size)),
        }
    }

    /// Whether `cond` reads only defined flags.
    pub fn can_test(&self, cond: Condition) -> bool {
        let reads = match cond as u8 & !1 {
            0 => OF,
            2 => CF,
            4 => ZF,
            6 => CF | ZF,
            8 => SF,
            10 => PF,
            12 => SF | OF,
            _ => ZF | SF | OF,
        };
        self.undefined & reads == 0
    }
}

impl RegisterFile for RegState {
    fn gpr(&self, reg: Gpr) -> u64 {
        self.gpr[reg as usize & 15]
    }
    fn rip(&self) -> u64 {
        0
    }
    fn rflags(&self) -> u64 {
        self.flags
    }
}

/// A register operand the model handles: number, width in bits. High-byte
/// registers (ah …) are not handled.
fn gpr(reg: Register) -> Option<(usize, u32)> {
    if matches!(
        reg,
        Register::AH | Register::CH | Register::DH | Register::BH
    ) {
        return None;
    }
    let full = reg.full_register();
    let base = Register::RAX as u32;
    let n = full as u32;
    if !(full.is_gpr64() && n >= base && n < base + 16) {
        return None;
    }
    Some(((n - base) as usize, reg.size() as u32 * 8))
}

fn mask(width: u32) -> u64 {
    if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

fn sign(width: u32) -> u64 {
    1u64 << (width - 1)
}

fn parity_even(v: u64) -> bool {
    (v as u8).count_ones() % 2 == 0
}

/// SF, ZF, PF of `result`, with CF and OF given.
fn result_flags(result: u64, width: u32, cf: bool, of: bool) -> u64 {
    let r = result & mask(width);
    let mut f = 0;
    if cf {
        f |= CF;
    }
    if of {
        f |= OF;
    }
    if r == 0 {
        f |= ZF;
    }
    if r & sign(width) != 0 {
        f |= SF;
    }
    if parity_even(r) {
        f |= PF;
    }
    f
}

fn set_flags(st: &mut RegState, f: u64, affected: u64) {
    st.flags = (st.flags & !affected) | (f & affected);
    st.undefined &= !affected;
}

/// Writes a 64- or 32-bit result (32-bit writes zero the upper half, as
/// the CPU does); narrower writes are not modelled.
fn write(st: &mut RegState, (n, width): (usize, u32), v: u64) -> bool {
    match width {
        64 => st.gpr[n] = v,
        32 => st.gpr[n] = v & 0xffff_ffff,
        _ => return false,
    }
    true
}

fn read(st: &RegState, (n, width): (usize, u32)) -> u64 {
    st.gpr[n] & mask(width)
}

/// The value of source operand `i`: a register, an immediate, or a load
/// from immutable memory.
fn source(insn: &Instruction, st: &RegState, i: u32, mem: &impl Memory) -> Option<u64> {
    match insn.op_kind(i) {
        OpKind::Register => gpr(insn.op_register(i)).map(|r| read(st, r)),
        OpKind::Memory => {
            let size = insn.memory_size().size();
            if !matches!(size, 1 | 2 | 4 | 8) {
                return None;
            }
            mem.read_immutable(address(insn, st)?, size as u8)
        }
        OpKind::Immediate8
        | OpKind::Immediate16
        | OpKind::Immediate32
        | OpKind::Immediate64
        | OpKind::Immediate8to16
        | OpKind::Immediate8to32
        | OpKind::Immediate8to64
        | OpKind::Immediate32to64 => Some(insn.immediate(i)),
        _ => None,
    }
}

/// Effective address of a memory operand, RIP-relative folded in; `None`
/// for fs/gs-relative ones (their bases are not in the ucontext).
fn address(insn: &Instruction, st: &RegState) -> Option<u64> {
    if matches!(insn.memory_segment(), Register::FS | Register::GS) {
        return None;
    }
    if insn.is_ip_rel_memory_operand() {
        return Some(insn.ip_rel_memory_address());
    }
    let mut a = insn.memory_displacement64();
    if insn.memory_base() != Register::None {
        a = a.wrapping_add(st.gpr[gpr(insn.memory_base())?.0]);
    }
    if insn.memory_index() != Register::None {
        a = a.wrapping_add(
            st.gpr[gpr(insn.memory_index())?.0].wrapping_mul(insn.memory_index_scale() as u64),
        );
    }
    if insn.memory_base().is_gpr32() || insn.memory_index().is_gpr32() {
        a &= 0xffff_ffff;
    }
    Some(a)
}

fn condition_of(insn: &Instruction) -> Option<Condition> {
    use iced_x86::ConditionCode as C;
    Some(Condition::from_code(match insn.condition_code() {
        C::o => 0,
        C::no => 1,
        C::b => 2,
        C::ae => 3,
        C::e => 4,
        C::ne => 5,
        C::be => 6,
        C::a => 7,
        C::s => 8,
        C::ns => 9,
        C::p => 10,
        C::np => 11,
        C::l => 12,
        C::ge => 13,
        C::le => 14,
        C::g => 15,
        C::None => return None,
    }))
}

/// Applies one non-transfer instruction to `st`. Returns false, leaving
/// `st` unspecified, when the instruction is outside the model.
pub fn step(insn: &Instruction, st: &mut RegState, mem: &impl Memory) -> bool {
    step_inner(insn, st, mem).is_some()
}

fn step_inner(insn: &Instruction, st: &mut RegState, mem: &impl Memory) -> Option<()> {
    let m = insn.mnemonic();
    // Instructions that change no register or flag.
    if matches!(
        m,
        Mnemonic::Nop
            | Mnemonic::Endbr64
            | Mnemonic::Pause
            | Mnemonic::Prefetcht0
            | Mnemonic::Prefetchnta
    ) {
        return Some(());
    }
    let op0_reg = || {
        if insn.op0_kind() == OpKind::Register {
            gpr(insn.op0_register())
        } else {
            None
        }
    };
    match m {
        Mnemonic::Mov => {
            if insn.op0_kind() == OpKind::Memory {
                // A store: logged, so later loads of the slot see it.
                let size = insn.memory_size().size();
                let value = source(insn, st, 1, mem)?;
                let addr = address(insn, st)?;
                return (matches!(size, 1 | 2 | 4 | 8) && st.log.record(addr, size as u8, value))
                    .then_some(());
            }
            let dst = op0_reg()?;
            let v = source(insn, st, 1, mem)?;
            write(st, dst, v).then_some(())
        }
        Mnemonic::Movzx | Mnemonic::Movsx | Mnemonic::Movsxd => {
            let dst = op0_reg()?;
            let width = match insn.op1_kind() {
                OpKind::Register => gpr(insn.op1_register())?.1,
                OpKind::Memory => insn.memory_size().size() as u32 * 8,
                _ => return None,
            };
            if !matches!(width, 8 | 16 | 32) {
                return None;
            }
            let v = source(insn, st, 1, mem)? & mask(width);
            let v = if m == Mnemonic::Movzx || v & sign(width) == 0 {
                v
            } else {
                v | !mask(width)
            };
            write(st, dst, v).then_some(())
        }
        Mnemonic::Pop => {
            let dst = op0_reg()?;
            if dst.1 != 64 || dst.0 == 4 {
                return None;
            }
            let v = st.load_stack(st.gpr[4], 8, mem)?;
            st.gpr[4] = st.gpr[4].wrapping_add(8);
            write(st, dst, v).then_some(())
        }
        Mnemonic::Leave => {
            if insn.code() != iced_x86::Code::Leaveq {
                return None;
            }
            // mov rsp, rbp; pop rbp
            let slot = st.gpr[5];
            let v = st.load_stack(slot, 8, mem)?;
            st.gpr[4] = slot.wrapping_add(8);
            st.gpr[5] = v;
            Some(())
        }
        Mnemonic::Lea => {
            let dst = op0_reg()?;
            let a = address(insn, st)?;
            write(st, dst, a).then_some(())
        }
        Mnemonic::Add | Mnemonic::Sub | Mnemonic::Cmp => {
            let dst = op0_reg()?;
            let a = read(st, dst);
            let b = source(insn, st, 1, mem)? & mask(dst.1);
            let w = dst.1;
            let (r, cf, of) = if m == Mnemonic::Add {
                let r = a.wrapping_add(b) & mask(w);
                (r, r < a, (!(a ^ b) & (a ^ r)) & sign(w) != 0)
            } else {
                let r = a.wrapping_sub(b) & mask(w);
                (r, a < b, ((a ^ b) & (a ^ r)) & sign(w) != 0)
            };
            if w < 32 && m != Mnemonic::Cmp {
                return None;
            }
            set_flags(st, result_flags(r, w, cf, of), STATUS);
            if m != Mnemonic::Cmp {
                write(st, dst, r);
            }
            Some(())
        }
        Mnemonic::And | Mnemonic::Or | Mnemonic::Xor | Mnemonic::Test => {
            let dst = op0_reg()?;
            let a = read(st, dst);
            let b = source(insn, st, 1, mem)? & mask(dst.1);
            let r = match m {
                Mnemonic::Or => a | b,
                Mnemonic::Xor => a ^ b,
                _ => a & b,
            };
            if dst.1 < 32 && m != Mnemonic::Test {
                return None;
            }
            set_flags(st, result_flags(r, dst.1, false, false), STATUS);
            if m != Mnemonic::Test {
                write(st, dst, r);
            }
            Some(())
        }
        Mnemonic::Inc | Mnemonic::Dec => {
            let dst = op0_reg()?;
            let a = read(st, dst);
            let w = dst.1;
            let (r, of) = if m == Mnemonic::Inc {
                let r = a.wrapping_add(1) & mask(w);
                (r, r == sign(w))
            } else {
                let r = a.wrapping_sub(1) & mask(w);
                (r, a == sign(w))
            };
            // CF is left as it was.
            set_flags(st, result_flags(r, w, false, of), STATUS & !CF);
            write(st, dst, r).then_some(())
        }
        Mnemonic::Neg => {
            let dst = op0_reg()?;
            let a = read(st, dst);
            let w = dst.1;
            let r = 0u64.wrapping_sub(a) & mask(w);
            set_flags(st, result_flags(r, w, a != 0, a == sign(w)), STATUS);
            write(st, dst, r).then_some(())
        }
        Mnemonic::Not => {
            let dst = op0_reg()?;
            let r = !read(st, dst);
            write(st, dst, r).then_some(())
        }
        Mnemonic::Shl | Mnemonic::Shr | Mnemonic::Sar => {
            let dst = op0_reg()?;
            let w = dst.1;
            let count = match insn.op1_kind() {
                OpKind::Immediate8 => insn.immediate8() as u32,
                OpKind::Register if insn.op1_register() == Register::CL => st.gpr[1] as u32,
                _ => return None,
            } & if w == 64 { 63 } else { 31 };
            if count == 0 {
                return write(st, dst, read(st, dst)).then_some(());
            }
            let a = read(st, dst);
            let (r, cf) = match m {
                Mnemonic::Shl => ((a << count) & mask(w), (a >> (w - count)) & 1 == 1),
                Mnemonic::Shr => (a >> count, (a >> (count - 1)) & 1 == 1),
                _ => {
                    let signed = if a & sign(w) != 0 { a | !mask(w) } else { a };
                    (
                        ((signed as i64) >> count) as u64 & mask(w),
                        ((signed as i64) >> (count - 1)) & 1 == 1,
                    )
                }
            };
            let of = match m {
                Mnemonic::Shl => (r & sign(w) != 0) != cf,
                Mnemonic::Shr => a & sign(w) != 0,
                _ => false,
            };
            set_flags(st, result_flags(r, w, cf, of), STATUS);
            if count != 1 {
                // OF is defined for one-bit shifts only.
                st.undefined |= OF;
            }
            write(st, dst, r).then_some(())
        }
        Mnemonic::Cmovo
        | Mnemonic::Cmovno
        | Mnemonic::Cmovb
        | Mnemonic::Cmovae
        | Mnemonic::Cmove
        | Mnemonic::Cmovne
        | Mnemonic::Cmovbe
        | Mnemonic::Cmova
        | Mnemonic::Cmovs
        | Mnemonic::Cmovns
        | Mnemonic::Cmovp
        | Mnemonic::Cmovnp
        | Mnemonic::Cmovl
        | Mnemonic::Cmovge
        | Mnemonic::Cmovle
        | Mnemonic::Cmovg => {
            let dst = op0_reg()?;
            let cond = condition_of(insn)?;
            if !st.can_test(cond) || insn.op1_kind() != OpKind::Register {
                return None;
            }
            let v = if cond.holds(st.flags) {
                read(st, gpr(insn.op1_register())?)
            } else {
                read(st, dst)
            };
            // A 32-bit cmov zero-extends even when the condition is false.
            write(st, dst, v).then_some(())
        }
        Mnemonic::Push => {
            if insn.stack_pointer_increment() != -8 {
                return None;
            }
            let v = source(insn, st, 0, mem)?;
            st.push(v).then_some(())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
