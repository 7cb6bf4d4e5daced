//! An x86-64 user-mode emulator for static Linux binaries that contain brr:
//! the x86-sem core, with brr's branch-on-random installed, a guest memory,
//! an ELF loader and a Linux system-call layer.

pub mod elf;
pub mod machine;
pub mod mem;
pub mod syscall;

pub use machine::{emulated_model, Guest, Machine};
pub use mem::GuestMemory;
pub use x86_sem::{BranchKind, CpuState, Retired, Stop};
