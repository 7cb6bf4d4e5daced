//! Instruction semantics, and the list of forms the table holds.
//!
//! Handlers are specialised at compile time on what the `Code` fixes (the
//! operation, the operand size `S` in bytes, the condition); what varies
//! per instruction (register or memory, which register) comes from the
//! operand slots resolved at decode time.
//!
//! The rule every handler keeps: no register (flags included) is written
//! before the last memory access that can fail, so a [`Stop`] leaves the
//! registers as they were.

mod avx;
mod avx2;
mod avx512;
mod avxfp;
mod bits;
mod bmi;
mod flow;
mod forms;
mod int;
mod kmask;
mod muldiv;
pub(crate) mod quirks;
mod shift;
mod sse;
mod sse42;
mod ssefp;
mod string;
mod system;
mod x87;

use crate::flags::mask;
use crate::insn::{Insn, HIGH8, IMM, MEM, SEG_FS, SEG_NONE};
use crate::mem::Memory;
use crate::regs::{gpr, Registers};
use crate::step::{Machine, Retired, Stop};

pub(crate) use forms::install;

/// What handlers return.
pub(crate) type Flow = Result<(), Stop>;

/// The handler of every form the core does not implement.
pub(crate) fn unsupported<X: Machine>(x: &mut X, i: &Insn, _r: &mut Retired) -> Flow {
    Err(Stop::Unsupported {
        ip: x.regs().rip(),
        code: i.code(),
    })
}

/// Effective address of the memory operand, without the segment base
/// (what lea computes), wrapped to 32 bits under the 0x67 prefix.
#[inline(always)]
pub(crate) fn offset<X: Machine>(x: &X, i: &Insn) -> u64 {
    let r = x.regs();
    crate::address::offset(i.base, i.index, i.scale, i.disp, i.addr32, |n| r.gpr(n))
}

/// Adds the fs or gs base of the instruction's segment prefix.
#[inline(always)]
pub(crate) fn segment<X: Machine>(x: &X, i: &Insn, offset: u64) -> u64 {
    match i.seg {
        SEG_NONE => offset,
        SEG_FS => offset.wrapping_add(x.regs().fs_base()),
        _ => offset.wrapping_add(x.regs().gs_base()),
    }
}

/// Linear address of the memory operand.
#[inline(always)]
pub(crate) fn ea<X: Machine>(x: &X, i: &Insn) -> u64 {
    segment(x, i, offset(x, i))
}

#[inline(always)]
pub(crate) fn load<X: Machine>(
    x: &mut X,
    r: &mut Retired,
    addr: u64,
    size: usize,
) -> Result<u64, Stop> {
    r.mem_addr = addr;
    Ok(x.mem().load(addr, size)?)
}

#[inline(always)]
pub(crate) fn store<X: Machine>(
    x: &mut X,
    r: &mut Retired,
    addr: u64,
    size: usize,
    v: u64,
) -> Flow {
    r.mem_addr = addr;
    r.mem_write = true;
    Ok(x.mem().store(addr, size, v)?)
}

#[inline(always)]
pub(crate) fn reg<X: Machine>(x: &X, n: usize) -> u64 {
    x.regs().gpr(n)
}

#[inline(always)]
pub(crate) fn set_reg<X: Machine>(x: &mut X, n: usize, v: u64) {
    x.regs_mut().set_gpr(n, v);
}

/// Writes the low `S` bytes of a general-purpose register with the
/// x86-64 rule: a 32-bit write zeroes the upper half, 8- and 16-bit
/// writes keep the rest.
#[inline(always)]
pub(crate) fn set_sized<X: Machine, const S: usize>(x: &mut X, n: usize, v: u64) {
    let r = x.regs_mut();
    match S {
        8 => r.set_gpr(n, v),
        4 => r.set_gpr(n, v & 0xffff_ffff),
        _ => {
            let m = mask(S);
            let old = r.gpr(n);
            r.set_gpr(n, (old & !m) | (v & m));
        }
    }
}

/// Reads operand slot `o` (register, memory or immediate) as `S` bytes,
/// zero-extended.
#[inline(always)]
pub(crate) fn read<X: Machine, const S: usize>(
    x: &mut X,
    i: &Insn,
    o: u8,
    r: &mut Retired,
) -> Result<u64, Stop> {
    if o < 16 {
        Ok(reg(x, usize::from(o)) & mask(S))
    } else if o == MEM {
        let a = ea(x, i);
        load(x, r, a, S)
    } else if o == IMM {
        Ok(i.imm & mask(S))
    } else {
        Ok((reg(x, usize::from(o - HIGH8)) >> 8) & 0xff)
    }
}

/// Writes `S` bytes of `v` to operand slot `o` (register or memory).
#[inline(always)]
pub(crate) fn write<X: Machine, const S: usize>(
    x: &mut X,
    i: &Insn,
    o: u8,
    v: u64,
    r: &mut Retired,
) -> Flow {
    if o < 16 {
        set_sized::<X, S>(x, usize::from(o), v);
        Ok(())
    } else if o == MEM {
        let a = ea(x, i);
        store(x, r, a, S, v)
    } else {
        let n = usize::from(o - HIGH8);
        let old = reg(x, n);
        set_reg(x, n, (old & !0xff00) | ((v & 0xff) << 8));
        Ok(())
    }
}

/// Stops with [`Stop::UnknownFlags`] when a flag in `reads` is undefined.
#[inline(always)]
pub(crate) fn defined<X: Machine>(x: &X, reads: u64) -> Flow {
    if x.regs().undefined() & reads != 0 {
        Err(Stop::UnknownFlags)
    } else {
        Ok(())
    }
}

/// Pushes a 64-bit value: the store first, rsp after it.
#[inline(always)]
pub(crate) fn push<X: Machine>(x: &mut X, r: &mut Retired, v: u64) -> Flow {
    let sp = reg(x, gpr::RSP).wrapping_sub(8);
    store(x, r, sp, 8, v)?;
    set_reg(x, gpr::RSP, sp);
    Ok(())
}

/// Records a control transfer.
#[inline(always)]
pub(crate) fn transfer(r: &mut Retired, kind: crate::BranchKind, taken: bool, target: u64) {
    r.kind = kind;
    r.taken = taken;
    r.target = target;
    if taken {
        r.next_rip = target;
    }
}
