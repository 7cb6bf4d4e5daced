//! The register file behind a small trait, so the same instruction semantics
//! can run on the emulator's own state or on a signal handler's ucontext.

use iced_x86::Register;

/// General-purpose register numbers in x86 encoding order.
pub mod gpr {
    pub const RAX: usize = 0;
    pub const RCX: usize = 1;
    pub const RDX: usize = 2;
    pub const RBX: usize = 3;
    pub const RSP: usize = 4;
    pub const RBP: usize = 5;
    pub const RSI: usize = 6;
    pub const RDI: usize = 7;
    pub const R8: usize = 8;
    pub const R9: usize = 9;
    pub const R10: usize = 10;
}

/// Bits of RFLAGS the emulator maintains.
pub mod flag {
    pub const CF: u64 = 1 << 0;
    pub const PF: u64 = 1 << 2;
    pub const AF: u64 = 1 << 4;
    pub const ZF: u64 = 1 << 6;
    pub const SF: u64 = 1 << 7;
    pub const DF: u64 = 1 << 10;
    pub const OF: u64 = 1 << 11;
    /// The six arithmetic status flags.
    pub const STATUS: u64 = CF | PF | AF | ZF | SF | OF;
}

/// Architectural state one instruction reads and writes. Implementations must
/// not allocate: the step function calls these from a signal-handler-safe path.
pub trait Registers {
    /// Full 64-bit value of general-purpose register `i` (0 = rax … 15 = r15).
    fn gpr(&self, i: usize) -> u64;
    fn set_gpr(&mut self, i: usize, value: u64);
    fn rip(&self) -> u64;
    fn set_rip(&mut self, value: u64);
    fn rflags(&self) -> u64;
    fn set_rflags(&mut self, value: u64);
    /// 128-bit value of xmm register `i`.
    fn xmm(&self, i: usize) -> u128;
    fn set_xmm(&mut self, i: usize, value: u128);
    fn fs_base(&self) -> u64;
    fn set_fs_base(&mut self, value: u64);
    fn gs_base(&self) -> u64;
}

/// The emulator's own register file.
#[derive(Clone, Debug, Default)]
pub struct Cpu {
    pub gpr: [u64; 16],
    pub rip: u64,
    pub rflags: u64,
    pub xmm: [u128; 16],
    pub fs_base: u64,
    pub gs_base: u64,
}

impl Registers for Cpu {
    #[inline(always)]
    fn gpr(&self, i: usize) -> u64 {
        self.gpr[i & 15]
    }
    #[inline(always)]
    fn set_gpr(&mut self, i: usize, value: u64) {
        self.gpr[i & 15] = value;
    }
    #[inline(always)]
    fn rip(&self) -> u64 {
        self.rip
    }
    #[inline(always)]
    fn set_rip(&mut self, value: u64) {
        self.rip = value;
    }
    #[inline(always)]
    fn rflags(&self) -> u64 {
        self.rflags
    }
    #[inline(always)]
    fn set_rflags(&mut self, value: u64) {
        self.rflags = value;
    }
    #[inline(always)]
    fn xmm(&self, i: usize) -> u128 {
        self.xmm[i & 15]
    }
    #[inline(always)]
    fn set_xmm(&mut self, i: usize, value: u128) {
        self.xmm[i & 15] = value;
    }
    #[inline(always)]
    fn fs_base(&self) -> u64 {
        self.fs_base
    }
    #[inline(always)]
    fn set_fs_base(&mut self, value: u64) {
        self.fs_base = value;
    }
    #[inline(always)]
    fn gs_base(&self) -> u64 {
        self.gs_base
    }
}

/// How an iced register name maps onto the register file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegSlot {
    /// Bits 0..8*size of a general-purpose register.
    Gpr {
        index: u8,
        size: u8,
    },
    /// AH, CH, DH, BH: bits 8..16 of rax, rcx, rdx, rbx.
    GprHigh8 {
        index: u8,
    },
    Xmm {
        index: u8,
    },
    Rip,
    Unsupported,
}

/// Table from `Register as usize` to its slot, built once per machine.
pub fn register_slots() -> Vec<RegSlot> {
    Register::values().map(slot_of).collect()
}

fn slot_of(r: Register) -> RegSlot {
    use Register::*;
    match r {
        AH | CH | DH | BH => RegSlot::GprHigh8 {
            index: (r as u8 - AH as u8),
        },
        RIP => RegSlot::Rip,
        _ if r.is_gpr() => RegSlot::Gpr {
            index: r.full_register().number() as u8,
            size: r.size() as u8,
        },
        _ if r.is_xmm() => RegSlot::Xmm {
            index: r.number() as u8,
        },
        _ => RegSlot::Unsupported,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_encoding_order() {
        let slots = register_slots();
        let s = |r: Register| slots[r as usize];
        assert_eq!(s(Register::AL), RegSlot::Gpr { index: 0, size: 1 });
        assert_eq!(s(Register::SIL), RegSlot::Gpr { index: 6, size: 1 });
        assert_eq!(s(Register::BH), RegSlot::GprHigh8 { index: 3 });
        assert_eq!(s(Register::R9W), RegSlot::Gpr { index: 9, size: 2 });
        assert_eq!(s(Register::R15D), RegSlot::Gpr { index: 15, size: 4 });
        assert_eq!(s(Register::RSP), RegSlot::Gpr { index: 4, size: 8 });
        assert_eq!(s(Register::XMM13), RegSlot::Xmm { index: 13 });
        assert_eq!(s(Register::ST0), RegSlot::Unsupported);
    }
}
