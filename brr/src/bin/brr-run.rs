//! brr-run: run a static x86-64 Linux ELF under the brr emulator.

use anyhow::{bail, Context, Result};
use brr::emu::syscall::Process;
use std::path::PathBuf;
use std::time::Instant;

const HELP: &str = "\
brr-run: run a static x86-64 Linux executable under the branch-on-random emulator

USAGE:
    brr-run [OPTIONS] [--] PROGRAM [ARGS...]

The program must be statically linked (musl-gcc -static, or -nostdlib). Its
brr instructions (see brr/README.md) are executed with the LFSR model; every
other instruction must be in the emulator's integer + SSE2 subset, or the run
stops with an error naming the instruction and its address. The program's
file descriptors are the emulator's own, so its output appears on stdout.
The exit status is the guest's, or 125 when the emulator stops the run (the
error is printed on one line).

OPTIONS:
    --seed N          LFSR seed (default 1); runs are deterministic per seed
    --env KEY=VALUE   add an environment variable (the guest starts with none)
    --limit N         stop with an error after N instructions (default 10^12)
    --timing CONFIG   also run the cycle model with the parameters in CONFIG
                      (key = value lines; brr/timing.conf holds the defaults,
                      the paper's core) and print its report to stderr:
                      the predictor, instructions, cycles, CPI, MPKI
                      (branch mispredictions per 1000 instructions), counts
                      per branch kind, L1I/L1D/L2 accesses and misses, BTB
                      lookups and misses, L1I and BTB misses per 1000
                      instructions
    --predictor NAME  the timing model's branch direction predictor, instead
                      of CONFIG's `predictor` key (needs --timing):
                        tournament  gshare + bimodal + per-branch chooser
                                    (the paper's core, the default)
                        gshare      gshare alone (gshare_history_bits)
                        bimodal     2-bit counters by address (bimodal_entries)
                        perfect     never mispredicts a direction, an indirect
                                    target or a return: CPI without
                                    misprediction cost (BTB misses of direct
                                    jumps still cost a decode redirect)
    --epoch N         the guest's interval timer (setitimer, any of the three
                      timers) fires every N retired instructions, whatever
                      period the guest asked for (default: a requested
                      microsecond counts as 1000 instructions). The handler
                      installed with sigaction runs like a signal handler
    --stats           print instructions, time, MIPS, brr counts, stores into
                      executable memory and timer signals delivered to
                      stderr, and the CPU model emulated (this machine's,
                      measured)
    -h, --help        this text
";

fn main() {
    match real_main() {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("brr-run: {e:#}");
            std::process::exit(125);
        }
    }
}

fn real_main() -> Result<i32> {
    let mut args = std::env::args().skip(1);
    let mut seed = 1u64;
    let mut env = Vec::new();
    let mut limit = 1_000_000_000_000u64;
    let mut stats = false;
    let mut epoch: Option<u64> = None;
    let mut timing: Option<PathBuf> = None;
    let mut predictor: Option<brr::timing::PredictorKind> = None;
    let mut program: Vec<String> = Vec::new();
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match a.as_str() {
            "-h" | "--help" => {
                print!("{HELP}");
                return Ok(0);
            }
            "--seed" => seed = value("--seed")?.parse().context("--seed: not a number")?,
            "--env" => env.push(value("--env")?),
            "--limit" => limit = value("--limit")?.parse().context("--limit: not a number")?,
            "--stats" => stats = true,
            "--epoch" => {
                let v = value("--epoch")?;
                epoch = Some(v.parse().ok().filter(|&n: &u64| n > 0).with_context(|| {
                    format!("--epoch needs a positive number of instructions, got '{v}'")
                })?)
            }
            "--timing" => timing = Some(PathBuf::from(value("--timing")?)),
            "--predictor" => {
                predictor = Some(
                    brr::timing::PredictorKind::parse(&value("--predictor")?)
                        .context("--predictor")?,
                )
            }
            "--" => {
                program.extend(args.by_ref());
            }
            s if s.starts_with('-') && program.is_empty() => {
                bail!("unknown option '{s}' (see --help)")
            }
            _ => {
                program.push(a);
                program.extend(args.by_ref());
            }
        }
    }
    if predictor.is_some() && timing.is_none() {
        bail!("--predictor needs --timing CONFIG (see --help)");
    }
    let Some(path) = program.first().map(PathBuf::from) else {
        bail!("no program given (see --help)");
    };
    let mut process = Process::load(&path, &program, &env, seed)?;
    process.epoch = epoch;
    let start = Instant::now();
    let status = match &timing {
        Some(path) => {
            let mut config = brr::timing::Config::from_file(path)?;
            if let Some(p) = predictor {
                config.predictor = p;
            }
            let (status, report) = brr::timing::run(&mut process, &config, limit)?;
            eprint!("{}", report.to_text());
            status
        }
        None => process.run(limit)?,
    };
    let secs = start.elapsed().as_secs_f64();
    if stats {
        let m = &process.machine;
        let g = &m.guest;
        eprintln!(
            "brr-run: {} instructions in {:.3} s ({:.1} MIPS), {} syscalls, brr {} executed {} taken, exit {}",
            m.icount,
            secs,
            m.icount as f64 / secs / 1e6,
            process.syscalls,
            g.brr_executed,
            g.brr_taken,
            status
        );
        eprintln!(
            "brr-run: {} stores into executable memory, {} timer signals delivered",
            m.code_writes, process.signals_delivered
        );
        eprintln!(
            "brr-run: emulated CPU model: {}",
            brr::emu::emulated_model()
        );
    }
    Ok(status)
}
