//! Forms whose results differ between CPUs, re-installed for the table's
//! [`CpuModel`]: each is modelled from what [`CpuModel::host`]'s probe
//! measured, or refused with [`Stop::Opaque`] where the results would
//! differ; never guessed.
//!
//! `forms.rs` installs the variants measured on Zen 5 and Intel; this
//! replaces them where the model says otherwise.

use super::bits::{self, bit_scan};
use super::string::{self, string_with, KEEP_COUNT_UPPER, REFUSE_UPPER};
use super::{read, Flow};
use crate::insn::Insn;
use crate::model::{Addr32Rep, BitScanZero, CpuModel};
use crate::step::{Machine, Retired, Stop};
use crate::table::{Handler, Table};
use iced_x86::{Code, CpuidFeature};

/// Installs every string form with the addr32 variant `Q`.
fn strings<X: Machine, const Q: u8>(t: &mut Table<X>) {
    use string::{CMPS, LODS, MOVS, SCAS, STOS};
    let forms: [(Code, Handler<X>); 20] = [
        (Code::Movsb_m8_m8, string_with::<X, MOVS, 1, Q>),
        (Code::Movsw_m16_m16, string_with::<X, MOVS, 2, Q>),
        (Code::Movsd_m32_m32, string_with::<X, MOVS, 4, Q>),
        (Code::Movsq_m64_m64, string_with::<X, MOVS, 8, Q>),
        (Code::Stosb_m8_AL, string_with::<X, STOS, 1, Q>),
        (Code::Stosw_m16_AX, string_with::<X, STOS, 2, Q>),
        (Code::Stosd_m32_EAX, string_with::<X, STOS, 4, Q>),
        (Code::Stosq_m64_RAX, string_with::<X, STOS, 8, Q>),
        (Code::Lodsb_AL_m8, string_with::<X, LODS, 1, Q>),
        (Code::Lodsw_AX_m16, string_with::<X, LODS, 2, Q>),
        (Code::Lodsd_EAX_m32, string_with::<X, LODS, 4, Q>),
        (Code::Lodsq_RAX_m64, string_with::<X, LODS, 8, Q>),
        (Code::Cmpsb_m8_m8, string_with::<X, CMPS, 1, Q>),
        (Code::Cmpsw_m16_m16, string_with::<X, CMPS, 2, Q>),
        (Code::Cmpsd_m32_m32, string_with::<X, CMPS, 4, Q>),
        (Code::Cmpsq_m64_m64, string_with::<X, CMPS, 8, Q>),
        (Code::Scasb_AL_m8, string_with::<X, SCAS, 1, Q>),
        (Code::Scasw_AX_m16, string_with::<X, SCAS, 2, Q>),
        (Code::Scasd_EAX_m32, string_with::<X, SCAS, 4, Q>),
        (Code::Scasq_RAX_m64, string_with::<X, SCAS, 8, Q>),
    ];
    for (code, h) in forms {
        t.set(code, h);
    }
}

/// bsf/bsr (`OP`) that stops with [`Stop::Opaque`] on a zero source,
/// whose result the model does not know.
fn bit_scan_nonzero<X: Machine, const OP: u8, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    if read::<X, S>(x, i, i.op[1], r)? == 0 {
        return Err(Stop::Opaque);
    }
    bit_scan::<X, OP, S>(x, i, r)
}

/// The bsf (`OP` = BSF) or bsr handlers for 16, 32 and 64 bits under the
/// model's zero-source quirk.
fn scans<X: Machine, const OP: u8>(zero: BitScanZero) -> [Handler<X>; 3] {
    match zero {
        BitScanZero::KeepsDestination => [
            bit_scan::<X, OP, 2>,
            bit_scan::<X, OP, 4>,
            bit_scan::<X, OP, 8>,
        ],
        BitScanZero::Refuse => [
            bit_scan_nonzero::<X, OP, 2>,
            bit_scan_nonzero::<X, OP, 4>,
            bit_scan_nonzero::<X, OP, 8>,
        ],
    }
}

/// Re-installs the forms `model`'s quirks change.
pub(crate) fn apply<X: Machine>(t: &mut Table<X>, model: &CpuModel) {
    let q = model.quirks();
    match q.addr32_rep {
        Addr32Rep::ZeroUpper => {}
        Addr32Rep::KeepCountUpper => strings::<X, KEEP_COUNT_UPPER>(t),
        Addr32Rep::Refuse => strings::<X, REFUSE_UPPER>(t),
    }
    let bsf = scans::<X, { bits::BSF }>(q.bit_scan_zero);
    let bsr = scans::<X, { bits::BSR }>(q.bit_scan_zero);
    for (code, h) in [Code::Bsf_r16_rm16, Code::Bsf_r32_rm32, Code::Bsf_r64_rm64]
        .into_iter()
        .zip(bsf)
    {
        t.set(code, h);
    }
    for (code, h) in [Code::Bsr_r16_rm16, Code::Bsr_r32_rm32, Code::Bsr_r64_rm64]
        .into_iter()
        .zip(bsr)
    {
        t.set(code, h);
    }
    // Without BMI1 (LZCNT), the F3-prefixed encodings of tzcnt (lzcnt)
    // are rep bsf (rep bsr): the CPU ignores the prefix.
    if !model.has(CpuidFeature::BMI1) {
        for (code, h) in [
            Code::Tzcnt_r16_rm16,
            Code::Tzcnt_r32_rm32,
            Code::Tzcnt_r64_rm64,
        ]
        .into_iter()
        .zip(bsf)
        {
            t.set(code, h);
        }
    }
    if !model.has(CpuidFeature::LZCNT) {
        for (code, h) in [
            Code::Lzcnt_r16_rm16,
            Code::Lzcnt_r32_rm32,
            Code::Lzcnt_r64_rm64,
        ]
        .into_iter()
        .zip(bsr)
        {
            t.set(code, h);
        }
    }
}
