//! Integer moves, arithmetic and logic.

use super::{defined, offset, read, reg, set_sized, write, Flow};
use crate::flags::{self, mask, sext, szp};
use crate::insn::{Insn, MEM};
use crate::regs::flag::{AF, CF, STATUS};
use crate::regs::Registers;
use crate::step::{Machine, Retired};

/// The eight classic ALU operations in their /digit order, and test.
pub(crate) const ADD: u8 = 0;
pub(crate) const OR: u8 = 1;
pub(crate) const ADC: u8 = 2;
pub(crate) const SBB: u8 = 3;
pub(crate) const AND: u8 = 4;
pub(crate) const SUB: u8 = 5;
pub(crate) const XOR: u8 = 6;
pub(crate) const CMP: u8 = 7;
pub(crate) const TEST: u8 = 8;

/// add, or, adc, sbb, and, sub, xor, cmp, test: op0 = op0 OP op1.
pub(crate) fn alu<X: Machine, const OP: u8, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    if OP == ADC || OP == SBB {
        defined(x, CF)?;
    }
    let a = read::<X, S>(x, i, i.op[0], r)?;
    let b = read::<X, S>(x, i, i.op[1], r)?;
    let c = x.regs().rflags() & CF;
    let m = mask(S);
    let (res, f) = match OP {
        ADD => {
            let v = a.wrapping_add(b) & m;
            (v, flags::add::<S>(a, b, 0, v))
        }
        ADC => {
            let v = a.wrapping_add(b).wrapping_add(c) & m;
            (v, flags::add::<S>(a, b, c, v))
        }
        SUB | CMP => {
            let v = a.wrapping_sub(b) & m;
            (v, flags::sub::<S>(a, b, 0, v))
        }
        SBB => {
            let v = a.wrapping_sub(b).wrapping_sub(c) & m;
            (v, flags::sub::<S>(a, b, c, v))
        }
        AND | TEST => (a & b, szp::<S>(a & b)),
        OR => (a | b, szp::<S>(a | b)),
        _ => (a ^ b, szp::<S>(a ^ b)),
    };
    if OP != CMP && OP != TEST {
        write::<X, S>(x, i, i.op[0], res, r)?;
    }
    // Logic operations clear CF and OF and leave AF undefined.
    let undefined = if matches!(OP, AND | OR | XOR | TEST) {
        AF
    } else {
        0
    };
    flags::update(x.regs_mut(), STATUS, f, undefined);
    Ok(())
}

pub(crate) const INC: u8 = 0;
pub(crate) const DEC: u8 = 1;
pub(crate) const NEG: u8 = 2;
pub(crate) const NOT: u8 = 3;

/// inc, dec (CF kept), neg, not (no flags).
pub(crate) fn unary<X: Machine, const OP: u8, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let a = read::<X, S>(x, i, i.op[0], r)?;
    let m = mask(S);
    let (res, written, f) = match OP {
        INC => {
            let v = a.wrapping_add(1) & m;
            (v, STATUS & !CF, flags::add::<S>(a, 1, 0, v))
        }
        DEC => {
            let v = a.wrapping_sub(1) & m;
            (v, STATUS & !CF, flags::sub::<S>(a, 1, 0, v))
        }
        NEG => {
            let v = a.wrapping_neg() & m;
            (v, STATUS, flags::sub::<S>(0, a, 0, v))
        }
        _ => (!a & m, 0, 0),
    };
    write::<X, S>(x, i, i.op[0], res, r)?;
    if OP != NOT {
        flags::update(x.regs_mut(), written, f, 0);
    }
    Ok(())
}

/// mov r/m, r/imm and mov r, r/m (moffs forms included).
pub(crate) fn mov<X: Machine, const S: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let v = read::<X, S>(x, i, i.op[1], r)?;
    write::<X, S>(x, i, i.op[0], v, r)
}

/// movzx (`SIGNED` false), movsx and movsxd: `D`-byte destination from an
/// `S`-byte source.
pub(crate) fn movx<X: Machine, const D: usize, const S: usize, const SIGNED: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let v = read::<X, S>(x, i, i.op[1], r)?;
    let v = if SIGNED { sext(v, S) } else { v };
    write::<X, D>(x, i, i.op[0], v, r)
}

/// lea: the offset (no segment base), cut to the destination size.
pub(crate) fn lea<X: Machine, const S: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let a = offset(x, i);
    write::<X, S>(x, i, i.op[0], a, r)
}

/// xchg: the memory operand (if any) is op0; its store comes before the
/// register write.
pub(crate) fn xchg<X: Machine, const S: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let a = read::<X, S>(x, i, i.op[0], r)?;
    let b = read::<X, S>(x, i, i.op[1], r)?;
    write::<X, S>(x, i, i.op[0], b, r)?;
    write::<X, S>(x, i, i.op[1], a, r)
}

/// cmovcc: the source is read whatever the condition (a memory source
/// faults either way), and a 32-bit destination is zero-extended even when
/// the condition is false.
pub(crate) fn cmov<X: Machine, const CC: u8, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    defined(x, flags::reads(CC))?;
    let v = read::<X, S>(x, i, i.op[1], r)?;
    if flags::holds(x.regs().rflags(), CC) {
        write::<X, S>(x, i, i.op[0], v, r)
    } else {
        if S == 4 {
            let d = reg(x, usize::from(i.op[0]));
            set_sized::<X, 4>(x, usize::from(i.op[0]), d);
        }
        Ok(())
    }
}

/// setcc r/m8.
pub(crate) fn setcc<X: Machine, const CC: u8>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    defined(x, flags::reads(CC))?;
    let v = u64::from(flags::holds(x.regs().rflags(), CC));
    write::<X, 1>(x, i, i.op[0], v, r)
}

/// cbw, cwde, cdqe: sign-extend the low half of the accumulator into the
/// `S`-byte accumulator.
pub(crate) fn widen_acc<X: Machine, const S: usize>(
    x: &mut X,
    _i: &Insn,
    _r: &mut Retired,
) -> Flow {
    let v = sext(reg(x, 0), S / 2);
    set_sized::<X, S>(x, 0, v);
    Ok(())
}

/// cwd, cdq, cqo: fill the `S`-byte rdx with the accumulator's sign.
pub(crate) fn sign_to_rdx<X: Machine, const S: usize>(
    x: &mut X,
    _i: &Insn,
    _r: &mut Retired,
) -> Flow {
    let neg = (reg(x, 0) >> (S * 8 - 1)) & 1 != 0;
    set_sized::<X, S>(x, 2, if neg { u64::MAX } else { 0 });
    Ok(())
}

/// bswap r32 / r64.
pub(crate) fn bswap<X: Machine, const S: usize>(x: &mut X, i: &Insn, _r: &mut Retired) -> Flow {
    let n = usize::from(i.op[0]);
    let v = reg(x, n);
    let v = if S == 8 {
        v.swap_bytes()
    } else {
        u64::from((v as u32).swap_bytes())
    };
    set_sized::<X, S>(x, n, v);
    Ok(())
}

/// cmpxchg r/m, r: compare with the accumulator; equal: store the source,
/// else load the destination into the accumulator. A memory destination
/// is written either way (with its own value when unequal), as the CPU
/// does; a register destination is left alone when unequal (a 32-bit one
/// keeps its upper half).
pub(crate) fn cmpxchg<X: Machine, const S: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let acc = reg(x, 0) & mask(S);
    let dest = read::<X, S>(x, i, i.op[0], r)?;
    let src = read::<X, S>(x, i, i.op[1], r)?;
    let diff = acc.wrapping_sub(dest) & mask(S);
    let f = flags::sub::<S>(acc, dest, 0, diff);
    if acc == dest {
        write::<X, S>(x, i, i.op[0], src, r)?;
    } else {
        if i.op[0] == MEM {
            write::<X, S>(x, i, i.op[0], dest, r)?;
        }
        set_sized::<X, S>(x, 0, dest);
    }
    flags::update(x.regs_mut(), STATUS, f, 0);
    Ok(())
}

/// xadd r/m, r: the register gets the old destination, the destination
/// the sum.
pub(crate) fn xadd<X: Machine, const S: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let a = read::<X, S>(x, i, i.op[0], r)?;
    let b = read::<X, S>(x, i, i.op[1], r)?;
    let sum = a.wrapping_add(b) & mask(S);
    let f = flags::add::<S>(a, b, 0, sum);
    if i.op[0] == MEM {
        // Memory destination: the store is the fallible part, so first.
        write::<X, S>(x, i, i.op[0], sum, r)?;
        write::<X, S>(x, i, i.op[1], a, r)?;
    } else {
        write::<X, S>(x, i, i.op[1], a, r)?;
        write::<X, S>(x, i, i.op[0], sum, r)?;
    }
    flags::update(x.regs_mut(), STATUS, f, 0);
    Ok(())
}
