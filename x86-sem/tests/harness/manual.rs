//! What the manuals (Intel SDM vol. 2, AMD APM vol. 3) say each form does
//! to the status flags, written independently of the core: which flags it
//! reads, which it writes, and which of those it leaves undefined.

use iced_x86::{ConditionCode, Instruction, Mnemonic, OpKind, Register};
use x86_sem::flag::{AF, CF, OF, PF, SF, STATUS, ZF};
use x86_sem::CpuState;

/// The flag behaviour of one execution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expect {
    /// Status flags the instruction reads (an undefined one must stop it).
    pub reads: u64,
    /// Status flags it writes (defined or not).
    pub writes: u64,
    /// The written flags it leaves undefined.
    pub undefined: u64,
    /// cmc: CF flips, and an undefined CF stays undefined.
    pub flips_cf: bool,
    /// The manuals leave the result itself undefined.
    pub opaque: bool,
    /// x87 condition codes (C0 0x100, C1 0x200, C2 0x400, C3 0x4000) the
    /// instruction writes, defined or not.
    pub cc_writes: u16,
    /// The written condition codes it leaves undefined.
    pub cc_undefined: u16,
    /// Whether it reads the condition codes (fnstsw).
    pub cc_reads: bool,
}

const C1: u16 = 0x200;
const CC: u16 = 0x4700;

/// What the x87 "FPU flags affected" sections say of the condition codes.
fn condition_codes(i: &Instruction) -> (u16, u16, bool) {
    use Mnemonic::*;
    match i.mnemonic() {
        Fnstsw => (CC, CC, true),
        Fnstcw | Fldcw | Fcmovb | Fcmove | Fcmovbe | Fcmovu | Fcmovnb | Fcmovne | Fcmovnbe
        | Fcmovnu => (CC, CC, false),
        // Intel's manual clears C1; Zen 5 keeps it.
        Fucomi | Fucomip | Fcomi | Fcomip => (C1, C1, false),
        // The quotient's low bits and whether the reduction is complete.
        Fprem => (CC, 0, false),
        m if format!("{m:?}").starts_with('F') => (CC, CC & !C1, false),
        _ => (0, 0, false),
    }
}

/// Condition codes an instruction that writes them leaves as they were in
/// this execution, given the state after it: fprem with a NaN result keeps
/// C0 and C3 (measured on the CPU; the manuals do not say).
pub fn cc_kept(i: &Instruction, after: &CpuState) -> u16 {
    let x = &after.x87;
    let st0 = x.st[0];
    let nan = st0.sign_exponent & 0x7fff == 0x7fff && st0.mantissa << 1 != 0;
    if i.mnemonic() == Mnemonic::Fprem && nan {
        0x4100
    } else {
        0
    }
}

fn reads_of(cc: ConditionCode) -> u64 {
    use ConditionCode::*;
    match cc {
        o | no => OF,
        b | ae => CF,
        e | ne => ZF,
        be | a => CF | ZF,
        s | ns => SF,
        p | np => PF,
        l | ge => SF | OF,
        le | g => ZF | SF | OF,
        None => 0,
    }
}

/// Size in bits of operand 0.
fn bits(i: &Instruction) -> u32 {
    match i.op0_kind() {
        OpKind::Register => i.op0_register().size() as u32 * 8,
        _ => i.memory_size().size() as u32 * 8,
    }
}

/// The count of a shift, before masking: the immediate, or cl.
fn raw_count(i: &Instruction, n: u32, s: &CpuState) -> u64 {
    match i.op_kind(n) {
        OpKind::Register => {
            assert_eq!(i.op_register(n), Register::CL);
            s.gpr[1] & 0xff
        }
        _ => i.immediate(n) & 0xff,
    }
}

fn expect_with(writes: u64, undefined: u64) -> Expect {
    Expect {
        writes,
        undefined,
        ..Expect::default()
    }
}

/// The flag behaviour of `i` executed from `s`.
pub fn expect(i: &Instruction, s: &CpuState) -> Expect {
    let (cc_writes, cc_undefined, cc_reads) = condition_codes(i);
    Expect {
        cc_writes,
        cc_undefined,
        cc_reads,
        ..status_flags(i, s)
    }
}

fn status_flags(i: &Instruction, s: &CpuState) -> Expect {
    use Mnemonic::*;
    let m = i.mnemonic();
    let w = bits(i);
    let masked = |n: u32| raw_count(i, n, s) & if w == 64 { 63 } else { 31 };
    match m {
        Add | Sub | Cmp | Neg | Xadd | Cmpxchg => expect_with(STATUS, 0),
        Adc | Sbb => Expect {
            reads: CF,
            ..expect_with(STATUS, 0)
        },
        Cmpsb | Cmpsw | Cmpsd | Cmpsq | Scasb | Scasw | Scasd | Scasq
            if i.is_string_instruction() =>
        {
            let rep = i.has_rep_prefix() || i.has_repne_prefix();
            let ecx_only = matches!(i.op0_kind(), OpKind::MemoryESEDI | OpKind::MemorySegESI)
                || matches!(i.op1_kind(), OpKind::MemoryESEDI);
            let rcx = if ecx_only {
                s.gpr[1] & 0xffff_ffff
            } else {
                s.gpr[1]
            };
            if rep && rcx == 0 {
                Expect::default()
            } else {
                expect_with(STATUS, 0)
            }
        }
        Inc | Dec => expect_with(STATUS & !CF, 0),
        And | Or | Xor | Test => expect_with(STATUS, AF),
        Mul | Imul => expect_with(STATUS, SF | ZF | AF | PF),
        Div | Idiv => expect_with(STATUS, STATUS),
        Shl | Sal | Shr | Sar => {
            let c = masked(1);
            if c == 0 {
                return Expect::default();
            }
            let mut u = AF;
            if c > 1 {
                u |= OF;
            }
            // "CF is undefined for SHL and SHR where the count is greater
            // than or equal to the size of the destination."
            if m != Sar && c >= u64::from(w) {
                u |= CF;
            }
            expect_with(STATUS, u)
        }
        Rol | Ror => {
            let c = masked(1);
            if c == 0 {
                return Expect::default();
            }
            expect_with(CF | OF, if c > 1 { OF } else { 0 })
        }
        Rcl | Rcr => {
            let c = masked(1);
            if c == 0 {
                return Expect::default();
            }
            Expect {
                reads: CF,
                ..expect_with(CF | OF, if c > 1 { OF } else { 0 })
            }
        }
        Shld | Shrd => {
            let c = masked(2);
            if c == 0 {
                return Expect::default();
            }
            if c > u64::from(w) {
                // "If the count is greater than the operand size, the
                // result is undefined."
                return Expect {
                    opaque: true,
                    ..Expect::default()
                };
            }
            expect_with(STATUS, AF | if c > 1 { OF } else { 0 })
        }
        Bt | Bts | Btr | Btc => expect_with(CF | OF | SF | AF | PF, OF | SF | AF | PF),
        Bsf | Bsr => expect_with(STATUS, STATUS & !ZF),
        Tzcnt | Lzcnt => expect_with(STATUS, OF | SF | AF | PF),
        Popcnt => expect_with(STATUS, 0),
        Andn | Bzhi | Blsmsk | Blsr => expect_with(STATUS, AF | PF),
        Kortestd | Kortestq | Ktestd | Ktestq | Pcmpistri | Xtest => expect_with(STATUS, 0),
        Ucomiss | Ucomisd | Comiss | Comisd | Vucomiss | Vucomisd | Vcomiss | Vcomisd | Fucomi
        | Fucomip | Fcomi | Fcomip => expect_with(STATUS, 0),
        Fcmovb | Fcmovnb | Fcmove | Fcmovne | Fcmovbe | Fcmovnbe | Fcmovu | Fcmovnu => Expect {
            reads: match m {
                Fcmovb | Fcmovnb => CF,
                Fcmove | Fcmovne => ZF,
                Fcmovbe | Fcmovnbe => CF | ZF,
                _ => PF,
            },
            ..Expect::default()
        },
        Loope | Loopne => Expect {
            reads: ZF,
            ..Expect::default()
        },
        Pushfq => Expect {
            reads: STATUS,
            ..Expect::default()
        },
        Popfq => expect_with(STATUS, 0),
        Lahf => Expect {
            reads: SF | ZF | AF | PF | CF,
            ..Expect::default()
        },
        Sahf => expect_with(SF | ZF | AF | PF | CF, 0),
        Clc | Stc => expect_with(CF, 0),
        Cmc => Expect {
            flips_cf: true,
            ..Expect::default()
        },
        _ => Expect {
            reads: reads_of(i.condition_code()),
            ..Expect::default()
        },
    }
}
