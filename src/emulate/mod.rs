//! Emulate ahead: the speculative look-ahead. From the exact CPU state of a
//! sample (or of a checkpoint), the x86 semantics core runs the thread's
//! code forward on the thread's real memory (fault-safe loads, a private
//! store overlay), recording the taken branches; one breakpoint at the pc
//! where emulation stopped then proves the thread did what was predicted.

pub mod memory;
pub mod visits;
