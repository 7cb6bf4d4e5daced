//! The CPU a [`crate::Table`] emulates: the instruction-set features it
//! has, the register state its OS enables (XCR0), and the quirks where
//! x86-64 CPUs disagree.
//!
//! The rule (see the crate docs): a result that differs between CPUs is
//! modelled from a probe of the real CPU, or refused with a [`crate::Stop`];
//! it is never guessed from the vendor or family.

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod probe;

use core::fmt;
use iced_x86::{Code, CpuidFeature};

/// XCR0 bits: which register state the OS saves, and so which registers
/// instructions may use (`xgetbv` with ecx = 0).
pub mod xcr0 {
    /// x87 state.
    pub const X87: u64 = 1 << 0;
    /// SSE state: xmm0–15 and MXCSR.
    pub const SSE: u64 = 1 << 1;
    /// The upper halves of ymm0–15.
    pub const AVX: u64 = 1 << 2;
    /// k0–7.
    pub const OPMASK: u64 = 1 << 5;
    /// The upper halves of zmm0–15.
    pub const ZMM_HI256: u64 = 1 << 6;
    /// zmm16–31.
    pub const HI16_ZMM: u64 = 1 << 7;
    /// What VEX vector forms need.
    pub const AVX_STATE: u64 = SSE | AVX;
    /// What EVEX forms and mask-register forms need.
    pub const AVX512_STATE: u64 = AVX_STATE | OPMASK | ZMM_HI256 | HI16_ZMM;
}

/// Who made the CPU (CPUID leaf 0's vendor string).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    /// GenuineIntel.
    Intel,
    /// AuthenticAMD.
    Amd,
    /// Anything else, or a model built by hand.
    Other,
}

/// What `rep movs/stos/lods/cmps/scas` under the 0x67 (32-bit address)
/// prefix do to the upper halves of rcx, rsi and rdi.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addr32Rep {
    /// Every write of ecx, esi or edi zero-extends, and a zero-count rep
    /// still writes ecx (and movs/stos their pointers). Measured on AMD
    /// Zen 5 and Intel Xeon (family 6 model 85 and 207).
    ZeroUpper,
    /// As [`Addr32Rep::ZeroUpper`], but `rcx[63:32]` is never changed.
    /// Seen on AMD Zen 4 (family 25 model 17).
    KeepCountUpper,
    /// Neither was measured: an addr32 string instruction whose rcx, rsi
    /// or rdi has a non-zero upper half stops with [`crate::Stop::Opaque`]
    /// (with the upper halves zero, every CPU agrees).
    Refuse,
}

/// What `bsf` and `bsr` do to their destination when the source is zero
/// (the manuals: undefined).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitScanZero {
    /// The whole destination register is kept (all sizes, 32-bit included:
    /// no zero-extension). ZF is set; the other status flags stay
    /// undefined.
    KeepsDestination,
    /// Not measured: a zero source stops with [`crate::Stop::Opaque`].
    Refuse,
}

/// The behaviours that differ between x86-64 CPUs and that the core
/// models per CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quirks {
    /// Upper halves after addr32 rep string instructions.
    pub addr32_rep: Addr32Rep,
    /// bsf/bsr with a zero source.
    pub bit_scan_zero: BitScanZero,
}

impl Quirks {
    /// Every quirk refused: the model makes no claim a probe did not make.
    pub const REFUSE: Quirks = Quirks {
        addr32_rep: Addr32Rep::Refuse,
        bit_scan_zero: BitScanZero::Refuse,
    };
}

const FEATURE_WORDS: usize = 4;

/// One CPU as the core emulates it.
///
/// Build it with [`CpuModel::host`] (CPUID, XCR0 and the quirk probes of
/// the machine it runs on), or by hand from [`CpuModel::baseline`] with
/// the `with_*` builders. A [`crate::Table`] built for a model implements
/// only the forms the model has ([`CpuModel::supports`]); every other form
/// stops with [`crate::Stop::Unsupported`], as the CPU would raise #UD.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CpuModel {
    name: &'static str,
    vendor: Vendor,
    family: u32,
    model: u32,
    features: [u64; FEATURE_WORDS],
    xcr0: u64,
    quirks: Quirks,
}

/// What every x86-64 CPU has (x86-64 baseline, "v1"), as iced names it.
const BASELINE: &[CpuidFeature] = &[
    CpuidFeature::INTEL8086,
    CpuidFeature::INTEL186,
    CpuidFeature::INTEL286,
    CpuidFeature::INTEL386,
    CpuidFeature::INTEL486,
    CpuidFeature::X64,
    CpuidFeature::CPUID,
    CpuidFeature::MULTIBYTENOP,
    CpuidFeature::PAUSE,
    CpuidFeature::FPU,
    CpuidFeature::FPU287,
    CpuidFeature::FPU387,
    CpuidFeature::TSC,
    CpuidFeature::CX8,
    CpuidFeature::CMOV,
    CpuidFeature::CLFSH,
    CpuidFeature::MMX,
    CpuidFeature::FXSR,
    CpuidFeature::SSE,
    CpuidFeature::SSE2,
    CpuidFeature::SYSCALL,
    CpuidFeature::RDPMC,
];

/// The XCR0 state a form's features need besides the features themselves
/// (a VEX or EVEX vector form raises #UD when the OS has not enabled the
/// registers it uses; VEX forms on general-purpose registers, like BMI's,
/// need none).
fn state_needed(features: &[CpuidFeature]) -> u64 {
    use CpuidFeature as F;
    let mut need = 0;
    for &f in features {
        need |= match f {
            F::AVX512F
            | F::AVX512VL
            | F::AVX512BW
            | F::AVX512DQ
            | F::AVX512CD
            | F::AVX512ER
            | F::AVX512PF
            | F::AVX512_IFMA
            | F::AVX512_VBMI
            | F::AVX512_VBMI2
            | F::AVX512_VNNI
            | F::AVX512_BITALG
            | F::AVX512_VPOPCNTDQ
            | F::AVX512_4FMAPS
            | F::AVX512_4VNNIW
            | F::AVX512_BF16
            | F::AVX512_VP2INTERSECT
            | F::AVX512_FP16 => xcr0::AVX512_STATE,
            F::AVX
            | F::AVX2
            | F::FMA
            | F::F16C
            | F::AVX_VNNI
            | F::VAES
            | F::VPCLMULQDQ
            | F::AVX_IFMA
            | F::AVX_NE_CONVERT
            | F::AVX_VNNI_INT8
            | F::AVX_VNNI_INT16 => xcr0::AVX_STATE,
            _ => 0,
        };
    }
    need
}

impl CpuModel {
    /// The x86-64 baseline (x86-64-v1: SSE2, cmov, cx8, x87, syscall),
    /// with x87 and SSE state and every quirk refused. Named "x86-64
    /// baseline"; an owner that changes it should rename it.
    #[must_use]
    pub const fn baseline() -> CpuModel {
        let mut m = CpuModel {
            name: "x86-64 baseline",
            vendor: Vendor::Other,
            family: 0,
            model: 0,
            features: [0; FEATURE_WORDS],
            xcr0: xcr0::X87 | xcr0::SSE,
            quirks: Quirks::REFUSE,
        };
        let mut k = 0;
        while k < BASELINE.len() {
            m = m.with_feature(BASELINE[k]);
            k += 1;
        }
        m
    }

    /// Every feature iced knows and every XCR0 state, quirks refused: no
    /// real CPU, but the core's whole repertoire (for coverage checks and
    /// tests that do not compare with the CPU).
    #[must_use]
    pub const fn every_feature() -> CpuModel {
        CpuModel {
            name: "every feature",
            features: [u64::MAX; FEATURE_WORDS],
            xcr0: xcr0::X87 | xcr0::AVX512_STATE,
            ..CpuModel::baseline()
        }
    }

    /// This machine: features from CPUID, XCR0 from `xgetbv` (read only
    /// when CPUID says the OS enabled XSAVE; x87 and SSE state otherwise),
    /// and the quirks measured by running the instructions natively once
    /// (see [`Quirks`]). Named "host".
    ///
    /// Runs CPUID, `xgetbv`, a few bit scans and string instructions, and
    /// on Linux one `mmap(MAP_32BIT)` and `munmap` of a scratch page below
    /// 4 GiB (addr32 string instructions reach no other memory); when that
    /// page cannot be had, the addr32 quirk is [`Addr32Rep::Refuse`].
    /// Call it once, before any signal is armed; it does not allocate.
    #[cfg(target_arch = "x86_64")]
    #[must_use]
    pub fn host() -> CpuModel {
        probe::host()
    }

    /// Renamed (a model built by hand should say what it stands for).
    #[must_use]
    pub const fn with_name(mut self, name: &'static str) -> CpuModel {
        self.name = name;
        self
    }

    /// With vendor, family and model (display family and model, as
    /// `/proc/cpuinfo` shows them).
    #[must_use]
    pub const fn with_identity(mut self, vendor: Vendor, family: u32, model: u32) -> CpuModel {
        self.vendor = vendor;
        self.family = family;
        self.model = model;
        self
    }

    /// With `f`.
    #[must_use]
    pub const fn with_feature(mut self, f: CpuidFeature) -> CpuModel {
        let n = f as usize;
        if n < FEATURE_WORDS * 64 {
            self.features[n / 64] |= 1 << (n % 64);
        }
        self
    }

    /// Without `f`.
    #[must_use]
    pub const fn without_feature(mut self, f: CpuidFeature) -> CpuModel {
        let n = f as usize;
        if n < FEATURE_WORDS * 64 {
            self.features[n / 64] &= !(1 << (n % 64));
        }
        self
    }

    /// With XCR0 = `xcr0` (see [`xcr0`]).
    #[must_use]
    pub const fn with_xcr0(mut self, xcr0: u64) -> CpuModel {
        self.xcr0 = xcr0;
        self
    }

    /// With `quirks`.
    #[must_use]
    pub const fn with_quirks(mut self, quirks: Quirks) -> CpuModel {
        self.quirks = quirks;
        self
    }

    /// What the model stands for ("host", "x86-64 baseline", or the
    /// owner's name).
    #[must_use]
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The vendor.
    #[must_use]
    pub const fn vendor(&self) -> Vendor {
        self.vendor
    }

    /// Display family (0 when built by hand).
    #[must_use]
    pub const fn family(&self) -> u32 {
        self.family
    }

    /// Display model (0 when built by hand).
    #[must_use]
    pub const fn model(&self) -> u32 {
        self.model
    }

    /// XCR0: the register state the OS enables.
    #[must_use]
    pub const fn xcr0(&self) -> u64 {
        self.xcr0
    }

    /// The quirks.
    #[must_use]
    pub const fn quirks(&self) -> Quirks {
        self.quirks
    }

    /// Whether the model has CPUID feature `f`.
    #[must_use]
    pub const fn has(&self, f: CpuidFeature) -> bool {
        let n = f as usize;
        n < FEATURE_WORDS * 64 && self.features[n / 64] & (1 << (n % 64)) != 0
    }

    /// Whether the state bits `bits` are all enabled in XCR0.
    #[must_use]
    pub const fn enables(&self, bits: u64) -> bool {
        self.xcr0 & bits == bits
    }

    /// Whether the CPU runs `code` as that form: it has every feature iced
    /// lists for it and XCR0 enables the registers it uses. endbr64 and
    /// endbr32 are always run (they sit in the hint-nop space: a CPU
    /// without CET runs them as nop).
    #[must_use]
    pub fn supports(&self, code: Code) -> bool {
        if matches!(code, Code::Endbr64 | Code::Endbr32) {
            return true;
        }
        let features = code.cpuid_features();
        features.iter().all(|&f| self.has(f)) && self.enables(state_needed(features))
    }
}

impl fmt::Debug for CpuModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpuModel")
            .field("name", &self.name)
            .field("vendor", &self.vendor)
            .field("family", &self.family)
            .field("model", &self.model)
            .field("xcr0", &self.xcr0)
            .field("quirks", &self.quirks)
            .finish_non_exhaustive()
    }
}

/// One line: name, identity, XCR0 and quirks, e.g. `host (Intel family 6
/// model 85, xcr0 0xe7; addr32 rep: ZeroUpper; bsf/bsr zero source:
/// KeepsDestination)`.
impl fmt::Display for CpuModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({:?} family {} model {}, xcr0 {:#x}; addr32 rep: {:?}; bsf/bsr zero source: {:?})",
            self.name,
            self.vendor,
            self.family,
            self.model,
            self.xcr0,
            self.quirks.addr32_rep,
            self.quirks.bit_scan_zero
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iced_features_fit_the_bitset() {
        assert!(CpuidFeature::values().len() <= FEATURE_WORDS * 64);
    }

    #[test]
    fn baseline_runs_sse2_but_not_avx() {
        let m = CpuModel::baseline();
        assert!(m.supports(Code::Paddb_xmm_xmmm128));
        assert!(m.supports(Code::Add_rm64_r64));
        assert!(m.supports(Code::Endbr64));
        assert!(!m.supports(Code::VEX_Vmovdqu_ymm_ymmm256));
        assert!(!m.supports(Code::Tzcnt_r64_rm64));
    }

    #[test]
    fn vector_forms_need_their_xcr0_state() {
        let m = CpuModel::every_feature();
        assert!(m.supports(Code::EVEX_Vpaddb_zmm_k1z_zmm_zmmm512));
        let no512 = m.with_xcr0(xcr0::X87 | xcr0::AVX_STATE);
        assert!(!no512.supports(Code::EVEX_Vpaddb_xmm_k1z_xmm_xmmm128));
        assert!(!no512.supports(Code::VEX_Kmovd_kr_r32));
        assert!(no512.supports(Code::VEX_Vmovdqu_ymm_ymmm256));
        let sse = m.with_xcr0(xcr0::X87 | xcr0::SSE);
        assert!(!sse.supports(Code::VEX_Vmovdqu_xmm_xmmm128));
        // BMI2 is VEX-encoded but uses general-purpose registers only.
        assert!(sse.supports(Code::VEX_Shlx_r64_rm64_r64));
    }
}
