//! Floating-point cases: values where IEEE arithmetic and the x86 rules
//! change behaviour (signed zeros, denormals, infinities, quiet and
//! signalling NaNs, rounding ties, the edges of integer conversions),
//! pairs of close operands (cancellation, equality), and MXCSR and x87
//! control states beyond the defaults.

use super::Rng;
use iced_x86::{Instruction, Mnemonic, OpKind};
use x86_sem::CpuState;

/// Whether `i` is an x87 instruction.
pub fn is_x87(i: &Instruction) -> bool {
    format!("{:?}", i.mnemonic()).starts_with('F')
}

/// Whether `i` is an SSE floating-point instruction (arithmetic,
/// comparison or conversion).
pub fn is_sse_fp(i: &Instruction) -> bool {
    let m = format!("{:?}", i.mnemonic());
    let stems = [
        "Add", "Sub", "Mul", "Div", "Min", "Max", "Sqrt", "Cmp", "Ucomi", "Comi", "Cvt",
    ];
    let suffixes = ["ss", "sd", "ps", "pd"];
    (stems.iter().any(|s| m.starts_with(s)) && suffixes.iter().any(|s| m.ends_with(s)))
        || m.starts_with("Cvt")
        || matches!(i.mnemonic(), Mnemonic::Ucomisd | Mnemonic::Comisd)
}

/// A double: an edge, a value near an integer limit or a tie, a denormal,
/// a NaN, or random bits.
pub fn f64_bits(rng: &mut Rng) -> u64 {
    const EDGES: [f64; 26] = [
        0.0,
        1.0,
        0.5,
        1.5,
        2.5,
        3.0,
        0.1,
        1e300,
        1e-300,
        f64::MAX,
        f64::MIN_POSITIVE,
        f64::INFINITY,
        2147483647.0,
        2147483647.5,
        2147483648.0,
        2147483648.5,
        4294967296.0,
        9.223372036854775e18,
        9223372036854775808.0,
        18446744073709551616.0,
        32767.5,
        32768.0,
        65535.5,
        9007199254740993.0,
        1.0000000000000002,
        0.9999999999999999,
    ];
    let sign = (rng.next() & 1) << 63;
    match rng.below(11) {
        0..=2 => sign | EDGES[rng.below(EDGES.len() as u64) as usize].to_bits(),
        10 => sign,
        3 => sign | (rng.next() & ((1 << 52) - 1)) >> rng.below(52), // denormal
        4 => {
            // NaN: quiet or signalling, some payload.
            let quiet = (rng.next() & 1) << 51;
            let payload = (rng.next() & ((1 << 51) - 1)) >> rng.below(51);
            sign | 0x7ff << 52 | quiet | payload.max(u64::from(quiet == 0))
        }
        5 => {
            // Near the smallest normal or the largest finite value.
            let e = if rng.below(2) == 0 {
                rng.below(3)
            } else {
                0x7fe - rng.below(2)
            };
            sign | e << 52 | (rng.next() & ((1 << 52) - 1))
        }
        6 => sign | (rng.next() >> 12) | (0x3ff - 8 + rng.below(16)) << 52,
        7 => sign | (rng.below(1 << 20) as f64 + [0.0, 0.5, 0.25][rng.below(3) as usize]).to_bits(),
        _ => rng.next(),
    }
}

/// A single, as [`f64_bits`].
pub fn f32_bits(rng: &mut Rng) -> u32 {
    const EDGES: [f32; 16] = [
        0.0,
        1.0,
        0.5,
        1.5,
        2.5,
        0.1,
        f32::MAX,
        f32::MIN_POSITIVE,
        f32::INFINITY,
        2147483648.0,
        2147483520.0,
        9.223372e18,
        16777217.0,
        1e-40,
        3.4e38,
        1e30,
    ];
    let sign = ((rng.next() & 1) << 31) as u32;
    match rng.below(11) {
        0..=2 => sign | EDGES[rng.below(EDGES.len() as u64) as usize].to_bits(),
        10 => sign,
        3 => sign | ((rng.next() as u32 & 0x7f_ffff) >> rng.below(23)),
        4 => {
            let quiet = ((rng.next() & 1) << 22) as u32;
            let payload = (rng.next() as u32 & 0x3f_ffff) >> rng.below(22);
            sign | 0xff << 23 | quiet | payload.max(u32::from(quiet == 0))
        }
        5 => {
            let e = if rng.below(2) == 0 {
                rng.below(3) as u32
            } else {
                0xfe - rng.below(2) as u32
            };
            sign | e << 23 | (rng.next() as u32 & 0x7f_ffff)
        }
        6 => sign | (rng.next() as u32 & 0x7f_ffff) | (0x7f - 8 + rng.below(16) as u32) << 23,
        7 => sign | (rng.below(1 << 12) as f32 + [0.0, 0.5, 0.25][rng.below(3) as usize]).to_bits(),
        _ => rng.next() as u32,
    }
}

/// A 64-bit lane: one double, or two singles.
fn lane(rng: &mut Rng, doubles: bool) -> u64 {
    if doubles {
        f64_bits(rng)
    } else {
        u64::from(f32_bits(rng)) | u64::from(f32_bits(rng)) << 32
    }
}

/// Whether the instruction's data are doubles (by its mnemonic), else
/// singles; integer sources of conversions get the vector edges.
fn doubles(i: &Instruction) -> bool {
    let m = format!("{:?}", i.mnemonic()).to_lowercase();
    m.ends_with("sd") || m.ends_with("pd") || m.contains("sd2") || m.contains("pd2")
}

/// An x87 register value.
pub fn f80(rng: &mut Rng) -> (u64, u16) {
    let sign = ((rng.next() & 1) << 15) as u16;
    match rng.below(12) {
        0..=3 => {
            // A double, extended exactly.
            let d = f64::from_bits(f64_bits(rng) & !(1 << 63));
            let b = d.to_bits();
            let e = (b >> 52) as u16;
            let f = b & ((1 << 52) - 1);
            if e == 0x7ff {
                (1 << 63 | f << 11, sign | 0x7fff)
            } else if e == 0 {
                if f == 0 {
                    (0, sign)
                } else {
                    let lz = f.leading_zeros() - 11;
                    (f << (11 + lz), sign | (0x3fff - 1022 - lz as u16))
                }
            } else {
                (1 << 63 | f << 11, sign | (e + 0x3fff - 1023))
            }
        }
        4 => {
            // Around the limits of 16-, 32- and 64-bit integers.
            let k = [14u16, 15, 30, 31, 62, 63][rng.below(6) as usize];
            let m = match rng.below(3) {
                0 => u64::MAX << rng.below(4),
                1 => 1 << 63 | rng.below(4),
                _ => 1 << 63 | rng.next() >> 1,
            };
            (m, sign | (0x3fff + k))
        }
        5 => (
            1 << 63 | rng.next() >> 1,
            sign | (0x3fff - 20 + rng.below(40) as u16),
        ),
        6 => {
            // NaN, infinity, or an encoding the unit does not support.
            let m = match rng.below(6) {
                0 => 1 << 63,
                1 => 0xc000_0000_0000_0000 | rng.next() >> (2 + rng.below(62)),
                2 => 1 << 63 | (rng.next() >> 2).max(1),
                3 => rng.next() >> 1,
                _ => 0xc000_0000_0000_0000,
            };
            (m, sign | 0x7fff)
        }
        7 => {
            // Denormal or pseudo-denormal; rarely an unnormal.
            match rng.below(8) {
                0 => (rng.next() >> 1, sign | (1 + rng.below(100) as u16)),
                1 => (1 << 63 | rng.next(), sign),
                _ => (rng.next() >> (1 + rng.below(63)), sign),
            }
        }
        8 => (
            1 << 63 | rng.next(),
            sign | [1u16, 2, 0x7ffe, 0x7ffd][rng.below(4) as usize],
        ),
        9 => (0, sign),
        _ => (
            1 << 63 | rng.next() & !(u64::MAX >> 12 << rng.below(12)),
            sign | (0x3fff + rng.below(8) as u16),
        ),
    }
}

/// A control or status setting: usually the default, sometimes another
/// rounding, precision, flush or mask setting.
fn mxcsr(rng: &mut Rng) -> u32 {
    let mut m = 0x1f80 | (rng.next() as u32 & 0x3f);
    if rng.below(6) == 0 {
        m = (m & !0x6000) | (rng.below(4) as u32) << 13;
    }
    if rng.below(8) == 0 {
        m |= rng.next() as u32 & 0x8040;
    }
    if rng.below(12) == 0 {
        m &= !((rng.next() as u32 & 0x3f) << 7);
    }
    m
}

fn x87_control(rng: &mut Rng) -> u16 {
    let mut c: u16 = 0x37f;
    if rng.below(6) == 0 {
        c = (c & !0xc00) | (rng.below(4) as u16) << 10;
    }
    if rng.below(6) == 0 {
        c = (c & !0x300) | [0u16, 2, 2, 0, 1][rng.below(5) as usize] << 8;
    }
    if rng.below(12) == 0 {
        c &= !(rng.next() as u16 & 0x3f);
    }
    if rng.below(8) == 0 {
        c |= 0x1000;
    }
    c
}

/// Fills the float state of a case for `i`: vector lanes, the memory
/// operand, MXCSR, and the x87 unit.
pub fn fill(i: &Instruction, s: &mut CpuState, data: &mut [u8], rng: &mut Rng, mem: Option<usize>) {
    let d = doubles(i);
    if is_sse_fp(i) {
        for v in s.vec.iter_mut().take(16) {
            v[0] = lane(rng, d);
            v[1] = lane(rng, d);
        }
        s.mxcsr = mxcsr(rng);
        // Close operands: the source a copy of the destination, nudged or
        // negated.
        let dst = (i.op0_kind() == OpKind::Register && i.op0_register().is_xmm())
            .then(|| i.op0_register().number());
        let close = rng.below(3) == 0;
        let mut src = [0u64; 2];
        if let Some(n) = dst {
            src = [s.vec[n][0], s.vec[n][1]];
            for x in &mut src {
                match rng.below(3) {
                    0 => *x = x.wrapping_add(rng.below(3)).wrapping_sub(1),
                    1 => *x ^= 1 << 63 | 1 << 31,
                    _ => {}
                }
            }
        }
        if i.op_count() > 1 && i.op1_kind() == OpKind::Register && i.op1_register().is_xmm() {
            let n = i.op1_register().number();
            if close && dst.is_some() {
                s.vec[n][..2].copy_from_slice(&src);
            }
        }
        if let Some(o) = mem {
            for k in 0..2 {
                let v = if close && dst.is_some() {
                    src[k]
                } else {
                    lane(rng, d)
                };
                if o + 8 * k + 8 <= data.len() {
                    data[o + 8 * k..o + 8 * k + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
    }
    if is_x87(i) {
        let x = &mut s.x87;
        x.fcw = (x87_control(rng) & 0x1f3f) | 0x40;
        let top = rng.below(8) as u16;
        let flags = rng.next() as u16 & 0x3f & if rng.below(2) == 0 { 0 } else { 0x3f };
        let es = if flags & !x.fcw & 0x3f != 0 {
            0x8080
        } else {
            0
        };
        x.fsw = flags | es | (rng.next() as u16 & 0x4700) | top << 11;
        for k in 0..8 {
            let (m, se) = f80(rng);
            x.st[k].mantissa = m;
            x.st[k].sign_exponent = se;
        }
        // st0 and st1 usually hold values, st7 is usually free for a push.
        let mut ftw = 0u8;
        for k in 0..8u16 {
            let p = match k {
                0 | 1 => 15,
                7 => 1,
                _ => 12,
            };
            if rng.below(16) < p {
                ftw |= 1 << ((top + k) & 7);
            }
        }
        x.ftw = ftw;
        // Close operands for the register forms.
        if rng.below(3) == 0 {
            let n = (1 + rng.below(7)) as usize;
            x.st[n] = x.st[0];
            if rng.below(2) == 0 {
                x.st[n].sign_exponent ^= 0x8000;
            }
        }
        if let Some(o) = mem {
            let int = format!("{:?}", i.mnemonic()).starts_with("Fi");
            let (v, se): (u64, u16) = match i.memory_size().size() {
                2 if i.mnemonic() == Mnemonic::Fldcw => (u64::from(x87_control(rng)), 0),
                4 if !int => (u64::from(f32_bits(rng)), 0),
                8 if !int => (f64_bits(rng), 0),
                10 => f80(rng),
                _ => (rng.value(), 0),
            };
            let n = i.memory_size().size().min(8);
            if o + 10 <= data.len() {
                data[o..o + n].copy_from_slice(&v.to_le_bytes()[..n]);
                if i.memory_size().size() == 10 {
                    data[o + 8..o + 10].copy_from_slice(&se.to_le_bytes());
                }
            }
        }
    }
}
