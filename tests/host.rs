//! The injected library survives its host: the program's own signal
//! handlers (SIGTRAP, SIGALRM, SIGPROF, Ctrl-C to the process group),
//! longjmp, thread exits and cancellation, fork with and without exec, many
//! live threads and dlopen leave it running exactly as it runs natively,
//! and the session still stops and writes its profile.
//!
//! Every run here is bounded by a generous limit so that a hang fails the
//! test instead of stalling the suite; no assertion is about speed.

mod common;

use std::ffi::OsStr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Far above what any of these runs needs on a loaded machine.
const LIMIT: Duration = Duration::from_secs(240);

/// A finished run and the CPU time it and its descendants used.
struct Run {
    output: Output,
    cpu: Duration,
    /// The process's peak resident set (wait4's ru_maxrss), in KiB.
    max_rss_kib: u64,
}

/// Runs `command` to its end, failing the test if it is still running after
/// `LIMIT` (then it is killed). The CPU time comes from wait4's rusage: the
/// process and every descendant it waited for.
// The child is reaped by wait4 (which gives its rusage), not by Child::wait.
#[allow(clippy::zombie_processes)]
fn run_bounded(what: &str, mut command: Command, scratch: &Scratch) -> Run {
    let out_path = scratch.path(&format!("{what}.stdout"));
    let err_path = scratch.path(&format!("{what}.stderr"));
    let child = command
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let pid = child.id() as libc::pid_t;
    let t0 = Instant::now();
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: plain data, filled by wait4.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child with valid out-pointers.
        let got = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if got == pid {
            break (ExitStatus::from_raw(status), usage);
        }
        assert!(got == 0, "{what}: wait4 failed");
        if t0.elapsed() > LIMIT {
            // SAFETY: signals our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let mut status = 0;
            // SAFETY: reaps it.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            panic!(
                "{what}: still running after {} s (hung); stderr:\n{}",
                LIMIT.as_secs(),
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    Run {
        output: Output {
            status,
            stdout: std::fs::read(&out_path).unwrap(),
            stderr: std::fs::read(&err_path).unwrap(),
        },
        cpu: time(usage.ru_utime) + time(usage.ru_stime),
        max_rss_kib: usage.ru_maxrss as u64,
    }
}

/// `profiler-ctl record -q [-c PERIOD] -o OUT -- PROGRAM ARGS`, bounded.
fn record_bounded(
    tracer: &Tracer,
    scratch: &Scratch,
    out: &Path,
    period_ns: Option<u64>,
    program: &Path,
    args: &[&str],
) -> Run {
    record_bounded_with(tracer, scratch, out, period_ns, &[], program, args)
}

/// `record_bounded` with more `record` options (`options`).
fn record_bounded_with(
    tracer: &Tracer,
    scratch: &Scratch,
    out: &Path,
    period_ns: Option<u64>,
    options: &[&str],
    program: &Path,
    args: &[&str],
) -> Run {
    let command = record_command(tracer, out, period_ns, options, program, args);
    let name = out.file_name().and_then(OsStr::to_str).unwrap_or("record");
    run_bounded(name, command, scratch)
}

/// `profiler-ctl record -q [-c PERIOD] OPTIONS -o OUT -- PROGRAM ARGS`.
fn record_command(
    tracer: &Tracer,
    out: &Path,
    period_ns: Option<u64>,
    options: &[&str],
    program: &Path,
    args: &[&str],
) -> Command {
    let mut command = Command::new(&tracer.ctl);
    command.args(["record", "-q"]);
    if let Some(p) = period_ns {
        command.args(["-c", &p.to_string()]);
    }
    command.args(options);
    command.arg("-o").arg(out).arg("--").arg(program).args(args);
    command
}

/// `program args` recorded in look-ahead `mode` at `period_ns` into
/// `out`, bounded: it behaves as `native` did, its summary checks and its
/// traces are valid. `name` names it in messages.
#[allow(clippy::too_many_arguments)]
fn record_mode_checked(
    tracer: &Tracer,
    scratch: &Scratch,
    out: &Path,
    name: &str,
    mode: &str,
    period_ns: u64,
    program: &Path,
    args: &[&str],
    native: &Run,
) -> Recording {
    let profiled = record_bounded_with(
        tracer,
        scratch,
        out,
        Some(period_ns),
        &["--lookahead", mode],
        program,
        args,
    );
    assert_same_behaviour(name, &native.output, &profiled.output);
    let rec = load(out);
    check_summary(&rec);
    assert_valid_traces(name, &rec);
    rec
}

fn native(scratch: &Scratch, program: &Path, args: &[&str]) -> Run {
    let mut command = Command::new(program);
    command.args(args);
    run_bounded("native", command, scratch)
}

/// The library preloaded with no session: only its constructor and its
/// interposers run. The library's variables are cleared so that none
/// inherited from the environment starts a session.
fn preloaded_only(tracer: &Tracer, scratch: &Scratch, program: &Path, args: &[&str]) -> Run {
    let mut command = Command::new(program);
    command.args(args).env("LD_PRELOAD", &tracer.lib);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("BREAKDANCE_") {
            command.env_remove(key);
        }
    }
    run_bounded("preloaded", command, scratch)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A host counter of summary.json (`host.NAME`), 0 when absent.
fn host_counter(summary: &serde_json::Value, name: &str) -> u64 {
    summary["host"][name].as_u64().unwrap_or(0)
}

/// Samples cover at least a tenth of the CPU time the program spent: the
/// thread went on being sampled (a trace's own stops are not sampled, so
/// all of it is never covered).
fn assert_sampling_went_on(name: &str, rec: &Recording, period_ns: u64, cpu_ms: u64) {
    let samples = counter(&rec.summary, "samples");
    let expected = cpu_ms * 1_000_000 / period_ns;
    assert!(
        samples * 10 >= expected,
        "{name}: {samples} samples for {cpu_ms} ms of CPU at a {period_ns} ns period \
         (about {expected} expected): sampling stopped; {}",
        rec.summary
    );
}

/// The program's own view of its signal actions is unchanged by the
/// wrapping of asynchronous handlers (`quiet::wrap`): sigactions.c reads
/// its actions back (handler, flags, mask), checks signal's return
/// values, runs handlers with their siginfo and mask, SA_RESETHAND and
/// SA_NODEFER, and ignore and back, and prints each check. Under the
/// tracer it prints the same and exits 0, and the process stayed quiet:
/// its segments were settled without a stop.
#[test]
fn the_program_sees_its_own_signal_actions() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("sigactions");
    let program = build(&clang, &scratch.0, "sigactions", &["sigactions.c"], &[]);
    let args = ["100"];
    let native = native(&scratch, &program, &args);
    assert!(
        native.output.status.success() && text(&native.output.stdout).contains("failures: 0"),
        "native: {:?}",
        native.output
    );
    let out = scratch.path("out");
    let profiled = record_bounded(&tracer, &scratch, &out, Some(1_000_000), &program, &args);
    assert_same_behaviour("sigactions", &native.output, &profiled.output);
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces("sigactions", &rec);
    let settled = counter(&rec.summary, "segments_settled");
    assert!(
        settled > 0,
        "sigactions: no segment settled: the wrapped handlers made the process noisy: {}",
        rec.summary
    );
}

/// SIGALRM every millisecond whose handler leaves by siglongjmp: the
/// tracer's handler is never left half-way by it, sampling goes on, and the
/// session stops at exit with its profile.
#[test]
fn siglongjmp_out_of_sigalrm_keeps_sampling_and_stopping() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("sigalrm");
    let program = build(
        &clang,
        &scratch.0,
        "sigalrm_longjmp",
        &["sigalrm_longjmp.c"],
        &[],
    );
    let cpu_ms = 600;
    let args = [cpu_ms.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let native = native(&scratch, &program, &args);
    assert!(
        text(&native.output.stdout).contains("jumped: yes"),
        "native: {:?}",
        native.output
    );
    let out = scratch.path("out");
    let period = 1_000_000;
    let profiled = record_bounded(&tracer, &scratch, &out, Some(period), &program, &args);
    assert_same_behaviour("sigalrm_longjmp", &native.output, &profiled.output);
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces("sigalrm_longjmp", &rec);
    assert_sampling_went_on("sigalrm_longjmp", &rec, period, cpu_ms);
}

/// A SIGPROF handler installed with every signal masked: SIGTRAP is
/// blocked while it runs. It works past a sampling period first, so a
/// sample's SIGTRAP waits blocked, then runs the main loop's function
/// where the tracer's breakpoint waits. Those hits' SIGTRAPs merge into
/// the waiting one, and the handler that takes the sample never learned
/// that the breakpoint event spent them: the library's count of the
/// event's limit went wrong, the event was enabled again with no limit
/// left, and at the next masked run it trapped at every pass of the loop
/// (a debug exception each, about 15 µs), the handler outlasted the
/// timer's period and the program never got out of it. paper and verify
/// hung in every run before; a late sample now renews an armed breakpoint
/// (`breakpoints_renewed`). Every mode runs to its end, as natively.
#[test]
fn a_handler_that_masks_sigtrap_over_the_breakpoint_does_not_hang() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("masked-handler");
    let program = build(
        &clang,
        &scratch.0,
        "masked_handler",
        &["masked_handler.c"],
        &[],
    );
    let cpu_ms = 500;
    let args = [cpu_ms.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let native = native(&scratch, &program, &args);
    assert!(
        text(&native.output.stdout).contains("alarms: yes"),
        "native: {:?}",
        native.output
    );
    let period = 1_000_000;
    for mode in ["paper", "verify", "emulate"] {
        let out = scratch.path(mode);
        let profiled = record_bounded_with(
            &tracer,
            &scratch,
            &out,
            Some(period),
            &["--lookahead", mode],
            &program,
            &args,
        );
        let name = format!("masked_handler {mode}");
        assert_same_behaviour(&name, &native.output, &profiled.output);
        let rec = load(&out);
        check_summary(&rec);
        assert_valid_traces(&name, &rec);
        assert_sampling_went_on(&name, &rec, period, cpu_ms);
        if mode != "emulate" {
            // Evidence that the case was met: breakpoints armed where the
            // masked handler passed them.
            assert!(
                counter(&rec.summary, "breakpoints_renewed") > 0,
                "{name}: no breakpoint was hit with SIGTRAP blocked: {}",
                rec.summary
            );
        }
    }
}

/// A program that blocks SIGTRAP, raises it at itself and unblocks it
/// (`blocked_raise.c`, 30,000 times, its handler counting) gets every one,
/// and is sampled. SIGTRAP is not queued: a SIGTRAP of the tracer's raised
/// just before the program's made the kernel drop the program's (20 to 60
/// in a run at 200 µs); the `raise` interposer now notes the program's as
/// owed and the handler delivers it after ours
/// (`host.application_sigtraps_delivered`). And a thread's first sample
/// that merged into the program's waiting SIGTRAP left the thread
/// unsampled for the whole run in about half the runs (`check_summary`
/// fails on sampling off more than half the time); its event is now
/// started when the program's SIGTRAP is passed on
/// (`host.first_samples_revived`). Up to three runs, each checked, until
/// one met the first case.
#[test]
fn a_program_gets_every_sigtrap_it_raises_while_blocking_it() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("blocked-raise");
    let program = build(
        &clang,
        &scratch.0,
        "blocked_raise",
        &["blocked_raise.c"],
        &[],
    );
    let args = ["30000"];
    let native = native(&scratch, &program, &args);
    assert!(
        text(&native.output.stdout).contains("30000 traps"),
        "native: {:?}",
        native.output
    );
    let mut met = false;
    for run in 0..3 {
        let out = scratch.path(&format!("run{run}"));
        let profiled = record_bounded_with(
            &tracer,
            &scratch,
            &out,
            Some(200_000),
            &["--lookahead", "emulate"],
            &program,
            &args,
        );
        assert_same_behaviour("blocked_raise", &native.output, &profiled.output);
        let rec = load(&out);
        check_summary(&rec);
        assert_valid_traces("blocked_raise", &rec);
        if counter(&rec.summary, "host.application_sigtraps_delivered") > 0 {
            met = true;
            break;
        }
    }
    assert!(
        met,
        "in 3 runs no SIGTRAP of the program's was dropped for one of ours"
    );
}

/// Forty phases, each left for good by a siglongjmp from SIGPROF: a trace
/// waiting at a breakpoint in a phase that ended waits for a branch the
/// thread never runs again. In every look-ahead mode the tracer gives such
/// a trace up at a later sample and sampling goes on through all the
/// phases (before `breakpoint_unreached`, the paper's one-shot sampling
/// stayed off after the first such trace: a few percent of the samples).
#[test]
fn a_breakpoint_the_thread_never_reaches_does_not_end_sampling() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("abandoned");
    let program = build(
        &clang,
        &scratch.0,
        "abandoned_paths",
        &["abandoned_paths.c"],
        &["-pthread"],
    );
    let phase_ms = 15;
    let args = [phase_ms.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let native = native(&scratch, &program, &args);
    for mode in ["paper", "emulate", "verify"] {
        // In emulate mode a trace waits at its checkpoint for a few
        // microseconds of the program's time: a phase ends with one
        // waiting mostly when its SIGPROF falls due while the tracer's
        // handler runs (ITIMER_PROF counts that time too), and is taken
        // as the handler returns, before the segment. At 1 ms the handler
        // took about an eighth of the CPU and 1-4 traces of the forty
        // phases waited (none in 2 runs of 17 here); at 250 µs it takes
        // over a third, and 7-40 waited in 8 runs.
        let period = if mode == "emulate" {
            250_000
        } else {
            1_000_000
        };
        let rec = record_mode_checked(
            &tracer,
            &scratch,
            &scratch.path(&format!("out-{mode}")),
            &format!("abandoned_paths {mode}"),
            mode,
            period,
            &program,
            &args,
            &native,
        );
        // The phases' CPU time, at least: ITIMER_PROF counts the kernel's
        // share too, which the profiler adds to.
        assert_sampling_went_on(
            &format!("abandoned_paths {mode}"),
            &rec,
            period,
            40 * phase_ms,
        );
        let given_up = match mode {
            "emulate" => counter(&rec.summary, "aborts.checkpoint_unreached"),
            _ => counter(&rec.summary, "aborts.breakpoint_unreached"),
        };
        eprintln!("abandoned_paths {mode}: {given_up} traces given up");
        // With forty phases and a trace open much of the time, some phase
        // ends with one waiting: otherwise this run proved nothing.
        assert!(
            given_up > 0,
            "abandoned_paths {mode}: no trace was waiting when a phase ended: {}",
            rec.summary
        );
    }
}

/// A SIGPROF handler that runs the code where the breakpoint is armed, with
/// nothing blocked and with every signal blocked: the thread never
/// livelocks on breakpoint hits it cannot take.
#[test]
fn sigprof_handler_running_traced_code_does_not_livelock() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("sigprof");
    let program = build(
        &clang,
        &scratch.0,
        "sigprof_nested",
        &["sigprof_nested.c"],
        &[],
    );
    for mask in ["none", "full"] {
        let args = ["200000", mask];
        let native = native(&scratch, &program, &args);
        let out = scratch.path(&format!("out-{mask}"));
        let profiled = record_bounded(&tracer, &scratch, &out, Some(200_000), &program, &args);
        assert_same_behaviour(
            &format!("sigprof_nested {mask}"),
            &native.output,
            &profiled.output,
        );
        let rec = load(&out);
        check_summary(&rec);
        assert_valid_traces(&format!("sigprof_nested {mask}"), &rec);
    }
}

/// The program's SIGSEGV handler recovers by siglongjmp from a fault the
/// tracer's handler meets first (it reads the unmapped slot the traced jump
/// is about to read): the abandoned handler is noticed and counted,
/// sampling goes on, and the session stops at exit.
#[test]
fn siglongjmp_out_of_a_fault_in_the_tracer_handler() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("segv");
    let program = build(&clang, &scratch.0, "segv_longjmp", &["segv_longjmp.c"], &[]);
    let cpu_ms = 1500;
    let args = [cpu_ms.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let native = native(&scratch, &program, &args);
    let out = scratch.path("out");
    let period = 1_000_000;
    // One call in four faults, so a trace rarely runs 128 branches without
    // meeting a fault: 32, so that some traces complete (check_summary).
    let profiled = record_bounded_with(
        &tracer,
        &scratch,
        &out,
        Some(period),
        &["--lbr", "32"],
        &program,
        &args,
    );
    assert_same_behaviour("segv_longjmp", &native.output, &profiled.output);
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces("segv_longjmp", &rec);
    eprintln!(
        "segv_longjmp: {} handlers abandoned",
        host_counter(&rec.summary, "handlers_abandoned"),
    );
    assert_sampling_went_on("segv_longjmp", &rec, period, cpu_ms);
}

/// 1200 threads ending by return, pthread_exit and pthread_cancel under a
/// tight file limit: no descriptor leaks, the program's own opens succeed,
/// the thread table never fills, and threads started after all of them are
/// still traced.
#[test]
fn thread_exits_and_cancellation_leak_nothing() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("thread-exits");
    let program = build(
        &clang,
        &scratch.0,
        "thread_exits",
        &["thread_exits.c"],
        &["-pthread"],
    );
    let args = ["3000000"];
    let native = native(&scratch, &program, &args);
    assert!(
        text(&native.output.stdout).contains("fds-leaked=0 opened=16/16"),
        "native: {:?}",
        native.output
    );
    let out = scratch.path("out");
    let profiled = record_bounded(&tracer, &scratch, &out, Some(500_000), &program, &args);
    assert_same_behaviour("thread_exits", &native.output, &profiled.output);
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces("thread_exits", &rec);
    assert_eq!(
        counter(&rec.summary, "drops.thread_table_full"),
        0,
        "{}",
        rec.summary
    );
    let threads = counter(&rec.summary, "threads");
    assert!(
        threads >= 1205,
        "summary.json threads is {threads}; the program ran 1205"
    );
    assert!(
        functions_in_traces(&rec.script).contains("final_work"),
        "the threads started after 1200 exits were not traced"
    );
}

/// A child forked (without exec) from a program with threads has the
/// threads and descriptors it has natively and may enter a user namespace,
/// whether the library is only preloaded or a session runs in the parent.
#[test]
fn forked_child_is_left_as_it_is_natively() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("fork-unshare");
    let program = build(
        &clang,
        &scratch.0,
        "fork_unshare",
        &["fork_unshare.c"],
        &["-pthread"],
    );
    let args = ["2000000"];
    let native = native(&scratch, &program, &args);
    assert!(
        text(&native.output.stdout).contains("child threads=1 "),
        "native: {:?}",
        native.output
    );
    let preloaded = preloaded_only(&tracer, &scratch, &program, &args);
    assert_same_behaviour(
        "fork_unshare (preloaded)",
        &native.output,
        &preloaded.output,
    );
    let out = scratch.path("out");
    let profiled = record_bounded(&tracer, &scratch, &out, Some(200_000), &program, &args);
    assert_same_behaviour("fork_unshare (recorded)", &native.output, &profiled.output);
    let rec = load(&out);
    check_summary(&rec);
}

/// 500 live threads, at a 200 µs period and at the default one: the run
/// finishes, writes its profile, and at the default period the samples
/// account for most of the CPU the process used (the tracer's own cost per
/// thread stays out of the way).
#[test]
fn five_hundred_live_threads() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("many-threads");
    let program = build(
        &clang,
        &scratch.0,
        "many_threads",
        &["many_threads.c"],
        &["-pthread"],
    );
    let args = ["500", "4000000"];
    let native = native(&scratch, &program, &args);
    for (name, period) in [("fast", Some(200_000)), ("default", None)] {
        let out = scratch.path(&format!("out-{name}"));
        let profiled = record_bounded(&tracer, &scratch, &out, period, &program, &args);
        assert_same_behaviour(
            &format!("many_threads {name}"),
            &native.output,
            &profiled.output,
        );
        let rec = load(&out);
        check_summary(&rec);
        assert!(
            counter(&rec.summary, "threads") >= 501,
            "{name}: {}",
            rec.summary
        );
        let period = counter(&rec.summary, "config.period");
        let sampled = Duration::from_nanos(counter(&rec.summary, "samples") * period);
        eprintln!(
            "many_threads {name}: native CPU {:?}, profiled CPU {:?}, sampled {:?}",
            native.cpu, profiled.cpu, sampled
        );
        if name == "default" {
            assert!(
                sampled * 10 >= profiled.cpu * 3,
                "{name}: samples cover {sampled:?} of the {:?} of CPU the run used: \
                 the time goes somewhere sampling does not see",
                profiled.cpu
            );
        }
    }
}

/// Short-lived threads under an autostarted session cost little memory:
/// registration allocates nothing, and a thread's buffer, emulator and
/// caches come from pools at its first sample and go back when it ends.
/// 600 threads, 50 at a time, each spinning 200 µs at a 1 ms task-clock
/// period (so some are sampled, most are not): the program behaves as
/// natively, the counters reconcile (a sample that found a pool empty is
/// counted `no_free_state` or `no_free_buffer`), and the peak RSS grows by
/// less than 128 KiB per thread over the native run (about 1 MiB per
/// thread before the pools).
#[test]
fn short_lived_threads_cost_little_memory() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("short-threads");
    let program = build(
        &clang,
        &scratch.0,
        "short_threads",
        &["short_threads.c"],
        &["-pthread"],
    );
    const THREADS: u64 = 600;
    let args = [THREADS.to_string(), "50".into(), "200".into()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let native = native(&scratch, &program, &args);
    assert_eq!(
        text(&native.output.stdout),
        format!("threads done: {THREADS}\n"),
        "native: {:?}",
        native.output
    );
    let out = scratch.path("out");
    std::fs::create_dir_all(&out).unwrap();
    let mut command = Command::new(&program);
    command.args(&args).env("LD_PRELOAD", &tracer.lib);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("BREAKDANCE_") {
            command.env_remove(key);
        }
    }
    command
        .env("BREAKDANCE_AUTOSTART", "1")
        .env("BREAKDANCE_EVENT", "task-clock")
        .env("BREAKDANCE_PERIOD", "1000000")
        .env("BREAKDANCE_LOOKAHEAD", "emulate")
        .env("BREAKDANCE_OUTPUT", &out);
    let profiled = run_bounded("autostarted", command, &scratch);
    assert_same_behaviour("short_threads", &native.output, &profiled.output);
    let rec = load(&out);
    let s = &rec.summary;
    let per_thread = profiled.max_rss_kib.saturating_sub(native.max_rss_kib) / THREADS;
    let drop = |name: &str| s["drops"][name].as_u64().unwrap_or(0);
    eprintln!(
        "short_threads: native max RSS {} KiB, autostarted {} KiB: {per_thread} KiB per thread; \
         samples {}, traces {}, no_free_state {}, no_free_buffer {}",
        native.max_rss_kib,
        profiled.max_rss_kib,
        counter(s, "samples"),
        counter(s, "traces_started"),
        drop("no_free_state"),
        drop("no_free_buffer"),
    );
    assert!(
        per_thread < 128,
        "the peak RSS grew by {per_thread} KiB per thread (native {} KiB, autostarted {} KiB): \
         per-thread state is not pooled; {s}",
        native.max_rss_kib,
        profiled.max_rss_kib
    );
    check_reconciles(&rec);
    assert!(counter(s, "threads") > THREADS, "summary.json threads: {s}");
    assert!(counter(s, "samples") > 0, "no thread was sampled: {s}");
    assert!(
        counter(s, "traces_started") > 0,
        "no sample found a buffer and an emulator: {s}"
    );
}

/// A plugin loaded with dlopen during the session is traced: few traces end
/// for want of its mapping, and its profile is written.
#[test]
fn dlopened_code_is_traced() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("dlopen");
    let plugin = build(
        &clang,
        &scratch.0,
        "libplugin.so",
        &["plugin.c"],
        &["-shared", "-fPIC"],
    );
    let program = build(
        &clang,
        &scratch.0,
        "plugin_host",
        &["plugin_host.c"],
        &["-ldl"],
    );
    let plugin_arg = plugin.to_string_lossy().into_owned();
    let args = [plugin_arg.as_str(), "400"];
    let native = native(&scratch, &program, &args);
    let out = scratch.path("out");
    let profiled = record_bounded(&tracer, &scratch, &out, Some(200_000), &program, &args);
    assert_same_behaviour("plugin_host", &native.output, &profiled.output);
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces("plugin_host", &rec);
    let started = counter(&rec.summary, "traces_started");
    let outside = counter(&rec.summary, "aborts.outside_mappings");
    assert!(
        outside * 4 <= started,
        "{outside} of {started} traces ended outside the known mappings: \
         the plugin's code was not learnt in time"
    );
    assert!(
        !module_edges(&rec.script, "libplugin.so").is_empty(),
        "no branch of the plugin in perf.script"
    );
    assert!(
        rec.dir.join("libplugin.so.afdo.txt").is_file(),
        "no AutoFDO profile for the plugin"
    );
}

/// Code taken away under the look-ahead (what a dlclose by another thread
/// does): samples delivered on the return of an mprotect that made the
/// running page inaccessible find the tracer's table still listing it. The
/// look-ahead reads there through fault-safe loads, counts the read
/// (`host.code_unreadable`) and ends the trace, in both kinds of
/// look-ahead; the program's own SIGSEGV handler sees only its own faults.
/// With plain reads the tracer's handler faulted there and the program's
/// handler ran on the tracer's context: the program crashed.
#[test]
fn code_taken_away_under_the_lookahead() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("unmapped");
    let program = build(
        &clang,
        &scratch.0,
        "unmapped_code",
        &["unmapped_code.c"],
        &[],
    );
    let args = ["1000"];
    let native = native(&scratch, &program, &args);
    for mode in ["paper", "emulate"] {
        let name = format!("unmapped_code ({mode})");
        // A sample must come during the mprotect while the worker's table
        // still lists the page: one whose look found the page taken away
        // drops it until its next look. Up to MAX_RUNS runs reach the case
        // (one did not, once, on a loaded CI machine: 25 traces ended
        // outside the mappings instead); every run is checked.
        const MAX_RUNS: usize = 4;
        let mut summaries = Vec::new();
        for run in 0..MAX_RUNS {
            let out = scratch.path(&format!("out-{mode}-{run}"));
            let rec = record_mode_checked(
                &tracer, &scratch, &out, &name, mode, 100_000, &program, &args, &native,
            );
            let unreadable = host_counter(&rec.summary, "code_unreadable");
            eprintln!("{name}, run {run}: {unreadable} code reads found the page gone");
            if unreadable > 0 {
                break;
            }
            summaries.push(rec.summary.to_string());
        }
        assert!(
            summaries.len() < MAX_RUNS,
            "{name}: in {MAX_RUNS} runs no sample found the page gone: the test did \
             not reach the case it is for; {}",
            summaries.join("\n")
        );
    }
}

/// Faults a program takes and handles with SIGTRAP blocked: the kernel
/// delivers the sample's blocked SIGTRAP ahead of the fault's signal,
/// which then lands at the first instruction of the tracer's SIGTRAP
/// handler (`trace::chain::beneath_a_blocked_sigtrap` tells the story).
/// The tracer puts the SIGTRAP back and hands the program's handler the
/// fault's own context: blocked_sigtrap_faults.c takes a SIGSEGV, a
/// SIGFPE and a SIGILL in turn, checks the address and pc of each and
/// steps over it, in paper and emulate modes (sigtrap_order.c says
/// whether the kernel has that ordering; one that has not puts nothing
/// back). Without that, the
/// program's handler saw a fault that was not its own and the program
/// died at its first one (SIGSEGV; SIGFPE or SIGILL until those were
/// chained too); the code_taken_away test met the same ordering under
/// load, at a fault of the look-ahead's own loads (a few runs in a
/// hundred). The program's blocked sections also make a sample merge
/// into a breakpoint's late SIGTRAP now and then: while each sample took
/// the sampling event off until a handler armed it again, that left it
/// off (about one run in ten), which `check_summary`'s bound on sampling
/// off time catches.
#[test]
fn faults_with_sigtrap_blocked_reach_the_program_as_they_happened() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("blocked-trap");
    let program = build(
        &clang,
        &scratch.0,
        "blocked_sigtrap_faults",
        &["blocked_sigtrap_faults.c"],
        &[],
    );
    // Whether this kernel has the ordering at all: where it does not,
    // nothing is put back.
    let order = build(
        &clang,
        &scratch.0,
        "sigtrap_order",
        &["sigtrap_order.c"],
        &[],
    );
    let order = native(&scratch, &order, &[]);
    let first = match String::from_utf8_lossy(&order.output.stdout).trim() {
        "first" => true,
        "in order" => false,
        other => panic!("sigtrap_order printed {other:?}: {:?}", order.output),
    };
    eprintln!("this kernel delivers a blocked SIGTRAP ahead of a fault: {first}");
    let (cpu_ms, period_ns) = (300, 100_000);
    let args = [cpu_ms.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let native = native(&scratch, &program, &args);
    for mode in ["paper", "emulate"] {
        let name = format!("blocked_sigtrap_faults ({mode})");
        let out = scratch.path(&format!("out-{mode}"));
        let rec = record_mode_checked(
            &tracer, &scratch, &out, &name, mode, period_ns, &program, &args, &native,
        );
        let put_back = host_counter(&rec.summary, "sigtraps_put_back");
        eprintln!("{name}: {put_back} SIGTRAPs put back");
        assert!(
            (put_back > 0) == first,
            "{name}: {put_back} SIGTRAPs put back where the kernel delivers them \
             {}: {}",
            if first {
                "first (the test did not reach the case it is for)"
            } else {
                "in order"
            },
            rec.summary
        );
        assert_eq!(host_counter(&rec.summary, "sigtraps_lost"), 0, "{name}");
        assert_sampling_went_on(&name, &rec, period_ns, cpu_ms);
    }
}

/// A panic in the tracer's signal handler (forced by a test-only failpoint)
/// writes its message and aborts the process at once, as `panic = "abort"`
/// would: it does not unwind (std would then abort only at the handler's
/// extern "C" boundary, after running destructors in a signal handler,
/// with "panic in a function that cannot unwind"), and it does not hang.
#[test]
fn a_panic_in_the_handler_aborts_with_its_message() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("panic");
    let program = build(&clang, &scratch.0, "branchy", &["branchy.c"], &[]);
    let out = scratch.path("out");
    let mut command = record_command(&tracer, &out, Some(200_000), &[], &program, &[]);
    command.env("BREAKDANCE_FAILPOINT", "sample-panic");
    let run = run_bounded("panic", command, &scratch);
    let stderr = text(&run.output.stderr);
    assert!(
        stderr.contains("breakdance: internal error: panicked at")
            && stderr.contains("failpoint sample-panic")
            && stderr.contains("breakdance: aborting the process"),
        "no panic message and abort notice; stderr:\n{stderr}"
    );
    assert!(
        !stderr.contains("cannot unwind"),
        "the panic unwound to the handler's boundary; stderr:\n{stderr}"
    );
    // record ends the way its program did.
    assert_eq!(
        run.output.status.signal(),
        Some(libc::SIGABRT),
        "the program was not killed by SIGABRT ({}); stderr:\n{stderr}",
        run.output.status
    );
}

/// Perf event descriptors open in process `pid`.
fn perf_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().contains("perf_event"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Threads that existed before the session started (so the library never
/// wrapped them) and end during it: their events are closed by the
/// worker's sweep, not kept until stop.
#[test]
fn threads_found_at_start_are_closed_when_they_end() {
    use std::io::{BufRead, BufReader, Write};
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("threads-gone");
    let program = build(
        &clang,
        &scratch.0,
        "threads_exit_later",
        &["threads_exit_later.c"],
        &["-pthread"],
    );
    let socket = scratch.path("ctl.sock");
    let mut child = Command::new(&program)
        .env("LD_PRELOAD", &tracer.lib)
        .env("BREAKDANCE_SOCKET", &socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let t0 = Instant::now();
    while !socket.exists() {
        assert!(
            t0.elapsed() < LIMIT,
            "no control socket at {}",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = scratch.path("out");
    let ctl = |args: &[&str]| {
        let output = Command::new(&tracer.ctl)
            .args(args)
            .arg("--socket")
            .arg(&socket)
            .output()
            .unwrap();
        assert!(output.status.success(), "{args:?}: {output:?}");
    };
    ctl(&["start", "-c", "1000000", "-o", out.to_str().unwrap()]);
    // Main and the eight waiters, two events each.
    assert_eq!(perf_fds(pid), 18, "events of the nine threads at start");
    stdin.write_all(b"go\n").unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert!(line.starts_with("joined "), "{line:?}");
    // The sweep closes the ended threads' events; wait for it to be seen.
    let t0 = Instant::now();
    while perf_fds(pid) != 2 {
        assert!(
            t0.elapsed() < LIMIT,
            "{} perf descriptors still open after the threads ended",
            perf_fds(pid)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    ctl(&["stop"]);
    stdin.write_all(b"end\n").unwrap();
    drop(stdin);
    assert!(child.wait().unwrap().success());
    let rec = load(&out);
    assert_eq!(
        host_counter(&rec.summary, "threads_gone"),
        8,
        "{}",
        rec.summary
    );
}

/// The sampling period of the signal and fork tests below.
const SIGNALS_PERIOD_NS: u64 = 100_000;

/// A SIGTRAP handler installed by the program after the session started sees
/// exactly the SIGTRAPs the program raised (none of the tracer's own).
#[test]
fn application_sigtrap_handler_keeps_working() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("sigtrap");
    let binary = build(&clang, &dir.0, "sigtrap", &["sigtrap.c"], &[]);
    let args = ["3000"];
    let native = run_native(&binary, &args, &[]);
    assert!(
        String::from_utf8_lossy(&native.stdout).starts_with("sigtrap own=3000 foreign=0 "),
        "native run: {native:?}"
    );
    let out = dir.path("out");
    let profiled = record(&tracer, &out, SIGNALS_PERIOD_NS, &binary, &args, &[]);
    assert_same_behaviour("sigtrap", &native, &profiled);
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces("sigtrap", &rec);
}

/// fork without exec: the child keeps running under the inherited library
/// state and exits normally through exit(); the parent's profile is sound.
#[test]
fn fork_without_exec() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("fork");
    let binary = build(&clang, &dir.0, "forker", &["forker.c"], &[]);
    let args = ["30000000"];
    let native = run_native(&binary, &args, &[]);
    assert!(
        String::from_utf8_lossy(&native.stdout).contains("child-exit=0 signaled=0"),
        "native run: {native:?}"
    );
    let out = dir.path("out");
    let profiled = record(&tracer, &out, SIGNALS_PERIOD_NS, &binary, &args, &[]);
    assert_same_behaviour("forker", &native, &profiled);
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces("forker", &rec);
}

/// Ctrl-C at a terminal sends SIGINT to the whole foreground process group:
/// profiler-ctl and the program alike. The program still dies by SIGINT, as
/// it would unprofiled, but only after its profile is written.
#[test]
fn ctrl_c_to_the_process_group_keeps_the_profile() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("ctrlc");
    let binary = build(&clang, &dir.0, "control", &["control.c"], &[]);
    let out = dir.path("out");
    let never = dir.path("never-created");
    let mut command = std::process::Command::new(&tracer.ctl);
    command
        .args(["record", "-q", "-c", "1000000", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&binary)
        .arg(&never)
        .process_group(0);
    // As at a terminal, SIGINT is at its default action: a test run from a
    // background job (whose shell ignores SIGINT in it, as POSIX asks)
    // would otherwise pass the ignored disposition on and wait forever.
    // SAFETY: signal(2) is async-signal-safe, as pre_exec requires.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = command.spawn().expect("profiler-ctl runs");
    // Once the session has collected a few traces, the signal comes.
    let program = child_of(child.id());
    let socket = default_socket(program);
    wait_for_socket(&socket);
    wait_for_traces(&socket, 5);
    // SAFETY: signals the process group made above.
    let sent = unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) };
    assert_eq!(sent, 0, "kill(-pgid, SIGINT)");
    let status = child.wait().expect("profiler-ctl ends");
    assert_eq!(
        status.signal(),
        Some(libc::SIGINT),
        "record ends by SIGINT like the program: {status:?}"
    );
    let rec = load(&out);
    assert!(
        counter(&rec.summary, "traces_completed") > 0,
        "{}",
        rec.summary
    );
    check_summary(&rec);
}
