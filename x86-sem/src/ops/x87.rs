//! The x87 subset compiled C runs for `long double` and for integer
//! conversions: loads and stores in every format, fld/fst/fxch between
//! registers, the basic arithmetic, fcomi/fucomi, fcmov, and the control
//! and status words.
//!
//! Results are rounded under the control word's rounding and precision
//! control (Intel SDM vol. 1 §8.1.5). What the core does not cover stops
//! with [`Stop::Opaque`] before anything is written: a stack overflow or
//! underflow (the unit would produce the indefinite and set SF), an
//! exception the control word leaves unmasked, an exception already
//! pending (ES set: a waiting instruction would trap), a unit the owner
//! has not filled ([`X87::UNSET`]), the reserved
//! precision control, and denormal results under reduced precision.
//!
//! The condition codes C0, C2 and C3 (and C1 where the manuals say so)
//! that an instruction leaves undefined are marked in
//! [`X87::undefined`]; fnstsw stops with [`Stop::UnknownFlags`] on them.

use super::{ea, load, set_sized, store, Flow};
use crate::float::{self, Env, Format, Num, Order, Out, F32, F64, F80, RZ};
use crate::insn::{Insn, MEM, ST};
use crate::mem::Memory;
use crate::regs::flag::{CF, PF, STATUS, ZF};
use crate::regs::{Registers, F80 as Reg, X87};
use crate::step::{Machine, Retired, Stop};

const C0: u16 = 0x100;
const C1: u16 = 0x200;
const C2: u16 = 0x400;
const C3: u16 = 0x4000;
const CC: u16 = C0 | C1 | C2 | C3;
/// Error summary: an unmasked exception is pending.
const ES: u16 = 0x80;

const fn bits(v: Reg) -> u128 {
    v.mantissa as u128 | (v.sign_exponent as u128) << 64
}

const fn reg_of(b: u128) -> Reg {
    Reg {
        mantissa: b as u64,
        sign_exponent: (b >> 64) as u16,
    }
}

/// The unit's state, or a stop while the owner has not filled it.
#[inline]
fn unit<X: Machine>(x: &X) -> Result<X87, Stop> {
    let s = *x.regs().x87();
    if !s.is_set() {
        return Err(Stop::Opaque);
    }
    Ok(s)
}

/// The unit's state for an instruction that waits for pending exceptions.
#[inline]
fn begin<X: Machine>(x: &X) -> Result<X87, Stop> {
    let s = unit(x)?;
    if s.fsw & ES != 0 {
        return Err(Stop::Opaque);
    }
    Ok(s)
}

/// ST(`i`), or a stop on an empty register (stack underflow).
#[inline]
fn get(s: &X87, i: u32) -> Result<Reg, Stop> {
    if s.valid(i) {
        Ok(s.st[i as usize & 7])
    } else {
        Err(Stop::Opaque)
    }
}

#[inline]
fn set(s: &mut X87, i: u32, v: Reg) {
    s.st[i as usize & 7] = v;
    s.ftw |= 1 << ((s.top() + i) & 7);
}

#[inline]
fn set_top(s: &mut X87, top: u32) {
    s.fsw = (s.fsw & !0x3800) | ((top & 7) << 11) as u16;
}

/// Pushes `v`, or stops on a full register (stack overflow).
#[inline]
fn push(s: &mut X87, v: Reg) -> Result<(), Stop> {
    if s.valid(7) {
        return Err(Stop::Opaque);
    }
    s.st.rotate_right(1);
    set_top(s, s.top().wrapping_sub(1));
    set(s, 0, v);
    Ok(())
}

/// Marks ST(0) empty and moves TOP up; the register keeps its contents.
#[inline]
fn pop(s: &mut X87) {
    s.ftw &= !(1 << s.top());
    s.st.rotate_left(1);
    set_top(s, s.top() + 1);
}

/// The rounding control.
#[inline]
fn env(s: &X87) -> Env {
    Env::new((s.fcw >> 10) as u8 & 3)
}

/// Where arithmetic rounds under the precision control.
#[inline]
fn arith_format(s: &X87) -> Result<Format, Stop> {
    match (s.fcw >> 8) & 3 {
        0 => Ok(Format { p: 24, ..F80 }),
        2 => Ok(Format { p: 53, ..F80 }),
        3 => Ok(F80),
        _ => Err(Stop::Opaque),
    }
}

/// Stops when `e` raised an exception the control word leaves unmasked,
/// or met a case not covered.
#[inline]
fn check(s: &X87, e: &Env) -> Flow {
    if e.opaque || e.raised() & !(s.fcw as u8) & 0x3f != 0 {
        return Err(Stop::Opaque);
    }
    Ok(())
}

/// Records the flags `e` raised, C1, and the condition codes left
/// undefined, then writes the unit back.
#[inline]
fn commit<X: Machine>(x: &mut X, mut s: X87, e: &Env, c1: bool, undefined: u16) -> Flow {
    check(&s, e)?;
    s.fsw = (s.fsw & !C1) | u16::from(e.flags) | if c1 { C1 } else { 0 };
    s.undefined = (s.undefined & !(C1 | undefined)) | undefined;
    *x.regs_mut().x87_mut() = s;
    Ok(())
}

/// The NaN an arithmetic operation returns: a QNaN operand over an SNaN,
/// else the larger significand, else the positive one; quieted.
fn nan(a: Num, b: Num) -> Num {
    let pick = match (a, b) {
        (Num::NaN { .. }, Num::NaN { .. }) if a.is_snan() != b.is_snan() => {
            if a.is_snan() {
                b
            } else {
                a
            }
        }
        (Num::NaN { frac: fa, neg: na }, Num::NaN { frac: fb, .. }) => {
            if fa > fb || (fa == fb && !na) {
                a
            } else {
                b
            }
        }
        (Num::NaN { .. }, _) => a,
        _ => b,
    };
    pick.quiet()
}

fn result(out: Out, a: Num, b: Num) -> u128 {
    match out {
        Out::Bits(v) => v,
        Out::PropagateNaN => float::pack_special(F80, nan(a, b)),
    }
}

/// The memory formats, by size in bytes.
const fn mem_format(w: usize) -> Format {
    if w == 4 {
        F32
    } else {
        F64
    }
}

/// Loads a `W`-byte operand (10: all of it, in two accesses).
#[inline]
fn load_mem<X: Machine, const W: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Result<u128, Stop> {
    let a = ea(x, i);
    if W == 10 {
        let mut b = [0u8; 16];
        r.mem_addr = a;
        x.mem().load_bytes(a, &mut b[..10])?;
        Ok(u128::from_le_bytes(b))
    } else {
        Ok(u128::from(load(x, r, a, W)?))
    }
}

#[inline]
fn store_mem<X: Machine, const W: usize>(x: &mut X, i: &Insn, r: &mut Retired, v: u128) -> Flow {
    let a = ea(x, i);
    if W == 10 {
        r.mem_addr = a;
        r.mem_write = true;
        Ok(x.mem().store_bytes(a, &v.to_le_bytes()[..10])?)
    } else {
        store(x, r, a, W, v as u64)
    }
}

/// fld m32fp / m64fp / m80fp (`W` bytes): pushes the value, converted to
/// double extended (m80 as it is).
pub(crate) fn fld_mem<X: Machine, const W: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let raw = load_mem::<X, W>(x, i, r)?;
    let mut s = begin(x)?;
    let mut e = env(&s);
    let v = if W == 10 {
        raw
    } else {
        let a = float::unpack(mem_format(W), raw, false);
        result(float::convert(&mut e, F80, a), a, a)
    };
    push(&mut s, reg_of(v))?;
    commit(x, s, &e, false, C0 | C2 | C3)
}

/// fld st(i): pushes a copy.
pub(crate) fn fld_st<X: Machine>(x: &mut X, i: &Insn, _r: &mut Retired) -> Flow {
    let mut s = begin(x)?;
    let v = get(&s, u32::from(i.op[0] - ST))?;
    push(&mut s, v)?;
    commit(x, s, &Env::new(0), false, C0 | C2 | C3)
}

/// fild m16int / m32int / m64int (`S` bytes): exact.
pub(crate) fn fild<X: Machine, const S: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let a = ea(x, i);
    let v = crate::flags::sext(load(x, r, a, S)?, S) as i64;
    let mut s = begin(x)?;
    let mut e = env(&s);
    let b = float::from_int(&mut e, F80, v);
    push(&mut s, reg_of(b))?;
    commit(x, s, &e, false, C0 | C2 | C3)
}

/// fldz (`ONE` false) and fld1.
pub(crate) fn fconst<X: Machine, const ONE: bool>(x: &mut X, _i: &Insn, _r: &mut Retired) -> Flow {
    let mut s = begin(x)?;
    let v = if ONE {
        Reg {
            mantissa: 1 << 63,
            sign_exponent: 0x3fff,
        }
    } else {
        Reg::default()
    };
    push(&mut s, v)?;
    commit(x, s, &Env::new(0), false, C0 | C2 | C3)
}

/// fst / fstp m32fp, m64fp (`W` bytes, rounded under the rounding control;
/// precision control does not apply) and fstp m80fp (as it is).
pub(crate) fn fst_mem<X: Machine, const W: usize, const POP: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let mut s = begin(x)?;
    let v = bits(get(&s, 0)?);
    let mut e = env(&s);
    let out = if W == 10 {
        v
    } else {
        let a = float::unpack(F80, v, false);
        let b = match float::convert(&mut e, mem_format(W), a) {
            Out::Bits(b) => b,
            Out::PropagateNaN => float::pack_special(mem_format(W), a.quiet()),
        };
        // A store reports no denormal operand (it may underflow).
        e.flags &= !float::DE;
        b
    };
    check(&s, &e)?;
    store_mem::<X, W>(x, i, r, out)?;
    if POP {
        pop(&mut s);
    }
    commit(x, s, &e, e.rounded_up, C0 | C2 | C3)
}

/// fst / fstp st(i): a copy of ST(0), tagged valid.
pub(crate) fn fst_st<X: Machine, const POP: bool>(x: &mut X, i: &Insn, _r: &mut Retired) -> Flow {
    let mut s = begin(x)?;
    let v = get(&s, 0)?;
    set(&mut s, u32::from(i.op[0] - ST), v);
    if POP {
        pop(&mut s);
    }
    commit(x, s, &Env::new(0), false, C0 | C2 | C3)
}

/// fist / fistp (`POP`) m16int, m32int, m64int (`S` bytes), rounded under
/// the rounding control, and fisttp (`TRUNC`): the integer indefinite with
/// IE when out of range.
pub(crate) fn fist<X: Machine, const S: usize, const POP: bool, const TRUNC: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let mut s = begin(x)?;
    let a = float::unpack(F80, bits(get(&s, 0)?), false);
    let mut e = env(&s);
    if TRUNC {
        e.rc = RZ;
    }
    let v = float::to_int(&mut e, a, S as u32 * 8);
    check(&s, &e)?;
    let a = ea(x, i);
    store(x, r, a, S, v)?;
    if POP {
        pop(&mut s);
    }
    let c1 = e.rounded_up && !TRUNC;
    commit(x, s, &e, c1, C0 | C2 | C3)
}

/// fxch st(i).
pub(crate) fn fxch<X: Machine>(x: &mut X, i: &Insn, _r: &mut Retired) -> Flow {
    let mut s = begin(x)?;
    let n = u32::from(i.op[1] - ST);
    let (a, b) = (get(&s, 0)?, get(&s, n)?);
    set(&mut s, 0, b);
    set(&mut s, n, a);
    commit(x, s, &Env::new(0), false, C0 | C2 | C3)
}

/// fchs (`ABS` false) and fabs: the sign bit alone, of any value.
pub(crate) fn fsign<X: Machine, const ABS: bool>(x: &mut X, _i: &Insn, _r: &mut Retired) -> Flow {
    let mut s = begin(x)?;
    let mut v = get(&s, 0)?;
    v.sign_exponent = if ABS {
        v.sign_exponent & 0x7fff
    } else {
        v.sign_exponent ^ 0x8000
    };
    set(&mut s, 0, v);
    commit(x, s, &Env::new(0), false, C0 | C2 | C3)
}

/// fprem: ST(0) becomes its partial remainder by ST(1) (see
/// [`float::remainder`]); C0, C3 and C1 take bits 2, 1 and 0 of the
/// quotient, or while the reduction is incomplete C2 is set and the
/// others cleared. A NaN result clears C1 and C2 and leaves C0 and C3 as
/// they were. (The manuals leave both cases unsaid; this is what the CPU
/// does, checked by tests/cpu.rs.)
pub(crate) fn fprem<X: Machine>(x: &mut X, _i: &Insn, _r: &mut Retired) -> Flow {
    let mut s = begin(x)?;
    let mut e = env(&s);
    let a = float::unpack(F80, bits(get(&s, 0)?), false);
    let b = float::unpack(F80, bits(get(&s, 1)?), false);
    let (out, quotient) = float::remainder(&mut e, a, b);
    set(&mut s, 0, reg_of(result(out, a, b)));
    let mut q0 = false;
    s.fsw &= !C2;
    s.undefined &= !C2;
    if let Some((q, complete)) = quotient {
        s.fsw &= !(C0 | C3);
        s.undefined &= !(C0 | C3);
        if complete {
            s.fsw |= if q & 4 != 0 { C0 } else { 0 } | if q & 2 != 0 { C3 } else { 0 };
            q0 = q & 1 != 0;
        } else {
            s.fsw |= C2;
        }
    }
    commit(x, s, &e, q0, 0)
}

/// Arithmetic, named by the mnemonic; the reversed forms swap operands.
pub(crate) const ADD: u8 = 0;
pub(crate) const SUB: u8 = 1;
pub(crate) const SUBR: u8 = 2;
pub(crate) const MUL: u8 = 3;
pub(crate) const DIV: u8 = 4;
pub(crate) const DIVR: u8 = 5;

/// `dst` OP `src` under precision control.
fn arith(e: &mut Env, fmt: Format, op: u8, dst: Num, src: Num) -> u128 {
    let out = match op {
        ADD => float::add(e, fmt, dst, src, false),
        SUB => float::add(e, fmt, dst, src, true),
        SUBR => float::add(e, fmt, src, dst, true),
        MUL => float::mul(e, fmt, dst, src),
        DIV => float::div(e, fmt, dst, src),
        _ => float::div(e, fmt, src, dst),
    };
    result(out, dst, src)
}

/// fadd, fsub, fsubr, fmul, fdiv, fdivr with an m32fp / m64fp operand,
/// and fiadd … fidivr with an m16int / m32int one (`INT`): ST(0) OP m.
pub(crate) fn arith_mem<X: Machine, const OP: u8, const W: usize, const INT: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let raw = load_mem::<X, W>(x, i, r)?;
    let mut s = begin(x)?;
    let fmt = arith_format(&s)?;
    let mut e = env(&s);
    let src = if INT {
        let v = crate::flags::sext(raw as u64, W) as i64;
        float::unpack(F80, float::from_int(&mut e, F80, v), false)
    } else {
        float::unpack(mem_format(W), raw, false)
    };
    let dst = float::unpack(F80, bits(get(&s, 0)?), false);
    let v = arith(&mut e, fmt, OP, dst, src);
    set(&mut s, 0, reg_of(v));
    commit(x, s, &e, e.rounded_up, C0 | C2 | C3)
}

/// The register forms: operand 0 = operand 0 OP operand 1, then a pop for
/// faddp and friends.
pub(crate) fn arith_st<X: Machine, const OP: u8, const POP: bool>(
    x: &mut X,
    i: &Insn,
    _r: &mut Retired,
) -> Flow {
    let mut s = begin(x)?;
    let fmt = arith_format(&s)?;
    let mut e = env(&s);
    let (d, n) = (u32::from(i.op[0] - ST), u32::from(i.op[1] - ST));
    let dst = float::unpack(F80, bits(get(&s, d)?), false);
    let src = float::unpack(F80, bits(get(&s, n)?), false);
    let v = arith(&mut e, fmt, OP, dst, src);
    set(&mut s, d, reg_of(v));
    if POP {
        pop(&mut s);
    }
    commit(x, s, &e, e.rounded_up, C0 | C2 | C3)
}

/// fucomi / fucomip (`SIGNALLING` false) and fcomi / fcomip: ZF, PF, CF
/// from comparing ST(0) with ST(i); OF, SF, AF cleared. Intel's manual
/// clears C1, AMD's Zen 5 keeps it: C1 is left undefined.
pub(crate) fn fcomi<X: Machine, const SIGNALLING: bool, const POP: bool>(
    x: &mut X,
    i: &Insn,
    _r: &mut Retired,
) -> Flow {
    let mut s = begin(x)?;
    let a = float::unpack(F80, bits(get(&s, 0)?), false);
    let b = float::unpack(F80, bits(get(&s, u32::from(i.op[1] - ST))?), false);
    let mut e = env(&s);
    let f = match float::compare(&mut e, a, b, SIGNALLING) {
        Order::Unordered => ZF | PF | CF,
        Order::Less => CF,
        Order::Equal => ZF,
        Order::Greater => 0,
    };
    if POP {
        pop(&mut s);
    }
    commit(x, s, &e, false, C1)?;
    let regs = x.regs_mut();
    regs.set_rflags((regs.rflags() & !STATUS) | f);
    regs.set_undefined(regs.undefined() & !STATUS);
    Ok(())
}

/// fcmovcc st(0), st(i) on condition `CC_` (a `flags::cc` code);
/// both registers must hold values.
pub(crate) fn fcmov<X: Machine, const CC_: u8>(x: &mut X, i: &Insn, _r: &mut Retired) -> Flow {
    super::defined(x, crate::flags::reads(CC_))?;
    let mut s = begin(x)?;
    get(&s, 0)?;
    let v = get(&s, u32::from(i.op[1] - ST))?;
    if crate::flags::holds(x.regs().rflags(), CC_) {
        set(&mut s, 0, v);
    }
    commit(x, s, &Env::new(0), false, CC)
}

/// fnstcw m2byte: no wait, no exception.
pub(crate) fn fnstcw<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let mut s = unit(x)?;
    let a = ea(x, i);
    store(x, r, a, 2, u64::from(s.fcw))?;
    s.undefined |= CC;
    *x.regs_mut().x87_mut() = s;
    Ok(())
}

/// fldcw m2byte. The unit keeps bits 0–5 and 8–12, and reads bit 6 as
/// one. A control word that unmasks an exception already flagged would
/// make it pending: a stop.
pub(crate) fn fldcw<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let a = ea(x, i);
    let v = load(x, r, a, 2)? as u16;
    let mut s = begin(x)?;
    let fcw = (v & 0x1f3f) | 0x40;
    if s.fsw & !fcw & 0x3f != 0 {
        return Err(Stop::Opaque);
    }
    s.fcw = fcw;
    s.undefined |= CC;
    *x.regs_mut().x87_mut() = s;
    Ok(())
}

/// fnstsw ax / m2byte: no wait; a condition code left undefined stops
/// with [`Stop::UnknownFlags`].
pub(crate) fn fnstsw<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let mut s = unit(x)?;
    if s.undefined & CC != 0 {
        return Err(Stop::UnknownFlags);
    }
    if i.op[0] == MEM {
        let a = ea(x, i);
        store(x, r, a, 2, u64::from(s.fsw))?;
    } else {
        set_sized::<X, 2>(x, usize::from(i.op[0]), u64::from(s.fsw));
    }
    s.undefined |= CC;
    *x.regs_mut().x87_mut() = s;
    Ok(())
}
