//! Verify mode's predictions: every control transfer the core makes from
//! an exact state, with the registers just before it, for the handler to
//! check one by one at real stops.

use x86_sem::{BranchKind, CpuState, GprsAndFlags};

use super::{table, Emulator, MAX_SEGMENT_INSTRUCTIONS};

impl Emulator {
    /// Verify mode: emulates from the state in [`Emulator::state_mut`] and
    /// writes every control transfer the emulation makes (taken or not),
    /// with the registers just before it, into `out`, until the emulation
    /// stops, the budget is spent or `out` is full. Nothing is recorded in
    /// a trace: the caller checks each prediction at a real stop. The
    /// state was read from the signal context `uc`.
    pub fn predict(&mut self, out: &mut Predictions, uc: &libc::ucontext_t) {
        self.begin(Some(super::context::frame_start(uc)));
        self.predict_entered(out);
        self.code.leave();
    }

    fn predict_entered(&mut self, out: &mut Predictions) {
        self.cpu.mem.live.reset();
        out.clear();
        let table = table();
        for _ in 0..MAX_SEGMENT_INSTRUCTIONS {
            if out.len == out.items.len() {
                return;
            }
            let before = Prediction::before(&self.cpu.regs);
            match x86_sem::step(&mut self.cpu, table, &mut self.code) {
                Ok(r) if r.kind != BranchKind::None => {
                    // The walk may stop the thread here: a signal frame
                    // below this red zone, over what the program left.
                    let rsp = before.registers.gpr[4];
                    self.cpu.mem.live.note_signal_frame(
                        rsp.saturating_sub(super::DEAD_STACK),
                        rsp.saturating_sub(super::RED_ZONE),
                    );
                    out.items[out.len] = Prediction {
                        next: r.next_rip,
                        taken: r.taken,
                        ..before
                    };
                    out.len += 1;
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    }
}

/// Transfers one verify-mode emulation predicts, at most.
pub const MAX_PREDICTIONS: usize = 1024;

/// One predicted control transfer.
#[derive(Clone, Copy, Debug, Default)]
pub struct Prediction {
    /// The transfer instruction.
    pub at: u64,
    /// Where the emulation says it goes.
    pub next: u64,
    pub taken: bool,
    /// Registers just before it (and the flags the emulation does not
    /// know there).
    pub registers: GprsAndFlags,
}

impl Prediction {
    fn before(regs: &CpuState) -> Prediction {
        Prediction {
            at: regs.rip,
            next: 0,
            taken: false,
            registers: GprsAndFlags {
                gpr: regs.gpr,
                rflags: regs.rflags,
                undefined: regs.undefined,
            },
        }
    }

    /// Whether the real registers at the transfer are the predicted ones
    /// (general-purpose registers and the status flags the emulation
    /// defines: x86-sem's comparison, the one a checkpoint makes first).
    pub fn registers_match(&self, gpr: &[u64; 16], rflags: u64) -> bool {
        self.registers.first_difference(gpr, rflags).is_none()
    }
}

/// A verify-mode emulation's predictions, consumed in order.
pub struct Predictions {
    items: Box<[Prediction]>,
    len: usize,
    cursor: usize,
}

impl Predictions {
    pub fn new() -> Box<Predictions> {
        Box::new(Predictions {
            items: vec![Prediction::default(); MAX_PREDICTIONS].into_boxed_slice(),
            len: 0,
            cursor: 0,
        })
    }

    pub fn clear(&mut self) {
        self.len = 0;
        self.cursor = 0;
    }

    /// Predictions not yet checked.
    pub fn remaining(&self) -> usize {
        self.len - self.cursor.min(self.len)
    }

    /// The next prediction not yet checked, left in place.
    pub fn peek(&self) -> Option<&Prediction> {
        self.items[..self.len].get(self.cursor)
    }

    /// The next prediction not yet checked, taken.
    pub fn take_next(&mut self) -> Option<Prediction> {
        let p = self.items[..self.len].get(self.cursor).copied();
        self.cursor += p.is_some() as usize;
        p
    }
}
