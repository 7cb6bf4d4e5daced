//! The call stack at a trace's newest branch (`callstack`, `record -g`),
//! for context-sensitive profiles.
//!
//! The emulator takes it when it pushes the Nth taken branch, from the
//! state it predicts there, so the stack agrees with the newest branch (0
//! skid, as llvm-profgen's hybrid samples need). Two sources, innermost
//! first:
//!
//! 1. **The trace's own calls** ([`Shadow`]): every call the trace's
//!    segments emulated pushed its return address and the slot it was
//!    stored at; a return drops the calls whose slots it popped. A pass
//!    that is redone gives back what it did ([`Shadow::mark`],
//!    [`Shadow::restore`]). These frames are
//!    exact whatever the code does with rbp, so a leaf in a function
//!    without a frame pointer (glibc's string functions) does not hide its
//!    caller when the call is in the trace.
//! 2. **The frame-pointer chain** from the predicted rbp, for the frames
//!    older than the trace: saved rbp at `[rbp]`, return address at
//!    `[rbp + 8]`, read through the segment's store overlay and then real
//!    memory without logging (they are the thread's own older frames).
//!    When the pass made calls, the walk starts from the rbp its outermost
//!    call was made with (the caller's frame, whatever its callees did to
//!    rbp since: a leaf that uses rbp as a scratch register does not cut
//!    the stack). Only frames whose slot lies above the shadow's outermost
//!    are taken, so a frame both sources know is written once. The walk stops at the
//!    first frame that does not look like one: rbp unaligned, below rsp,
//!    not rising, more than [`STACK_SPAN`] above rsp, or a return address
//!    outside the executable mappings or not right after a call
//!    instruction ([`follows_call`]).
//! 3. **Signal frames.** A return address at the signal return
//!    trampoline ([`SIGRETURN`]) is a handler's: the kernel's signal frame
//!    lies at its slot, and the walk goes on from the interrupted pc (a
//!    frame of its own, though no call made it) and rbp.
//!
//! Async-signal-safe: fixed arrays on the heap, fault-safe loads.

use breakdance_protocol::MAX_CALLSTACK;

/// Frames a stack may hold: the most `callstack=N` may ask for.
pub const MAX_FRAMES: usize = MAX_CALLSTACK as usize;
/// `unwind=dwarf`: qwords of stack copied from rsp up (8 KiB, as perf's
/// default for DWARF call graphs), for the worker to unwind.
pub const SNAPSHOT_WORDS: usize = 1024;
/// A stack snapshot as the frame store holds it: [`SNAPSHOT`], the leaf
/// pc, rsp, rbp, the number of stack words, the words.
pub const SNAPSHOT_LEN: usize = 5 + SNAPSHOT_WORDS;
/// First word of a stack snapshot: no frame has this address.
pub const SNAPSHOT: u64 = u64::MAX;
/// Words a [`CallStack`] holds: a stack of frames or a snapshot.
const STACK_WORDS: usize = if SNAPSHOT_LEN > MAX_FRAMES {
    SNAPSHOT_LEN
} else {
    MAX_FRAMES
};
/// Calls one pass remembers; a deeper nest of calls within one trace
/// forgets its outermost (the frame-pointer walk finds them, where the
/// code keeps frame pointers).
const SHADOW_CALLS: usize = 256;
/// How far above rsp a frame may lie: a thread's stack (8 MiB by default)
/// with room to spare.
pub const STACK_SPAN: u64 = 64 << 20;

/// The code a signal handler returns to (glibc's `__restore_rt` on
/// x86-64, which the kernel is given as `sa_restorer`): `mov rax, 15`
/// (rt_sigreturn), `syscall`.
pub const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
/// The kernel's x86-64 signal frame (`struct rt_sigframe`): the return
/// address, then the ucontext; in the ucontext, uc_flags, uc_link and
/// uc_stack come before the registers (`uc_mcontext`, in the order of
/// glibc's `REG_*` indices).
pub const UCONTEXT_IN_SIGFRAME: u64 = 8;
pub const GREGS_IN_UCONTEXT: u64 = 40;
pub const REG_RBP: u64 = 10;
pub const REG_RSP: u64 = 15;
pub const REG_RIP: u64 = 16;

/// The calls of the pass that have not returned: a ring, innermost last.
#[derive(bytemuck::Zeroable)]
pub struct Shadow {
    /// (return address, the slot it was stored at, rbp at the call).
    calls: [(u64, u64, u64); SHADOW_CALLS],
    /// Calls pushed and not popped (may exceed the ring).
    depth: usize,
    /// Of those, the innermost ones the ring still holds.
    known: usize,
    /// The lowest `depth` since the last [`Shadow::mark`].
    low: usize,
}

/// What [`Shadow::restore`] goes back to.
#[derive(Clone, Copy)]
pub struct Mark {
    depth: usize,
    known: usize,
}

impl Shadow {
    pub fn clear(&mut self) {
        self.depth = 0;
        self.known = 0;
        self.low = 0;
    }

    /// Where a pass begins.
    pub fn mark(&mut self) -> Mark {
        self.low = self.depth;
        Mark {
            depth: self.depth,
            known: self.known,
        }
    }

    /// Undoes the calls and returns since `mark`. Calls made after the
    /// pass returned below the mark overwrote entries of the ring: then
    /// nothing is known.
    pub fn restore(&mut self, mark: Mark) {
        let overwritten = self.low < mark.depth;
        self.depth = mark.depth;
        self.known = if overwritten { 0 } else { mark.known };
    }

    /// A call stored `ret` at `slot`, made with `rbp`.
    #[inline]
    pub fn call(&mut self, ret: u64, slot: u64, rbp: u64) {
        self.calls[self.depth % SHADOW_CALLS] = (ret, slot, rbp);
        self.depth += 1;
        self.known = (self.known + 1).min(SHADOW_CALLS);
    }

    /// rsp is now `rsp` after a return: the calls whose slots lie below it
    /// have returned (one, unless the code unwound several frames).
    #[inline]
    pub fn returned(&mut self, rsp: u64) {
        while self.known > 0 && self.calls[(self.depth - 1) % SHADOW_CALLS].1 < rsp {
            self.depth -= 1;
            self.known -= 1;
        }
        self.low = self.low.min(self.depth);
    }

    /// The known calls, innermost first, as (return address, slot, rbp at
    /// the call).
    pub fn innermost_first(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        (0..self.known).map(move |i| self.calls[(self.depth - 1 - i) % SHADOW_CALLS])
    }
}

/// One stack: leaf first (the pc after the newest branch, then return
/// addresses), or a stack snapshot (see [`SNAPSHOT_LEN`]).
#[derive(bytemuck::Zeroable)]
pub struct CallStack {
    frames: [u64; STACK_WORDS],
    len: usize,
    /// The depth asked for was reached with frames still above.
    pub truncated: bool,
    /// Taken in this pass (a pass that did not reach the Nth branch takes
    /// none).
    pub taken: bool,
}

impl CallStack {
    pub fn clear(&mut self) {
        self.len = 0;
        self.truncated = false;
        self.taken = false;
    }

    /// Appends a frame; false (and `truncated`) when `depth` frames are
    /// there already.
    #[inline]
    pub fn push(&mut self, frame: u64, depth: usize) -> bool {
        if self.len >= depth.min(MAX_FRAMES) {
            self.truncated = true;
            return false;
        }
        self.frames[self.len] = frame;
        self.len += 1;
        true
    }

    pub fn frames(&self) -> &[u64] {
        &self.frames[..self.len]
    }

    /// Whether this is a stack snapshot for the worker to unwind.
    pub fn is_snapshot(&self) -> bool {
        self.len > 0 && self.frames[0] == SNAPSHOT
    }

    /// Writes a snapshot: the registers, then up to [`SNAPSHOT_WORDS`]
    /// qwords of stack from rsp up, as many as `copy(rsp, words)` says it
    /// wrote.
    pub fn snapshot(
        &mut self,
        pc: u64,
        rsp: u64,
        rbp: u64,
        copy: impl FnOnce(u64, &mut [u64]) -> usize,
    ) {
        self.frames[..4].copy_from_slice(&[SNAPSHOT, pc, rsp, rbp]);
        let n = copy(rsp, &mut self.frames[5..5 + SNAPSHOT_WORDS]).min(SNAPSHOT_WORDS);
        self.frames[4] = n as u64;
        self.len = 5 + n;
    }
}

/// For a pc interrupted by a signal: where its return address lies when
/// the code at the pc (`code`, its first bytes) runs with no frame of its
/// own, rsp being `rsp`: at a `push rbp` (a function's entry) or a `ret`,
/// at rsp; at `mov rbp, rsp` (rbp pushed, not yet moved), above it. `None`
/// elsewhere: the frame is set up and rbp is the function's own.
pub fn unframed_return_slot(code: &[u8], rsp: u64) -> Option<u64> {
    match code {
        [0x55, ..] | [0xc3, ..] | [0xf3, 0xc3, ..] => Some(rsp),
        [0x48, 0x89, 0xe5, ..] => Some(rsp + 8),
        _ => None,
    }
}

/// Whether the bytes before a return address end with a call instruction:
/// `call rel32` (e8), or `call r/m64` (ff /2) with any ModRM form, a
/// prefix before ff being irrelevant. `before[6]` is the byte right
/// before the return address. A heuristic, as in every frame-pointer
/// unwinder: bytes that happen to read as a call pass.
pub fn follows_call(before: &[u8; 7]) -> bool {
    if before[2] == 0xe8 {
        return true;
    }
    (0..6).any(|k| {
        let modrm = before[k + 1];
        before[k] == 0xff
            && (modrm >> 3) & 7 == 2
            && 1 + modrm_len(modrm, before.get(k + 2).copied()) == 7 - k
    })
}

/// Bytes of a ModRM, its SIB and displacement.
fn modrm_len(modrm: u8, sib: Option<u8>) -> usize {
    let (md, rm) = (modrm >> 6, modrm & 7);
    let sib_len = usize::from(rm == 4 && md != 3);
    let base5 = sib.is_some_and(|s| s & 7 == 5);
    1 + sib_len
        + match md {
            0 if rm == 5 => 4,
            0 if rm == 4 && base5 => 4,
            0 | 3 => 0,
            1 => 1,
            _ => 4,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 7 bytes before a return address that follows `insn`.
    fn before(insn: &[u8]) -> [u8; 7] {
        let mut b = [0x90u8; 7];
        b[7 - insn.len()..].copy_from_slice(insn);
        b
    }

    #[test]
    fn every_call_form_is_known() {
        let calls: [&[u8]; 9] = [
            &[0xe8, 1, 2, 3, 4],             // call rel32
            &[0xff, 0xd0],                   // call rax
            &[0x41, 0xff, 0xd3],             // call r11
            &[0xff, 0x15, 1, 2, 3, 4],       // call [rip+disp32]
            &[0xff, 0x55, 0x08],             // call [rbp+8]
            &[0xff, 0x14, 0x24],             // call [rsp]
            &[0xff, 0x54, 0x24, 0x08],       // call [rsp+8]
            &[0xff, 0x94, 0x24, 1, 2, 3, 4], // call [rsp+disp32]
            &[0xff, 0x90, 1, 2, 3, 4],       // call [rax+disp32]
        ];
        for c in calls {
            assert!(follows_call(&before(c)), "{c:x?}");
        }
    }

    #[test]
    fn other_instructions_are_not_calls() {
        let others: [&[u8]; 5] = [
            &[0x48, 0x89, 0xe5],       // mov rbp, rsp
            &[0xff, 0xe0],             // jmp rax (ff /4)
            &[0xff, 0x25, 1, 2, 3, 4], // jmp [rip+disp32]
            &[0x0f, 0x1f, 0x44, 0, 0], // nop
            &[0xff, 0x55],             // ff /2 cut short: the disp8 is missing
        ];
        for o in others {
            assert!(!follows_call(&before(o)), "{o:x?}");
        }
    }

    #[test]
    fn returns_pop_the_calls_below_rsp() {
        let mut s = bytemuck::zeroed_box::<Shadow>();
        s.call(0x10, 0x7000, 1);
        s.call(0x20, 0x6ff0, 2);
        s.call(0x30, 0x6fe0, 3);
        s.returned(0x6fe8);
        let known: Vec<_> = s.innermost_first().collect();
        assert_eq!(known, [(0x20, 0x6ff0, 2), (0x10, 0x7000, 1)]);
        // A longjmp-like return past two frames.
        s.returned(0x7008);
        assert_eq!(s.innermost_first().count(), 0);
        // A nest deeper than the ring keeps its innermost calls.
        for i in 0..(SHADOW_CALLS as u64 + 10) {
            s.call(i, 0x10_0000 - 16 * i, 0);
        }
        let known: Vec<_> = s.innermost_first().collect();
        assert_eq!(known.len(), SHADOW_CALLS);
        assert_eq!(known[0].0, SHADOW_CALLS as u64 + 9);
        // A return pops from the ring; the forgotten calls stay forgotten.
        s.returned(0x10_0000 - 16 * (SHADOW_CALLS as u64 + 9) + 8);
        let known: Vec<_> = s.innermost_first().collect();
        assert_eq!(known.len(), SHADOW_CALLS - 1);
        assert_eq!(known[0].0, SHADOW_CALLS as u64 + 8);
        assert_eq!(known.last().unwrap().0, 10);
        s.returned(0x10_0000 + 8);
        assert_eq!(s.innermost_first().count(), 0);
    }

    #[test]
    fn unframed_code_has_its_return_address_at_rsp() {
        assert_eq!(
            unframed_return_slot(&[0x55, 0x48, 0x89], 0x1000),
            Some(0x1000)
        );
        assert_eq!(
            unframed_return_slot(&[0x48, 0x89, 0xe5], 0x1000),
            Some(0x1008)
        );
        assert_eq!(unframed_return_slot(&[0xc3], 0x1000), Some(0x1000));
        assert_eq!(unframed_return_slot(&[0x48, 0x8b, 0x45], 0x1000), None);
        assert_eq!(unframed_return_slot(&[], 0x1000), None);
    }

    #[test]
    fn a_redone_pass_gives_back_its_calls() {
        let mut s = bytemuck::zeroed_box::<Shadow>();
        s.call(0x10, 0x7000, 1);
        s.call(0x20, 0x6ff0, 2);
        let mark = s.mark();
        s.call(0x30, 0x6fe0, 3);
        s.restore(mark);
        assert_eq!(s.innermost_first().count(), 2);
        // A pass that returned below the mark and called again wrote over
        // the ring: nothing is known.
        let mark = s.mark();
        s.returned(0x6ff8);
        s.call(0x40, 0x6ff0, 4);
        s.restore(mark);
        assert_eq!(s.innermost_first().count(), 0);
    }

    #[test]
    fn the_stack_stops_at_its_depth() {
        let mut st = bytemuck::zeroed_box::<CallStack>();
        assert!(st.push(1, 2) && st.push(2, 2));
        assert!(!st.push(3, 2));
        assert!(st.truncated);
        assert_eq!(st.frames(), [1, 2]);
        st.clear();
        assert!(st.frames().is_empty() && !st.truncated);
    }
}
