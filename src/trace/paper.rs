//! The `paper` engine: the paper's algorithm as it stands (Algorithm 1,
//! §2), the breakpoint-per-branch walk with nothing added. Every entry is
//! a transfer the walk decoded or a stop evaluated from the thread's own
//! registers and memory.

use super::engine::{Engine, Needs, Ucontext};
use super::walk::{self, Witness};
use super::{ThreadSlot, ThreadTrace, Tracer};

pub(super) struct Paper;

/// The walk's hooks, all empty.
impl Witness for Paper {}

impl Engine for Paper {
    fn on_sample(&self, tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, uc: &Ucontext) {
        walk::on_sample(self, tracer, slot, t, uc);
    }

    fn on_breakpoint(
        &self,
        tracer: &Tracer,
        slot: &ThreadSlot,
        t: &mut ThreadTrace,
        uc: &Ucontext,
    ) {
        walk::on_breakpoint(self, tracer, slot, t, uc);
    }

    fn needs(&self) -> Needs {
        Needs {
            emulator: false,
            predictions: false,
        }
    }
}
