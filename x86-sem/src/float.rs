//! Software floating point with the x86 rules, for SSE and x87 alike.
//!
//! Values are unpacked into a sign, a 64-bit significand normalised to
//! bit 63 and a binary exponent; every operation computes enough bits to
//! round once, exactly, into the destination format under the given
//! rounding control, and records the exceptions IEEE 754 and the manuals
//! name (Intel SDM vol. 1 §4.9, §8.5, §11.5) in the bit order MXCSR and
//! the x87 status word share. What each unit does with NaNs differs (SSE
//! returns the first NaN operand, x87 the one with the larger
//! significand), so NaN operands are handed back to the caller unchanged.
//!
//! x86 detects tininess after rounding: a result is tiny when, rounded to
//! the precision with an unbounded exponent, it is below the smallest
//! normal. With underflow masked, UE is raised for a tiny result that is
//! also inexact.
//!
//! Nothing here allocates; the significand arithmetic fits in `u128`.

/// Invalid operation.
pub(crate) const IE: u8 = 1;
/// Denormal operand.
pub(crate) const DE: u8 = 2;
/// Division by zero.
pub(crate) const ZE: u8 = 4;
/// Overflow.
pub(crate) const OE: u8 = 8;
/// Underflow.
pub(crate) const UE: u8 = 16;
/// Precision (inexact result).
pub(crate) const PE: u8 = 32;

/// Rounding control, in the encoding MXCSR and the x87 control word share.
pub(crate) const RN: u8 = 0;
pub(crate) const RD: u8 = 1;
pub(crate) const RU: u8 = 2;
pub(crate) const RZ: u8 = 3;

/// A destination format: where results are rounded and how they are
/// stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Format {
    /// Significand bits, the integer bit included.
    pub(crate) p: u32,
    /// Smallest and largest unbiased exponent of a normal number.
    pub(crate) emin: i32,
    pub(crate) emax: i32,
    /// Stored fraction bits (the x87 format also stores its integer bit).
    pub(crate) fbits: u32,
    /// Stored exponent bits.
    pub(crate) ebits: u32,
}

pub(crate) const F32: Format = Format {
    p: 24,
    emin: -126,
    emax: 127,
    fbits: 23,
    ebits: 8,
};
pub(crate) const F64: Format = Format {
    p: 53,
    emin: -1022,
    emax: 1023,
    fbits: 52,
    ebits: 11,
};
/// The x87 double extended format at full precision; x87 precision
/// control narrows `p` and keeps the rest.
pub(crate) const F80: Format = Format {
    p: 64,
    emin: -16382,
    emax: 16383,
    fbits: 63,
    ebits: 15,
};

impl Format {
    const fn bias(self) -> i32 {
        self.emax
    }

    const fn is_x87(self) -> bool {
        self.ebits == 15
    }

    /// Total bits of the stored value.
    const fn bits(self) -> u32 {
        1 + self.ebits + self.fbits + self.is_x87() as u32
    }
}

/// The rounding environment of one instruction, and what it raised.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Env {
    /// Rounding control ([`RN`], [`RD`], [`RU`], [`RZ`]).
    pub(crate) rc: u8,
    /// SSE flush-to-zero: tiny results become zero (with UE and PE).
    pub(crate) ftz: bool,
    /// SSE denormals-are-zero: denormal operands read as zero.
    pub(crate) daz: bool,
    /// Exceptions raised, as masked exceptions set them.
    pub(crate) flags: u8,
    /// A result was tiny (an unmasked underflow traps on it even when
    /// exact).
    pub(crate) tiny: bool,
    /// The last rounding increased the magnitude (the x87's C1).
    pub(crate) rounded_up: bool,
    /// A case this implementation does not cover was met.
    pub(crate) opaque: bool,
}

impl Env {
    pub(crate) const fn new(rc: u8) -> Env {
        Env {
            rc,
            ftz: false,
            daz: false,
            flags: 0,
            tiny: false,
            rounded_up: false,
            opaque: false,
        }
    }

    /// The exceptions that trap when unmasked.
    pub(crate) const fn raised(&self) -> u8 {
        self.flags | if self.tiny { UE } else { 0 }
    }
}

/// An unpacked value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Num {
    Zero {
        neg: bool,
    },
    Inf {
        neg: bool,
    },
    /// `frac` holds the stored fraction left-aligned: bit 63 is the quiet
    /// bit.
    NaN {
        neg: bool,
        frac: u64,
    },
    /// `sig` × 2^`exp`, `sig` with bit 63 set; `den` when the operand was
    /// stored denormal.
    Fin {
        neg: bool,
        exp: i32,
        sig: u64,
        den: bool,
    },
    /// An x87 encoding the unit does not support (unnormal, pseudo-NaN,
    /// pseudo-infinity): an invalid operand.
    Bad {
        neg: bool,
    },
}

impl Num {
    pub(crate) const fn neg(self) -> bool {
        match self {
            Num::Zero { neg }
            | Num::Inf { neg }
            | Num::NaN { neg, .. }
            | Num::Fin { neg, .. }
            | Num::Bad { neg } => neg,
        }
    }

    pub(crate) const fn is_nan(self) -> bool {
        matches!(self, Num::NaN { .. })
    }

    pub(crate) const fn is_snan(self) -> bool {
        matches!(self, Num::NaN { frac, .. } if frac >> 63 == 0)
    }

    pub(crate) const fn is_denormal(self) -> bool {
        matches!(self, Num::Fin { den: true, .. })
    }

    const fn with_sign(self, neg: bool) -> Num {
        match self {
            Num::Zero { .. } => Num::Zero { neg },
            Num::Inf { .. } => Num::Inf { neg },
            Num::NaN { frac, .. } => Num::NaN { neg, frac },
            Num::Fin { exp, sig, den, .. } => Num::Fin { neg, exp, sig, den },
            Num::Bad { .. } => Num::Bad { neg },
        }
    }

    /// The NaN made quiet.
    pub(crate) const fn quiet(self) -> Num {
        match self {
            Num::NaN { neg, frac } => Num::NaN {
                neg,
                frac: frac | 1 << 63,
            },
            other => other,
        }
    }

    /// The default NaN an invalid operation returns: negative, quiet,
    /// with no payload.
    pub(crate) const INDEFINITE: Num = Num::NaN {
        neg: true,
        frac: 1 << 63,
    };
}

/// Unpacks the `fmt`-format value in the low bits of `bits`; with `daz`,
/// a denormal reads as zero.
pub(crate) fn unpack(fmt: Format, bits: u128, daz: bool) -> Num {
    let fmask = (1u128 << fmt.fbits) - 1;
    let frac = (bits & fmask) as u64;
    let e = ((bits >> (fmt.fbits + fmt.is_x87() as u32)) as u32 & ((1 << fmt.ebits) - 1)) as i32;
    let neg = (bits >> (fmt.bits() - 1)) & 1 != 0;
    let emax_field = (1 << fmt.ebits) - 1;
    if fmt.is_x87() {
        let m = bits as u64;
        let int = m >> 63 != 0;
        return if e == emax_field {
            if !int {
                Num::Bad { neg }
            } else if m << 1 == 0 {
                Num::Inf { neg }
            } else {
                Num::NaN { neg, frac: m << 1 }
            }
        } else if e == 0 {
            if m == 0 {
                Num::Zero { neg }
            } else {
                // Denormals and pseudo-denormals alike scale by 2^emin.
                let lz = m.leading_zeros();
                Num::Fin {
                    neg,
                    exp: fmt.emin - 63 - lz as i32,
                    sig: m << lz,
                    den: true,
                }
            }
        } else if !int {
            Num::Bad { neg }
        } else {
            Num::Fin {
                neg,
                exp: e - fmt.bias() - 63,
                sig: m,
                den: false,
            }
        };
    }
    let shift = 63 - fmt.fbits;
    if e == emax_field {
        if frac == 0 {
            Num::Inf { neg }
        } else {
            Num::NaN {
                neg,
                frac: frac << (64 - fmt.fbits),
            }
        }
    } else if e == 0 {
        if frac == 0 || daz {
            Num::Zero { neg }
        } else {
            let lz = frac.leading_zeros();
            Num::Fin {
                neg,
                exp: fmt.emin - fmt.fbits as i32 - lz as i32,
                sig: frac << lz,
                den: true,
            }
        }
    } else {
        Num::Fin {
            neg,
            exp: e - fmt.bias() - 63,
            sig: (frac | 1 << fmt.fbits) << shift,
            den: false,
        }
    }
}

/// Packs a value that needs no rounding (zero, infinity, NaN) into `fmt`.
/// A NaN keeps the high bits of its fraction.
pub(crate) fn pack_special(fmt: Format, n: Num) -> u128 {
    let sign = u128::from(n.neg()) << (fmt.bits() - 1);
    let inf_exp = ((1u128 << fmt.ebits) - 1) << (fmt.fbits + fmt.is_x87() as u32);
    let int = u128::from(fmt.is_x87()) << 63;
    match n {
        Num::Inf { .. } => sign | inf_exp | int,
        Num::NaN { frac, .. } => sign | inf_exp | int | u128::from(frac >> (64 - fmt.fbits)),
        _ => sign,
    }
}

/// Rounds `m` × 2^`exp` (`m` not zero) into `fmt` under `env`, and packs
/// it.
pub(crate) fn round(env: &mut Env, fmt: Format, neg: bool, exp: i32, m: u128) -> u128 {
    debug_assert!(m != 0);
    let lz = m.leading_zeros();
    let m = m << lz;
    // The value is m × 2^(e − 127) with bit 127 of m set: its unbiased
    // exponent is e.
    let mut e = exp - lz as i32 + 127;
    let sign = u128::from(neg) << (fmt.bits() - 1);
    let normal_shift = 128 - fmt.p;
    let tiny_before = e < fmt.emin;
    let tiny = tiny_before && {
        // Rounded with an unbounded exponent, does it reach the smallest
        // normal?
        let (q, _, _) = shift_round(m, normal_shift, env.rc, neg);
        !(q >> fmt.p != 0 && e + 1 >= fmt.emin)
    };
    if tiny {
        env.tiny = true;
        if env.ftz {
            env.flags |= UE | PE;
            env.rounded_up = false;
            return sign;
        }
        if fmt.is_x87() && fmt.p != 64 {
            // Denormal results under reduced x87 precision control.
            env.opaque = true;
        }
    }
    let shift = if tiny_before {
        normal_shift.saturating_add((fmt.emin - e) as u32)
    } else {
        normal_shift
    };
    let (mut q, inexact, up) = shift_round(m, shift, env.rc, neg);
    env.rounded_up = up;
    if inexact {
        env.flags |= PE;
        if tiny {
            env.flags |= UE;
        }
    }
    if tiny_before {
        // A denormal; rounding may have carried it into the smallest
        // normal, whose encoding follows on naturally.
        return sign | pack_finite(fmt, q, fmt.emin - 1, true);
    }
    if q >> fmt.p != 0 {
        q >>= 1;
        e += 1;
    }
    if e > fmt.emax {
        env.flags |= OE | PE;
        let to_inf = match env.rc {
            RN => true,
            RD => neg,
            RU => !neg,
            _ => false,
        };
        env.rounded_up = to_inf;
        if to_inf {
            return pack_special(fmt, Num::Inf { neg });
        }
        return sign | pack_finite(fmt, (1 << fmt.p) - 1, fmt.emax, false);
    }
    sign | pack_finite(fmt, q, e, false)
}

/// Encodes the significand `q` (`p` bits, integer bit at `p − 1`) with
/// unbiased exponent `e`; `denormal` takes `q` as a multiple of the
/// smallest denormal (biased exponent 0, or 1 when it carried into the
/// integer bit).
fn pack_finite(fmt: Format, q: u128, e: i32, denormal: bool) -> u128 {
    let int_bit = q >> (fmt.p - 1) & 1;
    let biased = if denormal {
        int_bit
    } else {
        (e + fmt.bias()) as u128
    };
    let field = biased << (fmt.fbits + fmt.is_x87() as u32);
    if fmt.is_x87() {
        field | q << (64 - fmt.p)
    } else {
        field | (q & ((1 << fmt.fbits) - 1))
    }
}

/// `m` shifted right by `shift` bits, rounded under `rc`: the quotient,
/// whether bits were lost, and whether rounding increased the magnitude.
fn shift_round(m: u128, shift: u32, rc: u8, neg: bool) -> (u128, bool, bool) {
    let (q, half, sticky) = match shift {
        0 => (m, false, false),
        1..=127 => (
            m >> shift,
            (m >> (shift - 1)) & 1 != 0,
            m & ((1 << (shift - 1)) - 1) != 0,
        ),
        128 => (0, m >> 127 != 0, m & (u128::MAX >> 1) != 0),
        _ => (0, false, m != 0),
    };
    let inexact = half || sticky;
    let up = match rc {
        RN => half && (sticky || q & 1 != 0),
        RD => neg && inexact,
        RU => !neg && inexact,
        _ => false,
    };
    (q + u128::from(up), inexact, up)
}

/// A result: packed bits, or a NaN operand the caller's rule picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Out {
    Bits(u128),
    /// At least one operand is a NaN (IE already raised for a signalling
    /// one): the caller returns one of them, quieted.
    PropagateNaN,
}

/// The quiet default NaN, with IE.
fn invalid(env: &mut Env, fmt: Format) -> Out {
    env.flags |= IE;
    Out::Bits(pack_special(fmt, Num::INDEFINITE))
}

/// Checks the operands of an arithmetic operation: NaNs (IE for a
/// signalling one), unsupported x87 encodings (IE), and denormals (DE).
fn operands(env: &mut Env, fmt: Format, ops: &[Num]) -> Option<Out> {
    if ops.iter().any(|n| matches!(n, Num::Bad { .. })) {
        return Some(invalid(env, fmt));
    }
    if ops.iter().any(|n| n.is_nan()) {
        if ops.iter().any(|n| n.is_snan()) {
            env.flags |= IE;
        }
        return Some(Out::PropagateNaN);
    }
    if ops.iter().any(|n| n.is_denormal()) {
        env.flags |= DE;
    }
    None
}

/// The sign of an exact zero sum of opposite-signed operands.
const fn zero_sum_sign(rc: u8) -> bool {
    rc == RD
}

/// a + b (b negated first for a subtraction).
pub(crate) fn add(env: &mut Env, fmt: Format, a: Num, b: Num, sub: bool) -> Out {
    if let Some(o) = operands(env, fmt, &[a, b]) {
        return o;
    }
    let b = if sub { b.with_sign(!b.neg()) } else { b };
    let bits = match (a, b) {
        (Num::Inf { neg: x }, Num::Inf { neg: y }) if x != y => return invalid(env, fmt),
        (Num::Inf { .. }, _) => pack_special(fmt, a),
        (_, Num::Inf { .. }) => pack_special(fmt, b),
        (Num::Zero { neg: x }, Num::Zero { neg: y }) => pack_special(
            fmt,
            Num::Zero {
                neg: if x == y { x } else { zero_sum_sign(env.rc) },
            },
        ),
        (Num::Zero { .. }, Num::Fin { neg, exp, sig, .. })
        | (Num::Fin { neg, exp, sig, .. }, Num::Zero { .. }) => {
            round(env, fmt, neg, exp, u128::from(sig))
        }
        (
            Num::Fin {
                neg: na,
                exp: ea,
                sig: sa,
                ..
            },
            Num::Fin {
                neg: nb,
                exp: eb,
                sig: sb,
                ..
            },
        ) => {
            // The larger operand at bit 126, the smaller aligned under it
            // with its lost bits folded into a sticky bit: 62 extra bits
            // round any precision up to 64 exactly.
            let (big, small) = if (ea, sa) >= (eb, sb) {
                ((na, ea, sa), (nb, eb, sb))
            } else {
                ((nb, eb, sb), (na, ea, sa))
            };
            let x = u128::from(big.2) << 63;
            let d = (big.1 - small.1) as u32;
            let y0 = u128::from(small.2) << 63;
            let y = match d {
                0 => y0,
                1..=127 => (y0 >> d) | u128::from(y0 & ((1 << d) - 1) != 0),
                _ => 1,
            };
            let e = big.1 - 63;
            if big.0 == small.0 {
                round(env, fmt, big.0, e, x + y)
            } else if x == y {
                pack_special(
                    fmt,
                    Num::Zero {
                        neg: zero_sum_sign(env.rc),
                    },
                )
            } else {
                round(env, fmt, big.0, e, x - y)
            }
        }
        _ => unreachable_bits(env),
    };
    Out::Bits(bits)
}

/// a × b + c with one rounding, the product negated when `neg_product`
/// and c when `neg_addend` (the FMA instructions, for single and double
/// precision: both significands have at most 53 bits, so the product is
/// exact in 106). The sum is aligned as [`add`] aligns: the larger term
/// at bit 126, the smaller's bits lost below bit 0 folded into a sticky
/// bit, which leaves more than p + 2 bits above it whenever bits are lost.
pub(crate) fn fma(
    env: &mut Env,
    fmt: Format,
    [a, b, c]: [Num; 3],
    neg_product: bool,
    neg_addend: bool,
) -> Out {
    if let Some(o) = operands(env, fmt, &[a, b, c]) {
        return o;
    }
    let pneg = (a.neg() != b.neg()) != neg_product;
    let c = c.with_sign(c.neg() != neg_addend);
    // The product as (sign, exponent, significand with bit 126 its top).
    let product = match (a, b) {
        (Num::Inf { .. }, Num::Zero { .. }) | (Num::Zero { .. }, Num::Inf { .. }) => {
            return invalid(env, fmt)
        }
        (Num::Inf { .. }, _) | (_, Num::Inf { .. }) => Num::Inf { neg: pneg },
        (Num::Zero { .. }, _) | (_, Num::Zero { .. }) => Num::Zero { neg: pneg },
        (
            Num::Fin {
                exp: ea, sig: sa, ..
            },
            Num::Fin {
                exp: eb, sig: sb, ..
            },
        ) => {
            let p = u128::from(sa) * u128::from(sb);
            // Bit 127 or 126 is the top; the low 22 bits are zero.
            let (m, e) = if p >> 127 != 0 {
                (p >> 1, ea + eb + 1)
            } else {
                (p, ea + eb)
            };
            return Out::Bits(match c {
                Num::Inf { .. } => pack_special(fmt, c),
                Num::Zero { .. } => round(env, fmt, pneg, e, m),
                Num::Fin {
                    neg: nc,
                    exp: ec,
                    sig: sc,
                    ..
                } => sum(env, fmt, (pneg, e, m), (nc, ec - 63, u128::from(sc) << 63)),
                _ => unreachable_bits(env),
            });
        }
        _ => return Out::Bits(unreachable_bits(env)),
    };
    // The product is infinite or zero.
    let bits = match (product, c) {
        (Num::Inf { neg: x }, Num::Inf { neg: y }) if x != y => return invalid(env, fmt),
        (Num::Inf { .. }, _) => pack_special(fmt, product),
        (_, Num::Inf { .. }) => pack_special(fmt, c),
        (Num::Zero { neg: x }, Num::Zero { neg: y }) => pack_special(
            fmt,
            Num::Zero {
                neg: if x == y { x } else { zero_sum_sign(env.rc) },
            },
        ),
        (_, Num::Fin { neg, exp, sig, .. }) => round(env, fmt, neg, exp, u128::from(sig)),
        _ => unreachable_bits(env),
    };
    Out::Bits(bits)
}

/// Rounds the sum of two exact terms (sign, exponent, significand whose
/// top bit is bit 126), aligned as [`add`] aligns.
fn sum(env: &mut Env, fmt: Format, a: (bool, i32, u128), b: (bool, i32, u128)) -> u128 {
    let (big, small) = if (a.1, a.2) >= (b.1, b.2) {
        (a, b)
    } else {
        (b, a)
    };
    let d = (big.1 - small.1) as u32;
    let y = match d {
        0 => small.2,
        1..=127 => (small.2 >> d) | u128::from(small.2 & ((1 << d) - 1) != 0),
        _ => 1,
    };
    if big.0 == small.0 {
        round(env, fmt, big.0, big.1, big.2 + y)
    } else if big.2 == y {
        pack_special(
            fmt,
            Num::Zero {
                neg: zero_sum_sign(env.rc),
            },
        )
    } else {
        round(env, fmt, big.0, big.1, big.2 - y)
    }
}

/// Operand kinds [`operands`] has excluded: never reached, and treated
/// as a case not covered rather than a result.
fn unreachable_bits(env: &mut Env) -> u128 {
    env.opaque = true;
    0
}

/// a × b.
pub(crate) fn mul(env: &mut Env, fmt: Format, a: Num, b: Num) -> Out {
    if let Some(o) = operands(env, fmt, &[a, b]) {
        return o;
    }
    let neg = a.neg() != b.neg();
    let bits = match (a, b) {
        (Num::Inf { .. }, Num::Zero { .. }) | (Num::Zero { .. }, Num::Inf { .. }) => {
            return invalid(env, fmt)
        }
        (Num::Inf { .. }, _) | (_, Num::Inf { .. }) => pack_special(fmt, Num::Inf { neg }),
        (Num::Zero { .. }, _) | (_, Num::Zero { .. }) => pack_special(fmt, Num::Zero { neg }),
        (
            Num::Fin {
                exp: ea, sig: sa, ..
            },
            Num::Fin {
                exp: eb, sig: sb, ..
            },
        ) => round(env, fmt, neg, ea + eb, u128::from(sa) * u128::from(sb)),
        _ => unreachable_bits(env),
    };
    Out::Bits(bits)
}

/// a ÷ b. A finite dividend over zero raises ZE alone: the hardware
/// reports no DE for a denormal dividend then.
pub(crate) fn div(env: &mut Env, fmt: Format, a: Num, b: Num) -> Out {
    let zero_divide = matches!(a, Num::Fin { .. }) && matches!(b, Num::Zero { .. });
    let flags = env.flags;
    if let Some(o) = operands(env, fmt, &[a, b]) {
        return o;
    }
    if zero_divide {
        env.flags = flags | ZE;
        return Out::Bits(pack_special(
            fmt,
            Num::Inf {
                neg: a.neg() != b.neg(),
            },
        ));
    }
    let neg = a.neg() != b.neg();
    let bits = match (a, b) {
        (Num::Inf { .. }, Num::Inf { .. }) | (Num::Zero { .. }, Num::Zero { .. }) => {
            return invalid(env, fmt)
        }
        (Num::Inf { .. }, _) | (_, Num::Zero { .. }) => {
            if !matches!(a, Num::Inf { .. }) {
                env.flags |= ZE;
            }
            pack_special(fmt, Num::Inf { neg })
        }
        (Num::Zero { .. }, _) | (_, Num::Inf { .. }) => pack_special(fmt, Num::Zero { neg }),
        (
            Num::Fin {
                exp: ea, sig: sa, ..
            },
            Num::Fin {
                exp: eb, sig: sb, ..
            },
        ) => {
            // Two 64-bit digits of the quotient (sa/sb < 2, so the first
            // fits), the remainder as a sticky bit.
            let (a, b) = (u128::from(sa) << 63, u128::from(sb));
            let (q1, r1) = (a / b, a % b);
            let (q2, r2) = ((r1 << 64) / b, (r1 << 64) % b);
            let q = (q1 << 64) | q2 | u128::from(r2 != 0);
            round(env, fmt, neg, ea - eb - 127, q)
        }
        _ => unreachable_bits(env),
    };
    Out::Bits(bits)
}

/// The x87's partial remainder (fprem): `a` − q·`b` with q the quotient
/// truncated toward zero, exact. Where the exponents differ by 64 or more
/// the unit reduces only part of the way: by `b` × 2^(d − n) with n = 32 +
/// (d mod 32), and reports the reduction incomplete. Returns the result
/// and, unless it is a NaN, the low bits of q and whether the reduction is
/// complete.
pub(crate) fn remainder(env: &mut Env, a: Num, b: Num) -> (Out, Option<(u64, bool)>) {
    let invalid_operands = matches!(a, Num::Inf { .. }) || matches!(b, Num::Zero { .. });
    if invalid_operands && !a.is_nan() && !b.is_nan() {
        // Before the denormal check: the CPU raises IE alone.
        return (invalid(env, F80), None);
    }
    if let Some(o) = operands(env, F80, &[a, b]) {
        return (o, None);
    }
    let neg = a.neg();
    match (a, b) {
        (Num::Zero { .. }, _) | (_, Num::Inf { .. }) => (Out::Bits(exact(env, a)), Some((0, true))),
        (
            Num::Fin {
                exp: ea, sig: sa, ..
            },
            Num::Fin {
                exp: eb, sig: sb, ..
            },
        ) => {
            let d = ea - eb;
            if d < 0 {
                return (Out::Bits(exact(env, a)), Some((0, true)));
            }
            let (n, complete) = if d < 64 {
                (d, true)
            } else {
                (32 + d % 32, false)
            };
            let num = u128::from(sa) << n;
            let (q, r) = (num / u128::from(sb), num % u128::from(sb));
            let bits = if r == 0 {
                pack_special(F80, Num::Zero { neg })
            } else {
                round(env, F80, neg, eb + (d - n), r)
            };
            (Out::Bits(bits), Some((q as u64, complete)))
        }
        _ => (Out::Bits(unreachable_bits(env)), None),
    }
}

/// A finite value, zero or infinity packed as it is.
fn exact(env: &mut Env, n: Num) -> u128 {
    match n {
        Num::Fin { neg, exp, sig, .. } => round(env, F80, neg, exp, u128::from(sig)),
        other => pack_special(F80, other),
    }
}

/// √a, for precisions up to 62 bits (SSE).
pub(crate) fn sqrt(env: &mut Env, fmt: Format, a: Num) -> Out {
    debug_assert!(fmt.p <= 62);
    if matches!(a, Num::Fin { neg: true, .. }) {
        // Invalid before denormal: a negative denormal raises IE alone.
        return invalid(env, fmt);
    }
    if let Some(o) = operands(env, fmt, &[a]) {
        return o;
    }
    let bits = match a {
        Num::Zero { .. } => pack_special(fmt, a),
        Num::Inf { neg: false } => pack_special(fmt, a),
        Num::Inf { .. } | Num::Fin { neg: true, .. } => return invalid(env, fmt),
        Num::Fin { exp, sig, .. } => {
            // An even exponent, the radicand as wide as u128 allows: the
            // root has 64 bits, the remainder is a sticky bit.
            let shift = if (exp - 63) % 2 == 0 { 63 } else { 64 };
            let m = u128::from(sig) << shift;
            let r = isqrt(m);
            let sticky = r * r != m;
            round(
                env,
                fmt,
                false,
                (exp - shift) / 2 - 1,
                (r << 1) | u128::from(sticky),
            )
        }
        _ => unreachable_bits(env),
    };
    Out::Bits(bits)
}

/// ⌊√m⌋, bit by bit.
fn isqrt(m: u128) -> u128 {
    let mut rem = m;
    let mut root = 0u128;
    let mut bit = 1u128 << 126;
    while bit > m {
        bit >>= 2;
    }
    while bit != 0 {
        if rem >= root + bit {
            rem -= root + bit;
            root = (root >> 1) + bit;
        } else {
            root >>= 1;
        }
        bit >>= 2;
    }
    root
}

/// Converts a value to `fmt` (cvtss2sd, cvtsd2ss, fld m32/m64, fst m32/m64).
pub(crate) fn convert(env: &mut Env, fmt: Format, a: Num) -> Out {
    if let Some(o) = operands(env, fmt, &[a]) {
        return o;
    }
    Out::Bits(match a {
        Num::Fin { neg, exp, sig, .. } => round(env, fmt, neg, exp, u128::from(sig)),
        _ => pack_special(fmt, a),
    })
}

/// The signed integer `v` in `fmt`.
pub(crate) fn from_int(env: &mut Env, fmt: Format, v: i64) -> u128 {
    if v == 0 {
        return 0;
    }
    round(env, fmt, v < 0, 0, u128::from(v.unsigned_abs()))
}

/// `a`'s magnitude rounded to an integer under `env.rc`, with its sign,
/// whether the rounding was inexact and whether it went up (as
/// `shift_round` says); `u128::MAX` when the magnitude has 64 or more
/// integer bits. `Ok(None)` for a zero; `Err(())` for a NaN or an infinity
/// (no integer: the caller returns its indefinite with IE).
fn integer_magnitude(a: Num, rc: u8) -> Result<Option<(bool, u128, bool, bool)>, ()> {
    let (neg, exp, sig) = match a {
        Num::Zero { .. } => return Ok(None),
        Num::Fin { neg, exp, sig, .. } => (neg, exp, sig),
        _ => return Err(()),
    };
    let (q, inexact, up) = if exp >= 0 {
        if exp >= 64 {
            (u128::MAX, false, false)
        } else {
            (u128::from(sig) << exp, false, false)
        }
    } else {
        shift_round(u128::from(sig), (-exp) as u32, rc, neg)
    };
    Ok(Some((neg, q, inexact, up)))
}

/// `a` as a signed integer of `bits` bits, rounded under `env.rc`: the
/// value, or the integer indefinite (only the sign bit) with IE for a NaN,
/// an infinity or a value out of range.
pub(crate) fn to_int(env: &mut Env, a: Num, bits: u32) -> u64 {
    let indefinite = 1u64 << (bits - 1);
    let (neg, q, inexact, up) = match integer_magnitude(a, env.rc) {
        Ok(None) => return 0,
        Ok(Some(m)) => m,
        Err(()) => {
            env.flags |= IE;
            return indefinite;
        }
    };
    let limit = u128::from(indefinite) - u128::from(!neg);
    if q > limit {
        env.flags |= IE;
        return indefinite;
    }
    if inexact {
        env.flags |= PE;
    }
    env.rounded_up = up;
    let v = q as u64;
    if neg {
        v.wrapping_neg()
    } else {
        v
    }
}

/// `a` as an unsigned integer of `bits` bits, rounded under `env.rc`
/// (the AVX-512 vcvt(t)s*2usi): the value, or all ones (the unsigned
/// integer indefinite) with IE for a NaN, an infinity, or a value out of
/// range (a negative one rounding to zero is in range).
pub(crate) fn to_uint(env: &mut Env, a: Num, bits: u32) -> u64 {
    let indefinite = u64::MAX >> (64 - bits);
    let (neg, q, inexact, up) = match integer_magnitude(a, env.rc) {
        Ok(None) => return 0,
        Ok(Some(m)) => m,
        Err(()) => {
            env.flags |= IE;
            return indefinite;
        }
    };
    if q > u128::from(indefinite) || (neg && q != 0) {
        env.flags |= IE;
        return indefinite;
    }
    if inexact {
        env.flags |= PE;
    }
    env.rounded_up = up;
    q as u64
}

/// How two values compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    Less,
    Equal,
    Greater,
    Unordered,
}

/// Compares `a` with `b`: IE for a signalling NaN, or for any NaN when
/// `signalling`; DE for a denormal.
pub(crate) fn compare(env: &mut Env, a: Num, b: Num, signalling: bool) -> Order {
    if matches!(a, Num::Bad { .. }) || matches!(b, Num::Bad { .. }) {
        env.flags |= IE;
        return Order::Unordered;
    }
    if a.is_nan() || b.is_nan() {
        if signalling || a.is_snan() || b.is_snan() {
            env.flags |= IE;
        }
        return Order::Unordered;
    }
    if a.is_denormal() || b.is_denormal() {
        env.flags |= DE;
    }
    let magnitude = |n: Num| -> (u8, i32, u64) {
        match n {
            Num::Zero { .. } => (0, 0, 0),
            Num::Fin { exp, sig, .. } => (1, exp, sig),
            _ => (2, 0, 0),
        }
    };
    let (ma, mb) = (magnitude(a), magnitude(b));
    if ma.0 == 0 && mb.0 == 0 {
        return Order::Equal;
    }
    // Signs decide unless they agree (a zero's sign included: -0 < 3
    // and +0 > -3 either way).
    let ord = match (a.neg(), b.neg()) {
        (false, true) => core::cmp::Ordering::Greater,
        (true, false) => core::cmp::Ordering::Less,
        (false, false) => ma.cmp(&mb),
        (true, true) => mb.cmp(&ma),
    };
    match ord {
        core::cmp::Ordering::Less => Order::Less,
        core::cmp::Ordering::Equal => Order::Equal,
        core::cmp::Ordering::Greater => Order::Greater,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f64_op(op: fn(&mut Env, Format, Num, Num) -> Out, a: f64, b: f64) -> (f64, u8) {
        let mut env = Env::new(RN);
        let x = unpack(F64, u128::from(a.to_bits()), false);
        let y = unpack(F64, u128::from(b.to_bits()), false);
        match op(&mut env, F64, x, y) {
            Out::Bits(v) => (f64::from_bits(v as u64), env.flags),
            Out::PropagateNaN => (f64::NAN, env.flags),
        }
    }

    #[test]
    fn double_arithmetic_rounds_as_the_hardware_does() {
        let sum: fn(&mut Env, Format, Num, Num) -> Out = |e, f, a, b| add(e, f, a, b, false);
        let sub: fn(&mut Env, Format, Num, Num) -> Out = |e, f, a, b| add(e, f, a, b, true);
        let vals = [
            0.0,
            -0.0,
            1.0,
            -1.5,
            0.1,
            3.0,
            1e308,
            -1e-308,
            5e-324,
            2.2250738585072014e-308,
            123456.789,
            f64::INFINITY,
            f64::MAX,
            1.0 + f64::EPSILON,
        ];
        for &a in &vals {
            for &b in &vals {
                for (name, op, want) in [
                    ("add", sum, a + b),
                    ("sub", sub, a - b),
                    ("mul", mul, a * b),
                    ("div", div, a / b),
                ] {
                    let (got, _) = f64_op(op, a, b);
                    assert!(
                        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                        "{a:e} {name} {b:e}: {got:e}, want {want:e}"
                    );
                }
            }
        }
    }

    #[test]
    fn square_roots_are_exact_to_the_last_bit() {
        for v in [2.0f64, 0.5, 1e-310, 1e300, 10.0, 3.0, 0.1] {
            let mut env = Env::new(RN);
            let Out::Bits(r) = sqrt(&mut env, F64, unpack(F64, u128::from(v.to_bits()), false))
            else {
                panic!()
            };
            let r = f64::from_bits(r as u64);
            // The correctly rounded root brackets v between its
            // neighbours' squares.
            let lo = f64::from_bits(r.to_bits() - 1);
            let hi = f64::from_bits(r.to_bits() + 1);
            assert!(lo * lo <= v && v <= hi * hi, "sqrt({v:e}) = {r:e}");
        }
        let mut env = Env::new(RN);
        let four = unpack(F64, u128::from(4.0f64.to_bits()), false);
        assert_eq!(
            sqrt(&mut env, F64, four),
            Out::Bits(u128::from(2.0f64.to_bits()))
        );
        assert_eq!(env.flags, 0);
    }
}
