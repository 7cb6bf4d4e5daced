//! VEX and EVEX vector instructions: the AVX2/AVX-512 integer subset that
//! glibc's string and memory functions run on AVX-512 machines
//! (`__strlen_evex`, `__memmove_avx512_unaligned_erms`, …).
//!
//! A VEX or EVEX instruction writing a vector register zeroes it above the
//! operation's length, up to bit 511. Under an EVEX writemask, each element
//! whose mask bit is clear keeps the destination's element (or becomes zero
//! with {z}); a disabled element of a memory operand is not accessed at all,
//! so it cannot fault, as on the CPU (loads, stores, and the memory source
//! of arithmetic and of comparisons into a mask register alike).

use super::{ea, reg, set_sized, Flow};
use crate::flags::{low_bits as elements, mask};
use crate::insn::{Insn, BROADCAST, KREG, MEM, VEC, ZEROING};
use crate::mem::Memory;
use crate::regs::Registers;
use crate::step::{Machine, Retired, Stop};

/// A vector value: eight 64-bit lanes, lane 0 lowest.
pub(crate) type V = [u64; 8];

/// Element `k` of `e` bytes.
#[inline(always)]
pub(super) fn elem(v: &V, k: usize, e: usize) -> u64 {
    let bit = k * e * 8;
    (v[bit / 64] >> (bit % 64)) & mask(e)
}

#[inline(always)]
pub(super) fn set_elem(v: &mut V, k: usize, e: usize, value: u64) {
    let bit = k * e * 8;
    let sh = bit % 64;
    let lane = &mut v[bit / 64];
    *lane = (*lane & !(mask(e) << sh)) | ((value & mask(e)) << sh);
}

/// `v` cut to `n` bytes (zero above).
#[inline(always)]
pub(super) fn cut(mut v: V, n: usize) -> V {
    if n % 8 != 0 {
        v[n / 8] &= (1u64 << (n % 8 * 8)) - 1;
    }
    for lane in &mut v[n.div_ceil(8)..] {
        *lane = 0;
    }
    v
}

fn to_bytes(v: &V) -> [u8; 64] {
    let mut b = [0u8; 64];
    for (chunk, lane) in b.chunks_exact_mut(8).zip(v) {
        chunk.copy_from_slice(&lane.to_le_bytes());
    }
    b
}

pub(super) fn from_bytes(b: &[u8; 64]) -> V {
    let mut v = [0u64; 8];
    for (lane, chunk) in v.iter_mut().zip(b.chunks_exact(8)) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        *lane = u64::from_le_bytes(w);
    }
    v
}

/// The writemask: the selected k register, or all ones without one.
#[inline(always)]
pub(super) fn writemask<X: Machine>(x: &X, i: &Insn) -> u64 {
    if i.kmask == 0 {
        u64::MAX
    } else {
        x.regs().k(usize::from(i.kmask))
    }
}

/// Whether every one of `count` elements is enabled.
#[inline(always)]
pub(super) fn all(m: u64, count: usize) -> bool {
    m & elements(count) == elements(count)
}

/// Whether any of `count` elements is enabled. A misaligned aligned move
/// whose elements are all disabled does not fault (measured on Zen 5).
#[inline(always)]
pub(super) fn any(m: u64, count: usize) -> bool {
    m & elements(count) != 0
}

/// Reads `n` bytes of memory at `a` into a vector (zero above), only the
/// elements of `e` bytes enabled in `m` (the others read as zero and are
/// not accessed).
pub(super) fn load_masked<X: Machine>(
    x: &mut X,
    a: u64,
    n: usize,
    e: usize,
    m: u64,
) -> Result<V, Stop> {
    let count = n / e;
    let mut b = [0u8; 64];
    if all(m, count) {
        x.mem().load_bytes(a, &mut b[..n])?;
        return Ok(from_bytes(&b));
    }
    let mut k = 0;
    while k < count {
        if m >> k & 1 == 0 {
            k += 1;
            continue;
        }
        let start = k;
        while k < count && m >> k & 1 != 0 {
            k += 1;
        }
        let (lo, hi) = (start * e, k * e);
        x.mem().load_bytes(a + lo as u64, &mut b[lo..hi])?;
    }
    Ok(from_bytes(&b))
}

/// Writes the elements of `v` enabled in `m` to memory at `a`, all or
/// nothing: enabled elements that are not contiguous are written as one
/// read-modify-write of the span from the first to the last (the disabled
/// bytes inside it written back unchanged), so that a store that fails
/// has written nothing.
pub(super) fn store_masked<X: Machine>(
    x: &mut X,
    a: u64,
    v: &V,
    n: usize,
    e: usize,
    m: u64,
) -> Flow {
    let m = m & elements(n / e);
    if m == 0 {
        return Ok(());
    }
    let (first, last) = (m.trailing_zeros() as usize, 63 - m.leading_zeros() as usize);
    let (lo, hi) = (first * e, (last + 1) * e);
    let mut b = to_bytes(v);
    let span = elements(last + 1) & !elements(first);
    if m != span {
        let mut old = [0u8; 64];
        x.mem().load_bytes(a + lo as u64, &mut old[lo..hi])?;
        for k in first..=last {
            if m >> k & 1 == 0 {
                b[k * e..(k + 1) * e].copy_from_slice(&old[k * e..(k + 1) * e]);
            }
        }
    }
    Ok(x.mem().store_bytes(a + lo as u64, &b[lo..hi])?)
}

/// Reads vector operand slot `o` as `N` bytes: a vector register, memory
/// (16-, 32- or 64-byte aligned if `ALIGNED`), or under EVEX {1toN} one
/// `e`-byte element repeated. Memory elements disabled in `m` are not read.
pub(super) fn read<X: Machine, const N: usize, const ALIGNED: bool>(
    x: &mut X,
    i: &Insn,
    o: u8,
    r: &mut Retired,
    e: usize,
    m: u64,
) -> Result<V, Stop> {
    if o != MEM {
        return Ok(cut(*x.regs().vec(usize::from(o - VEC)), N));
    }
    let a = ea(x, i);
    r.mem_addr = a;
    if i.vflags & BROADCAST != 0 {
        if !any(m, N / e) {
            return Ok([0; 8]);
        }
        let one = x.mem().load(a, e)?;
        let mut v = [0u64; 8];
        for k in 0..N / e {
            set_elem(&mut v, k, e, one);
        }
        return Ok(v);
    }
    if ALIGNED && a % N as u64 != 0 && any(m, N / e) {
        return Err(Stop::Fault {
            addr: a,
            write: false,
        });
    }
    load_masked(x, a, N, e, m)
}

/// Writes an `n`-byte result to vector register slot `o`: elements of `e`
/// bytes disabled in `m` keep the old value (or zero under {z}); all bits
/// above `n` bytes are zeroed.
pub(super) fn write_reg<X: Machine>(
    x: &mut X,
    i: &Insn,
    o: u8,
    new: &V,
    n: usize,
    e: usize,
    m: u64,
) {
    let count = n / e;
    let dest = x.regs_mut().vec_mut(usize::from(o - VEC));
    if all(m, count) {
        *dest = cut(*new, n);
        return;
    }
    let old = *dest;
    let mut out = [0u64; 8];
    for k in 0..count {
        let v = if m >> k & 1 != 0 {
            elem(new, k, e)
        } else if i.vflags & ZEROING != 0 {
            0
        } else {
            elem(&old, k, e)
        };
        set_elem(&mut out, k, e, v);
    }
    *dest = out;
}

/// Vector moves, VEX and EVEX, loads, stores and register copies, of `N`
/// bytes in `E`-byte elements (the writemask's granularity); `ALIGNED`
/// for vmovdqa/vmovdqa64/vmovntdq.
pub(crate) fn mov<X: Machine, const N: usize, const E: usize, const ALIGNED: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = writemask(x, i);
    if i.op[0] == MEM {
        let v = *x.regs().vec(usize::from(i.op[1] - VEC));
        let a = ea(x, i);
        r.mem_addr = a;
        r.mem_write = true;
        if ALIGNED && a % N as u64 != 0 && any(m, N / E) {
            return Err(Stop::Fault {
                addr: a,
                write: true,
            });
        }
        return store_masked(x, a, &v, N, E, m);
    }
    let v = read::<X, N, ALIGNED>(x, i, i.op[1], r, E, m)?;
    write_reg(x, i, i.op[0], &v, N, E, m);
    Ok(())
}

/// vmovd / vmovq (`N` = 4 / 8): to an xmm register (zero-extended to 512
/// bits), to a general-purpose register, or to memory.
pub(crate) fn mov_low<X: Machine, const N: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let o = i.op[1];
    let v = if o == MEM {
        let a = ea(x, i);
        super::load(x, r, a, N)?
    } else if o < 16 {
        reg(x, usize::from(o)) & mask(N)
    } else {
        x.regs().vec(usize::from(o - VEC))[0] & mask(N)
    };
    let d = i.op[0];
    if d == MEM {
        let a = ea(x, i);
        super::store(x, r, a, N, v)
    } else if d < 16 {
        set_sized::<X, N>(x, usize::from(d), v);
        Ok(())
    } else {
        let mut out = [0u64; 8];
        out[0] = v;
        *x.regs_mut().vec_mut(usize::from(d - VEC)) = out;
        Ok(())
    }
}

/// Element-wise operations, named by their mnemonic. The bitwise ones
/// (`PAND`, `PANDN`, `POR`, `PXORQ`) serve VEX's vpand/vpandn/vpor/vpxor
/// too, whose element size nothing observes.
pub(crate) mod op {
    pub(crate) const PADDB: u8 = 0;
    pub(crate) const PSUBB: u8 = 1;
    pub(crate) const PMINUB: u8 = 2;
    pub(crate) const PMINUD: u8 = 3;
    pub(crate) const PXORD: u8 = 4;
    pub(crate) const PXORQ: u8 = 5;
    pub(crate) const PAND: u8 = 6;
    pub(crate) const PANDN: u8 = 7;
    pub(crate) const POR: u8 = 8;
    /// vpcmpeqb/d, vpcmpgtb into a vector: all ones where true.
    pub(crate) const PCMPEQB: u8 = 9;
    pub(crate) const PCMPEQD: u8 = 10;
    pub(crate) const PCMPGTB: u8 = 11;
    pub(crate) const PADDD: u8 = 12;
    pub(crate) const PADDQ: u8 = 13;
    pub(crate) const PSUBD: u8 = 14;
    pub(crate) const PSUBQ: u8 = 15;
    pub(crate) const PMAXSW: u8 = 16;
    /// The low doublewords of each quadword multiplied, unsigned.
    pub(crate) const PMULUDQ: u8 = 17;
    pub(crate) const PCMPGTD: u8 = 18;
    pub(crate) const PMULLQ: u8 = 19;
    /// vpsrlvd: each doubleword shifted by its own count; zero from 32.
    pub(crate) const PSRLVD: u8 = 20;
    pub(crate) const PADDW: u8 = 21;
    pub(crate) const PSUBW: u8 = 22;
    pub(crate) const PMULLD: u8 = 23;
    pub(crate) const PMAXSD: u8 = 24;
    pub(crate) const PMINSD: u8 = 25;
    pub(crate) const PMAXUB: u8 = 26;
    pub(crate) const PCMPEQQ: u8 = 27;
    pub(crate) const PCMPGTQ: u8 = 28;
    pub(crate) const PSLLVD: u8 = 29;
    pub(crate) const PAVGB: u8 = 30;
    /// The high words of the signed products.
    pub(crate) const PMULHW: u8 = 31;
    pub(crate) const PMINSB: u8 = 32;
    pub(crate) const PANDD: u8 = 33;
}

/// Element size of an element-wise operation.
const fn elem_size(o: u8) -> usize {
    match o {
        op::PADDB | op::PSUBB | op::PMINUB | op::PCMPEQB | op::PCMPGTB | op::PMAXUB => 1,
        op::PAVGB | op::PMINSB => 1,
        op::PMAXSW | op::PADDW | op::PSUBW | op::PMULHW => 2,
        op::PANDD => 4,
        op::PMINUD | op::PXORD | op::PCMPEQD | op::PADDD | op::PSUBD | op::PCMPGTD => 4,
        op::PSRLVD | op::PSLLVD | op::PMULLD | op::PMAXSD | op::PMINSD => 4,
        _ => 8,
    }
}

/// dst = src1 OP src2 element-wise (`N` bytes), src2 possibly memory or a
/// broadcast, under the writemask.
pub(crate) fn binary<X: Machine, const OP: u8, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let e = elem_size(OP);
    let m = writemask(x, i);
    let b = read::<X, N, false>(x, i, i.op[2], r, e, m)?;
    let a = read::<X, N, false>(x, i, i.op[1], r, e, m)?;
    let mut out = [0u64; 8];
    for k in 0..N / e {
        let (p, q) = (elem(&a, k, e), elem(&b, k, e));
        let v = match OP {
            op::PADDB => p.wrapping_add(q),
            op::PSUBB => p.wrapping_sub(q),
            op::PMINUB | op::PMINUD => p.min(q),
            op::PAND | op::PANDD => p & q,
            op::PAVGB => (p + q + 1) >> 1,
            op::PMULHW => ((i64::from(p as i16) * i64::from(q as i16)) >> 16) as u64,
            op::PMINSB => (p as i8).min(q as i8) as u64,
            op::PANDN => !p & q,
            op::POR => p | q,
            op::PCMPEQB | op::PCMPEQD => all_ones(p == q),
            op::PCMPGTB => all_ones(p as i8 > q as i8),
            op::PADDW | op::PADDD | op::PADDQ => p.wrapping_add(q),
            op::PSUBW | op::PSUBD | op::PSUBQ => p.wrapping_sub(q),
            op::PMAXSW => (p as i16).max(q as i16) as u64,
            op::PMAXSD => (p as i32).max(q as i32) as u64,
            op::PMINSD => (p as i32).min(q as i32) as u64,
            op::PMAXUB => p.max(q),
            op::PMULUDQ => (p & 0xffff_ffff) * (q & 0xffff_ffff),
            op::PMULLD | op::PMULLQ => p.wrapping_mul(q),
            op::PCMPGTD => all_ones(p as i32 > q as i32),
            op::PCMPEQQ => all_ones(p == q),
            op::PCMPGTQ => all_ones(p as i64 > q as i64),
            op::PSRLVD => p.checked_shr(q as u32).filter(|_| q < 32).unwrap_or(0),
            op::PSLLVD => p.checked_shl(q as u32).filter(|_| q < 32).unwrap_or(0),
            _ => p ^ q,
        };
        set_elem(&mut out, k, e, v);
    }
    write_reg(x, i, i.op[0], &out, N, e, m);
    Ok(())
}

/// An element of all ones (a true comparison) or zeros; `set_elem` cuts
/// it to the element's size.
#[inline(always)]
pub(super) fn all_ones(c: bool) -> u64 {
    if c {
        u64::MAX
    } else {
        0
    }
}

/// vpternlogd: each result bit is bit (a·4 + b·2 + c) of imm8, where a is
/// the destination's bit and b, c the sources'.
pub(crate) fn ternlog<X: Machine, const N: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let m = writemask(x, i);
    let c = read::<X, N, false>(x, i, i.op[2], r, 4, m)?;
    let b = read::<X, N, false>(x, i, i.op[1], r, 4, u64::MAX)?;
    let a = read::<X, N, false>(x, i, i.op[0], r, 4, u64::MAX)?;
    let imm = i.imm as u8;
    let mut out = [0u64; 8];
    for (l, o) in out.iter_mut().enumerate() {
        for (t, set) in (0..8u64).map(|t| (t, imm >> t & 1 != 0)) {
            if !set {
                continue;
            }
            let pick = |v: u64, bit: u64| if t & bit != 0 { v } else { !v };
            *o |= pick(a[l], 4) & pick(b[l], 2) & pick(c[l], 1);
        }
    }
    write_reg(x, i, i.op[0], &out, N, 4, m);
    Ok(())
}

/// Comparisons into a mask register.
pub(crate) mod cmp {
    /// vpcmpb/vpcmpub/vpcmpd/vpcmpud: the predicate is imm8.
    pub(crate) const CMPB: u8 = 0;
    pub(crate) const CMPUB: u8 = 1;
    pub(crate) const CMPD: u8 = 2;
    pub(crate) const CMPUD: u8 = 3;
    /// vpcmpeqb k: equality.
    pub(crate) const EQB: u8 = 4;
    /// vptestm / vptestnm: (a AND b) != 0, == 0.
    pub(crate) const TESTMB: u8 = 5;
    pub(crate) const TESTNMB: u8 = 6;
    pub(crate) const TESTMD: u8 = 7;
    pub(crate) const TESTNMD: u8 = 8;
    /// vpcmpeqd k: equality of doublewords.
    pub(crate) const EQD: u8 = 9;
    /// vpcmpgtd k: signed greater-than of doublewords.
    pub(crate) const GTD: u8 = 10;
}

/// k = compare(src1, src2) element-wise (`N` bytes), ANDed with the
/// writemask; bits above the element count zero.
pub(crate) fn compare<X: Machine, const OP: u8, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    use cmp::*;
    let e = match OP {
        CMPD | CMPUD | TESTMD | TESTNMD | EQD | GTD => 4,
        _ => 1,
    };
    let m = writemask(x, i);
    let b = read::<X, N, false>(x, i, i.op[2], r, e, m)?;
    let a = read::<X, N, false>(x, i, i.op[1], r, e, m)?;
    let pred = i.imm & 7;
    let signed = matches!(OP, CMPB | CMPD);
    let mut k = 0u64;
    for n in 0..N / e {
        let (p, q) = (elem(&a, n, e), elem(&b, n, e));
        let (sp, sq) = (
            crate::flags::sext(p, e) as i64,
            crate::flags::sext(q, e) as i64,
        );
        let lt = if signed { sp < sq } else { p < q };
        let bit = match OP {
            EQB | EQD => p == q,
            GTD => sp > sq,
            TESTMB | TESTMD => p & q != 0,
            TESTNMB | TESTNMD => p & q == 0,
            _ => match pred {
                0 => p == q,
                1 => lt,
                2 => lt || p == q,
                3 => false,
                4 => p != q,
                5 => !lt,
                6 => !lt && p != q,
                _ => true,
            },
        };
        k |= u64::from(bit) << n;
    }
    x.regs_mut().set_k(usize::from(i.op[0] - KREG), k & m);
    Ok(())
}

/// vpbroadcastb/d (`E` = 1/4) from a general-purpose register, an xmm
/// register or memory, to `N` bytes under the writemask.
pub(crate) fn broadcast<X: Machine, const E: usize, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = writemask(x, i);
    let o = i.op[1];
    let one = if o == MEM {
        let a = ea(x, i);
        super::load(x, r, a, E)?
    } else if o < 16 {
        reg(x, usize::from(o))
    } else {
        x.regs().vec(usize::from(o - VEC))[0]
    };
    let mut v = [0u64; 8];
    for k in 0..N / E {
        set_elem(&mut v, k, E, one);
    }
    write_reg(x, i, i.op[0], &v, N, E, m);
    Ok(())
}

/// vpmovmskb r32, xmm/ymm (`N` = 16/32): the byte sign bits, the
/// register written whole (zero-extended).
pub(crate) fn pmovmskb<X: Machine, const N: usize>(x: &mut X, i: &Insn, _r: &mut Retired) -> Flow {
    let v = cut(*x.regs().vec(usize::from(i.op[1] - VEC)), N);
    let m = (0..N).fold(0u64, |m, k| m | (elem(&v, k, 1) >> 7) << k);
    super::set_reg(x, usize::from(i.op[0]), m);
    Ok(())
}

/// vpshufb (`N` bytes): within each 128-bit lane, byte j of the result is
/// byte (b[j] & 15) of that lane of a, or zero when bit 7 of b[j] is set.
pub(crate) fn pshufb<X: Machine, const N: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let b = read::<X, N, false>(x, i, i.op[2], r, 1, u64::MAX)?;
    let a = read::<X, N, false>(x, i, i.op[1], r, 1, u64::MAX)?;
    let mut out = [0u64; 8];
    for j in 0..N {
        let sel = elem(&b, j, 1);
        if sel & 0x80 == 0 {
            set_elem(&mut out, j, 1, elem(&a, j & !15 | (sel as usize & 15), 1));
        }
    }
    write_reg(x, i, i.op[0], &out, N, 1, u64::MAX);
    Ok(())
}

/// vzeroall: zmm0–15 become zero (zmm16–31 are kept).
pub(crate) fn zeroall<X: Machine>(x: &mut X, _i: &Insn, _r: &mut Retired) -> Flow {
    for n in 0..16 {
        *x.regs_mut().vec_mut(n) = [0; 8];
    }
    Ok(())
}

/// vzeroupper: bits 128–511 of zmm0–15 become zero.
pub(crate) fn zeroupper<X: Machine>(x: &mut X, _i: &Insn, _r: &mut Retired) -> Flow {
    for n in 0..16 {
        let v = x.regs_mut().vec_mut(n);
        for lane in &mut v[2..] {
            *lane = 0;
        }
    }
    Ok(())
}
