//! The tracer as a black box: `profiler-ctl record` around a command, the
//! library preloaded but idle, and the `summary.json` it writes.

use crate::runner::{self, Cmd, Timing};
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

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

    /// `cmd` under `profiler-ctl record -e task-clock -c PERIOD -o DIR`.
    pub fn record(&self, cmd: &Cmd, period_ns: u64, out: &Path) -> Cmd {
        self.record_with(cmd, period_ns, out, &[])
    }

    /// As [`Tracer::record`], with more `record` options (`--dataflow verify`).
    pub fn record_with(&self, cmd: &Cmd, period_ns: u64, out: &Path, options: &[&str]) -> Cmd {
        let mut args: Vec<OsString> = vec![
            "record".into(),
            "-e".into(),
            "task-clock".into(),
            "-c".into(),
            period_ns.to_string().into(),
            "-o".into(),
            out.as_os_str().to_owned(),
        ];
        args.extend(options.iter().map(OsString::from));
        args.push("--".into());
        cmd.wrapped(&self.ctl, &args)
    }

    /// `cmd` with the library preloaded but no session started.
    pub fn loaded_idle(&self, cmd: &Cmd) -> Cmd {
        cmd.clone().env("LD_PRELOAD", self.library.as_os_str())
    }

    /// Runs `cmd` profiled into a fresh `out` and reads its summary.
    pub fn record_run(&self, cmd: &Cmd, period_ns: u64, out: &Path) -> Result<(Timing, Summary)> {
        let _ = std::fs::remove_dir_all(out);
        let t = runner::run_timed(&self.record(cmd, period_ns, out))?;
        let s = Summary::read(out)?;
        Ok((t, s))
    }
}

/// The counters of one profiled run (`summary.json`, see the contract).
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub duration_ns: f64,
    pub samples: f64,
    pub traces_completed: f64,
    pub entries_recorded: f64,
    pub breakpoints: f64,
    pub statically_resolved: f64,
    pub dynamically_evaluated: f64,
    pub dynamic_taken: f64,
    pub sampling_ns: f64,
    pub breakpoint_ns: f64,
    pub decode_ns: f64,
    pub aborts: f64,
    pub drops: f64,
}

impl Summary {
    /// Reads `DIR/summary.json`.
    pub fn read(dir: &Path) -> Result<Summary> {
        let path = dir.join("summary.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("profiled run wrote no {}", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not valid JSON", path.display()))?;
        let num = |keys: &[&str]| -> Result<f64> {
            let mut cur = &v;
            for k in keys {
                cur = cur.get(k).with_context(|| {
                    format!("{} has no field {}", path.display(), keys.join("."))
                })?;
            }
            cur.as_f64()
                .with_context(|| format!("{}: {} is not a number", path.display(), keys.join(".")))
        };
        let sum_of = |key: &str| -> f64 {
            v.get(key)
                .and_then(|o| o.as_object())
                .map(|o| o.values().filter_map(|x| x.as_f64()).sum())
                .unwrap_or(0.0)
        };
        Ok(Summary {
            duration_ns: num(&["duration_ns"])?,
            samples: num(&["samples"])?,
            traces_completed: num(&["traces_completed"])?,
            entries_recorded: num(&["entries_recorded"])?,
            breakpoints: num(&["breakpoints"])?,
            statically_resolved: num(&["statically_resolved"])?,
            dynamically_evaluated: num(&["dynamically_evaluated"])?,
            dynamic_taken: num(&["dynamic_taken"])?,
            sampling_ns: num(&["handler_ns", "sampling"])?,
            breakpoint_ns: num(&["handler_ns", "breakpoint"])?,
            decode_ns: num(&["handler_ns", "decode"])?,
            aborts: sum_of("aborts"),
            drops: sum_of("drops"),
        })
    }

    /// t: taken fraction of the dynamically evaluated branches.
    pub fn taken_fraction(&self) -> f64 {
        self.dynamic_taken / self.dynamically_evaluated
    }

    /// s: fraction of branches resolved statically during look-ahead.
    pub fn static_fraction(&self) -> f64 {
        self.statically_resolved / (self.statically_resolved + self.dynamically_evaluated)
    }

    /// The paper's breakpoint usefulness factor t/(1−s) (§3.1).
    pub fn usefulness(&self) -> f64 {
        self.taken_fraction() / (1.0 - self.static_fraction())
    }

    /// Adds another run's counters (for sums over runs).
    pub fn add(&mut self, o: &Summary) {
        self.duration_ns += o.duration_ns;
        self.samples += o.samples;
        self.traces_completed += o.traces_completed;
        self.entries_recorded += o.entries_recorded;
        self.breakpoints += o.breakpoints;
        self.statically_resolved += o.statically_resolved;
        self.dynamically_evaluated += o.dynamically_evaluated;
        self.dynamic_taken += o.dynamic_taken;
        self.sampling_ns += o.sampling_ns;
        self.breakpoint_ns += o.breakpoint_ns;
        self.decode_ns += o.decode_ns;
        self.aborts += o.aborts;
        self.drops += o.drops;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_fields_and_factors() {
        let dir = runner::tempfile_path("summary");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("summary.json"),
            r#"{"pid":1,"duration_ns":1000,"samples":10,"traces_completed":9,"entries_recorded":288,
            "breakpoints":500,"statically_resolved":100,"dynamically_evaluated":300,"dynamic_taken":150,
            "handler_ns":{"sampling":5,"breakpoint":7,"decode":2},
            "aborts":{"rseq":1,"sp_mismatch":2},"drops":{"no_free_buffer":3}}"#,
        )
        .unwrap();
        let s = Summary::read(&dir).unwrap();
        assert_eq!(s.taken_fraction(), 0.5);
        assert_eq!(s.static_fraction(), 0.25);
        assert!((s.usefulness() - 0.5 / 0.75).abs() < 1e-12);
        assert_eq!((s.aborts, s.drops), (3.0, 3.0));
        std::fs::remove_file(dir.join("summary.json")).unwrap();
        let err = Summary::read(&dir).unwrap_err().to_string();
        assert!(err.contains("summary.json"), "{err}");
        std::fs::remove_dir(&dir).unwrap();
    }
}
