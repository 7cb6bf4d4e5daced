//! An x86-64 user-mode emulator for static Linux binaries that contain brr.

pub mod elf;
pub mod machine;
pub mod mem;
pub mod ops;
pub mod regs;
pub mod syscall;

pub use machine::{BranchKind, Machine, Retired, Stop};
pub use mem::{GuestMemory, Memory};
pub use regs::{Cpu, Registers};
