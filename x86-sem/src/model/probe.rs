//! [`CpuModel::host`]: CPUID, XCR0, and the quirk probes, which run the
//! instructions whose results differ between CPUs on this CPU and read
//! what they did.
//!
//! The only unsafe code of the crate: `cpuid`, `xgetbv`, the probe
//! instructions in inline assembly, and on Linux one raw `mmap`/`munmap`
//! of a scratch page below 4 GiB for the addr32 string probes.

use super::{xcr0, Addr32Rep, BitScanZero, CpuModel, Quirks, Vendor};
use core::arch::asm;
use core::arch::x86_64::{__cpuid_count, _xgetbv, CpuidResult};
use iced_x86::CpuidFeature as F;

const EAX: u8 = 0;
const EBX: u8 = 1;
const ECX: u8 = 2;
const EDX: u8 = 3;

/// Features every x86-64 CPU has and no CPUID bit reports.
const ALWAYS: &[F] = &[
    F::INTEL8086,
    F::INTEL186,
    F::INTEL286,
    F::INTEL386,
    F::INTEL486,
    F::X64,
    F::CPUID,
    F::MULTIBYTENOP,
    F::PAUSE,
    F::RDPMC,
];

/// Where CPUID reports each feature: (feature, leaf, subleaf, register,
/// bit). XSAVE is read from OSXSAVE (xgetbv raises #UD unless the OS
/// enabled XSAVE) and PKU from OSPKE (rdpkru likewise). A feature not
/// listed is absent from the host model, so its forms are refused.
const MAP: &[(F, u32, u32, u8, u8)] = &[
    (F::FPU, 1, 0, EDX, 0),
    (F::FPU287, 1, 0, EDX, 0),
    (F::FPU387, 1, 0, EDX, 0),
    (F::TSC, 1, 0, EDX, 4),
    (F::CX8, 1, 0, EDX, 8),
    (F::CMOV, 1, 0, EDX, 15),
    (F::CLFSH, 1, 0, EDX, 19),
    (F::MMX, 1, 0, EDX, 23),
    (F::FXSR, 1, 0, EDX, 24),
    (F::SSE, 1, 0, EDX, 25),
    (F::SSE2, 1, 0, EDX, 26),
    (F::SSE3, 1, 0, ECX, 0),
    (F::PCLMULQDQ, 1, 0, ECX, 1),
    (F::SSSE3, 1, 0, ECX, 9),
    (F::FMA, 1, 0, ECX, 12),
    (F::CMPXCHG16B, 1, 0, ECX, 13),
    (F::SSE4_1, 1, 0, ECX, 19),
    (F::SSE4_2, 1, 0, ECX, 20),
    (F::MOVBE, 1, 0, ECX, 22),
    (F::POPCNT, 1, 0, ECX, 23),
    (F::AES, 1, 0, ECX, 25),
    (F::XSAVE, 1, 0, ECX, 27),
    (F::AVX, 1, 0, ECX, 28),
    (F::F16C, 1, 0, ECX, 29),
    (F::RDRAND, 1, 0, ECX, 30),
    (F::FSGSBASE, 7, 0, EBX, 0),
    (F::BMI1, 7, 0, EBX, 3),
    (F::HLE, 7, 0, EBX, 4),
    (F::AVX2, 7, 0, EBX, 5),
    (F::BMI2, 7, 0, EBX, 8),
    (F::INVPCID, 7, 0, EBX, 10),
    (F::RTM, 7, 0, EBX, 11),
    // xtest: either of the two TSX features.
    (F::HLE_or_RTM, 7, 0, EBX, 4),
    (F::HLE_or_RTM, 7, 0, EBX, 11),
    (F::MPX, 7, 0, EBX, 14),
    (F::AVX512F, 7, 0, EBX, 16),
    (F::AVX512DQ, 7, 0, EBX, 17),
    (F::RDSEED, 7, 0, EBX, 18),
    (F::ADX, 7, 0, EBX, 19),
    (F::SMAP, 7, 0, EBX, 20),
    (F::AVX512_IFMA, 7, 0, EBX, 21),
    (F::CLFLUSHOPT, 7, 0, EBX, 23),
    (F::CLWB, 7, 0, EBX, 24),
    (F::AVX512PF, 7, 0, EBX, 26),
    (F::AVX512ER, 7, 0, EBX, 27),
    (F::AVX512CD, 7, 0, EBX, 28),
    (F::SHA, 7, 0, EBX, 29),
    (F::AVX512BW, 7, 0, EBX, 30),
    (F::AVX512VL, 7, 0, EBX, 31),
    (F::PREFETCHWT1, 7, 0, ECX, 0),
    (F::AVX512_VBMI, 7, 0, ECX, 1),
    (F::PKU, 7, 0, ECX, 4),
    (F::WAITPKG, 7, 0, ECX, 5),
    (F::AVX512_VBMI2, 7, 0, ECX, 6),
    (F::CET_SS, 7, 0, ECX, 7),
    (F::GFNI, 7, 0, ECX, 8),
    (F::VAES, 7, 0, ECX, 9),
    (F::VPCLMULQDQ, 7, 0, ECX, 10),
    (F::AVX512_VNNI, 7, 0, ECX, 11),
    (F::AVX512_BITALG, 7, 0, ECX, 12),
    (F::AVX512_VPOPCNTDQ, 7, 0, ECX, 14),
    (F::RDPID, 7, 0, ECX, 22),
    (F::CLDEMOTE, 7, 0, ECX, 25),
    (F::MOVDIRI, 7, 0, ECX, 27),
    (F::MOVDIR64B, 7, 0, ECX, 28),
    (F::AVX512_4VNNIW, 7, 0, EDX, 2),
    (F::AVX512_4FMAPS, 7, 0, EDX, 3),
    (F::AVX512_VP2INTERSECT, 7, 0, EDX, 8),
    (F::SERIALIZE, 7, 0, EDX, 14),
    (F::CET_IBT, 7, 0, EDX, 20),
    (F::AVX512_FP16, 7, 0, EDX, 23),
    (F::AVX_VNNI, 7, 1, EAX, 4),
    (F::AVX512_BF16, 7, 1, EAX, 5),
    (F::XSAVEOPT, 0xd, 1, EAX, 0),
    (F::XSAVEC, 0xd, 1, EAX, 1),
    (F::XSAVES, 0xd, 1, EAX, 3),
    (F::LZCNT, 0x8000_0001, 0, ECX, 5),
    (F::SSE4A, 0x8000_0001, 0, ECX, 6),
    (F::PREFETCHW, 0x8000_0001, 0, ECX, 8),
    (F::XOP, 0x8000_0001, 0, ECX, 11),
    (F::FMA4, 0x8000_0001, 0, ECX, 16),
    (F::TBM, 0x8000_0001, 0, ECX, 21),
    (F::SYSCALL, 0x8000_0001, 0, EDX, 11),
    (F::RDTSCP, 0x8000_0001, 0, EDX, 27),
    (F::CLZERO, 0x8000_0008, 0, EBX, 0),
];

fn cpuid(leaf: u32, sub: u32) -> CpuidResult {
    // SAFETY: cpuid exists on every x86-64 CPU and only writes the four
    // registers the intrinsic returns.
    #[allow(unused_unsafe)]
    unsafe {
        __cpuid_count(leaf, sub)
    }
}

/// How many distinct (leaf, subleaf) pairs [`host`] keeps (MAP names six).
const LEAVES: usize = 8;

/// CPUID of (`leaf`, `sub`), from `read` when it holds it; read and kept
/// otherwise (a full `read` is not extended, only bypassed).
fn cached_cpuid(read: &mut [Option<(u32, u32, CpuidResult)>], leaf: u32, sub: u32) -> CpuidResult {
    for entry in read.iter_mut() {
        match *entry {
            Some((l, s, r)) if (l, s) == (leaf, sub) => return r,
            Some(_) => {}
            None => {
                let r = cpuid(leaf, sub);
                *entry = Some((leaf, sub, r));
                return r;
            }
        }
    }
    cpuid(leaf, sub)
}

/// Whether `leaf` is within the range CPUID reports (basic or extended).
fn leaf_exists(leaf: u32, max_basic: u32, max_ext: u32) -> bool {
    if leaf >= 0x8000_0000 {
        leaf <= max_ext
    } else {
        leaf <= max_basic
    }
}

pub(super) fn host() -> CpuModel {
    let l0 = cpuid(0, 0);
    let max_basic = l0.eax;
    let max_ext = cpuid(0x8000_0000, 0).eax;
    let vendor = match (l0.ebx, l0.edx, l0.ecx) {
        (0x756e_6547, 0x4965_6e69, 0x6c65_746e) => Vendor::Intel,
        (0x6874_7541, 0x6974_6e65, 0x444d_4163) => Vendor::Amd,
        _ => Vendor::Other,
    };
    // Each (leaf, subleaf) is read once: in a virtual machine every CPUID
    // exits to the hypervisor (microseconds each), and MAP names the same
    // few leaves a hundred times.
    let mut read: [Option<(u32, u32, CpuidResult)>; LEAVES] = [None; LEAVES];
    let sig = cached_cpuid(&mut read, 1, 0).eax;
    let base_family = (sig >> 8) & 0xf;
    let base_model = (sig >> 4) & 0xf;
    let family = if base_family == 0xf {
        base_family + ((sig >> 20) & 0xff)
    } else {
        base_family
    };
    let model = if base_family == 0x6 || base_family == 0xf {
        base_model | ((sig >> 16) & 0xf) << 4
    } else {
        base_model
    };

    let mut m = CpuModel::baseline()
        .with_name("host")
        .with_identity(vendor, family, model);
    m.features = [0; super::FEATURE_WORDS];
    for &f in ALWAYS {
        m = m.with_feature(f);
    }
    // Leaf 7 subleaf 1 exists when leaf 7 subleaf 0 says so.
    let max7 = if max_basic >= 7 {
        cached_cpuid(&mut read, 7, 0).eax
    } else {
        0
    };
    for &(f, leaf, sub, reg, bit) in MAP {
        if !leaf_exists(leaf, max_basic, max_ext) || (leaf == 7 && sub > max7) {
            continue;
        }
        let r = cached_cpuid(&mut read, leaf, sub);
        let v = [r.eax, r.ebx, r.ecx, r.edx][usize::from(reg)];
        if v & (1 << bit) != 0 {
            m = m.with_feature(f);
        }
    }
    m.xcr0 = if m.has(F::XSAVE) {
        // SAFETY: OSXSAVE is set, so xgetbv is enabled; XCR0 always exists.
        unsafe { read_xcr0() }
    } else {
        xcr0::X87 | xcr0::SSE
    };
    m.quirks = Quirks {
        addr32_rep: probe_addr32_rep(),
        bit_scan_zero: probe_bit_scan_zero(),
    };
    m
}

/// # Safety
/// CPUID.1:ECX.OSXSAVE must be set.
#[target_feature(enable = "xsave")]
unsafe fn read_xcr0() -> u64 {
    // SAFETY: the caller checked OSXSAVE.
    unsafe { _xgetbv(0) }
}

/// What a destination holds before a bit scan of zero.
const SENTINEL: u64 = 0x0123_4567_89ab_cdef;

/// bsf and bsr of a zero source, in every size: the destination register
/// must come back whole (the core's model) or the quirk is refused.
fn probe_bit_scan_zero() -> BitScanZero {
    let mut out = [0u64; 6];
    // SAFETY: register-only bit scans; no memory, no stack.
    unsafe {
        asm!("bsf {d:x}, {s:x}", d = inout(reg) SENTINEL => out[0], s = in(reg) 0u64, options(nomem, nostack));
        asm!("bsf {d:e}, {s:e}", d = inout(reg) SENTINEL => out[1], s = in(reg) 0u64, options(nomem, nostack));
        asm!("bsf {d}, {s}", d = inout(reg) SENTINEL => out[2], s = in(reg) 0u64, options(nomem, nostack));
        asm!("bsr {d:x}, {s:x}", d = inout(reg) SENTINEL => out[3], s = in(reg) 0u64, options(nomem, nostack));
        asm!("bsr {d:e}, {s:e}", d = inout(reg) SENTINEL => out[4], s = in(reg) 0u64, options(nomem, nostack));
        asm!("bsr {d}, {s}", d = inout(reg) SENTINEL => out[5], s = in(reg) 0u64, options(nomem, nostack));
    }
    if out.iter().all(|&d| d == SENTINEL) {
        BitScanZero::KeepsDestination
    } else {
        BitScanZero::Refuse
    }
}

/// Garbage put in the upper halves of rcx, rsi and rdi.
const HIGH: u64 = 0xa5a5_a5a5 << 32;

/// One addr32 string instruction (raw bytes: the 0x67 prefix spelt out)
/// on rcx, rsi, rdi, with al = 0; returns rcx, rsi, rdi after it.
macro_rules! string_probe {
    ($name:ident, $bytes:literal) => {
        /// # Safety
        /// esi and edi (zero-extended) address at least `ecx` readable and
        /// writable bytes each.
        unsafe fn $name(rcx: u64, rsi: u64, rdi: u64) -> [u64; 3] {
            let (mut c, mut s, mut d) = (rcx, rsi, rdi);
            // SAFETY: the caller's contract; DF is clear at asm entry.
            unsafe {
                asm!(
                    concat!(".byte ", $bytes),
                    inout("rcx") c,
                    inout("rsi") s,
                    inout("rdi") d,
                    inout("rax") 0u64 => _,
                    options(nostack)
                );
            }
            [c, s, d]
        }
    };
}

string_probe!(rep_movsb, "0x67, 0xf3, 0xa4");
string_probe!(rep_stosb, "0x67, 0xf3, 0xaa");
string_probe!(rep_lodsb, "0x67, 0xf3, 0xac");
string_probe!(repe_cmpsb, "0x67, 0xf3, 0xa6");
string_probe!(repne_scasb, "0x67, 0xf2, 0xae");
string_probe!(movsb, "0x67, 0xa4");
string_probe!(stosb, "0x67, 0xaa");
string_probe!(lodsb, "0x67, 0xac");
string_probe!(cmpsb, "0x67, 0xa6");
string_probe!(scasb, "0x67, 0xae");

type Probe = unsafe fn(u64, u64, u64) -> [u64; 3];

/// movs, stos, lods, cmps, scas: (rep form, plain form, uses rsi, uses
/// rdi).
const STRING_OPS: [(Probe, Probe, bool, bool); 5] = [
    (rep_movsb, movsb, true, true),
    (rep_stosb, stosb, false, true),
    (rep_lodsb, lodsb, true, false),
    (repe_cmpsb, cmpsb, true, true),
    (repne_scasb, scasb, false, true),
];

/// Which of rcx, rsi, rdi came back with a zero upper half, three bits
/// per run: for each op, rep with ecx = 1, rep with ecx = 0, then the
/// plain form.
fn signature(run: impl Fn(usize, usize) -> [u64; 3]) -> u64 {
    let mut sig = 0;
    for op in 0..STRING_OPS.len() {
        for kind in 0..3 {
            let regs = run(op, kind);
            for (n, v) in regs.iter().enumerate() {
                if v >> 32 == 0 {
                    sig |= 1 << ((op * 3 + kind) * 3 + n);
                }
            }
        }
    }
    sig
}

/// The signature the core produces under `rep` (its model of the quirk).
fn expected(rep: Addr32Rep) -> u64 {
    signature(|op, kind| {
        let (_, _, uses_si, uses_di) = STRING_OPS[op];
        let zero = |z: bool| if z { 0 } else { HIGH };
        let movs_or_stos = op <= 1;
        let (count, si, di) = match kind {
            // One iteration: every register the op steps is written.
            0 => (true, uses_si, uses_di),
            // No iteration: ecx is written, and movs/stos their pointers.
            1 => (true, op == 0, movs_or_stos),
            _ => (false, uses_si, uses_di),
        };
        let count = count && rep == Addr32Rep::ZeroUpper;
        [zero(count), zero(si), zero(di)]
    })
}

fn probe_addr32_rep() -> Addr32Rep {
    let Some(page) = low_page() else {
        return Addr32Rep::Refuse;
    };
    let measured = signature(|op, kind| {
        let (rep, plain, _, _) = STRING_OPS[op];
        let (f, count) = match kind {
            0 => (rep, 1),
            1 => (rep, 0),
            _ => (plain, 0),
        };
        // SAFETY: esi and edi point into the scratch page (at 0 and 64),
        // which is readable and writable, and at most one byte each is
        // touched.
        unsafe { f(HIGH | count, HIGH | page, HIGH | (page + 64)) }
    });
    free_low_page(page);
    if measured == expected(Addr32Rep::ZeroUpper) {
        Addr32Rep::ZeroUpper
    } else if measured == expected(Addr32Rep::KeepCountUpper) {
        Addr32Rep::KeepCountUpper
    } else {
        Addr32Rep::Refuse
    }
}

/// A zeroed private page below 4 GiB (`mmap` with `MAP_32BIT`), or None.
#[cfg(target_os = "linux")]
fn low_page() -> Option<u64> {
    const PROT_READ_WRITE: u64 = 3;
    const MAP_PRIVATE_ANONYMOUS_32BIT: u64 = 0x02 | 0x20 | 0x40;
    let ret: i64;
    // SAFETY: mmap of a new anonymous mapping at an address the kernel
    // picks; it changes no existing mapping.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") 9i64 => ret,
            in("rdi") 0u64,
            in("rsi") 4096u64,
            in("rdx") PROT_READ_WRITE,
            in("r10") MAP_PRIVATE_ANONYMOUS_32BIT,
            in("r8") -1i64,
            in("r9") 0u64,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        );
    }
    let addr = ret as u64;
    if ret < 0 {
        return None;
    }
    if addr + 4096 > 1 << 32 {
        free_low_page(addr);
        return None;
    }
    Some(addr)
}

#[cfg(target_os = "linux")]
fn free_low_page(addr: u64) {
    // SAFETY: unmaps the page low_page mapped, which nothing else uses.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") 11i64 => _,
            in("rdi") addr,
            in("rsi") 4096u64,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn low_page() -> Option<u64> {
    None
}

#[cfg(not(target_os = "linux"))]
fn free_low_page(_addr: u64) {}

#[cfg(test)]
mod tests {
    use super::*;

    /// A feature host() cannot see would make its forms refused on every
    /// CPU that has them.
    #[test]
    fn host_can_detect_every_feature_the_core_uses() {
        let table = crate::Table::<crate::Cpu<crate::CpuState, crate::NoMemory>>::boxed(
            &CpuModel::every_feature(),
        );
        for code in table.implemented() {
            for f in code.cpuid_features() {
                assert!(
                    ALWAYS.contains(f) || MAP.iter().any(|m| m.0 == *f),
                    "{code:?} needs {f:?}, which host() does not read"
                );
            }
        }
    }

    #[test]
    fn every_leaf_map_reads_is_read_once() {
        let mut pairs: alloc::vec::Vec<(u32, u32)> = MAP.iter().map(|m| (m.1, m.2)).collect();
        pairs.sort_unstable();
        pairs.dedup();
        assert!(
            pairs.len() <= LEAVES,
            "{} leaves for {LEAVES} places",
            pairs.len()
        );
        let mut read = [None; LEAVES];
        for &(leaf, sub) in pairs.iter().chain(pairs.iter().rev()) {
            assert_eq!(cached_cpuid(&mut read, leaf, sub), cpuid(leaf, sub));
        }
        assert_eq!(read.iter().flatten().count(), pairs.len());
    }

    #[test]
    fn the_two_models_have_different_signatures() {
        assert_ne!(
            expected(Addr32Rep::ZeroUpper),
            expected(Addr32Rep::KeepCountUpper)
        );
    }
}
