//! Session options: their names, values, defaults and limits, the `start`
//! request's `key=value` words and the `BREAKDANCE_*` variables that carry
//! them. The library parses them here; profiler-ctl writes them here.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The longest trace the library's buffers are sized for.
pub const MAX_LBR: u32 = 4096;
/// Taken branches per trace when none is asked for, in the stop-per-branch
/// modes (paper, verify): a hardware LBR's depth.
pub const DEFAULT_LBR: u32 = 32;
/// Taken branches per trace when none is asked for, in emulate mode. Each
/// trace begins with a sample, which costs more than a hundred emulated
/// branches. At the default period (10 ms) 256 branches cost what 128 do
/// (1.030× against 1.029×, geomean of five workloads) for a better profile
/// on all five (instruction overlap 0.897 against 0.883; results/tracelen),
/// but a trace of 256 takes longer than a 1 ms SIGALRM loop leaves between
/// signals (tests/host.rs, siglongjmp_out_of_sigalrm: no trace completed),
/// so the default stays 128 until a trace of loop code is cheaper.
pub const DEFAULT_EMULATE_LBR: u32 = 128;
/// 10 ms of task time between traces: about 5% overhead in emulate mode
/// (results/tracelen).
pub const DEFAULT_CLOCK_PERIOD_NS: u64 = 10_000_000;
/// Branch events between traces when a PMU exists (a prime, so as not to
/// resonate with loop trip counts).
pub const DEFAULT_BRANCH_PERIOD: u64 = 1_000_003;
/// The deepest call stack `callstack=N` (`record -g --stack-depth N`) may
/// ask for.
pub const MAX_CALLSTACK: u32 = 512;
/// Frames per call stack when `-g` gives no depth: perf's own default
/// (`kernel.perf_event_max_stack` is 127 frames plus the leaf).
pub const DEFAULT_CALLSTACK: u32 = 128;
/// Output directory when none is given.
pub const DEFAULT_OUTPUT: &str = "breakdance-out";
/// How long a control request waits for its answer by default.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// The tracer library's file name.
pub const LIBRARY_FILE: &str = "libbreakdance.so";
/// Files of the output directory.
pub const SUMMARY_FILE: &str = "summary.json";
pub const PERF_SCRIPT_FILE: &str = "perf.script";

/// Every variable the library reads at load time. A launcher sets or clears
/// all of them, so values left in its environment do not mix with its own.
pub const ENV_VARIABLES: [&str; 14] = [
    "BREAKDANCE_AUTOSTART",
    "BREAKDANCE_EVENT",
    "BREAKDANCE_PERIOD",
    "BREAKDANCE_FREQ",
    "BREAKDANCE_LBR",
    "BREAKDANCE_OUTPUT",
    "BREAKDANCE_SOCKET",
    "BREAKDANCE_ROOT_PID",
    "BREAKDANCE_LOOKAHEAD",
    "BREAKDANCE_FORCE_DIR",
    "BREAKDANCE_CALLSTACK",
    "BREAKDANCE_UNWIND",
    "BREAKDANCE_VALUES",
    "BREAKDANCE_ALWAYS_CHECK",
];

/// The session options and the variable each is read from at autostart.
const OPTION_VARIABLES: [(&str, &str); 11] = [
    ("event", "BREAKDANCE_EVENT"),
    ("period", "BREAKDANCE_PERIOD"),
    ("freq", "BREAKDANCE_FREQ"),
    ("lbr", "BREAKDANCE_LBR"),
    ("out", "BREAKDANCE_OUTPUT"),
    ("lookahead", "BREAKDANCE_LOOKAHEAD"),
    ("force_dir", "BREAKDANCE_FORCE_DIR"),
    ("callstack", "BREAKDANCE_CALLSTACK"),
    ("unwind", "BREAKDANCE_UNWIND"),
    ("values", "BREAKDANCE_VALUES"),
    ("always_check", "BREAKDANCE_ALWAYS_CHECK"),
];

/// The sampling event that picks trace starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Event {
    TaskClock,
    CpuClock,
    #[cfg_attr(feature = "clap", value(alias = "branch-instructions"))]
    Branches,
    Instructions,
    #[cfg_attr(feature = "clap", value(alias = "cpu-cycles"))]
    Cycles,
}

impl Event {
    pub const ALL: [Event; 5] = [
        Event::TaskClock,
        Event::CpuClock,
        Event::Branches,
        Event::Instructions,
        Event::Cycles,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Event::TaskClock => "task-clock",
            Event::CpuClock => "cpu-clock",
            Event::Branches => "branches",
            Event::Instructions => "instructions",
            Event::Cycles => "cycles",
        }
    }

    /// The event `name` stands for (perf's aliases accepted).
    pub fn from_name(name: &str) -> Option<Event> {
        match name {
            "branch-instructions" => Some(Event::Branches),
            "cpu-cycles" => Some(Event::Cycles),
            _ => Event::ALL.into_iter().find(|e| e.name() == name),
        }
    }

    /// Counted by the CPU's PMU (absent in most VMs), not by the kernel.
    pub fn is_hardware(self) -> bool {
        !self.is_clock()
    }

    pub fn is_clock(self) -> bool {
        matches!(self, Event::TaskClock | Event::CpuClock)
    }

    /// The sampling period used when none is given.
    pub fn default_period(self) -> u64 {
        if self.is_clock() {
            DEFAULT_CLOCK_PERIOD_NS
        } else {
            DEFAULT_BRANCH_PERIOD
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the tracer looks ahead from a sample: how it learns the branches
/// the thread takes without hardware.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
#[repr(u8)]
pub enum Lookahead {
    /// Decode ahead, and stop at a breakpoint on every branch that needs
    /// the CPU state: the paper's algorithm.
    Paper = 0,
    /// As paper, with every branch the emulator predicts checked at a real
    /// stop, counting disagreements (for testing; its profile is paper's).
    Verify = 2,
    /// Emulate each trace ahead from its sample on live memory and prove it
    /// at one breakpoint checkpoint per segment (the default: on every
    /// harness workload it needs a few stops per trace where paper needs
    /// 36 to 83).
    #[default]
    Emulate = 3,
}

impl Lookahead {
    /// Taken branches per trace when none is asked for.
    pub const fn default_lbr(self) -> u32 {
        match self {
            Lookahead::Emulate => DEFAULT_EMULATE_LBR,
            Lookahead::Paper | Lookahead::Verify => DEFAULT_LBR,
        }
    }

    pub const ALL: [Lookahead; 3] = [Lookahead::Paper, Lookahead::Emulate, Lookahead::Verify];

    /// A mode that no longer exists, and why: named in the error a request
    /// for it gets. `dataflow` (the core resolving ahead at each stop on
    /// memory no other thread can change) needed 6 to 40 times the stops
    /// of emulate and cost more on every workload measured (results/README.md,
    /// "What a trace costs"), and it was the one mode that trusted the core
    /// without a checkpoint.
    pub const RETIRED: [(&'static str, &'static str); 1] = [(
        "dataflow",
        "was retired: emulate needs fewer stops and less time on every workload measured",
    )];

    pub fn name(self) -> &'static str {
        match self {
            Lookahead::Paper => "paper",
            Lookahead::Emulate => "emulate",
            Lookahead::Verify => "verify",
        }
    }

    pub fn from_name(name: &str) -> Option<Lookahead> {
        Lookahead::ALL.into_iter().find(|m| m.name() == name)
    }

    /// [`Lookahead::from_name`], with an error that names a retired mode.
    pub fn parse(name: &str) -> Result<Lookahead, OptionError> {
        if let Some((_, why)) = Lookahead::RETIRED.iter().find(|(n, _)| *n == name) {
            return Err(OptionError::RetiredLookahead(name.to_string(), why));
        }
        Lookahead::from_name(name).ok_or_else(|| OptionError::Lookahead(name.to_string()))
    }
}

impl fmt::Display for Lookahead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A bad session option, named.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OptionError {
    #[error("unknown event '{0}' (known: task-clock, cpu-clock, branches, instructions, cycles)")]
    UnknownEvent(String),
    #[error("{0} must be a positive integer, got '{1}'")]
    NotPositive(&'static str, String),
    #[error("lbr must be between 1 and {MAX_LBR}, got '{0}'")]
    LbrRange(String),
    #[error("give a period or a frequency, not both")]
    PeriodAndFreq,
    #[error("callstack must be 0 (off) or a depth from 1 to {MAX_CALLSTACK}, got '{0}'")]
    CallstackRange(String),
    #[error("callstack needs lookahead emulate: the call stack is taken from the emulated state at the trace's newest branch")]
    CallstackMode,
    #[error("values must be 1 or 0, got '{0}'")]
    Values(String),
    #[error("values needs lookahead emulate: the loads are seen by the emulator in the segments it validates")]
    ValuesMode,
    #[error("always_check must be 1 or 0, got '{0}'")]
    AlwaysCheck(String),
    #[error("unwind must be fp or dwarf, got '{0}'")]
    Unwind(String),
    #[error(
        "unknown option '{0}' (known: event, period, freq, lbr, out, lookahead, force_dir, callstack, unwind, values, always_check)"
    )]
    UnknownOption(String),
    #[error("lookahead must be paper, emulate or verify, got '{0}'")]
    Lookahead(String),
    #[error("lookahead '{0}' {1}; use emulate (the default), paper or verify")]
    RetiredLookahead(String, &'static str),
    #[error("force_dir must be 1 or 0, got '{0}'")]
    ForceDir(String),
    #[error("'stop' takes only out=DIR and force_dir=1, got '{0}'")]
    StopOption(String),
    #[error(
        "output directory '{0}' cannot be sent: the request is UTF-8 words separated by spaces"
    )]
    OutputNotSendable(String),
}

/// Options of a session as given; `None` leaves the library's default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionOptions {
    pub event: Option<Event>,
    pub period: Option<u64>,
    pub freq: Option<u64>,
    pub lbr: Option<u32>,
    pub output: Option<PathBuf>,
    pub lookahead: Option<Lookahead>,
    /// Write into an output directory of another user.
    pub force_dir: bool,
    /// Take the call stack at each trace's newest branch, at most this
    /// many frames (leaf included); 0 or `None`: no call stacks.
    pub callstack: Option<u32>,
    /// How the frames older than the trace's own calls are found.
    pub unwind: Option<Unwind>,
    /// Record the value of every load the validated segments executed
    /// (value profiles); `None` leaves it off.
    pub values: Option<bool>,
    /// Validate every segment at a checkpoint, even the private reads of
    /// a quiet process (see the library's `quiet`); `None` leaves it off.
    pub always_check: Option<bool>,
}

/// How `callstack` finds the frames the trace did not see called.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Unwind {
    /// The frame-pointer chain, in the handler.
    #[default]
    Fp,
    /// A copy of the stack's top in the handler, unwound by the worker
    /// with the modules' DWARF CFI (.eh_frame).
    Dwarf,
}

impl Unwind {
    pub fn name(self) -> &'static str {
        match self {
            Unwind::Fp => "fp",
            Unwind::Dwarf => "dwarf",
        }
    }
}

fn positive(what: &'static str, v: &str) -> Result<u64, OptionError> {
    match v.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(OptionError::NotPositive(what, v.to_string())),
    }
}

impl SessionOptions {
    /// Sets one option by its request name (`event`, `period`, `freq`,
    /// `lbr`, `out`, `lookahead`, `force_dir`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), OptionError> {
        match key {
            "event" => {
                self.event = Some(
                    Event::from_name(value)
                        .ok_or_else(|| OptionError::UnknownEvent(value.to_string()))?,
                )
            }
            "period" => self.period = Some(positive("period", value)?),
            "freq" => self.freq = Some(positive("freq", value)?),
            "lbr" => {
                let n = value
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=MAX_LBR).contains(n))
                    .ok_or_else(|| OptionError::LbrRange(value.to_string()))?;
                self.lbr = Some(n);
            }
            "out" => self.output = Some(PathBuf::from(value)),
            "unwind" => {
                self.unwind = Some(match value {
                    "fp" => Unwind::Fp,
                    "dwarf" => Unwind::Dwarf,
                    _ => return Err(OptionError::Unwind(value.to_string())),
                })
            }
            "callstack" => {
                let n = value
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n <= MAX_CALLSTACK)
                    .ok_or_else(|| OptionError::CallstackRange(value.to_string()))?;
                self.callstack = Some(n);
            }
            "lookahead" => self.lookahead = Some(Lookahead::parse(value)?),
            "values" => {
                self.values = Some(match value {
                    "1" => true,
                    "0" => false,
                    _ => return Err(OptionError::Values(value.to_string())),
                })
            }
            "always_check" => {
                self.always_check = Some(match value {
                    "1" => true,
                    "0" => false,
                    _ => return Err(OptionError::AlwaysCheck(value.to_string())),
                })
            }
            "force_dir" => {
                self.force_dir = match value {
                    "1" => true,
                    "0" => false,
                    _ => return Err(OptionError::ForceDir(value.to_string())),
                }
            }
            _ => return Err(OptionError::UnknownOption(key.to_string())),
        }
        if self.period.is_some() && self.freq.is_some() {
            return Err(OptionError::PeriodAndFreq);
        }
        Ok(())
    }

    /// Parses the `key=value` words of a `start` request.
    pub fn parse_words(words: &str) -> Result<SessionOptions, OptionError> {
        let mut o = SessionOptions::default();
        for word in words.split_whitespace() {
            let (k, v) = word
                .split_once('=')
                .ok_or_else(|| OptionError::UnknownOption(word.to_string()))?;
            o.set(k, v)?;
        }
        Ok(o)
    }

    /// The options that are set, as (request name, value) pairs, but the
    /// output directory and `force_dir`.
    fn values(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if let Some(e) = self.event {
            pairs.push(("event", e.name().to_string()));
        }
        if let Some(p) = self.period {
            pairs.push(("period", p.to_string()));
        }
        if let Some(f) = self.freq {
            pairs.push(("freq", f.to_string()));
        }
        if let Some(n) = self.lbr {
            pairs.push(("lbr", n.to_string()));
        }
        if let Some(m) = self.lookahead {
            pairs.push(("lookahead", m.name().to_string()));
        }
        if let Some(n) = self.callstack {
            pairs.push(("callstack", n.to_string()));
        }
        if let Some(u) = self.unwind {
            pairs.push(("unwind", u.name().to_string()));
        }
        if let Some(v) = self.values {
            pairs.push(("values", u8::from(v).to_string()));
        }
        if let Some(v) = self.always_check {
            pairs.push(("always_check", u8::from(v).to_string()));
        }
        pairs
    }

    /// The `key=value` words [`parse_words`](Self::parse_words) reads back.
    /// An output path with whitespace, or one that is not UTF-8, cannot be
    /// carried and is refused.
    pub fn to_words(&self) -> Result<String, OptionError> {
        let mut words: Vec<String> = self
            .values()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if let Some(dir) = &self.output {
            words.push(format!("out={}", sendable(dir)?));
        }
        if self.force_dir {
            words.push("force_dir=1".to_string());
        }
        Ok(words.join(" "))
    }

    /// Reads the BREAKDANCE_* variables through `get`.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<SessionOptions, OptionError> {
        let mut o = SessionOptions::default();
        for (key, var) in OPTION_VARIABLES {
            if let Some(v) = get(var).filter(|v| !v.is_empty()) {
                o.set(key, &v)?;
            }
        }
        Ok(o)
    }

    /// The variables that carry these options to a library loaded at
    /// program start ([`from_env`](Self::from_env) reads them back).
    pub fn to_env(&self) -> Vec<(&'static str, OsString)> {
        let mut vars: Vec<(&'static str, OsString)> = self
            .values()
            .into_iter()
            .map(|(k, v)| (variable_of(k), v.into()))
            .collect();
        if let Some(dir) = &self.output {
            vars.push((variable_of("out"), dir.clone().into_os_string()));
        }
        if self.force_dir {
            vars.push((variable_of("force_dir"), "1".into()));
        }
        vars
    }
}

/// Where a `stop` writes: `out=DIR` sends a session's outputs (or the
/// data an earlier stop could not write) somewhere else than the session's
/// directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopOptions {
    pub output: Option<PathBuf>,
    pub force_dir: bool,
}

impl StopOptions {
    /// Parses the `key=value` words of a `stop` request.
    pub fn parse_words(words: &str) -> Result<StopOptions, OptionError> {
        let o = SessionOptions::parse_words(words)?;
        let stray = SessionOptions {
            output: None,
            force_dir: false,
            ..o.clone()
        };
        if stray != SessionOptions::default() {
            return Err(OptionError::StopOption(words.trim().to_string()));
        }
        Ok(StopOptions {
            output: o.output,
            force_dir: o.force_dir,
        })
    }

    /// The words [`parse_words`](Self::parse_words) reads back.
    pub fn to_words(&self) -> Result<String, OptionError> {
        SessionOptions {
            output: self.output.clone(),
            force_dir: self.force_dir,
            ..SessionOptions::default()
        }
        .to_words()
    }
}

fn variable_of(key: &str) -> &'static str {
    OPTION_VARIABLES
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| *v)
        .unwrap_or_default()
}

fn sendable(dir: &Path) -> Result<&str, OptionError> {
    match dir.to_str() {
        Some(text) if !text.is_empty() && !text.chars().any(char::is_whitespace) => Ok(text),
        _ => Err(OptionError::OutputNotSendable(dir.display().to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_validate() {
        let o = SessionOptions::parse_words(
            "event=task-clock period=200000 lbr=64 out=/tmp/x values=1",
        )
        .unwrap();
        assert_eq!(o.values, Some(true));
        assert_eq!(o.event, Some(Event::TaskClock));
        assert_eq!((o.period, o.lbr), (Some(200_000), Some(64)));
        assert_eq!(SessionOptions::parse_words(&o.to_words().unwrap()), Ok(o));
        for (words, error) in [
            ("period=0", OptionError::NotPositive("period", "0".into())),
            ("lbr=4097", OptionError::LbrRange("4097".into())),
            ("lbr=0", OptionError::LbrRange("0".into())),
            ("event=bogus", OptionError::UnknownEvent("bogus".into())),
            ("period=5 freq=5", OptionError::PeriodAndFreq),
            ("speed=5", OptionError::UnknownOption("speed".into())),
            ("lookahead=maybe", OptionError::Lookahead("maybe".into())),
            (
                "lookahead=dataflow",
                OptionError::RetiredLookahead("dataflow".into(), Lookahead::RETIRED[0].1),
            ),
            ("force_dir=yes", OptionError::ForceDir("yes".into())),
            ("values=yes", OptionError::Values("yes".into())),
        ] {
            assert_eq!(SessionOptions::parse_words(words), Err(error), "{words}");
        }
        assert_eq!(
            SessionOptions::parse_words("event=cpu-cycles")
                .unwrap()
                .event,
            Some(Event::Cycles)
        );
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
        assert_eq!(StopOptions::parse_words(&o.to_words().unwrap()), Ok(o));
        assert_eq!(
            StopOptions::parse_words("lbr=4"),
            Err(OptionError::StopOption("lbr=4".into()))
        );
        assert!(matches!(
            StopOptions::parse_words("now"),
            Err(OptionError::UnknownOption(_))
        ));
    }

    #[test]
    fn unsendable_output_is_refused() {
        let o = SessionOptions {
            output: Some("/a b".into()),
            ..Default::default()
        };
        assert!(matches!(
            o.to_words(),
            Err(OptionError::OutputNotSendable(_))
        ));
        assert_eq!(SessionOptions::default().to_words().unwrap(), "");
    }

    #[test]
    fn environment_round_trips() {
        let o = SessionOptions {
            event: Some(Event::CpuClock),
            freq: Some(999),
            lbr: Some(16),
            output: Some("/o".into()),
            lookahead: Some(Lookahead::Verify),
            force_dir: true,
            ..Default::default()
        };
        let vars = o.to_env();
        assert!(vars.iter().all(|(k, _)| ENV_VARIABLES.contains(k)));
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(SessionOptions::from_env(get), Ok(o));
    }
}
