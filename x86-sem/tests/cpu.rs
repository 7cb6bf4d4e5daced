//! Every form the dispatch table implements, checked against the CPU.
//!
//! Each line of `forms.txt` is assembled, then run many times from random
//! and edge-case states (registers, flags, xmm, memory), natively and under
//! the core. They must agree on every register, every byte of memory, where
//! execution continues, and every status flag the manuals define; the core's
//! undefined-flag mask must be exactly what the manuals leave undefined
//! (`harness/manual.rs`). A second core run starts from a random undefined
//! mask: an instruction that reads an undefined flag must stop with
//! `UnknownFlags` and change nothing; one that does not must carry the mask
//! through. A coverage check fails when a form in the table has no line.
//!
//! The core runs with a table built for this CPU's model
//! (`CpuModel::host`), so the test passes on any x86-64 CPU: a line whose
//! form the model lacks (CPUID feature, or XCR0 state) is checked for the
//! core's `Unsupported` stop with nothing changed, and natively for SIGILL;
//! vector registers are loaded and compared only as far as XCR0 enables
//! them (`harness::native::vectors`).

mod harness;

use harness::manual::{self, Expect};
use harness::native::{self, Ending, CODE, DATA, ENTRY};
use harness::{
    first_byte_difference, make_case, run_core, run_native, Case, Outcome, Rng, TestCpu,
};
use iced_x86::{Code, CpuidFeature, Decoder, DecoderOptions, Instruction, Mnemonic};
use std::collections::BTreeSet;
use x86_sem::flag::{RF, STATUS};
use x86_sem::{Addr32Rep, BitScanZero, CpuModel, DecodeCache, Insn, Retired, Stop, Table};

/// Cases per vector line.
const CASES: usize = 400;

/// Instructions the core hands back to its owner without running them:
/// checked for the stop and an unchanged state only (syscall is never run
/// natively; the others' results are the CPU's own, and int1's depends on
/// the hypervisor: some deliver its #DB differently).
fn owner_handled(m: Mnemonic) -> Option<Stop> {
    use Mnemonic::*;
    match m {
        Syscall => Some(Stop::Syscall),
        Int1 => Some(Stop::Trap),
        Cpuid | Rdtsc | Rdtscp | Rdpmc | Xgetbv | Rdpkru | Rdpid | Rdrand | Rdseed => {
            Some(Stop::Opaque)
        }
        _ => None,
    }
}

fn same_state_except_undefined(a: &Outcome, b: &Outcome) -> Result<(), String> {
    let mut x = a.regs;
    x.undefined = b.regs.undefined;
    x.x87.undefined = b.regs.x87.undefined;
    if x != b.regs {
        return Err(format!(
            "registers differ:\n  {:x?}\n  {:x?}",
            a.regs, b.regs
        ));
    }
    if let Some(d) = first_byte_difference(DATA, &a.data, &b.data) {
        return Err(d);
    }
    if let Some(d) = first_byte_difference(CODE, &a.code, &b.code) {
        return Err(d);
    }
    Ok(())
}

/// The core agrees with the CPU on registers, the flags the manuals
/// define, and memory.
fn agree(core: &Outcome, cpu: &Outcome, exp: &Expect) -> Result<(), String> {
    for n in 0..16 {
        if core.regs.gpr[n] != cpu.regs.gpr[n] {
            return Err(format!(
                "gpr {n}: core {:#x}, cpu {:#x}",
                core.regs.gpr[n], cpu.regs.gpr[n]
            ));
        }
    }
    if core.regs.rip != cpu.regs.rip {
        return Err(format!(
            "rip: core {:#x}, cpu {:#x}",
            core.regs.rip, cpu.regs.rip
        ));
    }
    let defined = STATUS & !exp.undefined;
    let diff = core.regs.rflags ^ cpu.regs.rflags;
    if diff & defined != 0 {
        return Err(format!(
            "defined flags {:#x}: core {:#x}, cpu {:#x}",
            diff & defined,
            core.regs.rflags & defined,
            cpu.regs.rflags & defined
        ));
    }
    if diff & !STATUS & !RF != 0 {
        return Err(format!(
            "control flags: core {:#x}, cpu {:#x}",
            core.regs.rflags, cpu.regs.rflags
        ));
    }
    for n in 0..32 {
        if core.regs.vec[n] != cpu.regs.vec[n] {
            return Err(format!(
                "zmm{n}: core {:x?}, cpu {:x?}",
                core.regs.vec[n], cpu.regs.vec[n]
            ));
        }
    }
    if core.regs.k != cpu.regs.k {
        return Err(format!("k: core {:x?}, cpu {:x?}", core.regs.k, cpu.regs.k));
    }
    if core.regs.mxcsr != cpu.regs.mxcsr {
        return Err(format!(
            "mxcsr: core {:#x}, cpu {:#x}",
            core.regs.mxcsr, cpu.regs.mxcsr
        ));
    }
    let (a, b) = (&core.regs.x87, &cpu.regs.x87);
    if a.fcw != b.fcw || a.ftw != b.ftw || (a.fsw ^ b.fsw) & !exp.cc_undefined != 0 {
        return Err(format!(
            "x87 fcw/fsw/ftw: core {:#x}/{:#x}/{:#x}, cpu {:#x}/{:#x}/{:#x}",
            a.fcw, a.fsw, a.ftw, b.fcw, b.fsw, b.ftw
        ));
    }
    if let Some(n) = (0..8).find(|&n| a.st[n] != b.st[n]) {
        return Err(format!("st{n}: core {:x?}, cpu {:x?}", a.st[n], b.st[n]));
    }
    if let Some(d) = first_byte_difference(DATA, &core.data, &cpu.data) {
        return Err(d);
    }
    if let Some(d) = first_byte_difference(CODE, &core.code, &cpu.code) {
        return Err(d);
    }
    Ok(())
}

/// Whether a core stop matches the signal the CPU raised.
fn same_fault(stop: Stop, signo: i32) -> bool {
    match stop {
        Stop::Fault { .. } => signo == libc::SIGSEGV || signo == libc::SIGBUS,
        Stop::DivideError => signo == libc::SIGFPE,
        // An unmasked SSE exception (#XM), or an x87 one already pending.
        Stop::Opaque => signo == libc::SIGFPE,
        Stop::Trap => matches!(signo, libc::SIGILL | libc::SIGTRAP | libc::SIGSEGV),
        _ => false,
    }
}

struct Runner {
    table: Box<Table<TestCpu>>,
    cache: DecodeCache<Vec<Insn>>,
    fs: u64,
    /// Whether the CPU itself raises #UD on forms the table lacks (false
    /// when `X86SEM_TEST_MODEL` masks the model below the CPU).
    cpu_is_model: bool,
}

/// The instruction the model runs for `v`: tzcnt and lzcnt on a CPU
/// without BMI1 or LZCNT are bsf and bsr (the F3 prefix is ignored).
fn as_run_by(model: &CpuModel, instr: &Instruction, bytes: &[u8]) -> Instruction {
    let runs_as_scan = match instr.mnemonic() {
        Mnemonic::Tzcnt => !model.has(CpuidFeature::BMI1),
        Mnemonic::Lzcnt => !model.has(CpuidFeature::LZCNT),
        _ => false,
    };
    if !runs_as_scan {
        return *instr;
    }
    let k = bytes.iter().position(|&b| b == 0xf3).expect("an F3 prefix");
    let without: Vec<u8> = bytes[..k].iter().chain(&bytes[k + 1..]).copied().collect();
    Decoder::with_ip(64, &without, ENTRY, DecoderOptions::NONE).decode()
}

/// Forms a CPU may run although CPUID says it lacks their feature, where
/// the core's stop is the safe answer: `xtest` on Intel parts whose TSX
/// was turned off by microcode (TSX_CTRL clears HLE and RTM from CPUID;
/// xtest then reports "not in a transaction" instead of raising #UD).
fn runs_without_its_cpuid_bit(m: Mnemonic) -> bool {
    m == Mnemonic::Xtest
}

impl Runner {
    /// A line whose form the table lacks: the core stops as on #UD and
    /// changes nothing; the CPU raises SIGILL.
    fn check_refused(
        &mut self,
        bytes: &[u8],
        instr: &Instruction,
        case: &Case,
    ) -> Result<(), String> {
        let (core, result) = run_core(&self.table, &mut self.cache, bytes, case, 0, 0);
        let want = Stop::Unsupported {
            ip: ENTRY,
            code: instr.code(),
        };
        if result != Err(want) {
            return Err(format!("the model lacks it, but the core gave {result:?}"));
        }
        let before = Outcome {
            regs: case.state,
            data: case.data.clone(),
            code: core.code.clone(),
        };
        same_state_except_undefined(&core, &before)?;
        if self.cpu_is_model && !runs_without_its_cpuid_bit(instr.mnemonic()) {
            let (_, ending) = run_native(bytes, case);
            if !matches!(ending, Ending::Signal { signo: libc::SIGILL, rip, .. } if rip == ENTRY) {
                return Err(format!(
                    "the model lacks it, but the CPU did not raise #UD: {ending:x?}"
                ));
            }
        }
        Ok(())
    }

    fn check(
        &mut self,
        bytes: &[u8],
        instr: &iced_x86::Instruction,
        case: &Case,
        rng: &mut Rng,
    ) -> Result<bool, String> {
        let exp = manual::expect(&as_run_by(self.table.model(), instr, bytes), &case.state);
        let (core, result) = run_core(&self.table, &mut self.cache, bytes, case, 0, 0);
        let before = Outcome {
            regs: case.state,
            data: case.data.clone(),
            code: core.code.clone(),
        };
        let handed_back = owner_handled(instr.mnemonic()).or(exp.opaque.then_some(Stop::Opaque));
        if let Some(stop) = handed_back {
            if result != Err(stop) {
                return Err(format!("core gave {result:?}, expected {stop:?}"));
            }
            return same_state_except_undefined(&core, &before).map(|()| false);
        }
        if result == Err(Stop::Opaque) && quirk_refused(self.table.model(), instr, bytes, case) {
            return same_state_except_undefined(&core, &before).map(|()| false);
        }
        let (cpu, ending) = run_native(bytes, case);
        match ending {
            Ending::Landed(_) if result == Err(Stop::Opaque) && x87_declined(instr, case, &cpu) => {
                return same_state_except_undefined(&core, &before).map(|()| false);
            }
            Ending::Landed(at) => {
                let r: Retired = result
                    .map_err(|e| format!("core stopped with {e:?}; the CPU went on to {at:#x}"))?;
                if r.next_rip != at || r.ip != ENTRY || r.len as usize != bytes.len() {
                    return Err(format!("core retired {r:x?}; the CPU went on to {at:#x}"));
                }
                agree(&core, &cpu, &exp)?;
                if core.regs.undefined != exp.undefined {
                    return Err(format!(
                        "undefined mask {:#x}, the manuals say {:#x}",
                        core.regs.undefined, exp.undefined
                    ));
                }
                if core.regs.x87.undefined != exp.cc_undefined {
                    return Err(format!(
                        "undefined x87 condition codes {:#x}, the manuals say {:#x}",
                        core.regs.x87.undefined, exp.cc_undefined
                    ));
                }
            }
            Ending::Signal { signo, rip, .. }
                if rip != ENTRY && rip != ENTRY + bytes.len() as u64 =>
            {
                return Err(format!(
                    "the CPU raised signal {signo} at {rip:#x}: the case left the harness regions"
                ));
            }
            Ending::Signal { signo, .. } => {
                let stop = match result {
                    Ok(r) => {
                        return Err(format!(
                            "core retired {r:x?}; the CPU raised signal {signo}"
                        ))
                    }
                    Err(e) => e,
                };
                if !same_fault(stop, signo) {
                    return Err(format!(
                        "core stopped with {stop:?}; the CPU raised signal {signo}"
                    ));
                }
                // The CPU flags the exception that trapped; the core
                // stopped before it.
                let mut cpu = cpu;
                if stop == Stop::Opaque {
                    cpu.regs.mxcsr = core.regs.mxcsr;
                    cpu.regs.x87.fsw = core.regs.x87.fsw;
                }
                // Only rep string instructions may have progressed.
                agree(
                    &core,
                    &cpu,
                    &Expect {
                        undefined: 0,
                        ..exp
                    },
                )?;
            }
        }
        // Again from a random undefined mask.
        let u = rng.next() & STATUS;
        let u87 = if exp.cc_writes != 0 {
            rng.next() as u16 & 0x4700
        } else {
            0
        };
        let (core2, result2) = run_core(&self.table, &mut self.cache, bytes, case, u, u87);
        if u & exp.reads != 0 || (exp.cc_reads && u87 != 0) {
            if result2 != Err(Stop::UnknownFlags) {
                return Err(format!(
                    "reads undefined flags {:#x}, but the core gave {result2:?}",
                    u & exp.reads
                ));
            }
            return same_state_except_undefined(&core2, &before).map(|()| result.is_ok());
        }
        if result2.map(|r| r.next_rip) != result.map(|r| r.next_rip) {
            return Err(format!(
                "with undefined {u:#x} the core gave {result2:?}, without {result:?}"
            ));
        }
        if result.is_ok() {
            let want = if exp.flips_cf {
                u
            } else {
                (u & !exp.writes) | exp.undefined
            };
            if core2.regs.undefined != want {
                return Err(format!(
                    "from undefined {u:#x} the mask became {:#x}, expected {want:#x}",
                    core2.regs.undefined
                ));
            }
            let kept = harness::manual::cc_kept(instr, &core2.regs);
            let want87 = (u87 & (!exp.cc_writes | kept)) | exp.cc_undefined;
            if core2.regs.x87.undefined != want87 {
                return Err(format!(
                    "from x87 undefined {u87:#x} the mask became {:#x}, expected {want87:#x}",
                    core2.regs.x87.undefined
                ));
            }
            same_state_except_undefined(&core2, &core)?;
        }
        Ok(result.is_ok())
    }
}

/// Whether the core may refuse `instr` in `case` (`Stop::Opaque`) because
/// the model left a quirk unmeasured: an addr32 string instruction with
/// an upper half of rcx (under rep), rsi or rdi set, or a bsf/bsr (tzcnt
/// or lzcnt run as one) of a zero source.
fn quirk_refused(model: &CpuModel, instr: &Instruction, bytes: &[u8], case: &Case) -> bool {
    use iced_x86::OpKind;
    let q = model.quirks();
    let i = as_run_by(model, instr, bytes);
    let a32 = (0..i.op_count())
        .any(|n| matches!(i.op_kind(n), OpKind::MemoryESEDI | OpKind::MemorySegESI));
    if a32 && q.addr32_rep == Addr32Rep::Refuse {
        let g = &case.state.gpr;
        let rep = i.has_rep_prefix() || i.has_repne_prefix();
        let count = if rep { g[1] } else { 0 };
        return (count | g[6] | g[7]) >> 32 != 0;
    }
    matches!(i.mnemonic(), Mnemonic::Bsf | Mnemonic::Bsr) && q.bit_scan_zero == BitScanZero::Refuse
}

/// Whether an x87 instruction the core declined (`Stop::Opaque`) was one
/// it documents as declined: the CPU met a stack fault or an unmasked
/// exception (SF or ES set after it), an exception was already pending,
/// or precision control was reduced (denormal results there are not
/// covered).
fn x87_declined(i: &iced_x86::Instruction, case: &Case, cpu: &Outcome) -> bool {
    harness::float::is_x87(i)
        && (cpu.regs.x87.fsw & 0xc0 != 0
            || case.state.x87.fsw & 0x80 != 0
            || (case.state.x87.fcw >> 8) & 3 != 3)
}

#[test]
fn every_form_matches_the_cpu() {
    let vectors = harness::vectors::load("forms.txt");
    let _lock = native::lock();
    let model = *native::model();
    let mut runner = Runner {
        table: Table::boxed(&model),
        cache: DecodeCache::new(vec![Insn::empty(); 16]).unwrap(),
        fs: native::fs_base(),
        cpu_is_model: model == CpuModel::host(),
    };
    eprintln!(
        "model: {model}; vector state loaded: {:?}",
        native::vectors()
    );
    let mut failures = Vec::new();
    let (mut compared, mut refused) = (0, 0);
    for (k, v) in vectors.iter().enumerate() {
        let mut rng =
            Rng(0x9e37_79b9_7f4a_7c15 ^ (k as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
        if !runner.table.implements(v.instr.code()) {
            refused += 1;
            eprintln!("  lacks `{}` ({:?})", v.text, v.instr.code());
            for n in 0..CASES / 8 {
                let case = make_case(&v.instr, &mut rng, runner.fs);
                if let Err(e) = runner.check_refused(&v.bytes, &v.instr, &case) {
                    failures.push(format!("`{}` ({:?}) case {n}: {e}", v.text, v.instr.code()));
                    break;
                }
            }
            continue;
        }
        compared += 1;
        let mut retired = 0;
        let mut failed = false;
        for n in 0..CASES {
            let case = make_case(&v.instr, &mut rng, runner.fs);
            match runner.check(&v.bytes, &v.instr, &case, &mut rng) {
                Ok(r) => retired += usize::from(r),
                Err(e) => {
                    failures.push(format!(
                        "`{}` ({:?}) case {n}: {e}\n    from {:x?}",
                        v.text,
                        v.instr.code(),
                        case.state
                    ));
                    failed = true;
                    break;
                }
            }
        }
        // Floating-point forms may decline (Opaque) in the cases their
        // docs name, but most cases must run.
        let fp = harness::float::is_x87(&v.instr) || harness::float::is_sse_fp(&v.instr);
        if fp && !failed && retired < CASES / 2 {
            failures.push(format!(
                "`{}`: only {retired} of {CASES} cases retired",
                v.text
            ));
        }
    }
    eprintln!("{compared} lines compared with the CPU, {refused} lines the model lacks");
    assert!(
        compared > vectors.len() / 2,
        "only {compared} of {} lines ran natively",
        vectors.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} lines disagree with the CPU:\n{}",
        failures.len(),
        vectors.len(),
        failures.join("\n")
    );
}

#[test]
fn every_implemented_form_has_a_native_test() {
    let vectors = harness::vectors::load("forms.txt");
    let tested: BTreeSet<Code> = vectors.iter().map(|v| v.instr.code()).collect();
    // The core's whole repertoire, whatever this CPU has.
    let table = Table::<TestCpu>::boxed(&CpuModel::every_feature());
    let missing: Vec<Code> = table
        .implemented()
        .filter(|c| !tested.contains(c))
        .collect();
    assert!(
        missing.is_empty(),
        "{} implemented forms have no line in forms.txt: {missing:?}",
        missing.len()
    );
    let untested: Vec<&str> = vectors
        .iter()
        .filter(|v| !table.implements(v.instr.code()))
        .map(|v| v.text.as_str())
        .collect();
    assert!(
        untested.is_empty(),
        "lines for forms the table lacks: {untested:?}"
    );
}
