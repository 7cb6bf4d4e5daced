//! Session lifecycle: start, stop (with the writer), status.
//!
//! Two locks, both spin locks that a fork child can reset (a std Mutex held
//! by another thread at fork time would stay locked forever in the child):
//! `CONTROL` serialises the control operations; `trace::threads` keeps the
//! sampling event threads created during a session register with (its
//! registry lock; see `threads::register_current_thread`). Neither lock is
//! ever taken in a handler.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::aggregate::{self, Aggregate};
use crate::decode;
use crate::exec_map::MemoryLayout;
use crate::modules::{self, Module};
use crate::output::{self, SessionReport};
use crate::sync::{self, Doorbell, SpinLock};
use crate::sys;
use crate::trace::counters::CounterValues;
use crate::trace::threads::{self, RegisterError};
use crate::trace::{self, chain, handler, Tracer};

use breakdance_protocol::{SessionConfig, StatusReply};

use super::config::{self, Options, Resolved, StopOptions};

struct Running {
    resolved: Resolved,
    started_ns: u64,
    stop_worker: Arc<AtomicBool>,
    worker: JoinHandle<(Aggregate, Vec<Module>)>,
    modules_at_start: Vec<Module>,
}

/// Data of a stopped session whose outputs could not be written yet.
struct Unwritten {
    report: SessionReport,
    agg: Aggregate,
    modules: Vec<Module>,
    /// Whether `report.output_dir` may belong to another user.
    force_dir: bool,
}

#[derive(Default)]
struct ControlState {
    running: Option<Running>,
    unwritten: Option<Unwritten>,
}

static CONTROL: SpinLock<Option<ControlState>> = SpinLock::new(None);

/// Why `start` refused.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("a session is already running (stop it first)")]
    AlreadyRunning,
    #[error("{0}")]
    Config(#[from] config::ConfigError),
    #[error("cannot install the SIGTRAP handler: {0}")]
    Handler(sys::Errno),
    #[error("{0}{1}; the program keeps running unprofiled")]
    Perf(RegisterError, String),
    #[error("cannot read /proc/self: {0}")]
    Proc(std::io::Error),
}

/// Why `stop` failed.
#[derive(Debug, thiserror::Error)]
pub enum StopError {
    #[error("no session is running")]
    NotRunning,
    #[error(
        "{0}; the session's data is kept: send stop again to retry, or stop with out=DIR \
         (profiler-ctl stop -o DIR) to write it elsewhere"
    )]
    Write(#[from] output::WriteError),
}

fn pmu_available() -> bool {
    let mut attr = sys::blank_attr();
    attr.type_ = perf_event_open_sys::bindings::PERF_TYPE_HARDWARE;
    attr.config = perf_event_open_sys::bindings::PERF_COUNT_HW_BRANCH_INSTRUCTIONS as u64;
    attr.set_disabled(1);
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    sys::perf_event_open(&mut attr, 0).is_ok()
}

fn hint_for(e: &RegisterError) -> String {
    let errno = match e {
        RegisterError::Sampling(e) | RegisterError::Breakpoint(e) | RegisterError::Arm(e) => *e,
        RegisterError::TableFull => return String::new(),
    };
    match errno.0 {
        libc::EACCES | libc::EPERM => format!(
            " (kernel.perf_event_paranoid is {}: run as root or lower it, e.g. sysctl kernel.perf_event_paranoid=1)",
            sys::perf_event_paranoid().map_or("unknown".to_string(), |p| p.to_string())
        ),
        libc::ENOSPC => " (no free hardware breakpoint slot: a debugger or another tool holds them)".to_string(),
        libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV => {
            " (this event does not exist here: machines without a PMU need -e task-clock)".to_string()
        }
        libc::EINVAL => " (the kernel refused the attributes: sigtrap needs Linux 5.13 or later)".to_string(),
        _ => String::new(),
    }
}

/// Initialises everything the handlers touch lazily, before any signal
/// can fire: iced's decoder tables, the real sigaction, the clock.
fn warm_up() {
    let code = [0x48u8, 0x89, 0xe5, 0x74, 0x02, 0xc3];
    let mut insn = iced_x86::Instruction::default();
    struct Bytes<'a>(&'a [u8]);
    impl decode::CodeSource for Bytes<'_> {
        fn code_at(&mut self, addr: u64) -> Option<&[u8]> {
            self.0.get(addr as usize..)
        }
    }
    let _ = decode::decode_block(&mut Bytes(&code), 0, &mut insn);
    sys::warm_sigaction();
    sys::raw::calibrate_clock();
    let _ = sys::now_ns();
    let _ = sys::gettid();
}

/// The modules whose code is traced: all but this library when it is
/// preloaded (its interposers and its own start and stop would otherwise
/// show in the application's profile; a trace that enters them ends as
/// `outside_mappings`). Linked into a program as an rlib, the library is
/// part of that program and is traced with it.
fn traced_modules(maps: &[modules::Mapping]) -> Vec<Module> {
    let own_code = traced_modules as *const () as usize as u64;
    let preloaded = super::is_preloaded();
    modules::modules_from_maps(maps)
        .into_iter()
        .filter(|m| !(preloaded && m.contains(own_code)))
        .collect()
}

/// Notes what makes the process noisy that the interposers do not see
/// (`quiet`): an application handler for an asynchronous signal, installed
/// by a raw system call or before the library loaded. The library's own
/// handlers do not count. (Threads are counted at every run, by
/// `quiet::is_quiet_now`.)
fn survey_quiet() {
    if !crate::quiet::is_quiet() {
        return;
    }
    let own = library_base();
    for sig in 1..=libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP || crate::quiet::synchronous(sig) {
            continue;
        }
        // SAFETY: plain data, all-zero is valid.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a query (no new action) into a valid out-pointer.
        if unsafe { sys::real_sigaction(sig, std::ptr::null(), &mut old) }.is_err() {
            continue;
        }
        let handler = old.sa_sigaction;
        if handler == libc::SIG_DFL || handler == libc::SIG_IGN || base_of(handler) == own {
            continue;
        }
        crate::quiet::handler_installed(sig, handler);
    }
}

/// Where the object holding `addr` is loaded (0 if none).
fn base_of(addr: usize) -> usize {
    // SAFETY: plain data, all-zero is valid.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables.
    if unsafe { libc::dladdr(addr as *const libc::c_void, &mut info) } == 0 {
        return 0;
    }
    info.dli_fbase as usize
}

/// Where this library is loaded.
fn library_base() -> usize {
    base_of(survey_quiet as fn() as usize)
}

/// The handler's table of code, rseq sections, immutable and private
/// memory.
fn layout(mods: &[Module], maps: &[modules::Mapping]) -> MemoryLayout {
    use std::hash::{Hash, Hasher};
    let mut code = std::collections::hash_map::DefaultHasher::new();
    for x in mods.iter().flat_map(|m| &m.exec) {
        (
            x.start,
            x.end,
            x.offset,
            x.dev_major,
            x.dev_minor,
            x.inode,
            &x.path,
        )
            .hash(&mut code);
    }
    MemoryLayout {
        code: code.finish(),
        exec: mods
            .iter()
            .flat_map(|m| m.exec.iter().map(|x| (x.start, x.end)))
            .collect(),
        rseq: mods.iter().flat_map(|m| m.rseq.iter().copied()).collect(),
        immutable: mods
            .iter()
            .flat_map(|m| m.immutable.iter().copied())
            .collect(),
        private: maps
            .iter()
            .filter(|m| m.is_private_writable())
            .map(|m| (m.start, m.end))
            .collect(),
        generated_code: maps.iter().any(|m| m.is_generated_code()),
        mapped: maps
            .iter()
            .fold(Vec::new(), |mut merged: Vec<(u64, u64)>, m| {
                match merged.last_mut() {
                    Some(last) if last.1 == m.start => last.1 = m.end,
                    _ => merged.push((m.start, m.end)),
                }
                merged
            }),
    }
}

/// How often the worker looks at /proc/self/maps for code mapped without
/// the dynamic loader (dlopen is noticed at once), and sweeps the thread
/// table (threads that ended, stuck slots).
const LOOK_EVERY_NS: u64 = 200_000_000;

/// The worker's wait between passes while there is work about (buffers
/// to drain, pools drawn on, the doorbell rung).
const WAIT_BUSY: Duration = Duration::from_millis(5);
/// The longest wait between idle passes: each idle pass doubles the wait
/// up to this. (Every 5 ms, the worker's wake-ups alone cost an idle
/// process 6–7 ms of CPU a second on the 2-core guest of
/// results/speed: a third of what its handlers cost SQLite sampled every
/// 10 ms.)
const WAIT_IDLE: Duration = Duration::from_millis(100);

/// The worker: aggregates full buffers, follows changes of the mappings
/// (dlopen and dlclose at once, other mappings within `LOOK_EVERY_NS`) so
/// that new code is traced and named, and sweeps the thread table.
///
/// `last_maps` and `last_loads` are what the table was made from at start
/// (read there, not here: a dlopen between the two would go unnoticed).
fn worker(
    tracer: &'static Tracer,
    stop: Arc<AtomicBool>,
    ready: std::sync::mpsc::Sender<()>,
    mut last_maps: String,
    mut last_loads: (u64, u64),
) -> (Aggregate, Vec<Module>) {
    threads::mark_own_thread();
    let _ = ready.send(());
    let mut agg = Aggregate::default();
    let mut unwinder = crate::unwind::DwarfUnwinder::default();
    let mut seen: Vec<Module> = Vec::new();
    let mut last_look = sys::now_ns();
    let mut last_window = sys::now_ns();
    // What the doorbell rang for since the last pass.
    let mut rung = 0u32;
    let mut wait = WAIT_BUSY;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let depth = tracer.callstack.load(Ordering::Relaxed);
        let drained = aggregate::drain(&tracer.pool, &mut agg, &mut unwinder, depth);
        let loads = sys::loaded_object_changes();
        let loaded = loads != last_loads;
        let look = sys::now_ns() - last_look > LOOK_EVERY_NS;
        if loaded || look || rung & Doorbell::REFRESH != 0 {
            sync::without_fork(|| {
                let Ok(text) = std::fs::read_to_string("/proc/self/maps") else {
                    return;
                };
                if text == last_maps {
                    return;
                }
                let maps = modules::parse_maps(&text);
                let mods = traced_modules(&maps);
                tracer.exec.update(&layout(&mods, &maps));
                for m in mods {
                    if !seen
                        .iter()
                        .any(|s| s.path == m.path && s.load_address == m.load_address)
                    {
                        seen.push(m);
                    }
                }
                last_maps = text;
            });
            last_loads = loads;
        }
        crate::emulate::code::maintain(tracer.exec.generation(), agg.traces_seen);
        if look {
            last_look = sys::now_ns();
            threads::sweep(tracer);
            survey_quiet();
        }
        // Per-thread state for the threads being sampled: sized by the
        // recent demand, not by the thread count (see `trace::pools`).
        if sys::now_ns() - last_window > trace::POOL_WINDOW_NS {
            last_window = sys::now_ns();
            trace::next_pool_window(tracer);
        }
        let added = trace::top_up_pools(tracer);
        let busy = drained > 0 || added > 0 || rung != 0 || loaded;
        if drained == 0 {
            if stopping {
                break;
            }
            // Idle passes space out, up to WAIT_IDLE: the doorbell brings
            // the worker back at once when a handler draws on a pool or
            // fills a buffer, or when code may have been mapped.
            wait = if busy {
                WAIT_BUSY
            } else {
                (wait * 2).min(WAIT_IDLE)
            };
            rung = tracer.exec.doorbell().wait(wait);
        } else {
            rung = 0;
        }
    }
    threads::unmark_own_thread();
    trace::counters::Counters::add(&tracer.retired.worker_ns, sys::thread_cpu_ns());
    (agg, seen)
}

/// Starts a session with `options`.
pub fn start(options: &Options) -> Result<String, StartError> {
    let mut guard = CONTROL.lock();
    let state = guard.get_or_insert_with(ControlState::default);
    if state.running.is_some() {
        return Err(StartError::AlreadyRunning);
    }
    let cpu_at_start = sys::thread_cpu_ns();
    let resolved = config::resolve(options, options.event.is_none() && pmu_available())?;
    warm_up();
    let tracer = trace::tracer_or_init();
    // Slots a previous session had to leave behind (a handler that was
    // abandoned, then took its slot back after that session stopped).
    threads::close_all(tracer);
    // The loader's counts before the maps: a dlopen in between shows as a
    // change to the worker.
    let loads = sys::loaded_object_changes();
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(StartError::Proc)?;
    let parsed = modules::parse_maps(&maps);
    let mods = traced_modules(&parsed);
    tracer.exec.update(&layout(&mods, &parsed));
    tracer.retired.reset();
    crate::host::HOST.reset();
    tracer.table_full.store(0, Ordering::Relaxed);
    tracer.threads_registered.store(0, Ordering::Relaxed);
    tracer.lbr.store(resolved.lbr, Ordering::Relaxed);
    tracer
        .callstack
        .store(resolved.callstack, Ordering::Relaxed);
    tracer.values.store(resolved.values, Ordering::Relaxed);
    tracer
        .always_check
        .store(resolved.always_check, Ordering::Relaxed);
    tracer.unwind_dwarf.store(
        resolved.unwind == breakdance_protocol::Unwind::Dwarf,
        Ordering::Relaxed,
    );
    tracer
        .lookahead
        .store(resolved.lookahead as u8, Ordering::Relaxed);
    // Every asynchronous signal is blocked while the handler runs: an
    // application handler never runs inside it (it would find the slot
    // busy, or leave ours half-way by longjmp).
    chain::install(
        libc::SIGTRAP,
        handler::on_sigtrap,
        sys::Blocked::AllButFaults,
        chain::Kind::Trap,
    )
    .map_err(StartError::Handler)?;
    // The handlers read the thread's memory through fault-safe loads (the
    // emulator's, and a breakpoint's branch reading its return address or
    // jump-table slot): our fault handler goes in front of the
    // application's for the session (for SIGILL and SIGFPE as well: see
    // `chain::beneath_a_blocked_sigtrap`). The emulator is built before
    // any thread is traced.
    if crate::trace::emulates(resolved.lookahead) {
        crate::emulate::warm();
    }
    // The spare per-thread state of the mode (taken at threads' first
    // samples, never made in a handler): the worker keeps it topped up.
    trace::top_up_pools(tracer);
    for sig in chain::FAULTS {
        chain::install(
            sig,
            chain::on_fault,
            sys::Blocked::These(&[]),
            chain::Kind::Fault,
        )
        .map_err(StartError::Handler)?;
    }

    // The worker exists before any thread is traced or `running` is set,
    // so the pthread_create interposer never mistakes it for the
    // application's.
    let stop_worker = Arc::new(AtomicBool::new(false));
    let worker = {
        let stop = stop_worker.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let handle = sys::with_signals_blocked(|| {
            crate::quiet::spawning_own(|| {
                std::thread::Builder::new()
                    .name("breakdance-worker".into())
                    .spawn(move || worker(tracer, stop, ready_tx, maps, loads))
            })
        })
        .map_err(StartError::Proc)?;
        // Marked as the library's before threads are enumerated.
        let _ = ready_rx.recv();
        handle
    };

    crate::quiet::open_thread_count();
    survey_quiet();
    // Threads registering themselves wait for `running`; those found here
    // are registered by this thread.
    let mut registered = 0u64;
    let tids = sys::thread_ids().map_err(StartError::Proc)?;
    for tid in tids.into_iter().filter(|t| !threads::is_own_thread(*t)) {
        match threads::register(tracer, tid, &resolved.sampling) {
            Ok(_) => registered += 1,
            // A thread that exited meanwhile.
            Err(RegisterError::Sampling(e) | RegisterError::Breakpoint(e))
                if e.0 == libc::ESRCH => {}
            Err(e) if registered == 0 => {
                threads::close_all(tracer);
                uninstall_handlers();
                stop_worker.store(true, Ordering::Release);
                let _ = worker.join();
                let hint = hint_for(&e);
                return Err(StartError::Perf(e, hint));
            }
            Err(_) => {}
        }
    }
    threads::open_registration(resolved.sampling);
    trace::counters::Counters::add(
        &tracer.retired.start_stop_ns,
        sys::thread_cpu_ns().saturating_sub(cpu_at_start),
    );
    tracer.epoch.fetch_add(1, Ordering::SeqCst);
    tracer.running.store(true, Ordering::SeqCst);

    let reply = serde_json::to_string(&StatusReply::Running {
        event: resolved.event,
        lbr: resolved.lbr as u32,
        output_dir: resolved.output.clone(),
        elapsed_ns: 0,
        threads: registered,
        counters: CounterValues::default(),
    })
    .expect("a status reply always serialises");
    state.running = Some(Running {
        resolved,
        started_ns: sys::now_ns(),
        stop_worker,
        worker,
        modules_at_start: mods,
    });
    state.unwritten = None;
    Ok(reply)
}

pub fn session_running() -> bool {
    trace::tracer().is_some_and(|t| t.running.load(Ordering::Acquire))
}

fn command_line() -> String {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Stops the session and writes its outputs into its directory. Returns
/// summary.json's text.
pub fn stop() -> Result<String, StopError> {
    stop_into(&StopOptions::default())
}

/// Stops the session, or takes the data an earlier stop could not write,
/// and writes the outputs into `options.output` if given, else into the
/// session's directory. Returns summary.json's text.
pub fn stop_into(options: &StopOptions) -> Result<String, StopError> {
    let mut guard = CONTROL.lock();
    let state = guard.get_or_insert_with(ControlState::default);
    let redirect = |u: &mut Unwritten| {
        if let Some(dir) = &options.output {
            u.report.output_dir = config::absolute(dir);
            u.force_dir = options.force_dir;
        }
    };
    let Some(running) = state.running.take() else {
        let Some(mut unwritten) = state.unwritten.take() else {
            return Err(StopError::NotRunning);
        };
        redirect(&mut unwritten);
        return write(state, unwritten);
    };
    let cpu_at_stop = sys::thread_cpu_ns();
    let tracer = trace::tracer_or_init();
    threads::close_registration();
    tracer.running.store(false, Ordering::SeqCst);
    tracer.epoch.fetch_add(1, Ordering::SeqCst);
    threads::close_all(tracer);
    // The SIGTRAP handler stays: a trap the kernel raised just before an
    // event was closed can be delivered after stop returns, and under the
    // application's default action it would kill the process. The handler
    // drops such late traps and passes every other SIGTRAP on.
    // No handler emulates any more: the application's fault actions go
    // back to the kernel.
    for sig in chain::FAULTS {
        let _ = chain::uninstall(sig);
    }
    running.stop_worker.store(true, Ordering::Release);
    tracer.exec.doorbell().ring(Doorbell::WORK);
    let (agg, seen) = running.worker.join().unwrap_or_default();

    // Modules: those mapped at start, those the worker saw appear, and the
    // current ones; the first of each path wins.
    let mut mods = running.modules_at_start;
    mods.extend(seen);
    if let Ok(maps) = modules::read_self_maps() {
        mods.extend(traced_modules(&maps));
    }
    let mut unique: Vec<Module> = Vec::new();
    for m in mods {
        if !unique
            .iter()
            .any(|u| u.path == m.path && u.load_address == m.load_address)
        {
            unique.push(m);
        }
    }
    let r = &running.resolved;
    // The stop so far; `write_session` adds the writing.
    trace::counters::Counters::add(
        &tracer.retired.start_stop_ns,
        sys::thread_cpu_ns().saturating_sub(cpu_at_stop),
    );
    let counters = tracer.totals();
    let report = SessionReport {
        pid: sys::getpid(),
        command: command_line(),
        output_dir: r.output.clone(),
        config: SessionConfig {
            event: r.event,
            period: r.period,
            freq: r.freq,
            lbr: r.lbr as u32,
            lookahead: r.lookahead,
            callstack: r.callstack as u32,
            unwind: r.unwind,
            values: r.values,
        },
        duration_ns: sys::now_ns() - running.started_ns,
        threads: tracer.threads_registered.load(Ordering::Relaxed),
        counters,
        thread_table_full: tracer.table_full.load(Ordering::Relaxed),
        host: crate::host::HOST.report(&counters),
    };
    let mut unwritten = Unwritten {
        report,
        agg,
        modules: unique,
        force_dir: r.force_dir,
    };
    redirect(&mut unwritten);
    write(state, unwritten)
}

fn write(state: &mut ControlState, u: Unwritten) -> Result<String, StopError> {
    match output::write_session(&u.report, &u.agg, &u.modules, u.force_dir) {
        Ok(summary) => {
            census!(
                let _ = std::fs::write(u.report.output_dir.join("census.txt"), crate::census::report());
            );
            #[cfg(feature = "paired")]
            let _ = std::fs::write(
                u.report.output_dir.join("paired.txt"),
                crate::paired::report(),
            );
            Ok(summary)
        }
        Err(e) => {
            state.unwritten = Some(u);
            Err(StopError::Write(e))
        }
    }
}

/// Live state and counters, one JSON line.
pub fn status() -> String {
    let guard = CONTROL.lock();
    let running = guard.as_ref().and_then(|s| s.running.as_ref());
    let reply = match running {
        None => StatusReply::Off {
            unwritten_session: guard.as_ref().is_some_and(|s| s.unwritten.is_some()),
        },
        Some(run) => {
            let tracer = trace::tracer_or_init();
            StatusReply::Running {
                event: run.resolved.event,
                lbr: run.resolved.lbr as u32,
                output_dir: run.resolved.output.clone(),
                elapsed_ns: sys::now_ns() - run.started_ns,
                threads: tracer.threads_registered.load(Ordering::Relaxed),
                counters: tracer.totals(),
            }
        }
    };
    serde_json::to_string(&reply).expect("a status reply always serialises")
}

/// Gives every signal the tracer handles back to the application's action
/// (a failed start, or the child of a fork).
fn uninstall_handlers() {
    for sig in chain::CHAINED {
        let _ = chain::uninstall(sig);
    }
}

/// In the child of a fork: no events, no worker, no holder of any lock.
/// Drops the parent's session state without touching the parent's
/// resources (the worker does not exist here) and gives SIGTRAP back.
/// Only system calls and stores: nothing is started here.
pub fn reset_after_fork() {
    CONTROL.force_unlock();
    threads::reset_registration_after_fork();
    sync::reset_fork_guard();
    chain::reset_after_fork();
    if let Some(state) = CONTROL.lock().take() {
        // The parent's worker handle and buffers are the parent's.
        std::mem::forget(state);
    }
    if let Some(tracer) = trace::tracer() {
        tracer.running.store(false, Ordering::SeqCst);
        tracer.exec.reset_after_fork();
        trace::forget_parent_threads(tracer);
    }
    uninstall_handlers();
}
