//! Opening and closing a thread's two events. Runs on the control thread
//! (at start and stop) or on the thread itself (created or exiting during a
//! session); never in a handler.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use perf_event_open_sys::bindings as pb;

use crate::buffer::{AbortReason, TraceEnd};
use crate::decode::BlockCache;
use crate::sys::{self, Errno};

use super::{
    handler, ThreadSlot, Tracer, BREAKPOINT_TAG, CLOSED, FREE, READY, SAMPLE_TAG, TID_TOMBSTONE,
};

/// The sampling event of a session, as perf_event_open takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplingEvent {
    pub type_: u32,
    pub config: u64,
    /// Period in event units, or frequency in Hz when `freq`.
    pub period: u64,
    pub freq: bool,
}

/// Why a thread could not be traced.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("the thread table is full ({} threads)", super::MAX_THREADS)]
    TableFull,
    #[error("perf_event_open of the sampling event failed: {0}")]
    Sampling(Errno),
    #[error("perf_event_open of the hardware breakpoint failed: {0}")]
    Breakpoint(Errno),
    #[error("arming the sampling event failed: {0}")]
    Arm(Errno),
}

/// Where a disabled breakpoint waits: an address in this library that no
/// application thread executes while the breakpoint is disabled.
extern "C" fn breakpoint_parking() {}

fn common_flags(attr: &mut sys::PerfEventAttr, tag: u64) {
    attr.set_disabled(1);
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    // sigtrap delivers a synchronous SIGTRAP to the thread that hit the
    // event, with si_perf_data = sig_data; the kernel requires
    // remove_on_exec with it (DESIGN.md, measured facts).
    attr.set_sigtrap(1);
    attr.set_remove_on_exec(1);
    attr.sig_data = tag;
}

pub fn breakpoint_attr() -> sys::PerfEventAttr {
    let mut attr = sys::blank_attr();
    attr.type_ = pb::PERF_TYPE_BREAKPOINT;
    attr.bp_type = pb::HW_BREAKPOINT_X;
    attr.__bindgen_anon_3.bp_addr = breakpoint_parking as *const () as usize as u64;
    attr.__bindgen_anon_4.bp_len = std::mem::size_of::<libc::c_long>() as u64;
    attr.__bindgen_anon_1.sample_period = 1;
    common_flags(&mut attr, BREAKPOINT_TAG);
    attr
}

pub fn sampling_attr(event: &SamplingEvent) -> sys::PerfEventAttr {
    let mut attr = sys::blank_attr();
    attr.type_ = event.type_;
    attr.config = event.config;
    if event.freq {
        attr.set_freq(1);
        attr.__bindgen_anon_1.sample_freq = event.period;
    } else {
        attr.__bindgen_anon_1.sample_period = event.period;
    }
    common_flags(&mut attr, SAMPLE_TAG);
    attr
}

/// Starts tracing thread `tid` (0 is not allowed: pass the real tid).
/// Idempotent: a thread that already has a slot is left as it is.
pub fn register(
    tracer: &'static Tracer,
    tid: i32,
    event: &SamplingEvent,
) -> Result<(), RegisterError> {
    if tracer.slot_of(tid).is_some() {
        return Ok(());
    }
    let Some(slot) = tracer.claim(tid) else {
        tracer.table_full.fetch_add(1, Ordering::Relaxed);
        return Err(RegisterError::TableFull);
    };
    let release = |slot: &ThreadSlot| slot.tid.store(TID_TOMBSTONE, Ordering::Release);
    // SAFETY: the slot is FREE and claimed by us: no handler holds it.
    let t = unsafe { slot.inner() };
    let mut bp_attr = breakpoint_attr();
    let bp_fd = match sys::perf_event_open(&mut bp_attr, tid) {
        Ok(fd) => fd,
        Err(e) => {
            release(slot);
            return Err(RegisterError::Breakpoint(e));
        }
    };
    let mut sample_attr = sampling_attr(event);
    let sample_fd = match sys::perf_event_open(&mut sample_attr, tid) {
        Ok(fd) => fd,
        Err(e) => {
            release(slot);
            return Err(RegisterError::Sampling(e));
        }
    };
    t.bp_attr = bp_attr;
    t.bp_armed = false;
    t.pending = None;
    if t.cache.is_none() {
        t.cache = Some(Box::new(BlockCache::new()));
    }
    t.chain.reserve_exact(super::handler::MAX_CHAIN);
    t.awaiting = None;
    if tracer.dataflow_mode() == super::DataflowMode::Emulate && t.emu.is_none() {
        t.emu = Some(crate::emulate::Emulator::new(&tracer.exec));
    }
    tracer.pool.grow_for_thread();
    if t.buffer.is_none() {
        t.buffer = tracer.pool.free.pop();
    }
    let raw = sample_fd.as_raw_fd();
    t.bp_fd = Some(bp_fd);
    t.sample_fd = Some(sample_fd);
    slot.state.store(READY, Ordering::Release);
    if let Err(e) = sys::perf_refresh(raw, 1) {
        close(tracer, slot, AbortReason::SessionStop);
        return Err(RegisterError::Arm(e));
    }
    tracer.threads_registered.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Stops tracing the slot's thread: waits out a running handler, closes an
/// open trace with `reason`, closes the events, hands the buffer to the
/// worker and the counters to the session totals.
pub fn close(tracer: &Tracer, slot: &ThreadSlot, reason: AbortReason) {
    if !slot.close() {
        return;
    }
    // SAFETY: close() made us the holder.
    let t = unsafe { slot.inner() };
    handler::close_open_trace(t, &slot.counters, TraceEnd::Aborted(reason));
    // Closing the fds disables both events.
    t.sample_fd = None;
    t.bp_fd = None;
    if let Some(buffer) = t.buffer.take() {
        let queue = if buffer.is_empty() {
            &tracer.pool.free
        } else {
            &tracer.pool.full
        };
        let _ = queue.push(buffer);
    }
    tracer.retired.absorb(&slot.counters.values());
    slot.counters.reset();
    slot.tid.store(TID_TOMBSTONE, Ordering::Release);
    debug_assert_eq!(slot.state.load(Ordering::Relaxed), CLOSED);
    slot.state.store(FREE, Ordering::Release);
}

/// Closes every traced thread (session stop). Threads that are gone are
/// closed with `thread_exit`, live ones with `session_stop`. Returns the
/// tids that were traced.
pub fn close_all(tracer: &Tracer) -> Vec<i32> {
    let mut tids = Vec::new();
    for slot in tracer.slots.iter() {
        let tid = slot.tid();
        if tid <= 0 {
            continue;
        }
        let reason = if sys::thread_alive(tid) {
            AbortReason::SessionStop
        } else {
            AbortReason::ThreadExit
        };
        close(tracer, slot, reason);
        tids.push(tid);
    }
    tids
}
