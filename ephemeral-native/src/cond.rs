//! The condition of a hooked branch, evaluated from the interrupted
//! thread's saved registers.
//!
//! Which branches are sites: the sixteen `Jcc` forms (short and near) and
//! `jrcxz`/`jecxz`. Those only *read* state (flags, rcx), so the trap
//! handler can stand for them by choosing the next rip. `loop`, `loope` and
//! `loopne` are left out: they also decrement rcx, an emulation with a
//! side effect, for instructions compilers do not emit.

use iced_x86::{ConditionCode, Instruction};

const CF: u64 = 1 << 0;
const PF: u64 = 1 << 2;
const ZF: u64 = 1 << 6;
const SF: u64 = 1 << 7;
const OF: u64 = 1 << 11;

/// What decides a site's direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// A `Jcc`: one of the sixteen flag conditions.
    Flags(ConditionCode),
    /// `jrcxz`: taken when rcx is 0.
    RcxZero,
    /// `jecxz`: taken when ecx is 0.
    EcxZero,
}

impl Condition {
    /// The condition of `instruction` when it is a site (see the module
    /// doc), else `None`.
    pub fn of(instruction: &Instruction) -> Option<Condition> {
        if instruction.is_jcc_short_or_near() {
            return Some(Condition::Flags(instruction.condition_code()));
        }
        if instruction.is_jcx_short() {
            // jcxz (16-bit address size) cannot be encoded in 64-bit mode.
            return match instruction.code() {
                iced_x86::Code::Jrcxz_rel8_64 => Some(Condition::RcxZero),
                iced_x86::Code::Jecxz_rel8_64 => Some(Condition::EcxZero),
                _ => None,
            };
        }
        None
    }

    /// Whether the branch is taken with these saved rflags and rcx.
    ///
    /// Called from the SIGTRAP handler: pure arithmetic.
    pub fn taken(self, rflags: u64, rcx: u64) -> bool {
        let f = |bit: u64| rflags & bit != 0;
        match self {
            Condition::RcxZero => rcx == 0,
            Condition::EcxZero => rcx as u32 == 0,
            Condition::Flags(cc) => match cc {
                ConditionCode::o => f(OF),
                ConditionCode::no => !f(OF),
                ConditionCode::b => f(CF),
                ConditionCode::ae => !f(CF),
                ConditionCode::e => f(ZF),
                ConditionCode::ne => !f(ZF),
                ConditionCode::be => f(CF) || f(ZF),
                ConditionCode::a => !f(CF) && !f(ZF),
                ConditionCode::s => f(SF),
                ConditionCode::ns => !f(SF),
                ConditionCode::p => f(PF),
                ConditionCode::np => !f(PF),
                ConditionCode::l => f(SF) != f(OF),
                ConditionCode::ge => f(SF) == f(OF),
                ConditionCode::le => f(ZF) || f(SF) != f(OF),
                ConditionCode::g => !f(ZF) && f(SF) == f(OF),
                // `Condition::of` builds Flags only from a Jcc, which
                // always has one of the sixteen codes.
                ConditionCode::None => false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    fn decode(bytes: &[u8]) -> Instruction {
        Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE).decode()
    }

    /// Each of the sixteen short Jcc opcodes 0x70..0x7f against every
    /// combination of the five flags, checked with the SDM's table written
    /// out a second way (by opcode pairs: odd opcodes negate even ones).
    #[test]
    fn every_jcc_condition_matches_the_manual() {
        for op in 0x70u8..=0x7f {
            let i = decode(&[op, 0x10]);
            let c = Condition::of(&i).expect("a jcc is a site");
            for bits in 0u64..32 {
                let pick = [CF, PF, ZF, SF, OF];
                let rflags: u64 = (0..5)
                    .filter(|k| bits & (1 << k) != 0)
                    .map(|k| pick[k])
                    .sum();
                let (cf, pf, zf, sf, of) = (
                    rflags & CF != 0,
                    rflags & PF != 0,
                    rflags & ZF != 0,
                    rflags & SF != 0,
                    rflags & OF != 0,
                );
                let base = match op & 0xe {
                    0x0 => of,
                    0x2 => cf,
                    0x4 => zf,
                    0x6 => cf || zf,
                    0x8 => sf,
                    0xa => pf,
                    0xc => sf != of,
                    _ => zf || sf != of,
                };
                let want = base != (op & 1 == 1);
                assert_eq!(
                    c.taken(rflags, 0),
                    want,
                    "opcode {op:#x} rflags {rflags:#x}"
                );
            }
        }
    }

    #[test]
    fn near_forms_and_rcx_forms_are_sites_and_loops_are_not() {
        // jne rel32
        let i = decode(&[0x0f, 0x85, 0, 0, 0, 0]);
        assert_eq!(Condition::of(&i), Some(Condition::Flags(ConditionCode::ne)));
        let jrcxz = Condition::of(&decode(&[0xe3, 0x00])).unwrap();
        assert!(jrcxz.taken(0, 0));
        assert!(!jrcxz.taken(0, 1 << 32));
        let jecxz = Condition::of(&decode(&[0x67, 0xe3, 0x00])).unwrap();
        assert!(jecxz.taken(0, 1 << 32));
        assert!(!jecxz.taken(0, 1));
        for op in [0xe0u8, 0xe1, 0xe2] {
            assert_eq!(Condition::of(&decode(&[op, 0x00])), None, "loop {op:#x}");
        }
        assert_eq!(Condition::of(&decode(&[0xeb, 0x00])), None, "jmp");
    }
}
