//! Session options: parsed once from the environment (autostart) or from a
//! `start` request, validated before anything is opened.

use std::path::{Path, PathBuf};

use perf_event_open_sys::bindings as pb;

use crate::output::dir::OutputDir;
use crate::trace::threads::SamplingEvent;

pub use breakdance_protocol::{
    Event as EventKind, OptionError, SessionOptions as Options, StopOptions, DEFAULT_OUTPUT,
};

/// The longest trace the buffers are sized for.
pub const MAX_LBR: usize = breakdance_protocol::MAX_LBR as usize;

/// A bad option, named.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error(transparent)]
    Option(#[from] OptionError),
    /// The output directory was refused: the whole message.
    #[error("{0}")]
    Output(String),
}

/// perf_event_attr's type and config for `event`.
fn type_config(event: EventKind) -> (u32, u64) {
    match event {
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
    pub lookahead: breakdance_protocol::Lookahead,
    /// Frames per call stack; 0: none.
    pub callstack: usize,
    pub unwind: breakdance_protocol::Unwind,
    /// Record load values (value profiles).
    pub values: bool,
    /// Validate every segment at a checkpoint, quiet process or not.
    pub always_check: bool,
}

/// Picks the default event (a hardware branch event where a PMU exists,
/// else task-clock), fills in defaults, and checks the output directory.
pub fn resolve(o: &Options, pmu_available: bool) -> Result<Resolved, ConfigError> {
    let event = o.event.unwrap_or(if pmu_available {
        EventKind::Branches
    } else {
        EventKind::TaskClock
    });
    let (type_, config) = type_config(event);
    let default_period = event.default_period();
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
    let lookahead = o.lookahead.unwrap_or_default();
    let callstack = o.callstack.unwrap_or(0) as usize;
    if callstack > 0 && lookahead != breakdance_protocol::Lookahead::Emulate {
        return Err(OptionError::CallstackMode.into());
    }
    let values = o.values.unwrap_or(false);
    if values && lookahead != breakdance_protocol::Lookahead::Emulate {
        return Err(OptionError::ValuesMode.into());
    }
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
        lbr: o.lbr.unwrap_or(lookahead.default_lbr()) as usize,
        output,
        force_dir: o.force_dir,
        lookahead,
        callstack,
        unwind: o.unwind.unwrap_or_default(),
        values,
        always_check: o.always_check.unwrap_or(false),
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
    fn every_event_has_a_perf_type() {
        for event in EventKind::ALL {
            let (type_, _) = type_config(event);
            let software = type_ == pb::PERF_TYPE_SOFTWARE;
            assert_eq!(software, event.is_clock(), "{event}");
        }
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
        assert_eq!(r.period, Some(breakdance_protocol::DEFAULT_CLOCK_PERIOD_NS));
        use breakdance_protocol::Lookahead;
        assert_eq!(r.lookahead, Lookahead::Emulate);
        assert_eq!(r.lbr, breakdance_protocol::DEFAULT_EMULATE_LBR as usize);
        let paper = Options {
            lookahead: Some(Lookahead::Paper),
            ..o.clone()
        };
        assert_eq!(
            resolve(&paper, false).unwrap().lbr,
            breakdance_protocol::DEFAULT_LBR as usize
        );
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
}
