//! Session options: parsed once from the environment (autostart) or from a
//! `start` request, validated before anything is opened.

use std::path::{Path, PathBuf};

use perf_event_open_sys::bindings as pb;

use crate::output::dir::OutputDir;
use crate::trace::threads::SamplingEvent;
use crate::trace::Lookahead;

/// The longest trace the buffers are sized for.
pub const MAX_LBR: usize = 4096;
pub const DEFAULT_LBR: usize = 32;
/// 10 ms of task time between traces: with ~0.5–1 ms a trace in these VMs,
/// about 5–10% overhead.
pub const DEFAULT_CLOCK_PERIOD_NS: u64 = 10_000_000;
/// Branch events between traces when a PMU exists (a prime, so as not to
/// resonate with loop trip counts).
pub const DEFAULT_BRANCH_PERIOD: u64 = 1_000_003;
pub const DEFAULT_OUTPUT: &str = "breakdance-out";

/// A bad option, named.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("unknown event '{0}' (known: task-clock, cpu-clock, branches, instructions, cycles)")]
    UnknownEvent(String),
    #[error("{0} must be a positive integer, got '{1}'")]
    NotPositive(&'static str, String),
    #[error("lbr must be between 1 and {MAX_LBR}, got '{0}'")]
    LbrRange(String),
    #[error("give a period or a frequency, not both")]
    PeriodAndFreq,
    #[error("unknown option '{0}' (known: event, period, freq, lbr, out, lookahead, force_dir)")]
    UnknownOption(String),
    #[error("lookahead must be paper, dataflow, emulate or verify, got '{0}'")]
    Lookahead(String),
    #[error("force_dir must be 1 or 0, got '{0}'")]
    ForceDir(String),
    #[error("'stop' takes only out=DIR and force_dir=1, got '{0}'")]
    StopOption(String),
    /// The output directory was refused: the whole message.
    #[error("{0}")]
    Output(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    TaskClock,
    CpuClock,
    Branches,
    Instructions,
    Cycles,
}

impl EventKind {
    pub fn parse(name: &str) -> Result<EventKind, ConfigError> {
        Ok(match name {
            "task-clock" => EventKind::TaskClock,
            "cpu-clock" => EventKind::CpuClock,
            "branches" | "branch-instructions" => EventKind::Branches,
            "instructions" => EventKind::Instructions,
            "cycles" | "cpu-cycles" => EventKind::Cycles,
            _ => return Err(ConfigError::UnknownEvent(name.to_string())),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            EventKind::TaskClock => "task-clock",
            EventKind::CpuClock => "cpu-clock",
            EventKind::Branches => "branches",
            EventKind::Instructions => "instructions",
            EventKind::Cycles => "cycles",
        }
    }

    fn type_config(self) -> (u32, u64) {
        match self {
            EventKind::TaskClock => (pb::PERF_TYPE_SOFTWARE, pb::PERF_COUNT_SW_TASK_CLOCK as u64),
            EventKind::CpuClock => (pb::PERF_TYPE_SOFTWARE, pb::PERF_COUNT_SW_CPU_CLOCK as u64),
            EventKind::Branches => (
                pb::PERF_TYPE_HARDWARE,
                pb::PERF_COUNT_HW_BRANCH_INSTRUCTIONS as u64,
            ),
            EventKind::Instructions => (
                pb::PERF_TYPE_HARDWARE,
                pb::PERF_COUNT_HW_INSTRUCTIONS as u64,
            ),
            EventKind::Cycles => (pb::PERF_TYPE_HARDWARE, pb::PERF_COUNT_HW_CPU_CYCLES as u64),
        }
    }

    fn is_clock(self) -> bool {
        matches!(self, EventKind::TaskClock | EventKind::CpuClock)
    }
}

/// Options as given; `None` means the default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub event: Option<EventKind>,
    pub period: Option<u64>,
    pub freq: Option<u64>,
    pub lbr: Option<usize>,
    pub output: Option<PathBuf>,
    pub lookahead: Option<Lookahead>,
    /// Write into an output directory of another user.
    pub force_dir: bool,
}

fn positive(what: &'static str, v: &str) -> Result<u64, ConfigError> {
    match v.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(ConfigError::NotPositive(what, v.to_string())),
    }
}

impl Options {
    /// Sets one option by name (`event`, `period`, `freq`, `lbr`, `out`,
    /// `dataflow`, `force_dir`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        match key {
            "event" => self.event = Some(EventKind::parse(value)?),
            "period" => self.period = Some(positive("period", value)?),
            "freq" => self.freq = Some(positive("freq", value)?),
            "lbr" => {
                let n = value
                    .trim()
                    .parse::<usize>()
                    .map_err(|_| ConfigError::LbrRange(value.to_string()))?;
                if !(1..=MAX_LBR).contains(&n) {
                    return Err(ConfigError::LbrRange(value.to_string()));
                }
                self.lbr = Some(n);
            }
            "out" => self.output = Some(PathBuf::from(value)),
            // The option's name before look-ahead modes had their own
            // (on, off, verify), kept until profiler-ctl says lookahead.
            "dataflow" => {
                self.lookahead = Some(match value {
                    "on" => Lookahead::Dataflow,
                    "off" => Lookahead::Paper,
                    "verify" => Lookahead::Verify,
                    "emulate" => Lookahead::Emulate,
                    _ => return Err(ConfigError::Lookahead(value.to_string())),
                })
            }
            "lookahead" => {
                self.lookahead = Some(
                    Lookahead::parse(value)
                        .ok_or_else(|| ConfigError::Lookahead(value.to_string()))?,
                )
            }
            "force_dir" => {
                self.force_dir = match value {
                    "1" => true,
                    "0" => false,
                    _ => return Err(ConfigError::ForceDir(value.to_string())),
                }
            }
            _ => return Err(ConfigError::UnknownOption(key.to_string())),
        }
        if self.period.is_some() && self.freq.is_some() {
            return Err(ConfigError::PeriodAndFreq);
        }
        Ok(())
    }

    /// Parses `key=value` words of a `start` request.
    pub fn parse_words(words: &str) -> Result<Options, ConfigError> {
        let mut o = Options::default();
        for word in words.split_whitespace() {
            let (k, v) = word
                .split_once('=')
                .ok_or_else(|| ConfigError::UnknownOption(word.to_string()))?;
            o.set(k, v)?;
        }
        Ok(o)
    }

    /// Reads the BREAKDANCE_* variables.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Options, ConfigError> {
        let mut o = Options::default();
        for (var, key) in [
            ("BREAKDANCE_EVENT", "event"),
            ("BREAKDANCE_PERIOD", "period"),
            ("BREAKDANCE_FREQ", "freq"),
            ("BREAKDANCE_LBR", "lbr"),
            ("BREAKDANCE_OUTPUT", "out"),
            ("BREAKDANCE_DATAFLOW", "dataflow"),
            ("BREAKDANCE_LOOKAHEAD", "lookahead"),
            ("BREAKDANCE_FORCE_DIR", "force_dir"),
        ] {
            if let Some(v) = get(var).filter(|v| !v.is_empty()) {
                o.set(key, &v)?;
            }
        }
        Ok(o)
    }
}

/// Where a `stop` writes: `out=DIR` sends a session's outputs (or the data
/// an earlier stop could not write) somewhere else than the session's
/// directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopOptions {
    pub output: Option<PathBuf>,
    pub force_dir: bool,
}

impl StopOptions {
    /// Parses the `key=value` words of a `stop` request.
    pub fn parse_words(words: &str) -> Result<StopOptions, ConfigError> {
        let o = Options::parse_words(words)?;
        let stray = Options {
            output: None,
            force_dir: false,
            ..o.clone()
        };
        if stray != Options::default() {
            return Err(ConfigError::StopOption(words.trim().to_string()));
        }
        Ok(StopOptions {
            output: o.output.map(|p| absolute(&p)),
            force_dir: o.force_dir,
        })
    }
}

/// `p` made absolute against the current directory (without resolving
/// symlinks: the directory is checked when it is opened).
pub fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Options resolved against the machine.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub event: EventKind,
    pub sampling: SamplingEvent,
    pub period: Option<u64>,
    pub freq: Option<u64>,
    pub lbr: usize,
    /// Absolute, so that a stop writes where start checked.
    pub output: PathBuf,
    pub force_dir: bool,
    pub lookahead: Lookahead,
}

/// Picks the default event (a hardware branch event where a PMU exists,
/// else task-clock), fills in defaults, and checks the output directory.
pub fn resolve(o: &Options, pmu_available: bool) -> Result<Resolved, ConfigError> {
    let event = o.event.unwrap_or(if pmu_available {
        EventKind::Branches
    } else {
        EventKind::TaskClock
    });
    let (type_, config) = event.type_config();
    let default_period = if event.is_clock() {
        DEFAULT_CLOCK_PERIOD_NS
    } else {
        DEFAULT_BRANCH_PERIOD
    };
    let (period, freq) = match (o.period, o.freq) {
        (_, Some(f)) => (None, Some(f)),
        (p, None) => (Some(p.unwrap_or(default_period)), None),
    };
    let output = absolute(
        o.output
            .as_deref()
            .unwrap_or_else(|| Path::new(DEFAULT_OUTPUT)),
    );
    check_output_dir(&output, o.force_dir)?;
    Ok(Resolved {
        event,
        sampling: SamplingEvent {
            type_,
            config,
            period: freq.or(period).unwrap_or(default_period),
            freq: freq.is_some(),
        },
        period,
        freq,
        lbr: o.lbr.unwrap_or(DEFAULT_LBR),
        output,
        force_dir: o.force_dir,
        lookahead: o.lookahead.unwrap_or(Lookahead::Dataflow),
    })
}

/// Creates the directory if needed (mode 0700), checks who owns it and
/// proves it writable (see `output::dir`).
pub fn check_output_dir(dir: &Path, force: bool) -> Result<(), ConfigError> {
    let opened = OutputDir::open(dir, force).map_err(|e| ConfigError::Output(e.to_string()))?;
    opened
        .probe()
        .map_err(|e| ConfigError::Output(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_words_parse_and_validate() {
        let o = Options::parse_words("event=task-clock period=200000 lbr=64 out=/tmp/x").unwrap();
        assert_eq!(o.event, Some(EventKind::TaskClock));
        assert_eq!(o.period, Some(200_000));
        assert_eq!(o.lbr, Some(64));
        assert_eq!(
            Options::parse_words("period=0"),
            Err(ConfigError::NotPositive("period", "0".into()))
        );
        assert_eq!(
            Options::parse_words("lbr=4097"),
            Err(ConfigError::LbrRange("4097".into()))
        );
        assert_eq!(
            Options::parse_words("lbr=0"),
            Err(ConfigError::LbrRange("0".into()))
        );
        assert_eq!(
            Options::parse_words("event=bogus"),
            Err(ConfigError::UnknownEvent("bogus".into()))
        );
        assert_eq!(
            Options::parse_words("period=5 freq=5"),
            Err(ConfigError::PeriodAndFreq)
        );
        assert_eq!(
            Options::parse_words("speed=5"),
            Err(ConfigError::UnknownOption("speed".into()))
        );
        assert_eq!(
            Options::parse_words("force_dir=yes"),
            Err(ConfigError::ForceDir("yes".into()))
        );
        assert!(Options::parse_words("force_dir=1").unwrap().force_dir);
        assert!(ConfigError::UnknownEvent("x".into())
            .to_string()
            .contains("unknown event 'x'"));
    }

    #[test]
    fn defaults_follow_the_pmu() {
        let dir = std::env::temp_dir().join(format!("bd-config-{}", std::process::id()));
        let o = Options {
            output: Some(dir.clone()),
            ..Options::default()
        };
        let r = resolve(&o, false).unwrap();
        assert_eq!(r.event, EventKind::TaskClock);
        assert_eq!(r.period, Some(DEFAULT_CLOCK_PERIOD_NS));
        assert_eq!(r.lbr, DEFAULT_LBR);
        let r = resolve(&o, true).unwrap();
        assert_eq!(r.event, EventKind::Branches);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn unwritable_output_is_refused() {
        let o = Options {
            output: Some(PathBuf::from("/proc/breakdance/out")),
            ..Options::default()
        };
        assert!(matches!(resolve(&o, false), Err(ConfigError::Output(..))));
    }

    #[test]
    fn stop_takes_only_a_directory() {
        assert_eq!(
            StopOptions::parse_words("").unwrap(),
            StopOptions::default()
        );
        let o = StopOptions::parse_words("out=/x/y force_dir=1").unwrap();
        assert_eq!(o.output, Some(PathBuf::from("/x/y")));
        assert!(o.force_dir);
        assert_eq!(
            StopOptions::parse_words("lbr=4"),
            Err(ConfigError::StopOption("lbr=4".into()))
        );
        assert!(matches!(
            StopOptions::parse_words("now"),
            Err(ConfigError::UnknownOption(_))
        ));
    }

    #[test]
    fn env_variables_map_to_options() {
        let env = |k: &str| match k {
            "BREAKDANCE_LBR" => Some("16".to_string()),
            "BREAKDANCE_FREQ" => Some("999".to_string()),
            _ => None,
        };
        let o = Options::from_env(env).unwrap();
        assert_eq!((o.lbr, o.freq, o.period), (Some(16), Some(999), None));
    }
}
