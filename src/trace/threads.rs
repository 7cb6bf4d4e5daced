//! Opening and closing a thread's two events. Runs on the control thread
//! (at start and stop) or on the thread itself (created or exiting during a
//! session); never in a handler.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::buffer::{AbortReason, TraceEnd};
use crate::sync::SpinLock;
use crate::sys::{self, Errno};

pub use super::events::SamplingEvent;
use super::events::{breakpoint_attr, sampling_attr};
use super::{
    Closer, Closing, Counters, ThreadSlot, ThreadTrace, Tracer, CLOSED, FREE, READY, TID_TOMBSTONE,
};

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

/// Starts tracing thread `tid` (0 is not allowed: pass the real tid) and
/// returns its slot. Idempotent: a thread that already has a slot is left
/// as it is (`Ok(None)`). Allocates nothing; the two perf_event_open calls
/// run outside any lock: threads created together register in parallel.
pub fn register<'t>(
    tracer: &'t Tracer,
    tid: i32,
    event: &SamplingEvent,
) -> Result<Option<&'t ThreadSlot>, RegisterError> {
    let slot = match tracer.claim(tid) {
        Ok(slot) => slot,
        Err(true) => return Ok(None),
        Err(false) => {
            tracer.table_full.fetch_add(1, Ordering::Relaxed);
            return Err(RegisterError::TableFull);
        }
    };
    let release = |slot: &ThreadSlot| {
        slot.tid.store(TID_TOMBSTONE, Ordering::Release);
        slot.state.store(FREE, Ordering::Release);
    };
    // SAFETY: the slot is in SETUP and claimed by us: no handler holds it.
    let t = unsafe { slot.inner() };
    // Nothing is allocated here: the buffer and what the mode needs
    // (emulator, block cache, predictions) come from the pools at the
    // thread's first sample (see `pools`), so a thread never sampled costs
    // its two events only.
    t.bp_attr = breakpoint_attr();
    t.bp_armed = false;
    t.bp_hits_left = 0;
    t.awaiting = None;
    t.committed = None;
    t.unsettled = None;
    let mut sample_attr = sampling_attr(event);
    t.period = if event.freq { 0 } else { event.period };
    if !event.freq && event.period > 1 {
        // A first period drawn uniformly from [1, period].
        let seed = (tid as u64) ^ sys::now_ns().rotate_left(17);
        let phase = 1 + seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) % event.period;
        sample_attr.__bindgen_anon_1.sample_period = phase;
    }
    t.event_period = if event.freq {
        0
    } else {
        // SAFETY: sample_period is the active field without a frequency.
        unsafe { sample_attr.__bindgen_anon_1.sample_period }
    };
    t.skip_sample = false;
    t.sampling_unlimited = false;
    // Opened and stored in the slot with no fork in between: a forked
    // child closes the descriptors its copy of the table names, and one
    // held only in a local here would stay open in it.
    let opened = crate::sync::without_fork(|| {
        t.bp_fd =
            Some(sys::perf_event_open(&mut t.bp_attr, tid).map_err(RegisterError::Breakpoint)?);
        t.sample_fd =
            Some(sys::perf_event_open(&mut sample_attr, tid).map_err(RegisterError::Sampling)?);
        Ok(())
    });
    if let Err(e) = opened {
        t.bp_fd = None;
        release(slot);
        return Err(e);
    }
    let raw = t.sample_fd.as_ref().map_or(-1, |fd| fd.as_raw_fd());
    // Armed while the slot is still ours alone (SETUP): once it is READY a
    // stop may close it, and these descriptors with it, at any moment.
    // For one overflow (the random first period), after which the first
    // sample takes the limit off (`events::sample_entered`); with a
    // frequency, without a limit from here.
    let entries = slot.entries.load(Ordering::SeqCst);
    t.cpu_at_register = sys::thread_cpu_ns_of(tid);
    let arm = |raw| {
        if event.freq {
            sys::perf_enable(raw)
        } else {
            sys::perf_refresh(raw, 1)
        }
    };
    if let Err(e) = arm(raw) {
        t.bp_fd = None;
        t.sample_fd = None;
        release(slot);
        return Err(RegisterError::Arm(e));
    }
    t.sampling_unlimited = event.freq;
    // SeqCst: a thread registering itself checks `running` after this
    // store, and stop clears `running` before it reads the states, so
    // one of the two sees the other (see register_current_thread).
    slot.state.store(READY, Ordering::SeqCst);
    if slot.entries.load(Ordering::SeqCst) != entries {
        // A sample came before the slot was ready and was refused: its
        // overflow used the limit, and nothing else can raise one. Armed
        // again. Should a stop have closed the slot meanwhile, this fails
        // on a closed descriptor, or at worst gives one extra sample to
        // the event that reused its number.
        let _ = arm(raw);
    }
    tracer.threads_registered.fetch_add(1, Ordering::Relaxed);
    Ok(Some(slot))
}

/// Adds the thread's CPU time since its registration to `threads_cpu_ns`,
/// and the part of it its sampling event was off to `sampling_off_ns`;
/// nothing for a thread already gone (its clock reads no more).
fn count_sampling_off(slot: &ThreadSlot, t: &mut ThreadTrace) {
    let (Some(fd), Some(c0)) = (t.sample_fd.as_ref(), t.cpu_at_register.take()) else {
        return;
    };
    let (Some(on), Some(now)) = (
        sys::perf_time_enabled(fd.as_raw_fd()),
        sys::thread_cpu_ns_of(slot.tid()),
    ) else {
        return;
    };
    let ran = now.saturating_sub(c0);
    Counters::add(&slot.counters.threads_cpu_ns, ran);
    Counters::add(&slot.counters.sampling_off_ns, ran.saturating_sub(on));
}

/// Stops tracing the slot's thread: takes the slot (see [`Closer`]), closes
/// an open trace with `reason`, closes the events, hands the buffer to the
/// worker, its pooled state back to the pools and the counters to the
/// session totals. A slot still busy after
/// the wait is left as it is and counted (`slots_busy_at_stop`).
pub fn close(tracer: &Tracer, slot: &ThreadSlot, reason: AbortReason, closer: Closer) -> Closing {
    let taken = slot.take_for_close(closer);
    match taken {
        Closing::Taken => {}
        Closing::Stuck => {
            crate::host::bump(&crate::host::HOST.slots_busy_at_stop);
            return taken;
        }
        Closing::NotOpen => return taken,
    }
    // SAFETY: take_for_close made us the holder.
    let t = unsafe { slot.inner() };
    if reason == AbortReason::ThreadExit || slot.tid() == sys::gettid() {
        // The thread is past its last segment: gone, or running this.
        super::emulate::settle_passed(t, &slot.counters);
    }
    super::ends::close_open_trace(t, &slot.counters, TraceEnd::Aborted(reason));
    count_sampling_off(slot, t);
    // Closing the fds disables both events.
    t.sample_fd = None;
    t.bp_fd = None;
    t.bp_hits_left = 0;
    if let Some(buffer) = t.buffer.take() {
        let queue = if buffer.is_empty() {
            &tracer.pool.free
        } else {
            &tracer.pool.full
        };
        let _ = queue.push(buffer);
    }
    super::pools::give_back(&tracer.states, t);
    tracer.retired.absorb(&slot.counters.values());
    slot.counters.reset();
    slot.tid.store(TID_TOMBSTONE, Ordering::Release);
    debug_assert_eq!(slot.state.load(Ordering::Relaxed), CLOSED);
    slot.state.store(FREE, Ordering::Release);
    taken
}

/// Closes every traced thread (session stop). Threads that are gone are
/// closed with `thread_exit`, live ones with `session_stop`. Returns the
/// tids that were traced.
pub fn close_all(tracer: &Tracer) -> Vec<i32> {
    let mut tids = Vec::new();
    for slot in tracer.claimed_slots() {
        let tid = slot.tid();
        if tid <= 0 {
            continue;
        }
        let (reason, closer) = if sys::thread_alive(tid) {
            (AbortReason::SessionStop, Closer::Other)
        } else {
            (AbortReason::ThreadExit, Closer::Owner)
        };
        close(tracer, slot, reason, closer);
        tids.push(tid);
    }
    tids
}

/// The worker's periodic look at the table (never in a handler): a slot
/// whose thread is gone is closed (threads found at start have no exit
/// hook of ours; a thread killed by a raw exit has none either). A slot
/// left `BUSY` by an abandoned handler needs nothing: the thread's
/// sampling runs on (it has no limit of overflows), and its next handler
/// takes the slot back.
pub fn sweep(tracer: &Tracer) {
    for slot in tracer.claimed_slots() {
        let tid = slot.tid();
        if tid <= 0 {
            continue;
        }
        if !sys::thread_alive(tid)
            && close(tracer, slot, AbortReason::ThreadExit, Closer::Owner) == Closing::Taken
        {
            crate::host::bump(&crate::host::HOST.threads_gone);
        }
    }
}

/// Threads of the library itself, never traced.
const MAX_OWN_THREADS: usize = 8;
static OWN_TIDS: [AtomicI32; MAX_OWN_THREADS] = [const { AtomicI32::new(0) }; MAX_OWN_THREADS];

/// Marks the calling thread as one of the library's.
pub fn mark_own_thread() {
    let tid = sys::gettid();
    crate::quiet::own_thread(true);
    for slot in &OWN_TIDS {
        if slot
            .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

pub fn unmark_own_thread() {
    let tid = sys::gettid();
    crate::quiet::own_thread(false);
    for slot in &OWN_TIDS {
        let _ = slot.compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

pub fn is_own_thread(tid: i32) -> bool {
    OWN_TIDS.iter().any(|t| t.load(Ordering::Acquire) == tid)
}

/// The sampling event while a session runs: threads created then register
/// themselves with it.
static REGISTRY: SpinLock<Option<SamplingEvent>> = SpinLock::new(None);

/// Opens registration for threads created during a session, with the
/// session's sampling event (at start, before `running` is set).
pub fn open_registration(event: SamplingEvent) {
    *REGISTRY.lock() = Some(event);
}

/// Closes registration (at stop, before `running` is cleared).
pub fn close_registration() {
    *REGISTRY.lock() = None;
}

/// In a fork child: no registration open, no thread of the library (the
/// parent's are not here), and the registry's lock free.
pub fn reset_registration_after_fork() {
    REGISTRY.force_unlock();
    *REGISTRY.lock() = None;
    for t in &OWN_TIDS {
        t.store(0, Ordering::Relaxed);
    }
}

/// Registers the calling thread if a session runs (threads created during
/// a session, from the pthread_create interposer). Returns whether it is
/// traced now.
///
/// No lock is held while the events are opened. Against a stop, the
/// thread's slot becomes `READY` before it reads `running` again, and stop
/// clears `running` before it closes the slots (both sequentially
/// consistent): either stop's close sees the slot ready, or this thread
/// sees the session gone and closes its own slot. A stop and a new start in
/// between move the epoch, which has the same effect.
pub fn register_current_thread() -> bool {
    let Some(tracer) = super::tracer() else {
        return false;
    };
    let epoch = tracer.epoch.load(Ordering::SeqCst);
    if !tracer.running.load(Ordering::SeqCst) {
        return false;
    }
    let Some(event) = *REGISTRY.lock() else {
        return false;
    };
    let tid = sys::gettid();
    // A slot under this tid is that of a thread whose tid was reused, or
    // this thread's own from start's enumeration: either way no handler of
    // it runs now (this thread is not in one).
    if let Some(stale) = tracer.slot_of(tid) {
        close(tracer, stale, AbortReason::ThreadExit, Closer::Owner);
    }
    let Ok(Some(slot)) = register(tracer, tid, &event) else {
        return false;
    };
    if tracer.epoch.load(Ordering::SeqCst) != epoch || !tracer.running.load(Ordering::SeqCst) {
        close(tracer, slot, AbortReason::SessionStop, Closer::Owner);
        return false;
    }
    true
}

/// Closes the calling thread's slot as it ends (its exit hook).
pub fn unregister_current_thread() {
    if let Some(tracer) = super::tracer() {
        if let Some(slot) = tracer.slot_of(sys::gettid()) {
            let closed = close(tracer, slot, AbortReason::ThreadExit, Closer::Owner);
            if closed == Closing::Taken {
                crate::host::bump(&crate::host::HOST.threads_exited);
            }
        }
    }
}
