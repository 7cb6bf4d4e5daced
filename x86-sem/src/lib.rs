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
//! - A [`Table`] maps every iced `Code` to its handler; the owner builds it
//!   once and may replace entries with its own instructions.
//! - A [`DecodeCache`] holds decoded instructions on storage the owner
//!   allocates.
//! - [`step`] runs the instruction at rip: `Ok(`[`Retired`]`)`, or a
//!   [`Stop`] that leaves the registers as they were.
//! - Flags the manuals leave undefined are tracked in
//!   [`Registers::undefined`]; an instruction that reads one stops with
//!   [`Stop::UnknownFlags`] instead of guessing.

#![no_std]
#![forbid(unsafe_code)]
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

mod cache;
mod flags;
mod float;
mod insn;
mod mem;
mod ops;
mod regs;
mod step;
mod table;

pub use cache::{CacheSizeError, DecodeCache};
pub use insn::Insn;
pub use mem::{MemError, Memory};
pub use regs::{flag, gpr, CpuState, Difference, Registers, F80, MXCSR_DEFAULT, MXCSR_UNSET, X87};
pub use step::{step, step_into, BranchKind, Cpu, Machine, Retired, Stop};
pub use table::{Handler, Table, CODE_COUNT};

/// The iced-x86 this crate decodes with, for owners that inspect
/// [`Insn::instruction`].
pub use iced_x86;
