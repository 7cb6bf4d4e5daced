//! `cargo bench --bench tracer`: the tracer's own costs on this machine.
//!
//! 1. The breakpoint microbenchmark (paper §3.2): median cost of one move
//!    and of one whole stop (move + trigger + handler); and the floor under
//!    every trace, the CPU time one task-clock sample costs with a handler
//!    that only re-arms it, on a compute-bound and on a memory-bound loop.
//! 2. A real session on a branchy loop for N = 16 and N = 32, interleaved
//!    runs, in the paper's algorithm and in emulate mode: median handler
//!    time per trace, breakpoints per trace, decode time
//!    per decoded branch and per branch followed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use breakdance::control::config::Options;
use breakdance::control::session;
use breakdance::sys;
use breakdance::trace::calibrate;

const RUNS: usize = 5;

#[inline(never)]
fn work(n: u64) -> u64 {
    let steps: [fn(u64) -> u64; 4] = [
        |x| x.wrapping_mul(3) + 1,
        |x| x / 2,
        |x| x ^ 0x55,
        |x| x.rotate_left(7),
    ];
    let mut x = 7u64;
    let mut acc = 0u64;
    for i in 0..n {
        let f = black_box(steps[(x % 4) as usize]);
        x = f(x) ^ i;
        if x & 4 == 0 {
            acc = acc.wrapping_add(x);
        } else if x & 8 == 0 {
            acc ^= x >> 3;
        }
    }
    acc
}

/// 8 MB of counters read and written at random: a memory-bound loop, as
/// SQLite's is, where whatever a sample evicts is paid for after it.
#[inline(never)]
fn random_access(table: &mut [u64], n: u64) -> u64 {
    let mask = table.len() as u64 - 1;
    let mut x = 7u64;
    let mut acc = 0u64;
    for _ in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let slot = &mut table[((x >> 20) & mask) as usize];
        *slot += 1;
        acc = acc.wrapping_add(*slot);
    }
    acc
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

struct Run {
    handler_us_per_trace: f64,
    bps_per_trace: f64,
    decode_ns_per_decoded: f64,
    decode_ns_per_branch: f64,
    stop_us_in_handler: f64,
    emulated_ns_per_instruction: f64,
}

fn traced_run(lbr: usize, mode: &str, dir: &std::path::Path) -> Run {
    let opts = Options::parse_words(&format!(
        "event=task-clock period=1000000 lbr={lbr} lookahead={mode} out={}",
        dir.display()
    ))
    .expect("options");
    session::start(&opts).expect("session starts (needs hardware breakpoints and task-clock)");
    let tracer = breakdance::trace::tracer().expect("tracer");
    let t0 = Instant::now();
    let mut acc = 0;
    while t0.elapsed() < Duration::from_secs(2) {
        acc ^= work(black_box(1_000_000));
    }
    black_box(acc);
    let c = tracer.totals();
    session::stop().expect("stop");
    let traces = c.traces_started.max(1) as f64;
    let branches = (c.statically_resolved + c.dynamically_evaluated).max(1) as f64;
    Run {
        handler_us_per_trace: (c.sampling_ns + c.breakpoint_ns) as f64 / traces / 1e3,
        bps_per_trace: c.breakpoints as f64 / traces,
        decode_ns_per_decoded: c.decode_ns as f64 / c.blocks_decoded.max(1) as f64,
        decode_ns_per_branch: c.decode_ns as f64 / branches,
        stop_us_in_handler: c.breakpoint_ns as f64 / c.breakpoints.max(1) as f64 / 1e3,
        emulated_ns_per_instruction: c.emulation_ns as f64 / c.emulated_steps.max(1) as f64,
    }
}

fn main() {
    // cargo bench passes --bench; a plain `cargo test` run of benches passes nothing useful.
    let old = calibrate::install_handler().expect("installing the calibration handler");
    let mut moves = Vec::new();
    let mut stops = Vec::new();
    for _ in 0..RUNS {
        let c = calibrate::measure_on_this_thread(10_000, 5_000).expect("hardware breakpoints");
        moves.push(c.move_wall_ns);
        stops.push(c.stop_wall_ns);
    }
    // One plain and one sampled run per round, both workloads in each
    // round; each run is about 0.4 s of CPU on this machine.
    let mut table = vec![0u64; 1 << 20];
    // (workload, period, one-shot, per-sample costs, samples per run)
    type Floor = (&'static str, u64, bool, Vec<f64>, Vec<u64>);
    let mut floors: Vec<Floor> = Vec::new();
    for period in [1_000_000u64, 200_000] {
        for one_shot in [false, true] {
            for name in ["compute-bound", "memory-bound (8 MB)"] {
                floors.push((name, period, one_shot, Vec::new(), Vec::new()));
            }
        }
    }
    for _ in 0..RUNS {
        for (name, period, one_shot, per_sample, samples) in floors.iter_mut() {
            let mut work: Box<dyn FnMut()> = if name.starts_with("compute") {
                Box::new(|| {
                    black_box(work(black_box(40_000_000)));
                })
            } else {
                Box::new(|| {
                    black_box(random_access(&mut table, black_box(150_000_000)));
                })
            };
            let c = calibrate::measure_sampling_on_this_thread(*period, *one_shot, &mut *work)
                .expect("task-clock sampling");
            per_sample.push(c.per_sample_ns());
            samples.push(c.samples);
        }
    }
    sys::restore_action(libc::SIGTRAP, &old).expect("restoring SIGTRAP");
    println!("breakpoint microbenchmark ({RUNS} runs x 10000 moves, 5000 stops; medians):");
    println!(
        "  move (PERF_EVENT_IOC_MODIFY_ATTRIBUTES)     {:8.2} us",
        median(moves) / 1e3
    );
    println!(
        "  stop (move + trigger + SIGTRAP + handler)  {:8.2} us",
        median(stops) / 1e3
    );
    println!(
        "\nthe sample floor ({RUNS} rounds of a plain and a sampled run; medians): CPU time one \
         task-clock sample adds with a handler that does nothing: the event without a limit \
         (the tracer's), and one-shot, re-armed by the handler (the tracer's until the \
         fourteenth round of results/speed)"
    );
    for (name, period, one_shot, per_sample, samples) in floors {
        let samples = median(samples.iter().map(|&n| n as f64).collect());
        let kind = if one_shot { "one-shot" } else { "no limit" };
        println!(
            "  {name:<20} period {:>4} us  {kind:<8}  {:8.2} us/sample  ({samples:.0} samples per run)",
            period / 1000,
            median(per_sample) / 1e3
        );
    }

    let dir = std::env::temp_dir().join(format!("bd-bench-{}", std::process::id()));
    let mut configs: Vec<(usize, &str, Vec<Run>)> = [16, 32]
        .into_iter()
        .flat_map(|n| ["paper", "emulate"].map(|m| (n, m, Vec::new())))
        .collect();
    for _ in 0..RUNS {
        for (n, mode, runs) in configs.iter_mut() {
            runs.push(traced_run(*n, mode, &dir));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("\ntracer on a branchy loop, task-clock period 1 ms, {RUNS} interleaved runs of 2 s, medians:");
    println!(
        "  N   mode      handler us/trace  breakpoints/trace  in-handler us/stop  decode ns/decoded branch  decode ns/branch followed  emulated ns/instruction"
    );
    for (n, mode, runs) in configs {
        let m = |f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
        println!(
            "  {n:<3} {mode:<9} {:>16.1} {:>18.1} {:>19.2} {:>25.0} {:>26.1} {:>24.1}",
            m(|r| r.handler_us_per_trace),
            m(|r| r.bps_per_trace),
            m(|r| r.stop_us_in_handler),
            m(|r| r.decode_ns_per_decoded),
            m(|r| r.decode_ns_per_branch),
            m(|r| r.emulated_ns_per_instruction)
        );
    }
}
