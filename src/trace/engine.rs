//! One engine per look-ahead mode, behind one trait.
//!
//! An engine is what a thread's SIGTRAP handler does at a sample and at a
//! breakpoint stop: how it learns the branches the thread takes past the
//! sample. The session's mode picks the engine in one place
//! (`handler::engine_of`); nothing else asks which mode runs. This file
//! names no engine: they import it, it imports none of them.
//!
//! | mode | engine | file |
//! |---|---|---|
//! | `paper` | decode ahead, a breakpoint on every branch that needs the CPU state | `paper.rs` (on `walk.rs`) |
//! | `verify` | paper's walk, each transfer checked against the emulator's prediction | `verify.rs` (on `walk.rs`) |
//! | `emulate` | emulate ahead from the sample, validate at one checkpoint per segment | `emulate.rs` |
//!
//! What every engine shares lives below them: the thread's two perf
//! events (`events.rs`) and the end of a trace (`ends.rs`). Contract of
//! every engine: async-signal-safe, as `handler.rs`.

use crate::decode::{Gpr, RegisterFile};
use crate::emulate::context;

use super::{ThreadSlot, ThreadTrace, Tracer};

/// A look-ahead mode's handlers. Called by `handler::on_sigtrap` with the
/// thread's slot held.
pub(super) trait Engine: Sync {
    /// A sample of the thread: begins a trace (or lets an open one go on).
    fn on_sample(&self, tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, uc: &Ucontext);

    /// A breakpoint stop, or a sample that is one (see
    /// `handler::is_merged_stop`).
    fn on_breakpoint(&self, tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, uc: &Ucontext);

    /// What a thread needs beyond its buffer: taken from the pools at its
    /// first sample (see `pools`), made by the worker ahead of time.
    fn needs(&self) -> Needs;
}

/// A thread's pooled resources beyond its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    /// The decoded-block cache (the walk of paper and verify).
    pub block_cache: bool,
    /// The x86 emulator (megabytes, zeroed on the heap).
    pub emulator: bool,
    /// Verify's queue of predictions.
    pub predictions: bool,
}

/// The interrupted thread's registers, as the kernel saved them.
#[repr(transparent)]
pub struct Ucontext(pub(super) libc::ucontext_t);

impl Ucontext {
    /// Views the kernel's ucontext of this delivery.
    ///
    /// # Safety
    /// `ctx` is the third argument of an `SA_SIGINFO` handler, valid for
    /// the handler's duration.
    pub(super) unsafe fn of<'a>(ctx: *mut std::ffi::c_void) -> &'a Ucontext {
        // SAFETY: Ucontext is a transparent wrapper; the caller vouches
        // for the pointer.
        unsafe { &*(ctx as *const Ucontext) }
    }

    /// The kernel's ucontext (for `emulate::context::read`).
    pub(super) fn raw(&self) -> &libc::ucontext_t {
        &self.0
    }
}

impl RegisterFile for Ucontext {
    fn gpr(&self, reg: Gpr) -> u64 {
        self.0.uc_mcontext.gregs[context::GREG_OF_GPR[reg as usize & 15] as usize] as u64
    }
    fn rip(&self) -> u64 {
        self.0.uc_mcontext.gregs[libc::REG_RIP as usize] as u64
    }
    fn rflags(&self) -> u64 {
        self.0.uc_mcontext.gregs[libc::REG_EFL as usize] as u64
    }
}

/// The registers at a breakpoint stop, kept to recognise a second SIGTRAP
/// for the same stop: one that arrives at the previous stop's pc with the
/// same registers (nothing ran in between) while the breakpoint is armed
/// elsewhere. Such repeats were every `pc_mismatch` on SQLite until the
/// handlers stopped calling into libc (`sys::raw`): the breakpoint, armed
/// at the first jcc of glibc's memmove, fired inside the handler's own
/// memcpy. They are dropped and counted (`duplicate_traps`), which now
/// stays 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StopRegisters([u64; 18]);

impl StopRegisters {
    pub(super) fn of(regs: &impl RegisterFile) -> StopRegisters {
        let mut r = [0u64; 18];
        for (i, v) in r.iter_mut().take(16).enumerate() {
            *v = regs.gpr(i as Gpr);
        }
        r[16] = regs.rip();
        r[17] = regs.rflags();
        StopRegisters(r)
    }

    /// Whether `other` holds the same general registers and pc: the thread
    /// ran nothing in between (or came back to the very same state). The
    /// flags are left out: the kernel may set RF in one frame and not the
    /// other.
    pub(super) fn same_place(&self, other: &StopRegisters) -> bool {
        self.0[..17] == other.0[..17]
    }

    /// Whether this stop repeats the thread's last one (see above): a
    /// stop away from `at` with the very registers of the last stop. Else
    /// it becomes the last stop.
    pub(super) fn repeats_last(self, t: &mut ThreadTrace, pc: u64, at: u64) -> bool {
        if pc != at && t.last_stop == Some(self) {
            return true;
        }
        t.last_stop = Some(self);
        false
    }
}
