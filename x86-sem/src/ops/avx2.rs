//! The vector integer forms compilers emit for vectorised loops at
//! `-march=x86-64-v2` (SSE4.1), `-v3` (AVX2) and `-v4` (AVX-512): shifts,
//! shuffles, permutes, blends, widening and narrowing moves, extracts.
//!
//! Most of them come as a legacy SSE form, which writes the low 128 bits
//! and keeps the rest of the register and whose memory operand must be
//! 16-byte aligned when it is 16 bytes, and as VEX/EVEX forms, which zero
//! the register above the operation's length: `LEGACY` picks the rule.
//! Operations that work "per lane" repeat on each 128-bit lane.

use super::avx::{cut, elem, read, set_elem, write_reg, writemask, V};
use super::{ea, reg, set_sized, Flow};
use crate::insn::{Insn, KREG, MEM, VEC};
use crate::mem::Memory;
use crate::regs::Registers;
use crate::step::{Machine, Retired, Stop};

/// The two sources of an `N`-byte operation: the destination and op[1]
/// for a legacy form, op[1] and op[2] for VEX.
fn sources<X: Machine, const N: usize, const LEGACY: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Result<(V, V), Stop> {
    if LEGACY {
        let b = read::<X, N, true>(x, i, i.op[1], r, 1, u64::MAX)?;
        let a = read::<X, N, false>(x, i, i.op[0], r, 1, u64::MAX)?;
        Ok((a, b))
    } else {
        let b = read::<X, N, false>(x, i, i.op[2], r, 1, u64::MAX)?;
        let a = read::<X, N, false>(x, i, i.op[1], r, 1, u64::MAX)?;
        Ok((a, b))
    }
}

/// Writes an `N`-byte result to the destination register: the rest kept
/// for a legacy form, zeroed for VEX.
fn put<X: Machine, const LEGACY: bool>(x: &mut X, i: &Insn, v: &V, n: usize) {
    let dest = x.regs_mut().vec_mut(usize::from(i.op[0] - VEC));
    if LEGACY {
        dest[..n / 8].copy_from_slice(&v[..n / 8]);
    } else {
        *dest = cut(*v, n);
    }
}

pub(crate) const SLL: u8 = 0;
pub(crate) const SRL: u8 = 1;
pub(crate) const SRA: u8 = 2;

/// vpsll/vpsrl/vpsra of `E`-byte elements by imm8 (VEX, or EVEX with a
/// writemask and a memory or broadcast source).
pub(crate) fn shift_imm<X: Machine, const OP: u8, const E: usize, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = writemask(x, i);
    let a = read::<X, N, false>(x, i, i.op[1], r, E, m)?;
    let count = i.imm & 0xff;
    let bits = E as u64 * 8;
    let mut out = [0u64; 8];
    for k in 0..N / E {
        let p = elem(&a, k, E);
        let v = match OP {
            SLL if count < bits => p << count,
            SRL if count < bits => p >> count,
            SRA => (crate::flags::sext(p, E) as i64 >> count.min(bits - 1)) as u64,
            _ => 0,
        };
        set_elem(&mut out, k, E, v);
    }
    write_reg(x, i, i.op[0], &out, N, E, m);
    Ok(())
}

/// vpshufd (VEX): per lane, doubleword k is source doubleword imm8[2k+1:2k].
pub(crate) fn pshufd<X: Machine, const N: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let a = read::<X, N, false>(x, i, i.op[1], r, 4, u64::MAX)?;
    let mut out = [0u64; 8];
    for k in 0..N / 4 {
        let sel = (i.imm >> (2 * (k % 4))) as usize & 3;
        set_elem(&mut out, k, 4, elem(&a, k & !3 | sel, 4));
    }
    write_reg(x, i, i.op[0], &out, N, 4, u64::MAX);
    Ok(())
}

/// vpunpckl* (`HIGH` false) and vpunpckh* of `E`-byte elements: per lane,
/// the low (high) halves of the two sources interleaved, the first's
/// elements in the even places.
pub(crate) fn unpack<X: Machine, const E: usize, const HIGH: bool, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let (a, b) = sources::<X, N, false>(x, i, r)?;
    let per = 16 / E;
    let mut out = [0u64; 8];
    for k in 0..N / E {
        let lane = k / per * per;
        let src = lane + (k % per) / 2 + if HIGH { per / 2 } else { 0 };
        let v = if k % 2 == 0 {
            elem(&a, src, E)
        } else {
            elem(&b, src, E)
        };
        set_elem(&mut out, k, E, v);
    }
    write_reg(x, i, i.op[0], &out, N, E, u64::MAX);
    Ok(())
}

/// pmovzx/pmovsx (SSE4.1, VEX and EVEX): the low `N`/`TO` elements of
/// `FROM` bytes of the source (xmm, ymm or memory), zero- or
/// sign-extended to `TO` bytes, under the EVEX writemask (a disabled
/// element's memory is not read).
pub(crate) fn extend<
    X: Machine,
    const FROM: usize,
    const TO: usize,
    const SIGNED: bool,
    const N: usize,
    const LEGACY: bool,
>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let count = N / TO;
    let m = writemask(x, i);
    let src = if i.op[1] == MEM {
        let a = ea(x, i);
        r.mem_addr = a;
        super::avx::load_masked(x, a, count * FROM, FROM, m)?
    } else {
        *x.regs().vec(usize::from(i.op[1] - VEC))
    };
    let mut out = [0u64; 8];
    for k in 0..count {
        let p = elem(&src, k, FROM);
        let v = if SIGNED {
            crate::flags::sext(p, FROM)
        } else {
            p
        };
        set_elem(&mut out, k, TO, v);
    }
    if LEGACY {
        put::<X, true>(x, i, &out, N);
    } else {
        write_reg(x, i, i.op[0], &out, N, TO, m);
    }
    Ok(())
}

/// vpermq ymm, ymm/m256, imm8: quadword k is source quadword imm8[2k+1:2k].
pub(crate) fn permq<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let a = read::<X, 32, false>(x, i, i.op[1], r, 8, u64::MAX)?;
    let mut out = [0u64; 8];
    for (k, o) in out.iter_mut().take(4).enumerate() {
        *o = a[(i.imm >> (2 * k)) as usize & 3];
    }
    write_reg(x, i, i.op[0], &out, 32, 8, u64::MAX);
    Ok(())
}

/// vpermps/vpermd ymm1, ymm2, ymm3/m256: doubleword k is doubleword
/// (ymm2[k] & 7) of the third operand.
pub(crate) fn permd<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let table = read::<X, 32, false>(x, i, i.op[2], r, 4, u64::MAX)?;
    let index = read::<X, 32, false>(x, i, i.op[1], r, 4, u64::MAX)?;
    let mut out = [0u64; 8];
    for k in 0..8 {
        set_elem(
            &mut out,
            k,
            4,
            elem(&table, elem(&index, k, 4) as usize & 7, 4),
        );
    }
    write_reg(x, i, i.op[0], &out, 32, 4, u64::MAX);
    Ok(())
}

/// pblendw, vpblendw, vpblendd: element k from the second source where
/// imm8 bit (k mod 8) is set, else from the first.
pub(crate) fn blend_imm<X: Machine, const E: usize, const N: usize, const LEGACY: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let (a, b) = sources::<X, N, LEGACY>(x, i, r)?;
    let mut out = [0u64; 8];
    for k in 0..N / E {
        let v = if i.imm >> (k % 8) & 1 != 0 {
            elem(&b, k, E)
        } else {
            elem(&a, k, E)
        };
        set_elem(&mut out, k, E, v);
    }
    put::<X, LEGACY>(x, i, &out, N);
    Ok(())
}

/// blendvps/blendvpd (legacy: the selector is xmm0) and vblendvps/pd
/// (VEX: the selector is the fourth operand): element k from the second
/// source where the selector's element k has its sign bit set.
pub(crate) fn blend_var<X: Machine, const E: usize, const N: usize, const LEGACY: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let (a, b) = sources::<X, N, LEGACY>(x, i, r)?;
    let sel = if LEGACY {
        *x.regs().vec(0)
    } else {
        *x.regs().vec(usize::from(i.op[3] - VEC))
    };
    let mut out = [0u64; 8];
    for k in 0..N / E {
        let v = if elem(&sel, k, E) >> (E * 8 - 1) != 0 {
            elem(&b, k, E)
        } else {
            elem(&a, k, E)
        };
        set_elem(&mut out, k, E, v);
    }
    put::<X, LEGACY>(x, i, &out, N);
    Ok(())
}

/// vpalignr (VEX): per lane, the 32 bytes first:second (first high)
/// shifted right by imm8 bytes, low 16 kept.
pub(crate) fn palignr<X: Machine, const N: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let (a, b) = sources::<X, N, false>(x, i, r)?;
    let shift = (i.imm & 0xff) as usize;
    let mut out = [0u64; 8];
    for k in 0..N {
        let (lane, j) = (k & !15, k % 16 + shift);
        let v = match j {
            0..=15 => elem(&b, lane + j, 1),
            16..=31 => elem(&a, lane + j - 16, 1),
            _ => 0,
        };
        set_elem(&mut out, k, 1, v);
    }
    write_reg(x, i, i.op[0], &out, N, 1, u64::MAX);
    Ok(())
}

/// pextrb/vpextrb r32/m8, xmm, imm8: byte imm8[3:0], zero-extended into
/// the register.
pub(crate) fn pextrb<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let v = *x.regs().vec(usize::from(i.op[1] - VEC));
    let b = elem(&v, (i.imm & 15) as usize, 1);
    if i.op[0] == MEM {
        let a = ea(x, i);
        super::store(x, r, a, 1, b)
    } else {
        set_sized::<X, 4>(x, usize::from(i.op[0]), b);
        Ok(())
    }
}

/// vextracti128/vextractf128 xmm/m128, ymm, imm8: lane imm8[0].
pub(crate) fn extract128<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let v = *x.regs().vec(usize::from(i.op[1] - VEC));
    let lane = (i.imm & 1) as usize * 2;
    let mut out = [0u64; 8];
    out[..2].copy_from_slice(&v[lane..lane + 2]);
    if i.op[0] == MEM {
        let a = ea(x, i);
        r.mem_addr = a;
        r.mem_write = true;
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&out[0].to_le_bytes());
        b[8..].copy_from_slice(&out[1].to_le_bytes());
        return Ok(x.mem().store_bytes(a, &b)?);
    }
    *x.regs_mut().vec_mut(usize::from(i.op[0] - VEC)) = out;
    Ok(())
}

/// vinserti128/vinsertf128 ymm1, ymm2, xmm/m128, imm8: ymm2 with lane
/// imm8[0] replaced.
pub(crate) fn insert128<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let b = read::<X, 16, false>(x, i, i.op[2], r, 1, u64::MAX)?;
    let mut out = read::<X, 32, false>(x, i, i.op[1], r, 1, u64::MAX)?;
    let lane = (i.imm & 1) as usize * 2;
    out[lane..lane + 2].copy_from_slice(&b[..2]);
    write_reg(x, i, i.op[0], &out, 32, 8, u64::MAX);
    Ok(())
}

/// packusdw (legacy) and vpackusdw: per lane, the signed doublewords of the
/// first source then the second, saturated to unsigned words.
pub(crate) fn packusdw<X: Machine, const N: usize, const LEGACY: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let (a, b) = sources::<X, N, LEGACY>(x, i, r)?;
    let mut out = [0u64; 8];
    for k in 0..N / 2 {
        let (lane, j) = (k / 8, k % 8);
        let src = if j < 4 { &a } else { &b };
        let d = elem(src, lane * 4 + j % 4, 4) as u32 as i32;
        set_elem(&mut out, k, 2, d.clamp(0, 0xffff) as u64);
    }
    put::<X, LEGACY>(x, i, &out, N);
    Ok(())
}

/// phminposuw (legacy, aligned m128) and vphminposuw: the smallest
/// unsigned word in bits 15:0, its index (the lowest on ties) in bits
/// 18:16, the rest of the low 128 bits zero.
pub(crate) fn phminposuw<X: Machine, const LEGACY: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let a = read::<X, 16, LEGACY>(x, i, i.op[1], r, 2, u64::MAX)?;
    let (k, min) = (0..8)
        .map(|k| (k, elem(&a, k, 2)))
        .min_by_key(|&(k, v)| (v, k))
        .unwrap_or((0, 0));
    let mut out = [0u64; 8];
    out[0] = min | (k as u64) << 16;
    put::<X, LEGACY>(x, i, &out, 16);
    Ok(())
}

/// vpmovdw xmm/m128{k}{z}, ymm (EVEX): the eight doublewords truncated to
/// words, under the writemask; a register destination is zeroed above
/// 128 bits, a memory one written only where enabled.
pub(crate) fn pmovdw<X: Machine, const N: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let m = writemask(x, i);
    let v = cut(*x.regs().vec(usize::from(i.op[1] - VEC)), N);
    let mut out = [0u64; 8];
    for k in 0..N / 4 {
        set_elem(&mut out, k, 2, elem(&v, k, 4));
    }
    if i.op[0] == MEM {
        let a = ea(x, i);
        r.mem_addr = a;
        r.mem_write = true;
        return super::avx::store_masked(x, a, &out, N / 2, 2, m);
    }
    write_reg(x, i, i.op[0], &out, N / 2, 2, m);
    Ok(())
}

/// vpmovm2d/q (`E` = 4/8) vector, k: element k all ones where mask bit k
/// is set.
pub(crate) fn mask_to_vec<X: Machine, const E: usize, const N: usize>(
    x: &mut X,
    i: &Insn,
    _r: &mut Retired,
) -> Flow {
    let k = x.regs().k(usize::from(i.op[1] - KREG));
    let mut out = [0u64; 8];
    for n in 0..N / E {
        set_elem(&mut out, n, E, super::avx::all_ones(k >> n & 1 != 0));
    }
    write_reg(x, i, i.op[0], &out, N, E, u64::MAX);
    Ok(())
}

/// movddup (legacy) xmm, xmm/m64: the low quadword in both halves.
pub(crate) fn movddup<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let lo = if i.op[1] == MEM {
        let a = ea(x, i);
        super::load(x, r, a, 8)?
    } else {
        x.regs().vec(usize::from(i.op[1] - VEC))[0]
    };
    put::<X, true>(x, i, &[lo, lo, 0, 0, 0, 0, 0, 0], 16);
    Ok(())
}

/// mulx r1, r2, r/m (BMI2): rdx × r/m unsigned, the high half to r1 and
/// the low to r2 (r1 wins when they are the same register); no flag.
pub(crate) fn mulx<X: Machine, const S: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let b = super::read::<X, S>(x, i, i.op[2], r)?;
    let a = reg(x, crate::regs::gpr::RDX) & crate::flags::mask(S);
    let p = u128::from(a) * u128::from(b);
    set_sized::<X, S>(x, usize::from(i.op[1]), p as u64);
    set_sized::<X, S>(x, usize::from(i.op[0]), (p >> (S * 8)) as u64);
    Ok(())
}

/// rorx r, r/m, imm8 (BMI2): rotate right, no flag.
pub(crate) fn rorx<X: Machine, const S: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let v = super::read::<X, S>(x, i, i.op[1], r)?;
    let n = (i.imm as u32) & (S as u32 * 8 - 1);
    let out = if S == 8 {
        v.rotate_right(n)
    } else {
        u64::from((v as u32).rotate_right(n))
    };
    set_sized::<X, S>(x, usize::from(i.op[0]), out);
    Ok(())
}

/// vmovss/vmovsd (`W` = 4/8), VEX or EVEX: a load zeroes the register
/// above the element, a store writes the element, the three-register form
/// takes the element from the third operand and bits 127:W·8 from the
/// second. Under a writemask, bit 0 enables the element (a disabled load
/// or store does not access memory).
pub(crate) fn mov_scalar<X: Machine, const W: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let m = writemask(x, i) & 1;
    if i.op[0] == MEM {
        let v = x.regs().vec(usize::from(i.op[1] - VEC))[0];
        let a = ea(x, i);
        r.mem_addr = a;
        r.mem_write = true;
        if m == 0 {
            return Ok(());
        }
        return super::store(x, r, a, W, v);
    }
    let mut out = [0u64; 8];
    if i.op[1] == MEM {
        let a = ea(x, i);
        r.mem_addr = a;
        if m != 0 {
            out[0] = x.mem().load(a, W)?;
        }
    } else {
        let hi = *x.regs().vec(usize::from(i.op[1] - VEC));
        let lo = x.regs().vec(usize::from(i.op[2] - VEC))[0];
        out[0] = lo;
        out[1] = hi[1];
        if W == 4 {
            out[0] = (hi[0] & !0xffff_ffff) | (lo & 0xffff_ffff);
        }
    }
    // write_reg applies the mask to element 0 only: the other elements
    // count as enabled.
    write_reg(x, i, i.op[0], &out, 16, W, m | !1);
    Ok(())
}

/// vpslldq (`LEFT`) and vpsrldq by imm8 bytes, per lane; zero from 16.
pub(crate) fn byte_shift<X: Machine, const LEFT: bool, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let a = read::<X, N, false>(x, i, i.op[1], r, 1, u64::MAX)?;
    let n = (i.imm & 0xff) as usize;
    let mut out = [0u64; 8];
    for k in 0..N {
        let (lane, j) = (k & !15, k % 16);
        let from = if LEFT {
            j.checked_sub(n)
        } else {
            Some(j + n).filter(|&f| f < 16)
        };
        if let Some(f) = from {
            set_elem(&mut out, k, 1, elem(&a, lane + f, 1));
        }
    }
    write_reg(x, i, i.op[0], &out, N, 1, u64::MAX);
    Ok(())
}

/// vshufps (`N` bytes): per lane, elements 0 and 1 from the first source
/// and 2 and 3 from the second, each picked by two imm8 bits.
pub(crate) fn shufps<X: Machine, const N: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let (a, b) = sources::<X, N, false>(x, i, r)?;
    let mut out = [0u64; 8];
    for k in 0..N / 4 {
        let (lane, j) = (k & !3, k % 4);
        let sel = (i.imm >> (2 * j)) as usize & 3;
        let src = if j < 2 { &a } else { &b };
        set_elem(&mut out, k, 4, elem(src, lane + sel, 4));
    }
    write_reg(x, i, i.op[0], &out, N, 4, u64::MAX);
    Ok(())
}

/// vpsll/vpsrl/vpsra of `E`-byte elements by the low quadword of an xmm
/// register or m128 (VEX, or EVEX under a writemask).
pub(crate) fn shift_vec<X: Machine, const OP: u8, const E: usize, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = writemask(x, i);
    let count = read::<X, 16, false>(x, i, i.op[2], r, 8, u64::MAX)?[0];
    let a = read::<X, N, false>(x, i, i.op[1], r, E, u64::MAX)?;
    let bits = E as u64 * 8;
    let mut out = [0u64; 8];
    for k in 0..N / E {
        let p = elem(&a, k, E);
        let v = match OP {
            SLL if count < bits => p << count,
            SRL if count < bits => p >> count,
            SRA => (crate::flags::sext(p, E) as i64 >> count.min(bits - 1)) as u64,
            _ => 0,
        };
        set_elem(&mut out, k, E, v);
    }
    write_reg(x, i, i.op[0], &out, N, E, m);
    Ok(())
}

/// movsldup/movshdup (`E` = 4, even or `ODD` elements duplicated) and
/// vmovddup (`E` = 8): per pair, the even (odd) element in both places.
/// The xmm form of movddup reads only 8 bytes of memory.
pub(crate) fn dup<
    X: Machine,
    const E: usize,
    const ODD: bool,
    const N: usize,
    const LEGACY: bool,
>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let a = if E == 8 && N == 16 && i.op[1] == MEM {
        let a = ea(x, i);
        [super::load(x, r, a, 8)?, 0, 0, 0, 0, 0, 0, 0]
    } else {
        read::<X, N, LEGACY>(x, i, i.op[1], r, E, u64::MAX)?
    };
    let mut out = [0u64; 8];
    for k in 0..N / E {
        let from = if ODD { k | 1 } else { k & !1 };
        set_elem(&mut out, k, E, elem(&a, from, E));
    }
    put::<X, LEGACY>(x, i, &out, N);
    Ok(())
}

/// pmaddwd (legacy) and vpmaddwd (VEX, EVEX under a doubleword writemask):
/// doubleword k is the sum of the signed products of words 2k and 2k+1.
pub(crate) fn pmaddwd<X: Machine, const N: usize, const LEGACY: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = writemask(x, i);
    let (a, b) = sources::<X, N, LEGACY>(x, i, r)?;
    let w = |v: &V, k: usize| i64::from(elem(v, k, 2) as u16 as i16);
    let mut out = [0u64; 8];
    for k in 0..N / 4 {
        let s = w(&a, 2 * k) * w(&b, 2 * k) + w(&a, 2 * k + 1) * w(&b, 2 * k + 1);
        set_elem(&mut out, k, 4, s as u64);
    }
    if LEGACY {
        put::<X, true>(x, i, &out, N);
    } else {
        write_reg(x, i, i.op[0], &out, N, 4, m);
    }
    Ok(())
}

/// pabsd (legacy) and vpabsd (VEX, EVEX): absolute values of `E`-byte
/// elements (the most negative stays itself).
pub(crate) fn pabs<X: Machine, const E: usize, const N: usize, const LEGACY: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = writemask(x, i);
    let a = read::<X, N, LEGACY>(x, i, i.op[1], r, E, m)?;
    let mut out = [0u64; 8];
    for k in 0..N / E {
        let v = crate::flags::sext(elem(&a, k, E), E) as i64;
        set_elem(&mut out, k, E, v.unsigned_abs());
    }
    if LEGACY {
        put::<X, true>(x, i, &out, N);
    } else {
        write_reg(x, i, i.op[0], &out, N, E, m);
    }
    Ok(())
}

/// vpackuswb: per lane, the signed words of the first source then the
/// second, saturated to unsigned bytes.
pub(crate) fn packuswb<X: Machine, const N: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let (a, b) = sources::<X, N, false>(x, i, r)?;
    let mut out = [0u64; 8];
    for k in 0..N {
        let (lane, j) = (k / 16, k % 16);
        let src = if j < 8 { &a } else { &b };
        let w = elem(src, lane * 8 + j % 8, 2) as u16 as i16;
        set_elem(&mut out, k, 1, w.clamp(0, 255) as u64);
    }
    write_reg(x, i, i.op[0], &out, N, 1, u64::MAX);
    Ok(())
}

/// vpsadbw: per quadword, the sum of the absolute byte differences, in its
/// low word.
pub(crate) fn psadbw<X: Machine, const N: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let (a, b) = sources::<X, N, false>(x, i, r)?;
    let mut out = [0u64; 8];
    for (q, o) in out.iter_mut().take(N / 8).enumerate() {
        *o = (0..8)
            .map(|j| elem(&a, q * 8 + j, 1).abs_diff(elem(&b, q * 8 + j, 1)))
            .sum();
    }
    write_reg(x, i, i.op[0], &out, N, 8, u64::MAX);
    Ok(())
}

/// pextrd/vpextrd r/m32, xmm, imm8: doubleword imm8[1:0].
pub(crate) fn pextrd<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let v = *x.regs().vec(usize::from(i.op[1] - VEC));
    let d = elem(&v, (i.imm & 3) as usize, 4);
    if i.op[0] == MEM {
        let a = ea(x, i);
        super::store(x, r, a, 4, d)
    } else {
        set_sized::<X, 4>(x, usize::from(i.op[0]), d);
        Ok(())
    }
}

/// pinsrd xmm, r/m32, imm8 (legacy) and vpinsrd xmm1, xmm2, r/m32, imm8:
/// doubleword imm8[1:0] replaced.
pub(crate) fn pinsrd<X: Machine, const LEGACY: bool>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let (base, src) = if LEGACY {
        (i.op[0], i.op[1])
    } else {
        (i.op[1], i.op[2])
    };
    let d = super::read::<X, 4>(x, i, src, r)?;
    let mut out = *x.regs().vec(usize::from(base - VEC));
    set_elem(&mut out, (i.imm & 3) as usize, 4, d);
    put::<X, LEGACY>(x, i, &out, 16);
    Ok(())
}

/// vbroadcasti128 ymm, m128: the 16 bytes in both lanes.
pub(crate) fn broadcast128<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let v = read::<X, 16, false>(x, i, i.op[1], r, 1, u64::MAX)?;
    write_reg(
        x,
        i,
        i.op[0],
        &[v[0], v[1], v[0], v[1], 0, 0, 0, 0],
        32,
        8,
        u64::MAX,
    );
    Ok(())
}

/// vmovlps/vmovlpd xmm1, xmm2, m64: the quadword from memory below the
/// high quadword of xmm2.
pub(crate) fn movlp<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let a = ea(x, i);
    let lo = super::load(x, r, a, 8)?;
    let hi = x.regs().vec(usize::from(i.op[1] - VEC))[1];
    write_reg(x, i, i.op[0], &[lo, hi, 0, 0, 0, 0, 0, 0], 16, 8, u64::MAX);
    Ok(())
}

/// EVEX down-converts vpmov{,s,us}{qd,db,…}: `FROM`-byte elements of an
/// `N`-byte source narrowed to `TO` bytes by truncation, or saturated
/// unsigned (`USAT`), under the writemask; to a register (zeroed above)
/// or to memory (only enabled elements written).
pub(crate) fn narrow<
    X: Machine,
    const FROM: usize,
    const TO: usize,
    const USAT: bool,
    const N: usize,
>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = writemask(x, i);
    let v = cut(*x.regs().vec(usize::from(i.op[1] - VEC)), N);
    let count = N / FROM;
    let mut out = [0u64; 8];
    for k in 0..count {
        let e = elem(&v, k, FROM);
        let y = if USAT {
            e.min(crate::flags::mask(TO))
        } else {
            e
        };
        set_elem(&mut out, k, TO, y);
    }
    if i.op[0] == MEM {
        let a = ea(x, i);
        r.mem_addr = a;
        r.mem_write = true;
        return super::avx::store_masked(x, a, &out, count * TO, TO, m);
    }
    write_reg(x, i, i.op[0], &out, count * TO, TO, m);
    Ok(())
}
