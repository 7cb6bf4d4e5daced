//! The tracer as a black box: `profiler-ctl record` around a command, the
//! library preloaded but idle, and the `summary.json` it writes.

use crate::runner::{self, Cmd, Timing};
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use breakdance_protocol::Counters;

/// The trace length of the paper's experiments: a hardware LBR's depth.
pub const PAPER_LBR: u32 = 32;

/// The built tracer: profiler-ctl and libbreakdance.so next to this binary.
pub struct Tracer {
    pub ctl: PathBuf,
    pub library: PathBuf,
}

impl Tracer {
    /// Locates the tracer in the directory of the bench-harness executable.
    pub fn locate() -> Result<Tracer> {
        let dir = runner::build_dir()?;
        let ctl = dir.join("profiler-ctl");
        let library = dir.join("libbreakdance.so");
        for p in [&ctl, &library] {
            if !p.is_file() {
                bail!(
                    "{} not found; build the tracer with `cargo build --release --workspace` first",
                    p.display()
                );
            }
        }
        Ok(Tracer { ctl, library })
    }

    /// `cmd` under `profiler-ctl record` with task-clock sampling every
    /// `period_ns`, into `out`, with more `record` options (`--lookahead
    /// verify`). Traces are a hardware LBR's 32 branches, as in the paper,
    /// unless `options` names another `--lbr`.
    pub fn record_with(&self, cmd: &Cmd, period_ns: u64, out: &Path, options: &[&str]) -> Cmd {
        let mut args: Vec<OsString> = vec![
            "record".into(),
            "-q".into(),
            "-e".into(),
            "task-clock".into(),
            "-c".into(),
            period_ns.to_string().into(),
            "-o".into(),
            out.as_os_str().to_owned(),
        ];
        if !options.contains(&"--lbr") {
            args.extend(["--lbr".into(), PAPER_LBR.to_string().into()]);
        }
        args.extend(options.iter().map(OsString::from));
        args.push("--".into());
        cmd.wrapped(&self.ctl, &args)
    }

    /// `cmd` with the library preloaded but no session started.
    pub fn loaded_idle(&self, cmd: &Cmd) -> Cmd {
        cmd.clone().env("LD_PRELOAD", self.library.as_os_str())
    }

    /// Runs `cmd` with the library preloaded and a session autostarted in
    /// it (task-clock every `period_ns`, into a fresh `out`, with more
    /// `BREAKDANCE_*` settings in `env`), and reads its summary. The times
    /// are the application's own: no `profiler-ctl` runs around it, and
    /// nothing (llvm-profgen) runs after it.
    pub fn autostarted_run(
        &self,
        cmd: &Cmd,
        period_ns: u64,
        out: &Path,
        env: &[(&str, &str)],
    ) -> Result<(Timing, Summary)> {
        let _ = std::fs::remove_dir_all(out);
        let mut run = self
            .loaded_idle(cmd)
            .env("BREAKDANCE_AUTOSTART", "1")
            .env("BREAKDANCE_EVENT", "task-clock")
            .env("BREAKDANCE_PERIOD", period_ns.to_string())
            .env("BREAKDANCE_OUTPUT", out.as_os_str());
        for (k, v) in env {
            run = run.env(k, *v);
        }
        let t = runner::run_timed(&run)?;
        let s = Summary::read(out)?;
        Ok((t, s))
    }

    /// Runs `cmd` profiled into a fresh `out` and reads its summary.
    pub fn record_run(&self, cmd: &Cmd, period_ns: u64, out: &Path) -> Result<(Timing, Summary)> {
        self.record_run_with(cmd, period_ns, out, &[])
    }

    /// As [`Tracer::record_run`], with more `record` options.
    pub fn record_run_with(
        &self,
        cmd: &Cmd,
        period_ns: u64,
        out: &Path,
        options: &[&str],
    ) -> Result<(Timing, Summary)> {
        let _ = std::fs::remove_dir_all(out);
        let t = runner::run_timed(&self.record_with(cmd, period_ns, out, options))?;
        let s = Summary::read(out)?;
        Ok((t, s))
    }
}

/// The counters of profiled runs, summed: summary.json's counters (the
/// protocol crate's types) and the wall time they covered.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub duration_ns: u64,
    pub counters: Counters,
    /// Everything dropped, all reasons together.
    pub dropped: u64,
}

impl Summary {
    /// Reads `DIR/summary.json`.
    pub fn read(dir: &Path) -> Result<Summary> {
        let s = breakdance_protocol::Summary::load(dir)?.with_context(|| {
            format!(
                "profiled run wrote no {}",
                dir.join("summary.json").display()
            )
        })?;
        Ok(Summary {
            duration_ns: s.duration_ns,
            counters: s.counters,
            dropped: s.drops().iter().map(|(_, n)| n).sum(),
        })
    }

    /// t: taken fraction of the dynamically evaluated branches.
    pub fn taken_fraction(&self) -> f64 {
        self.counters.dynamic_taken as f64 / self.counters.dynamically_evaluated as f64
    }

    /// s: fraction of branches resolved statically during look-ahead.
    pub fn static_fraction(&self) -> f64 {
        let c = &self.counters;
        c.statically_resolved as f64 / (c.statically_resolved + c.dynamically_evaluated) as f64
    }

    /// The paper's breakpoint usefulness factor t/(1−s) (§3.1).
    pub fn usefulness(&self) -> f64 {
        self.taken_fraction() / (1.0 - self.static_fraction())
    }

    /// Adds another run's counters (for sums over runs).
    pub fn add(&mut self, o: &Summary) {
        self.duration_ns += o.duration_ns;
        self.counters += o.counters;
        self.dropped += o.dropped;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_fields_and_factors() {
        let dir = runner::tempfile_path("summary");
        std::fs::create_dir_all(&dir).unwrap();
        let mut written = breakdance_protocol::Summary {
            schema: breakdance_protocol::SCHEMA_VERSION,
            ..Default::default()
        };
        let c = &mut written.counters;
        (
            c.statically_resolved,
            c.dynamically_evaluated,
            c.dynamic_taken,
        ) = (100, 300, 150);
        c.drops.no_free_buffer = 2;
        c.drops.trace_table_full = 1;
        std::fs::write(dir.join("summary.json"), written.to_json()).unwrap();
        let s = Summary::read(&dir).unwrap();
        assert_eq!(s.taken_fraction(), 0.5);
        assert_eq!(s.static_fraction(), 0.25);
        assert!((s.usefulness() - 0.5 / 0.75).abs() < 1e-12);
        assert_eq!(s.dropped, 3);
        std::fs::remove_file(dir.join("summary.json")).unwrap();
        let err = Summary::read(&dir).unwrap_err().to_string();
        assert!(err.contains("summary.json"), "{err}");
        std::fs::remove_dir(&dir).unwrap();
    }
}
