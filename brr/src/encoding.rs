//! The machine encoding of `brr FREQ, LABEL` in x86-64 binaries.
//!
//! brr is written as an 8-byte `ud1 r32, [rip + rel32]`:
//!
//! ```text
//! byte 0   REX = 0100 0 R 0 0      R   = bit 3 of FREQ
//! byte 1-2 0F B9                   UD1 (always #UD on Intel and AMD)
//! byte 3   ModRM = 00 reg 101      reg = bits 0-2 of FREQ, rm = RIP-relative
//! byte 4-7 rel32                   target = address of the next instruction + rel32
//! ```
//!
//! Because the bytes form a well-formed UD1 with a memory operand, objdump,
//! gdb and iced-x86 decode its length correctly and keep disassembling after
//! it, and the RIP-relative effective address they print is the branch target.
//! The REX byte is always present (0x40 or 0x44) so every brr is 8 bytes, and
//! it tells brr apart from other UD1 uses (clang's and the kernel's trap
//! encodings have no REX prefix).

use iced_x86::{Code, Instruction, Register};

/// Length of one encoded brr in bytes.
pub const BRR_LEN: usize = 8;

/// Highest frequency field: taken with probability (1/2)^16.
pub const MAX_FREQ: u8 = 15;

/// One decoded branch-on-random instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Brr {
    /// Taken with probability (1/2)^(freq+1).
    pub freq: u8,
    /// Displacement from the end of the instruction to the target.
    pub rel32: i32,
}

impl Brr {
    /// Branch target when the instruction starts at `ip`.
    pub fn target(self, ip: u64) -> u64 {
        ip.wrapping_add(BRR_LEN as u64)
            .wrapping_add(self.rel32 as i64 as u64)
    }

    /// The eight bytes of this instruction.
    pub fn encode(self) -> [u8; BRR_LEN] {
        assert!(self.freq <= MAX_FREQ, "brr frequency {} > 15", self.freq);
        let rel = self.rel32.to_le_bytes();
        [
            0x40 | ((self.freq >> 3) << 2),
            0x0f,
            0xb9,
            ((self.freq & 7) << 3) | 5,
            rel[0],
            rel[1],
            rel[2],
            rel[3],
        ]
    }

    /// Recognises a brr at the start of `bytes`; `None` for anything else,
    /// including other UD1 forms.
    pub fn decode(bytes: &[u8]) -> Option<Brr> {
        let b: &[u8; BRR_LEN] = bytes.get(..BRR_LEN)?.try_into().ok()?;
        if b[0] & !0x04 != 0x40 || b[1] != 0x0f || b[2] != 0xb9 || b[3] & 0xc7 != 0x05 {
            return None;
        }
        let freq = ((b[0] >> 2) & 1) << 3 | (b[3] >> 3) & 7;
        let rel32 = i32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        Some(Brr { freq, rel32 })
    }
}

impl Brr {
    /// Recognises a brr that iced decoded (as `ud1 r32, [rip + rel32]`): the
    /// 8-byte form, with no prefix but the REX byte. A REX carrying X or B
    /// (which change nothing in this encoding) is accepted too.
    /// Recognises a brr in an instruction the semantics core decoded (the
    /// form [`Brr::from_instruction`] accepts, from what the core keeps).
    pub fn from_insn(i: &x86_sem::Insn) -> Option<Brr> {
        // Eight bytes with REX, UD1 r32 and a RIP-relative operand leave no
        // room for another prefix but lock, rep, repne or a segment.
        let plain = i.code() == Code::Ud1_r32_rm32
            && i.len() == BRR_LEN
            && !i.has_lock_rep_or_segment_prefix();
        let target = i.rip_relative_address().filter(|_| plain)?;
        let next = i.ip().wrapping_add(BRR_LEN as u64);
        Some(Brr {
            freq: i.gpr_operand(0)?,
            rel32: target.wrapping_sub(next) as i32,
        })
    }

    pub fn from_instruction(i: &Instruction) -> Option<Brr> {
        let plain = i.code() == Code::Ud1_r32_rm32
            && i.len() == BRR_LEN
            && i.memory_base() == Register::RIP
            && i.segment_prefix() == Register::None
            && !i.has_lock_prefix()
            && !i.has_rep_prefix()
            && !i.has_repne_prefix();
        plain.then(|| Brr {
            freq: i.op0_register().number() as u8,
            rel32: i.memory_displacement64().wrapping_sub(i.next_ip()) as i32,
        })
    }
}

/// The GNU as / clang assembler macro that emits brr (also in `brr/asm/brr.S`).
pub const ASM_MACRO: &str = include_str!("../asm/brr.S");

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    fn decoded(bytes: &[u8]) -> Instruction {
        Decoder::with_ip(64, bytes, 0x40_1000, DecoderOptions::NONE).decode()
    }

    fn core_decoded(bytes: &[u8]) -> x86_sem::Insn {
        x86_sem::Insn::decode(0x40_1000, bytes).expect("decodes")
    }

    #[test]
    fn the_decoded_form_is_recognised_like_the_bytes() {
        for freq in 0..=MAX_FREQ {
            for rel32 in [0, 1, -8, i32::MAX, i32::MIN] {
                let brr = Brr { freq, rel32 };
                assert_eq!(Brr::from_instruction(&decoded(&brr.encode())), Some(brr));
                assert_eq!(Brr::from_insn(&core_decoded(&brr.encode())), Some(brr));
            }
        }
        // ud1 without REX (7 bytes), with REX.W, with a register operand,
        // with a segment or repeat prefix, and ud2.
        for bytes in [
            &[0x0f, 0xb9, 0x05, 0, 0, 0, 0, 0][..],
            &[0x48, 0x0f, 0xb9, 0x05, 0, 0, 0, 0],
            &[0x40, 0x0f, 0xb9, 0xc0, 0, 0, 0, 0],
            &[0x2e, 0x0f, 0xb9, 0x05, 0, 0, 0, 0],
            &[0xf2, 0x0f, 0xb9, 0x05, 0, 0, 0, 0],
            &[0x0f, 0x0b, 0, 0, 0, 0, 0, 0],
        ] {
            assert_eq!(Brr::from_instruction(&decoded(bytes)), None, "{bytes:02x?}");
            assert_eq!(Brr::from_insn(&core_decoded(bytes)), None, "{bytes:02x?}");
        }
    }

    #[test]
    fn round_trip_every_frequency() {
        for freq in 0..=MAX_FREQ {
            for rel32 in [0, 1, -8, i32::MAX, i32::MIN] {
                let brr = Brr { freq, rel32 };
                assert_eq!(Brr::decode(&brr.encode()), Some(brr));
            }
        }
    }

    #[test]
    fn other_ud1_forms_are_not_brr() {
        // ud1 without REX, with REX.W, with a register operand, and a short buffer.
        for bytes in [
            [0x0f, 0xb9, 0x05, 0, 0, 0, 0, 0],
            [0x48, 0x0f, 0xb9, 0x05, 0, 0, 0, 0],
            [0x40, 0x0f, 0xb9, 0xc0, 0, 0, 0, 0],
            [0x40, 0x0f, 0x0b, 0x05, 0, 0, 0, 0],
        ] {
            assert_eq!(Brr::decode(&bytes), None, "{bytes:02x?}");
        }
        assert_eq!(Brr::decode(&[0x40, 0x0f, 0xb9, 0x05]), None);
    }

    #[test]
    fn iced_decodes_brr_as_ud1_with_the_target_as_address() {
        let brr = Brr {
            freq: 11,
            rel32: 0x1234,
        };
        let bytes = brr.encode();
        let mut decoder = Decoder::with_ip(64, &bytes, 0x40_1000, DecoderOptions::NONE);
        let instr = decoder.decode();
        assert_eq!(instr.code(), Code::Ud1_r32_rm32);
        assert_eq!(instr.len(), BRR_LEN);
        assert_eq!(instr.memory_base(), Register::RIP);
        assert_eq!(instr.op0_register(), Register::R11D);
        assert_eq!(instr.ip_rel_memory_address(), brr.target(0x40_1000));
    }
}
