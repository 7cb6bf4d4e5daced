//! x86-64 user-mode instruction semantics, shared by brr's emulator and
//! the tracer's emulate-ahead.
//!
//! `#![no_std]` without `alloc`: nothing here allocates, locks or formats
//! on the step path, so a signal handler can run it. See README.md for
//! how an owner puts the pieces together; in short:
//!
//! - [`Registers`] (implemented by the plain [`CpuState`]) and [`Memory`]
//!   are what the semantics read and write; a [`Machine`] bundles one of
//!   each with whatever the owner's own handlers need ([`Cpu`] bundles just
//!   the two).
//! - A [`CpuModel`] says which CPU the core emulates: its CPUID features,
//!   the register state XCR0 enables, and its quirks.
//!   [`CpuModel::host`] measures the machine it runs on.
//! - A [`Table`] maps every iced `Code` to its handler for one model; the
//!   owner builds it once ([`Table::boxed`], or [`Table::init`] in place)
//!   and may replace entries with its own instructions.
//! - A [`DecodeCache`] holds decoded instructions on storage the owner
//!   allocates.
//! - [`step`] runs the instruction at rip: `Ok(`[`Retired`]`)`, or a
//!   [`Stop`] that leaves the registers as they were.
//! - Flags the manuals leave undefined are tracked in
//!   [`Registers::undefined`]; an instruction that reads one stops with
//!   [`Stop::UnknownFlags`] instead of guessing.
//!
//! # Results that differ between CPUs
//!
//! x86-64 CPUs do not all compute the same thing: forms exist on one and
//! raise #UD on another, and some results the manuals leave undefined or
//! implementation-specific differ from one CPU to the next (the upper
//! halves of rcx, rsi and rdi after an addr32 rep string instruction: Zen 4
//! keeps `rcx[63:32]`, Zen 5 and Intel zero it; the destination of bsf/bsr
//! with a zero source; tzcnt/lzcnt, which a CPU without BMI1/LZCNT runs as
//! rep bsf/bsr; int1, which hypervisors deliver differently). The rule:
//!
//! **a result that differs between CPUs is modelled from a probe of the
//! CPU, or refused with a [`Stop`]; it is never guessed** (not from the
//! vendor, the family, or the machine the core was first tested on).
//!
//! - A form the [`CpuModel`] lacks (a CPUID feature, or XCR0 state for the
//!   registers it uses) stops with [`Stop::Unsupported`], as the CPU would
//!   raise #UD.
//! - A quirk ([`Quirks`]) is what [`CpuModel::host`] measured by running
//!   the instruction natively; when no probe settled it, the instruction
//!   stops with [`Stop::Opaque`] in exactly the cases where CPUs disagree.
//! - Instructions whose outcome the hypervisor decides (int1/icebp) stop
//!   with [`Stop::Trap`], like every trapping instruction.
//!
//! Since every refusal is a stop, an owner never acts on a refused result.
//!
//! # Unsafe code
//!
//! Only [`CpuModel::host`] uses it (CPUID, `xgetbv`, the probe
//! instructions, and on Linux one `mmap`/`munmap` of a scratch page), and
//! [`Table::init`], which writes the table in place.

#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(missing_debug_implementations)]
#![warn(rust_2018_idioms)]
#![warn(unused_qualifications)]
#![warn(trivial_casts)]
#![warn(unreachable_pub)]
#![warn(clippy::cloned_instead_of_copied)]
#![warn(clippy::dbg_macro)]
#![warn(clippy::default_trait_access)]
#![warn(clippy::explicit_iter_loop)]
#![warn(clippy::implicit_saturating_sub)]
#![warn(clippy::match_bool)]
#![warn(clippy::missing_errors_doc)]
#![warn(clippy::must_use_candidate)]
#![warn(clippy::needless_pass_by_value)]
#![warn(clippy::print_stdout)]
#![warn(clippy::print_stderr)]
#![warn(clippy::redundant_closure_for_method_calls)]
#![warn(clippy::todo)]
#![warn(clippy::unimplemented)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]
#![cfg_attr(not(test), warn(clippy::expect_used))]
#![cfg_attr(not(test), warn(clippy::panic))]
// Handlers are written for the reader as x86 pseudo-code: the casts
// between widths and the shifts by operand size are the semantics.
#![allow(clippy::cast_lossless)]
#![allow(clippy::module_name_repetitions)]

#[cfg(feature = "alloc")]
extern crate alloc;

mod address;
mod cache;
mod flags;
mod float;
mod insn;
mod mem;
mod model;
mod ops;
mod quick;
mod regs;
mod step;
mod table;

pub use address::{condition_holds, MemOperand, SegmentBase};
pub use cache::{CacheSizeError, DecodeCache, InsnSource};
pub use insn::Insn;
pub use mem::{MemError, Memory, NoMemory};
pub use model::{xcr0, Addr32Rep, BitScanZero, CpuModel, Quirks, Vendor};
pub use quick::warm as warm_decoder;
pub use regs::{
    flag, gpr, CpuState, Difference, GprsAndFlags, Registers, F80, MXCSR_DEFAULT, MXCSR_UNSET, X87,
};
pub use step::{
    step, step_handled, step_into, BranchKind, Cpu, HandlerSource, Machine, Retired, Stop,
};
pub use table::{Handler, Table, CODE_COUNT};

/// The iced-x86 this crate decodes with, for owners that inspect
/// [`Insn::instruction`].
pub use iced_x86;
