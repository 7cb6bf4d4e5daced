//! VEX floating point (AVX): the operations of `ssefp.rs` in their
//! three-operand VEX forms, as compilers emit them for all floating-point
//! code at `-march=x86-64-v3` and up.
//!
//! A scalar form computes element 0 from the low elements of its two
//! sources and copies bits 127:W·8 from the first source; a packed form
//! works on every element of 16 or 32 bytes. Both zero the register
//! above what they wrote, and neither requires memory alignment. MXCSR
//! is honoured as in `ssefp.rs`: an unmasked exception, or MXCSR unset,
//! stops with [`Stop::Opaque`] before anything is written.

use super::avx::{cut, elem, read, set_elem, write_reg, writemask};
use super::sse::read_v;
use super::ssefp::{checked, convert, element, env, format, lane, mxcsr};
use super::Flow;
use crate::float::{self, Env, Order, F32, F64, RZ};
use crate::insn::{Insn, KREG, MEM, SAE, VEC};
use crate::regs::Registers;
use crate::step::{Machine, Retired, Stop};

/// Writes a 128-bit result to vector register slot `o`, zero above.
fn put128<X: Machine>(x: &mut X, o: u8, v: u128) {
    let mut out = [0u64; 8];
    out[0] = v as u64;
    out[1] = (v >> 64) as u64;
    *x.regs_mut().vec_mut(usize::from(o - VEC)) = out;
}

/// The body of the scalar forms: element 0 of op[2] (`W` bytes, memory or
/// register) and of op[1] go to `f` under MXCSR.
fn scalar_with<X: Machine, const W: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
    f: impl FnOnce(&mut Env, u128, u128) -> u128,
) -> Flow {
    let b = read_v::<X, W, false>(x, i, i.op[2], r)?;
    let a = x.regs().xmm(usize::from(i.op[1] - VEC));
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    let y = f(&mut e, lane(a, W, 0), lane(b, W, 0));
    let m = checked(mxcsr, &e)?;
    let low = (1u128 << (W * 8)) - 1;
    put128(x, i.op[0], (a & !low) | y);
    x.regs_mut().set_mxcsr(m);
    Ok(())
}

/// The body of the packed forms: each `W`-byte element of op[1] and op[2]
/// (`N` bytes) go to `f`, under MXCSR or an EVEX static rounding control,
/// and an EVEX writemask (a disabled element is not computed, raises
/// nothing, and its memory is not read).
fn packed_with<X: Machine, const W: usize, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
    mut f: impl FnMut(&mut Env, u128, u128) -> u128,
) -> Flow {
    let m = writemask(x, i);
    let b = read::<X, N, false>(x, i, i.op[2], r, W, m)?;
    let a = read::<X, N, false>(x, i, i.op[1], r, W, m)?;
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    if let Some(rc) = i.static_rounding() {
        e.rc = rc;
    }
    let mut out = [0u64; 8];
    for k in (0..N / W).filter(|k| m >> k & 1 != 0) {
        let y = f(
            &mut e,
            u128::from(elem(&a, k, W)),
            u128::from(elem(&b, k, W)),
        );
        set_elem(&mut out, k, W, y as u64);
    }
    let mx = evex_checked(mxcsr, &e, i)?;
    write_reg(x, i, i.op[0], &out, N, W, m);
    x.regs_mut().set_mxcsr(mx);
    Ok(())
}

/// vaddss/sd, vsubs…, vmuls…, vdivs…, vmins…, vmaxs…, vsqrts….
pub(crate) fn scalar<X: Machine, const OP: u8, const W: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    scalar_with::<X, W>(x, i, r, |e, a, b| element::<OP>(e, format(W), a, b))
}

/// vaddps/pd, vsubp…, vmulp…, vdivp…, vminp…, vmaxp… of `N` bytes.
pub(crate) fn packed<X: Machine, const OP: u8, const W: usize, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    packed_with::<X, W, N>(x, i, r, |e, a, b| element::<OP>(e, format(W), a, b))
}

/// One VEX comparison predicate (imm8[4:0]) of `a` and `b`: all ones when
/// it holds. Predicates 16–31 are 0–15 with the signalling of QNaNs
/// inverted (Intel SDM vol. 2, CMPPD, table 3-1).
fn predicate(e: &mut Env, w: usize, pred: u64, a: u128, b: u128) -> u128 {
    let a = float::unpack(format(w), a, e.daz);
    let b = float::unpack(format(w), b, e.daz);
    let signals = matches!(pred & 15, 1 | 2 | 5 | 6 | 9 | 10 | 13 | 14) != (pred & 16 != 0);
    let o = float::compare(e, a, b, signals);
    let (lt, eq, gt, un) = (
        o == Order::Less,
        o == Order::Equal,
        o == Order::Greater,
        o == Order::Unordered,
    );
    let t = match pred & 15 {
        0 => eq,
        1 => lt,
        2 => lt || eq,
        3 => un,
        4 => !eq,
        5 => !lt,
        6 => !(lt || eq),
        7 => !un,
        8 => eq || un,
        9 => lt || un,
        10 => lt || eq || un,
        11 => false,
        12 => lt || gt,
        13 => gt || eq,
        14 => gt,
        _ => true,
    };
    if t {
        (1u128 << (w * 8)) - 1
    } else {
        0
    }
}

/// vcmpss/sd xmm1, xmm2, xmm3/m, imm8.
pub(crate) fn cmp_scalar<X: Machine, const W: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let pred = i.imm & 31;
    scalar_with::<X, W>(x, i, r, |e, a, b| predicate(e, W, pred, a, b))
}

/// vcmpps/pd of `N` bytes.
pub(crate) fn cmp_packed<X: Machine, const W: usize, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let pred = i.imm & 31;
    packed_with::<X, W, N>(x, i, r, |e, a, b| predicate(e, W, pred, a, b))
}

/// vcvtsi2ss/sd xmm1, xmm2, r/m32 or r/m64 (`S` bytes).
pub(crate) fn from_int<X: Machine, const W: usize, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let v = super::read::<X, S>(x, i, i.op[2], r)?;
    let v = if S == 4 {
        i64::from(v as u32 as i32)
    } else {
        v as i64
    };
    let a = x.regs().xmm(usize::from(i.op[1] - VEC));
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    let y = float::from_int(&mut e, format(W), v);
    let m = checked(mxcsr, &e)?;
    let low = (1u128 << (W * 8)) - 1;
    put128(x, i.op[0], (a & !low) | y);
    x.regs_mut().set_mxcsr(m);
    Ok(())
}

/// vcvtss2sd (`W` = 4) and vcvtsd2ss (`W` = 8) xmm1, xmm2, xmm3/m.
pub(crate) fn convert_scalar<X: Machine, const W: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let b = read_v::<X, W, false>(x, i, i.op[2], r)?;
    let a = x.regs().xmm(usize::from(i.op[1] - VEC));
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    let to = if W == 4 { 8 } else { 4 };
    let y = convert(&mut e, format(W), format(to), lane(b, W, 0));
    let m = checked(mxcsr, &e)?;
    let low = (1u128 << (to * 8)) - 1;
    put128(x, i.op[0], (a & !low) | y);
    x.regs_mut().set_mxcsr(m);
    Ok(())
}

/// Packed conversions (VEX), named by their mnemonic.
pub(crate) const DQ2PS: u8 = 0;
pub(crate) const TPS2DQ: u8 = 1;
pub(crate) const PS2DQ: u8 = 2;
pub(crate) const TPD2DQ: u8 = 3;
pub(crate) const PD2DQ: u8 = 4;
pub(crate) const PD2PS: u8 = 5;
pub(crate) const DQ2PD: u8 = 6;
pub(crate) const PS2PD: u8 = 7;
/// EVEX only: unsigned doublewords to singles.
pub(crate) const UDQ2PS: u8 = 8;

/// vcvtdq2ps, vcvt(t)ps2dq (`N` bytes in and out), vcvt(t)pd2dq and
/// vcvtpd2ps (`N` bytes in, `N`/2 out), vcvtdq2pd and vcvtps2pd (`N`/2 in,
/// `N` out); VEX, or EVEX with a writemask (mask bit k governs source and
/// destination element k), a broadcast source, {sae} or static rounding.
pub(crate) fn convert_packed<X: Machine, const OP: u8, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = writemask(x, i);
    // Source and destination element sizes, and the element count.
    let (se, de, count) = match OP {
        DQ2PS | TPS2DQ | PS2DQ | UDQ2PS => (4, 4, N / 4),
        TPD2DQ | PD2DQ | PD2PS => (8, 4, N / 8),
        _ => (4, 8, N / 8),
    };
    let src = match (OP, N) {
        (DQ2PD | PS2PD, 16) => read::<X, 8, false>(x, i, i.op[1], r, se, m)?,
        (DQ2PD | PS2PD, 32) => read::<X, 16, false>(x, i, i.op[1], r, se, m)?,
        (DQ2PD | PS2PD, _) => read::<X, 32, false>(x, i, i.op[1], r, se, m)?,
        _ => read::<X, N, false>(x, i, i.op[1], r, se, m)?,
    };
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    if let Some(rc) = i.static_rounding() {
        e.rc = rc;
    }
    if matches!(OP, TPS2DQ | TPD2DQ) {
        e.rc = RZ;
    }
    let mut out = [0u64; 8];
    let daz = e.daz;
    for k in (0..count).filter(|k| m >> k & 1 != 0) {
        let v = u128::from(elem(&src, k, se));
        let y = match OP {
            DQ2PS => float::from_int(&mut e, F32, i64::from(v as u32 as i32)) as u64,
            UDQ2PS => float::from_int(&mut e, F32, i64::from(v as u32)) as u64,
            DQ2PD => float::from_int(&mut e, F64, i64::from(v as u32 as i32)) as u64,
            TPS2DQ | PS2DQ => float::to_int(&mut e, float::unpack(F32, v, daz), 32),
            TPD2DQ | PD2DQ => float::to_int(&mut e, float::unpack(F64, v, daz), 32),
            PD2PS => convert(&mut e, F64, F32, v) as u64,
            _ => convert(&mut e, F32, F64, v) as u64,
        };
        set_elem(&mut out, k, de, y);
    }
    let mx = evex_checked(mxcsr, &e, i)?;
    write_reg(x, i, i.op[0], &out, count * de, de, m);
    x.regs_mut().set_mxcsr(mx);
    Ok(())
}

/// vshufpd (`N` bytes): per lane, the low element from the first source
/// and the high one from the second, each picked by one imm8 bit.
pub(crate) fn shufpd<X: Machine, const N: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let b = read::<X, N, false>(x, i, i.op[2], r, 8, u64::MAX)?;
    let a = read::<X, N, false>(x, i, i.op[1], r, 8, u64::MAX)?;
    let mut out = [0u64; 8];
    for k in 0..N / 8 {
        let (lane, src) = (k & !1, if k % 2 == 0 { &a } else { &b });
        out[k] = src[lane + (i.imm >> k & 1) as usize];
    }
    write_reg(x, i, i.op[0], &out, N, 8, u64::MAX);
    Ok(())
}

/// Fused multiply-add kinds: the product and the addend negated or not.
pub(crate) const FMADD: u8 = 0;
pub(crate) const FMSUB: u8 = 1;
pub(crate) const FNMADD: u8 = 2;
pub(crate) const FNMSUB: u8 = 3;

/// vfmadd/vfmsub/vfnmadd/vfnmsub 132, 213 and 231 (`ORDER`), on the low
/// `W`-byte element when `SCALAR` (bits 127:W·8 of the destination kept)
/// or on every element of `N` bytes (VEX, or EVEX under a writemask, with
/// a broadcast source or static rounding); one rounding. With operands 1, 2, 3
/// (the destination first), 132 computes 1·3 + 2, 213 2·1 + 3 and 231
/// 2·3 + 1; a NaN operand gives the first NaN of the two factors and
/// then the addend, quieted (measured: not the operand order).
pub(crate) fn fma<
    X: Machine,
    const KIND: u8,
    const ORDER: u16,
    const W: usize,
    const N: usize,
    const SCALAR: bool,
>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = if SCALAR { u64::MAX } else { writemask(x, i) };
    let s3 = if SCALAR {
        let v = read_v::<X, W, false>(x, i, i.op[2], r)?;
        [v as u64, (v >> 64) as u64, 0, 0, 0, 0, 0, 0]
    } else {
        read::<X, N, false>(x, i, i.op[2], r, W, m)?
    };
    let s2 = *x.regs().vec(usize::from(i.op[1] - VEC));
    let s1 = *x.regs().vec(usize::from(i.op[0] - VEC));
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    if let Some(rc) = i.static_rounding() {
        e.rc = rc;
    }
    let fmt = format(W);
    let count = if SCALAR { 1 } else { N / W };
    let (neg_product, neg_addend) = (
        matches!(KIND, FNMADD | FNMSUB),
        matches!(KIND, FMSUB | FNMSUB),
    );
    let mut out = cut(s1, if SCALAR { 16 } else { N });
    for k in (0..count).filter(|k| m >> k & 1 != 0) {
        let [v1, v2, v3] = [&s1, &s2, &s3].map(|v| u128::from(elem(v, k, W)));
        let (p, q, a) = match ORDER {
            132 => (v1, v3, v2),
            213 => (v2, v1, v3),
            _ => (v2, v3, v1),
        };
        let nums = [p, q, a].map(|v| float::unpack(fmt, v, e.daz));
        let y = match float::fma(&mut e, fmt, nums, neg_product, neg_addend) {
            float::Out::Bits(v) => v,
            float::Out::PropagateNaN => {
                let first = [p, q, a]
                    .map(|v| float::unpack(fmt, v, e.daz))
                    .into_iter()
                    .find(|n| n.is_nan())
                    .unwrap_or(float::Num::INDEFINITE);
                float::pack_special(fmt, first.quiet())
            }
        };
        set_elem(&mut out, k, W, y as u64);
    }
    let mx = evex_checked(mxcsr, &e, i)?;
    if SCALAR {
        *x.regs_mut().vec_mut(usize::from(i.op[0] - VEC)) = out;
    } else {
        write_reg(x, i, i.op[0], &out, N, W, m);
    }
    x.regs_mut().set_mxcsr(mx);
    Ok(())
}

/// MXCSR after an EVEX operation raised `e`: unchanged under {sae} or a
/// static rounding control, else as [`checked`] has it.
fn evex_checked(mxcsr: u32, e: &Env, i: &Insn) -> Result<u32, Stop> {
    if i.vflags & SAE != 0 {
        if e.opaque {
            return Err(Stop::Opaque);
        }
        return Ok(mxcsr);
    }
    checked(mxcsr, e)
}

/// vcmpss/sd k1{k2}, xmm, xmm/m, imm8 (EVEX, optionally {sae}): bit 0 of
/// k1 is the predicate on the low elements ANDed with the writemask, the
/// other bits zero. A masked-off memory element is not read.
pub(crate) fn cmp_scalar_k<X: Machine, const W: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = writemask(x, i) & 1;
    let b = if i.op[2] == MEM && m == 0 {
        r.mem_addr = super::ea(x, i);
        0
    } else {
        read_v::<X, W, false>(x, i, i.op[2], r)?
    };
    let a = x.regs().xmm(usize::from(i.op[1] - VEC));
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    let bit = if m != 0 {
        u64::from(predicate(&mut e, W, i.imm & 31, lane(a, W, 0), lane(b, W, 0)) != 0)
    } else {
        0
    };
    let mx = evex_checked(mxcsr, &e, i)?;
    x.regs_mut().set_k(usize::from(i.op[0] - KREG), bit);
    x.regs_mut().set_mxcsr(mx);
    Ok(())
}

/// vcvtusi2ss/sd xmm1, xmm2, r/m32 or r/m64 (`S` bytes; EVEX, optionally
/// with a static rounding control): the unsigned integer into the low
/// element, bits 127:W·8 from xmm2.
pub(crate) fn from_uint<X: Machine, const W: usize, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let v = super::read::<X, S>(x, i, i.op[2], r)?;
    let a = x.regs().xmm(usize::from(i.op[1] - VEC));
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    if let Some(rc) = i.static_rounding() {
        e.rc = rc;
    }
    let y = if v == 0 {
        0
    } else {
        float::round(&mut e, format(W), false, 0, u128::from(v))
    };
    let m = evex_checked(mxcsr, &e, i)?;
    let low = (1u128 << (W * 8)) - 1;
    put128(x, i.op[0], (a & !low) | y);
    x.regs_mut().set_mxcsr(m);
    Ok(())
}

/// vcmpps/pd k1{k2}, src1, src2/m/bcst, imm8 (EVEX, `N` bytes, optionally
/// {sae}): mask bit k is the predicate on element k, ANDed with the
/// writemask; disabled elements are not compared (nor their memory read).
pub(crate) fn cmp_packed_k<X: Machine, const W: usize, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = writemask(x, i);
    let b = read::<X, N, false>(x, i, i.op[2], r, W, m)?;
    let a = read::<X, N, false>(x, i, i.op[1], r, W, m)?;
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    let mut k = 0u64;
    for n in (0..N / W).filter(|n| m >> n & 1 != 0) {
        let (p, q) = (u128::from(elem(&a, n, W)), u128::from(elem(&b, n, W)));
        k |= u64::from(predicate(&mut e, W, i.imm & 31, p, q) != 0) << n;
    }
    let mx = evex_checked(mxcsr, &e, i)?;
    x.regs_mut().set_k(usize::from(i.op[0] - KREG), k);
    x.regs_mut().set_mxcsr(mx);
    Ok(())
}

/// vcvt(t)ss2usi and vcvt(t)sd2usi r32/r64 (`S` bytes), xmm/m (EVEX,
/// optionally {sae} or static rounding): the low element as an unsigned
/// integer, truncated when `TRUNC`.
pub(crate) fn to_uint<X: Machine, const W: usize, const S: usize, const TRUNC: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let src = read_v::<X, W, false>(x, i, i.op[1], r)?;
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    if let Some(rc) = i.static_rounding() {
        e.rc = rc;
    }
    if TRUNC {
        e.rc = RZ;
    }
    let a = float::unpack(format(W), lane(src, W, 0), e.daz);
    let v = float::to_uint(&mut e, a, S as u32 * 8);
    let m = evex_checked(mxcsr, &e, i)?;
    super::set_sized::<X, S>(x, usize::from(i.op[0]), v);
    x.regs_mut().set_mxcsr(m);
    Ok(())
}
