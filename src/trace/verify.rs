//! The `verify` engine: paper's walk, with the emulator's prediction of
//! every transfer (made from the exact state of the sample or of the last
//! stop, on live memory) checked against what the thread did: the target
//! of each transfer, and the registers at each breakpoint stop. Recorded
//! entries are paper's, so a verify-mode profile is exact; the counters
//! (`verify_checked`, `verify_mismatches`, `verify_mismatched_stops`,
//! `verify_register_mismatches`) say how often the core was wrong, and the
//! tests and `bench-harness verify` require 0.

use crate::decode::RegisterFile;
use crate::emulate::context;

use super::counters::Counters;
use super::engine::{Needs, Ucontext};
use super::walk::Witness;
use super::{StackPointer, ThreadTrace};

pub(super) struct Verify;

/// Predicts afresh from the exact state in `uc`.
fn predict(t: &mut ThreadTrace, uc: &Ucontext) {
    if let (Some(emu), Some(preds)) = (t.emu.as_mut(), t.predictions.as_mut()) {
        context::read(uc.raw(), emu.state_mut());
        emu.predict(preds, uc.raw());
    }
}

impl Witness for Verify {
    fn needs(&self) -> Needs {
        Needs {
            block_cache: true,
            emulator: true,
            predictions: true,
        }
    }

    fn at_sample(&self, t: &mut ThreadTrace, uc: &Ucontext) {
        predict(t, uc);
    }

    fn at_stop(&self, t: &mut ThreadTrace, uc: &Ucontext) {
        // With no prediction left, predict from this exact state: the
        // first prediction is this very branch.
        if t.predictions.as_ref().is_some_and(|p| p.remaining() == 0) {
            predict(t, uc);
        }
    }

    /// Checks the transfer against the next prediction (and, at a
    /// breakpoint stop, the registers predicted there). A disagreement is
    /// counted and drops the rest of the prediction; the next stop predicts
    /// afresh.
    fn transfer(
        &self,
        t: &mut ThreadTrace,
        c: &Counters,
        at: u64,
        next: u64,
        regs: Option<&Ucontext>,
    ) {
        let Some(preds) = t.predictions.as_mut() else {
            return;
        };
        let Some(p) = preds.take_next() else {
            return;
        };
        Counters::bump(&c.verify_checked);
        let registers_differ = regs.is_some_and(|r| {
            let gpr = std::array::from_fn(|i| r.gpr(i as u8));
            !p.registers_match(&gpr, r.rflags())
        });
        // At the predicted transfer, the registers come first: a state that
        // already differs explains any target that follows from it, and a
        // wrong flag or GPR must not pass for a wrong transfer. A transfer
        // that differs with the registers equal read a different memory
        // word (or was evaluated differently): that is what
        // verify_mismatches then singles out.
        if p.at == at && registers_differ {
            Counters::bump(&c.verify_register_mismatches);
            preds.clear();
        } else if p.at != at || p.next != next {
            Counters::bump(&c.verify_mismatches);
            preds.clear();
        }
    }

    fn missed_stop(&self, t: &mut ThreadTrace, c: &Counters, at: u64) {
        let predicted_here = t
            .predictions
            .as_ref()
            .and_then(|p| p.peek())
            .is_some_and(|p| p.at == at);
        if predicted_here {
            // The emulator predicted this stop, with its exact rsp: the
            // thread did not come here as it said.
            Counters::bump(&c.verify_checked);
            Counters::bump(&c.verify_mismatches);
            Counters::bump(&c.verify_mismatched_stops);
        }
    }

    /// The emulator's exact rsp at this branch, when it predicted it (the
    /// walk's own estimate may be only near, after an alloca).
    fn expected_sp(&self, t: &ThreadTrace, at: u64, walk_sp: StackPointer) -> StackPointer {
        match t.predictions.as_ref().and_then(|p| p.peek()) {
            Some(p) if p.at == at => StackPointer::Exact(p.registers.gpr[4]),
            _ => walk_sp,
        }
    }
}
