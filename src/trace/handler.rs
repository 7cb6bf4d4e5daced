//! The SIGTRAP handler: sampling and breakpoint stops (the paper's
//! Algorithm 1, §2).
//!
//! Contract of everything in this file: async-signal-safe. No allocation,
//! no lock another thread or the application can hold, no formatting, no
//! logging; only raw syscalls (ioctl, gettid, futex wake; close and
//! perf_event_open to renew a breakpoint event) and the vDSO clock; errno is
//! saved on entry and restored on exit. The handler runs with every
//! asynchronous signal blocked (see `trace`'s module doc for why).
//! `tests/handler_alloc.rs` checks the no-allocation part with a counting
//! allocator while real signals fire.

use std::ffi::c_void;
use std::os::fd::AsRawFd;

use crate::buffer::{AbortReason, BranchEntry, TraceEnd};
use crate::decode::dataflow::RegState;
use crate::decode::form::RSP;
use crate::decode::{
    self, BranchForm, BranchKind, DecodeFailure, Gpr, Memory, Outcome, RegisterFile, SegmentEnd,
    Target,
};
use crate::sys;

use super::counters::Counters;
use super::exec_map::{ExecMap, LiveCode};
use super::{
    chain, ChainStep, DataflowMode, Entry, Pending, StackPointer, ThreadSlot, ThreadTrace, Tracer,
    BREAKPOINT_TAG, SAMPLE_TAG,
};

/// The interrupted thread's registers, as the kernel saved them.
struct Ucontext<'a>(&'a libc::ucontext_t);

/// gregs index of each register in x86 encoding order (rax, rcx, rdx, rbx,
/// rsp, rbp, rsi, rdi, r8 … r15).
const GREG_OF_GPR: [libc::c_int; 16] = [
    libc::REG_RAX,
    libc::REG_RCX,
    libc::REG_RDX,
    libc::REG_RBX,
    libc::REG_RSP,
    libc::REG_RBP,
    libc::REG_RSI,
    libc::REG_RDI,
    libc::REG_R8,
    libc::REG_R9,
    libc::REG_R10,
    libc::REG_R11,
    libc::REG_R12,
    libc::REG_R13,
    libc::REG_R14,
    libc::REG_R15,
];

impl RegisterFile for Ucontext<'_> {
    fn gpr(&self, reg: Gpr) -> u64 {
        self.0.uc_mcontext.gregs[GREG_OF_GPR[reg as usize & 15] as usize] as u64
    }
    fn rip(&self) -> u64 {
        self.0.uc_mcontext.gregs[libc::REG_RIP as usize] as u64
    }
    fn rflags(&self) -> u64 {
        self.0.uc_mcontext.gregs[libc::REG_EFL as usize] as u64
    }
}

/// Transfers the data-flow model may resolve between two stops.
pub const MAX_CHAIN: usize = 64;

/// The process's own memory. `read` serves the breakpoint handler, whose
/// addresses are the ones the trapped instruction itself is about to read
/// (its return address, its jump-table slot), and the data-flow model's
/// stack slots; both are mapped whenever the application is correct.
/// `read_immutable` checks the table of immutable mappings first.
struct OwnMemory<'a>(&'a ExecMap);

impl Memory for OwnMemory<'_> {
    fn read(&self, addr: u64, size: u8) -> u64 {
        // SAFETY: see the type's doc.
        unsafe {
            match size {
                1 => (addr as *const u8).read_unaligned() as u64,
                2 => (addr as *const u16).read_unaligned() as u64,
                4 => (addr as *const u32).read_unaligned() as u64,
                _ => (addr as *const u64).read_unaligned(),
            }
        }
    }

    fn read_immutable(&self, addr: u64, size: u8) -> Option<u64> {
        self.0
            .is_immutable(addr, size as u64)
            .then(|| self.read(addr, size))
    }
}

/// What the data-flow registers say `form` does, when they decide it: the
/// flags of a jcc must be defined, a return reads its stack slot (logged
/// store or memory), a jump or call through memory must read immutable
/// memory. A loop's rcx write and a syscall are not followed.
fn resolve(form: &BranchForm, st: &RegState, mem: &OwnMemory) -> Option<Outcome> {
    let sp = st.gpr[RSP as usize];
    let taken_to = |next, sp| {
        Some(Outcome::Continue {
            taken: true,
            next,
            sp,
        })
    };
    match form.kind {
        BranchKind::Jcc(c) if st.can_test(c) => Some(form.evaluate(st, mem)),
        BranchKind::Jrcxz { .. } => Some(form.evaluate(st, mem)),
        BranchKind::Jmp | BranchKind::Call => {
            let next = match form.target {
                Target::Const(a) => a,
                Target::Reg(r) => st.gpr(r),
                Target::Load { .. } => {
                    let (addr, size) = form.target.load_address(st)?;
                    mem.read_immutable(addr, size)?
                }
            };
            let after = if form.kind == BranchKind::Call {
                sp.wrapping_sub(8)
            } else {
                sp
            };
            taken_to(next, after)
        }
        BranchKind::Ret { pop } => {
            taken_to(st.load_stack(sp, 8, mem)?, sp.wrapping_add(8 + pop as u64))
        }
        _ => None,
    }
}

/// The SIGTRAP handler installed while a session runs.
pub(crate) extern "C" fn on_sigtrap(sig: i32, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let saved_errno = sys::errno();
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let si = unsafe { &*info };
    let tag = sys::siginfo_perf_data(si);
    if si.si_code != sys::TRAP_PERF || (tag != SAMPLE_TAG && tag != BREAKPOINT_TAG) {
        // SAFETY: the ucontext is the kernel's for this delivery.
        if !is_stray_debug_trap(si, unsafe { &*(ctx as *const libc::ucontext_t) }) {
            chain::forward(sig, info, ctx);
        }
        sys::set_errno(saved_errno);
        return;
    }
    // Ours. Without a tracer or a ready slot this is a late signal of a
    // stopped session or a closing thread: nothing to do.
    if let Some(tracer) = super::tracer() {
        if let Some(slot) = tracer.slot_of(sys::gettid()) {
            match slot.enter() {
                Entry::Held => {
                    // SAFETY: enter() made this handler the slot's holder;
                    // the ucontext is the kernel's for this delivery.
                    let (t, uc) = unsafe { (slot.inner(), &*(ctx as *const libc::ucontext_t)) };
                    if tag == SAMPLE_TAG {
                        if t.full_period != 0 {
                            // The first, randomly shortened period is over.
                            if let Some(fd) = t.sample_fd.as_ref() {
                                let _ = sys::perf_set_period(fd.as_raw_fd(), t.full_period);
                            }
                            t.full_period = 0;
                        }
                        on_sample(tracer, slot, t, uc);
                    } else {
                        if sys::siginfo_perf_flags(si) & sys::TRAP_PERF_FLAG_ASYNC != 0 {
                            // Hit while the thread blocked SIGTRAP: how many
                            // times is unknown, maybe up to the limit.
                            renew_breakpoint(slot, t);
                        } else {
                            t.bp_hits_left = t.bp_hits_left.saturating_sub(1);
                        }
                        on_breakpoint(tracer, slot, t, uc);
                    }
                    slot.leave();
                }
                Entry::Abandoned => {
                    // SAFETY: as above: the slot is this handler's again.
                    take_back(tracer, slot, unsafe { slot.inner() });
                    slot.leave();
                }
                Entry::Refused => {}
            }
        }
    }
    sys::set_errno(saved_errno);
}

/// Whether a SIGTRAP that perf did not raise is a stray one of the
/// tracer's breakpoint: a debug exception the kernel could not attribute
/// (no reason in DR6, so it took it for an icebp: `TRAP_BRKPT`; or a
/// breakpoint register perf did not claim: `TRAP_HWBKPT`), at the very
/// address of the thread's breakpoint. Seen under heavy load in this KVM
/// guest, at the loop branch a traced thread passed thousands of times; the
/// application's default action would have killed the process. Such a
/// trap is dropped and counted (`stray_debug_traps`); the application's
/// own traps (int3 is `SI_KERNEL`, and its instructions are not where the
/// tracer's breakpoints go) are passed on as before.
fn is_stray_debug_trap(si: &libc::siginfo_t, uc: &libc::ucontext_t) -> bool {
    if si.si_code != sys::TRAP_BRKPT && si.si_code != sys::TRAP_HWBKPT {
        return false;
    }
    let Some(tracer) = super::tracer() else {
        return false;
    };
    let Some(slot) = tracer.slot_of(sys::gettid()) else {
        return false;
    };
    match slot.enter() {
        Entry::Held => {
            // SAFETY: enter() made this handler the slot's holder.
            let t = unsafe { slot.inner() };
            // SAFETY: bp_addr is the active field of a breakpoint attribute.
            let at = unsafe { t.bp_attr.__bindgen_anon_3.bp_addr };
            let stray = t.bp_fd.is_some() && Ucontext(uc).rip() == at;
            if stray {
                Counters::bump(&slot.counters.stray_debug_traps);
            }
            slot.leave();
            stray
        }
        Entry::Abandoned => {
            // SAFETY: as above: the slot is this handler's again.
            take_back(tracer, slot, unsafe { slot.inner() });
            slot.leave();
            false
        }
        Entry::Refused => false,
    }
}

/// The previous handler of this thread never returned (see the module doc
/// of `trace`): whatever it was doing is dropped. The open trace ends as
/// `handler_abandoned`, the breakpoint is disarmed, and sampling is armed
/// again, unless the session stopped meanwhile. This signal itself is
/// not used: the state it was raised for is gone.
fn take_back(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace) {
    let c = &slot.counters;
    Counters::bump(&c.handlers_abandoned);
    t.chain.clear();
    close_open_trace(t, c, TraceEnd::Aborted(AbortReason::HandlerAbandoned));
    // What is left of the breakpoint's limit is unknown.
    renew_breakpoint(slot, t);
    if tracer.running.load(std::sync::atomic::Ordering::Acquire) {
        rearm_sampling(t);
    }
}

fn on_sample(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, uc: &libc::ucontext_t) {
    let t0 = sys::now_ns();
    let c = &slot.counters;
    Counters::bump(&c.samples);
    if t.pending.is_some() {
        // One-shot sampling makes this impossible; be safe anyway.
        return;
    }
    if t.buffer.is_none() {
        t.buffer = tracer.pool.free.pop();
    }
    match t.buffer.as_mut() {
        Some(b) => b.open_trace(),
        None => {
            Counters::bump(&c.no_free_buffer);
            rearm_sampling(t);
            return;
        }
    }
    Counters::bump(&c.traces_started);
    let regs = Ucontext(uc);
    let state = RegState::from_registers(&regs);
    follow(
        tracer,
        slot,
        t,
        regs.rip(),
        StackPointer::Exact(regs.rsp()),
        Some(state),
    );
    Counters::add(&c.sampling_ns, sys::now_ns().saturating_sub(t0));
}

fn on_breakpoint(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, uc: &libc::ucontext_t) {
    let t0 = sys::now_ns();
    let c = &slot.counters;
    Counters::bump(&c.breakpoints);
    let Some(Pending {
        form,
        expected_sp,
        predicted,
    }) = t.pending.take()
    else {
        disarm_breakpoint(t);
        return;
    };
    let regs = Ucontext(uc);
    if regs.rip() != form.at || !expected_sp.admits(regs.rsp()) {
        if predicted.is_some() {
            // Verify mode: the model predicted this transfer, and the stack
            // pointer it expects here is the model's. A stop that arrives
            // elsewhere, or on another stack, disagrees with it.
            Counters::bump(&c.dataflow_verified);
            Counters::bump(&c.dataflow_mismatches);
            Counters::bump(&c.dataflow_mismatched_stops);
        }
        let reason = if regs.rip() != form.at {
            AbortReason::PcMismatch
        } else {
            AbortReason::SpMismatch
        };
        end_trace(tracer, slot, t, TraceEnd::Aborted(reason));
    } else {
        if matches!(expected_sp, StackPointer::Near(_)) {
            Counters::bump(&c.sp_windowed);
        }
        match form.evaluate(&regs, &OwnMemory(&tracer.exec)) {
            Outcome::Stop => end_trace(tracer, slot, t, TraceEnd::Aborted(AbortReason::Syscall)),
            Outcome::Continue { taken, next, sp } => {
                let is_branch = !matches!(form.kind, BranchKind::Syscall);
                if is_branch {
                    Counters::bump(&c.dynamically_evaluated);
                }
                if let Some(p) = predicted {
                    Counters::bump(&c.dataflow_verified);
                    if p != next {
                        Counters::bump(&c.dataflow_mismatches);
                    }
                }
                if taken {
                    Counters::bump(&c.dynamic_taken);
                    if record(tracer, slot, t, form.at, next) {
                        Counters::add(&c.breakpoint_ns, sys::now_ns().saturating_sub(t0));
                        return;
                    }
                }
                // The registers after the transfer: those at the stop but
                // rsp; a loop's rcx and a syscall's clobbers are not
                // followed.
                let state = match form.kind {
                    BranchKind::Loop { .. } | BranchKind::Syscall => None,
                    // The call has not pushed its return address yet (the
                    // handler runs before the instruction): log the push,
                    // or the callee's ret would read the stale slot.
                    BranchKind::Call => {
                        let mut st = RegState::from_registers(&regs);
                        st.push(form.fall_through).then_some(st)
                    }
                    _ => {
                        let mut st = RegState::from_registers(&regs);
                        st.gpr[RSP as usize] = sp;
                        Some(st)
                    }
                };
                follow(tracer, slot, t, next, StackPointer::Exact(sp), state);
            }
        }
    }
    Counters::add(&c.breakpoint_ns, sys::now_ns().saturating_sub(t0));
}

/// Appends {from, to} to the open trace; returns true when the trace
/// ended (complete, or stopped at a target outside the known code).
fn record(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, from: u64, to: u64) -> bool {
    // A branch into code the profile cannot name (the vDSO, this library's
    // interposers, memory that is not a file) ends the trace unrecorded:
    // every recorded target lies in a module perf.script lists.
    if tracer.exec.range_of(to).is_none() {
        end_trace(
            tracer,
            slot,
            t,
            TraceEnd::Aborted(AbortReason::OutsideMappings),
        );
        return true;
    }
    let Some(buffer) = t.buffer.as_mut() else {
        return true;
    };
    if !buffer.push(BranchEntry { from, to }) {
        // Cannot happen after the room check; counted, never silent.
        Counters::bump(&slot.counters.buffer_overflow_entries);
        end_trace(tracer, slot, t, TraceEnd::Complete);
        return true;
    }
    Counters::bump(&slot.counters.entries_recorded);
    if buffer.open_len() >= tracer.lbr.load(std::sync::atomic::Ordering::Relaxed) {
        end_trace(tracer, slot, t, TraceEnd::Complete);
        return true;
    }
    false
}

/// Look ahead from `pc` (FindNextUnresolvedBranch): record direct branches,
/// stop at the first transfer needing the CPU state and set the breakpoint
/// on it, or end the trace. With `regs` (the exact registers at `pc`) the
/// look-ahead also resolves, without a breakpoint, every transfer that the
/// data-flow model decides (see `decode::dataflow`), for as long as the
/// code stays inside the model.
fn follow(
    tracer: &Tracer,
    slot: &ThreadSlot,
    t: &mut ThreadTrace,
    mut pc: u64,
    mut sp: StackPointer,
    mut regs: Option<RegState>,
) {
    let c = &slot.counters;
    let code = LiveCode(&tracer.exec);
    let mem = OwnMemory(&tracer.exec);
    let generation = tracer.exec.generation();
    let mode = tracer.dataflow_mode();
    if mode == DataflowMode::Off {
        regs = None;
    }
    t.chain.clear();
    loop {
        let Some(cache) = t.cache.as_mut() else {
            end_trace(
                tracer,
                slot,
                t,
                TraceEnd::Aborted(AbortReason::UnsupportedInstruction),
            );
            return;
        };
        let mut decoded = false;
        let d0 = sys::now_ns();
        let seg = cache.lookup(&code, pc, generation, &mut t.insn, &mut decoded);
        if let Some(st) = regs.as_mut() {
            if !(seg.pure && decode::replay(&code, &seg, &mut t.insn, st, &mem)) {
                regs = None;
            }
        }
        if decoded {
            Counters::add(&c.decode_ns, sys::now_ns().saturating_sub(d0));
            Counters::bump(&c.segments_decoded);
        } else {
            Counters::bump(&c.segments_cached);
        }
        let sp_at_end = match &regs {
            Some(st) => StackPointer::Exact(st.gpr[RSP as usize]),
            None => sp.after(seg.sp_delta),
        };
        match seg.end {
            SegmentEnd::Direct { from, to, ret_addr } => {
                Counters::bump(&c.statically_resolved);
                if record(tracer, slot, t, from, to) {
                    return;
                }
                sp = if ret_addr.is_some() {
                    sp_at_end.after_call()
                } else {
                    sp_at_end
                };
                if let (Some(st), Some(ret)) = (regs.as_mut(), ret_addr) {
                    // The pushed return address, for the ret that reads it.
                    if !st.push(ret) {
                        regs = None;
                    }
                }
                pc = to;
            }
            SegmentEnd::Dynamic(form) => {
                if tracer.exec.in_rseq(form.at) {
                    end_trace(tracer, slot, t, TraceEnd::Aborted(AbortReason::Rseq));
                    return;
                }
                // The thread has not yet run the part of the chain the
                // model resolved: a breakpoint on an address the chain
                // passed would fire there first. A revisit therefore ends
                // the chain at the first visit, and the breakpoint goes
                // there.
                if let Some(i) = t.chain.iter().position(|step| step.at == form.at) {
                    rewind_chain(slot, t, i);
                    let step = t.chain[i];
                    let predicted = (mode == DataflowMode::Verify).then_some(step.next);
                    arm_or_end(
                        tracer,
                        slot,
                        t,
                        step.form,
                        StackPointer::Exact(step.sp),
                        predicted,
                    );
                    return;
                }
                let mut predicted = None;
                if let Some(st) = regs.as_mut().filter(|_| t.chain.len() < MAX_CHAIN) {
                    if let Some(Outcome::Continue {
                        taken,
                        next,
                        sp: after,
                    }) = resolve(&form, st, &mem)
                    {
                        // Verify mode stops at every transfer the model
                        // decides and checks its answer there: nothing it
                        // predicts is recorded unchecked.
                        if mode == DataflowMode::Verify {
                            predicted = Some(next);
                        } else {
                            let entries_before = t.buffer.as_ref().map_or(0, |b| b.open_len());
                            t.chain.push(ChainStep {
                                at: form.at,
                                form,
                                sp: st.gpr[RSP as usize],
                                next,
                                taken,
                                entries_before,
                            });
                            Counters::bump(&c.dataflow_resolved);
                            if taken {
                                Counters::bump(&c.dataflow_taken);
                                if record(tracer, slot, t, form.at, next) {
                                    return;
                                }
                            }
                            let pushed =
                                form.kind != BranchKind::Call || st.push(form.fall_through);
                            st.gpr[RSP as usize] = after;
                            if !pushed {
                                regs = None;
                            }
                            sp = StackPointer::Exact(after);
                            pc = next;
                            continue;
                        }
                    }
                }
                arm_or_end(tracer, slot, t, form, sp_at_end, predicted);
                return;
            }
            SegmentEnd::Fail { why, .. } => {
                let reason = match why {
                    DecodeFailure::OutsideMappings => AbortReason::OutsideMappings,
                    DecodeFailure::Unsupported => AbortReason::UnsupportedInstruction,
                    DecodeFailure::LookaheadLimit => AbortReason::LookaheadLimit,
                };
                end_trace(tracer, slot, t, TraceEnd::Aborted(reason));
                return;
            }
        }
    }
}

/// Sets the breakpoint for `form` and leaves it pending, or ends the trace
/// when the breakpoint cannot be set.
fn arm_or_end(
    tracer: &Tracer,
    slot: &ThreadSlot,
    t: &mut ThreadTrace,
    form: BranchForm,
    expected_sp: StackPointer,
    predicted: Option<u64>,
) {
    if arm_breakpoint(t, form.at) {
        t.pending = Some(Pending {
            form,
            expected_sp,
            predicted,
        });
    } else {
        end_trace(
            tracer,
            slot,
            t,
            TraceEnd::Aborted(AbortReason::BreakpointFailed),
        );
    }
}

/// Undoes the chain from step `i` on: its entries leave the open trace and
/// its counts leave the counters, so they reconcile.
fn rewind_chain(slot: &ThreadSlot, t: &mut ThreadTrace, i: usize) {
    let c = &slot.counters;
    let step = t.chain[i];
    let dropped = &t.chain[i..];
    let taken = dropped.iter().filter(|s| s.taken).count() as u64;
    let resolved = dropped.len() as u64;
    let removed = t
        .buffer
        .as_mut()
        .map_or(0, |b| b.truncate_open(step.entries_before)) as u64;
    Counters::sub(&c.entries_recorded, removed);
    Counters::sub(&c.dataflow_resolved, resolved);
    Counters::sub(&c.dataflow_taken, taken);
    Counters::sub(&c.statically_resolved, removed.saturating_sub(taken));
    Counters::bump(&c.dataflow_rewinds);
    t.chain.truncate(i + 1);
}

/// Hits the breakpoint event may take before the kernel stops it; the
/// limit is topped up to this when fewer than two are left.
const BREAKPOINT_HIT_BUDGET: u32 = 8;

/// Moves the thread's breakpoint to `addr` and enables it (one ioctl; two
/// when the event's limit is topped up, once every few stops).
///
/// The breakpoint event has a limit of hits (as the sampling event has a
/// limit of one sample): a hit whose SIGTRAP cannot be delivered, because
/// the thread runs with SIGTRAP blocked (in one of its own signal handlers,
/// or a section that blocks every signal) and passes the address again
/// and again, traps a few times and then no more, instead of at every
/// pass until the signal is unblocked. A delivered hit must never use the
/// last of the limit: on this kernel a hardware breakpoint event that its
/// limit stopped never fires again (measured; sampling events restart), so
/// the limit is topped up while two are left, and a hit delivered late
/// (when the count is unknown) replaces the event ([`renew_breakpoint`]).
fn arm_breakpoint(t: &mut ThreadTrace, addr: u64) -> bool {
    let Some(fd) = t.bp_fd.as_ref().map(|f| f.as_raw_fd()) else {
        return false;
    };
    if t.bp_hits_left < 2 {
        // Enables the event where it was parked (an address this handler
        // does not run) before it moves.
        let add = BREAKPOINT_HIT_BUDGET - t.bp_hits_left;
        if sys::perf_refresh(fd, add as i32).is_err() {
            t.bp_armed = false;
            return false;
        }
        t.bp_hits_left = BREAKPOINT_HIT_BUDGET;
    }
    t.bp_attr.__bindgen_anon_3.bp_addr = addr;
    t.bp_attr.set_disabled(0);
    let ok = sys::perf_modify_attributes(fd, &mut t.bp_attr).is_ok();
    t.bp_armed = ok;
    ok
}

/// Replaces the thread's breakpoint event by a fresh one, when what is
/// left of its limit is unknown (a hit delivered late, an abandoned
/// handler). Async-signal-safe: close and perf_event_open are system calls
/// and the attribute is built on the stack. Without a new event the
/// thread's next traces end as `breakpoint_failed`.
fn renew_breakpoint(slot: &ThreadSlot, t: &mut ThreadTrace) {
    t.bp_fd = None;
    t.bp_armed = false;
    t.bp_hits_left = 0;
    let mut attr = super::threads::breakpoint_attr();
    if let Ok(fd) = sys::perf_event_open(&mut attr, 0) {
        t.bp_attr = attr;
        t.bp_fd = Some(fd);
        Counters::bump(&slot.counters.breakpoints_renewed);
    }
}

fn disarm_breakpoint(t: &mut ThreadTrace) {
    if t.bp_armed {
        if let Some(fd) = t.bp_fd.as_ref() {
            let _ = sys::perf_disable(fd.as_raw_fd());
        }
        t.bp_armed = false;
    }
}

fn rearm_sampling(t: &mut ThreadTrace) {
    if let Some(fd) = t.sample_fd.as_ref() {
        let _ = sys::perf_refresh(fd.as_raw_fd(), 1);
    }
}

/// Closes the open trace, makes sure the buffer has room for the next one
/// (swapping it for an empty one if not: the paper's free-space check at
/// re-arm time) and re-arms one-shot sampling.
fn end_trace(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, end: TraceEnd) {
    let c = &slot.counters;
    close_open_trace(t, c, end);
    let lbr = tracer.lbr.load(std::sync::atomic::Ordering::Relaxed);
    let needs_swap = t.buffer.as_ref().is_some_and(|b| !b.has_room(lbr));
    if needs_swap {
        if let Some(full) = t.buffer.take() {
            // The queue holds every buffer the pool ever made: no overflow.
            let _ = tracer.pool.full.push(full);
            Counters::bump(&c.buffer_swaps);
        }
        t.buffer = tracer.pool.free.pop();
    }
    rearm_sampling(t);
}

/// Closes the open trace (if any) with `end` and disarms the breakpoint.
/// Shared by the handlers and the control thread (which holds the slot
/// when it calls this).
pub(super) fn close_open_trace(t: &mut ThreadTrace, c: &Counters, end: TraceEnd) {
    t.pending = None;
    disarm_breakpoint(t);
    if end == TraceEnd::Aborted(AbortReason::OutsideMappings) {
        // Code the table does not know: maybe a library dlopen'ed since
        // the worker last looked. It looks now.
        if let Some(tracer) = super::tracer() {
            tracer.exec.request_refresh();
        }
    }
    if let Some(b) = t.buffer.as_mut() {
        if b.is_open() {
            if !b.close_trace(end) {
                // Ended before its first entry: counted by how it ended,
                // and here, since no buffer holds it.
                Counters::bump(&c.traces_empty);
            }
            match end {
                TraceEnd::Complete => Counters::bump(&c.traces_completed),
                TraceEnd::Aborted(r) => c.abort(r),
            }
        }
    }
}
