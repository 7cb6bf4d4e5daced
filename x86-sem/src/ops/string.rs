//! movs, stos, lods, cmps, scas, with rep/repe/repne.
//!
//! Each iteration commits (registers and memory), so a fault in the middle
//! of a rep leaves rsi, rdi and rcx at the faulting iteration with rip at
//! the instruction, as on the CPU. Under the 0x67 prefix the instruction
//! uses esi, edi and ecx. The source segment may be overridden (fs/gs);
//! the destination is always es (base 0).

use super::{load, reg, segment, set_reg, set_sized, store, Flow};
use crate::flags::{self, mask};
use crate::insn::Insn;
use crate::regs::flag::{DF, STATUS, ZF};
use crate::regs::{gpr, Registers};
use crate::step::{Machine, Retired, Stop};

pub(crate) const MOVS: u8 = 0;
pub(crate) const STOS: u8 = 1;
pub(crate) const LODS: u8 = 2;
pub(crate) const CMPS: u8 = 3;
pub(crate) const SCAS: u8 = 4;

#[inline(always)]
fn set_pointer<X: Machine>(x: &mut X, n: usize, v: u64, a32: bool) {
    if a32 {
        set_sized::<X, 4>(x, n, v);
    } else {
        set_reg(x, n, v);
    }
}

/// Addr32 quirk variants ([`crate::Addr32Rep`]): every write of ecx,
/// esi, edi zero-extends.
pub(crate) const ZERO_UPPER: u8 = 0;
/// rcx[63:32] is never written.
pub(crate) const KEEP_COUNT_UPPER: u8 = 1;
/// Unmeasured: stop when an upper half the CPUs disagree on is non-zero.
pub(crate) const REFUSE_UPPER: u8 = 2;

/// The string instruction `OP` on `S`-byte elements, as Zen 5 and Intel
/// run it under 0x67 ([`ZERO_UPPER`]).
#[inline(always)]
pub(crate) fn string<X: Machine, const OP: u8, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    string_with::<X, OP, S, ZERO_UPPER>(x, i, r)
}

/// Writes ecx (or rcx) under the addr32 variant `Q`.
#[inline(always)]
fn set_count<X: Machine, const Q: u8>(x: &mut X, c: u64, a32: bool) {
    if a32 && Q == KEEP_COUNT_UPPER {
        let old = reg(x, gpr::RCX);
        set_reg(x, gpr::RCX, (old & !0xffff_ffff) | (c & 0xffff_ffff));
    } else {
        set_pointer(x, gpr::RCX, c, a32);
    }
}

/// The string instruction `OP` on `S`-byte elements, with the upper
/// halves of rcx, rsi and rdi under 0x67 as the addr32 variant `Q` says.
pub(crate) fn string_with<X: Machine, const OP: u8, const S: usize, const Q: u8>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let compares = OP == CMPS || OP == SCAS;
    let repne = i.has_repne();
    let rep = i.has_rep() || repne;
    let a32 = i.addr32;
    if Q == REFUSE_UPPER && a32 {
        let count = if rep { reg(x, gpr::RCX) } else { 0 };
        let high = count | reg(x, gpr::RSI) | reg(x, gpr::RDI);
        if high >> 32 != 0 {
            return Err(Stop::Opaque);
        }
    }
    let amask = if a32 { 0xffff_ffff } else { u64::MAX };
    let step = if x.regs().rflags() & DF != 0 {
        (S as u64).wrapping_neg()
    } else {
        S as u64
    };
    let limit = x.rep_limit();
    let mut done = 0u64;
    loop {
        if rep {
            let c = reg(x, gpr::RCX);
            if c & amask == 0 {
                if a32 && done == 0 {
                    // Measured on Zen 5 (tests/forms.txt): with no
                    // iteration to run, the CPU still writes ecx, and
                    // movs/stos their pointers, clearing the upper halves.
                    set_count::<X, Q>(x, c, true);
                    if OP == MOVS {
                        let si = reg(x, gpr::RSI);
                        set_pointer(x, gpr::RSI, si, true);
                    }
                    if OP == MOVS || OP == STOS {
                        let di = reg(x, gpr::RDI);
                        set_pointer(x, gpr::RDI, di, true);
                    }
                }
                return Ok(());
            }
            if done == limit {
                // Resume here on the next step, as after an interrupt.
                r.next_rip = r.ip;
                return Ok(());
            }
        }
        let si = reg(x, gpr::RSI) & amask;
        let di = reg(x, gpr::RDI) & amask;
        let src = segment(x, i, si);
        match OP {
            MOVS => {
                let v = load(x, r, src, S)?;
                store(x, r, di, S, v)?;
                set_pointer(x, gpr::RSI, si.wrapping_add(step), a32);
                set_pointer(x, gpr::RDI, di.wrapping_add(step), a32);
            }
            STOS => {
                let v = reg(x, gpr::RAX) & mask(S);
                store(x, r, di, S, v)?;
                set_pointer(x, gpr::RDI, di.wrapping_add(step), a32);
            }
            LODS => {
                let v = load(x, r, src, S)?;
                set_sized::<X, S>(x, gpr::RAX, v);
                set_pointer(x, gpr::RSI, si.wrapping_add(step), a32);
            }
            CMPS => {
                let a = load(x, r, src, S)?;
                let b = load(x, r, di, S)?;
                let d = a.wrapping_sub(b) & mask(S);
                flags::update(x.regs_mut(), STATUS, flags::sub::<S>(a, b, 0, d), 0);
                set_pointer(x, gpr::RSI, si.wrapping_add(step), a32);
                set_pointer(x, gpr::RDI, di.wrapping_add(step), a32);
            }
            _ => {
                let a = reg(x, gpr::RAX) & mask(S);
                let b = load(x, r, di, S)?;
                let d = a.wrapping_sub(b) & mask(S);
                flags::update(x.regs_mut(), STATUS, flags::sub::<S>(a, b, 0, d), 0);
                set_pointer(x, gpr::RDI, di.wrapping_add(step), a32);
            }
        }
        if !rep {
            return Ok(());
        }
        let c = reg(x, gpr::RCX).wrapping_sub(1);
        set_count::<X, Q>(x, c, a32);
        done += 1;
        if compares {
            let zf = x.regs().rflags() & ZF != 0;
            if zf == repne {
                return Ok(());
            }
        }
    }
}
