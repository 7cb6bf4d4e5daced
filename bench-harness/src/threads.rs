//! `threads`: what a registered thread costs, sampled or not.
//!
//! With the library preloaded and autostarted, every thread the program
//! creates registers itself (two perf events). A program that creates
//! 1000 short-lived threads (each spins about 50 µs of CPU; joined in
//! batches of 50) runs natively and under the library in paper and emulate
//! mode at a 10 ms task-clock period, so that few threads are ever
//! sampled. Rounds interleave the runs; per configuration the median max
//! RSS and user and system CPU time (wait4's rusage) are reported, with
//! the cost per thread: (RSS − native RSS) / threads and (sys − native
//! sys) / threads.
//!
//! `--baseline LIB` runs another build of the library (the .so of an
//! earlier commit) in the same rounds, for a before/after comparison on
//! the same machine.

use crate::profiler::Tracer;
use crate::report::{fmt, median, Report, Table};
use crate::runner;
use crate::Options;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const THREADS: usize = 1000;
const BATCH: usize = 50;
const SPIN_US: u64 = 50;
const PERIOD: u64 = 10_000_000;
const ROUNDS: usize = 5;
const QUICK_ROUNDS: usize = 1;

/// The program: 1000 threads and the rest from the command line; the
/// same source as the library's memory test (tests/host.rs).
const PROGRAM: &str = include_str!("../../tests/programs/short_threads.c");

/// One run's figures.
#[derive(Clone, Copy)]
struct Usage {
    max_rss_kib: f64,
    user_s: f64,
    sys_s: f64,
}

/// A configuration: a library (or none) and a mode.
struct Config {
    name: String,
    library: Option<PathBuf>,
    mode: &'static str,
    runs: Vec<Usage>,
}

fn build_program(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let src = dir.join("threads.c");
    let exe = dir.join("threads");
    std::fs::write(&src, PROGRAM)?;
    let cc = runner::require_tool("cc", "gcc")?;
    let status = Command::new(cc)
        .args(["-O2", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .context("cannot run cc")?;
    if !status.success() {
        bail!("cc failed to build {}", src.display());
    }
    Ok(exe)
}

fn run_once(exe: &Path, config: &Config, out: &Path) -> Result<Usage> {
    let mut c = Command::new(exe);
    c.args([THREADS.to_string(), BATCH.to_string(), SPIN_US.to_string()]);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(lib) = &config.library {
        let _ = std::fs::remove_dir_all(out);
        std::fs::create_dir_all(out)?;
        c.env("LD_PRELOAD", lib)
            .env("BREAKDANCE_AUTOSTART", "1")
            .env("BREAKDANCE_EVENT", "task-clock")
            .env("BREAKDANCE_PERIOD", PERIOD.to_string())
            .env("BREAKDANCE_LOOKAHEAD", config.mode)
            .env("BREAKDANCE_OUTPUT", out);
    }
    let child = c
        .spawn()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    let pid = child.id() as libc::pid_t;
    let output = child.wait_with_output_rusage(pid)?;
    let (status, usage, stdout, stderr) = output;
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        bail!(
            "{} ({}) failed with wait status {status:#x}: {}",
            exe.display(),
            config.name,
            String::from_utf8_lossy(&stderr)
        );
    }
    let expected = format!("threads done: {THREADS}\n");
    if String::from_utf8_lossy(&stdout) != expected {
        bail!(
            "{} ({}) printed {:?}, not {expected:?}",
            exe.display(),
            config.name,
            String::from_utf8_lossy(&stdout)
        );
    }
    if config.library.is_some() && !out.join("summary.json").is_file() {
        bail!(
            "{} ({}) wrote no summary.json in {}: the library did not profile",
            exe.display(),
            config.name,
            out.display()
        );
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Ok(Usage {
        max_rss_kib: usage.ru_maxrss as f64,
        user_s: tv(usage.ru_utime),
        sys_s: tv(usage.ru_stime),
    })
}

/// Waits for a child with wait4 (its rusage: max RSS and CPU times) after
/// reading its output.
trait WaitRusage {
    fn wait_with_output_rusage(
        self,
        pid: libc::pid_t,
    ) -> Result<(i32, libc::rusage, Vec<u8>, Vec<u8>)>;
}

impl WaitRusage for std::process::Child {
    fn wait_with_output_rusage(
        mut self,
        pid: libc::pid_t,
    ) -> Result<(i32, libc::rusage, Vec<u8>, Vec<u8>)> {
        use std::io::Read;
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        // The program writes one line and the library a few: neither pipe
        // fills, so reading them one after the other cannot block.
        if let Some(mut o) = self.stdout.take() {
            o.read_to_end(&mut stdout)?;
        }
        if let Some(mut e) = self.stderr.take() {
            e.read_to_end(&mut stderr)?;
        }
        let mut status = 0;
        // SAFETY: rusage is plain old data; an all-zero value is valid.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: `pid` is our own un-reaped child (std's Child is not
            // waited on after this); both out-pointers are valid.
            let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
            if r == pid {
                return Ok((status, usage, stdout, stderr));
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e.into());
            }
        }
    }
}

fn cpu_model() -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).trim().to_string())
        .unwrap_or_else(|| "unknown CPU".to_string())
}

pub fn run(opts: &Options) -> Result<usize> {
    let mut rep = Report::new(&opts.results, "threads", "What a registered thread costs")?;
    let tracer = Tracer::locate()?;
    let work = opts.cache.join("runs").join("threads");
    let exe = build_program(&work)?;
    let rounds = if opts.quick { QUICK_ROUNDS } else { ROUNDS };
    let mut configs = vec![Config {
        name: "native".into(),
        library: None,
        mode: "",
        runs: Vec::new(),
    }];
    let mut libraries = vec![("current", tracer.library.clone())];
    if let Some(b) = &opts.baseline {
        if !b.is_file() {
            bail!("--baseline {}: no such library", b.display());
        }
        // The constructor acts only when LD_PRELOAD names libbreakdance.
        if !b.to_string_lossy().contains("libbreakdance") {
            bail!(
                "--baseline {}: the path must contain `libbreakdance` (the library \
                 profiles only when LD_PRELOAD names it): copy it to DIR/libbreakdance.so",
                b.display()
            );
        }
        libraries.insert(0, ("baseline", b.clone()));
    }
    for (label, lib) in &libraries {
        for mode in ["paper", "emulate"] {
            configs.push(Config {
                name: format!("{label} {mode}"),
                library: Some(lib.clone()),
                mode,
                runs: Vec::new(),
            });
        }
    }
    for round in 0..rounds {
        eprintln!("[threads] round {} of {rounds}", round + 1);
        for (i, c) in configs.iter_mut().enumerate() {
            let out = work.join(format!("out-{i}"));
            match run_once(&exe, c, &out) {
                Ok(u) => c.runs.push(u),
                Err(e) => rep.fail(&c.name, "run", &e),
            }
        }
    }
    let med = |c: &Config, f: fn(&Usage) -> f64| {
        let v: Vec<f64> = c.runs.iter().map(f).collect();
        if v.is_empty() {
            f64::NAN
        } else {
            median(&v)
        }
    };
    let native_rss = med(&configs[0], |u| u.max_rss_kib);
    let native_sys = med(&configs[0], |u| u.sys_s);
    let mut t = Table::new(&[
        "configuration",
        "library",
        "mode",
        "runs",
        "max RSS (MiB)",
        "user (s)",
        "sys (s)",
        "RSS per thread (KiB)",
        "sys per thread (µs)",
    ]);
    for c in &configs {
        let rss = med(c, |u| u.max_rss_kib);
        let sys = med(c, |u| u.sys_s);
        let native = c.library.is_none();
        t.push(vec![
            c.name.clone(),
            c.library
                .as_ref()
                .map_or("-".into(), |l| l.display().to_string()),
            if native { "-".into() } else { c.mode.into() },
            c.runs.len().to_string(),
            fmt(rss / 1024.0, 1),
            fmt(med(c, |u| u.user_s), 3),
            fmt(sys, 3),
            if native {
                "-".into()
            } else {
                fmt((rss - native_rss) / THREADS as f64, 1)
            },
            if native {
                "-".into()
            } else {
                fmt((sys - native_sys) * 1e6 / THREADS as f64, 1)
            },
        ]);
    }
    rep.note(&format!(
        "A C program creates {THREADS} threads, {BATCH} at a time, each spinning \
         {SPIN_US} µs of CPU, then joined; natively and with libbreakdance.so \
         preloaded and autostarted (BREAKDANCE_EVENT=task-clock, \
         BREAKDANCE_PERIOD={PERIOD}), in paper and emulate mode. {rounds} \
         interleaved rounds; each figure is the median over the rounds of wait4's \
         rusage (max RSS, user and system CPU of the process). Per thread: \
         (RSS − native RSS) / {THREADS} and (sys − native sys) / {THREADS}. \
         \"baseline\" is the library given with --baseline, \"current\" the \
         one built beside bench-harness. Machine: {}, {} CPUs.",
        cpu_model(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    ));
    rep.table("threads", "Cost of 1000 short-lived threads", &t)?;
    rep.finish()
}
