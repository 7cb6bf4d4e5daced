//! Command-line parsing and option validation.
//!
//! Parsing is pure: it turns the argument list into a [`Command`] or a
//! [`UsageError`]. Checks that touch the machine (creating the output
//! directory, looking for a PMU) live in `trust::prepare_output_dir` and
//! [`check_event_available`] so that `record` can run all of them before it
//! starts anything.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::help::{MAIN_HELP, RECORD_HELP, START_HELP, STATUS_HELP, STOP_HELP};

/// Largest trace length the library accepts.
pub const MAX_LBR: u32 = 4096;
/// Output directory when `-o` is not given (the library's default too).
pub const DEFAULT_OUTPUT: &str = "breakdance-out";
/// Sampling events the library accepts (`BREAKDANCE_EVENT`).
pub const EVENTS: [&str; 5] = [
    "task-clock",
    "cpu-clock",
    "branches",
    "instructions",
    "cycles",
];
/// Modes of the library's data-flow look-ahead (`BREAKDANCE_DATAFLOW`).
pub const DATAFLOW_MODES: [&str; 4] = ["on", "off", "verify", "emulate"];
/// How long start/stop/status wait for the answer by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A mistake in the command line: printed as one line, exit status 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn usage<T>(message: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(message.into()))
}

/// How often the sampling event fires: every N events, or N times a second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    Period(u64),
    Freq(u64),
}

/// Session settings shared by `start` and `record`; `None` leaves the
/// library's default in force.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionOptions {
    pub event: Option<String>,
    pub rate: Option<Rate>,
    pub lbr: Option<u32>,
    pub output: Option<PathBuf>,
    pub dataflow: Option<&'static str>,
    /// Write into an output directory that belongs to another user.
    pub force_dir: bool,
}

/// Which control socket to talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub socket: PathBuf,
    /// With `--pid`: the process that must be serving `socket`.
    pub pid: Option<u32>,
    pub timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordArgs {
    pub session: SessionOptions,
    pub lib: Option<PathBuf>,
    pub quiet: bool,
    pub command: Vec<OsString>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Print this text to stdout and exit 0.
    Help(&'static str),
    Version,
    Start(Target, SessionOptions),
    /// Only `output` and `force_dir` are set: where to write instead.
    Stop(Target, SessionOptions),
    Status(Target),
    Record(RecordArgs),
}

/// Parses the arguments after the program name.
pub fn parse(args: &[OsString]) -> Result<Command, UsageError> {
    let Some(first) = args.first() else {
        return Ok(Command::Help(MAIN_HELP));
    };
    let rest = &args[1..];
    match first.to_str() {
        Some("-h" | "--help") => Ok(Command::Help(MAIN_HELP)),
        Some("help") => match rest.first().and_then(|s| s.to_str()) {
            None => Ok(Command::Help(MAIN_HELP)),
            Some(name) => subcommand_help(name)
                .map(Command::Help)
                .ok_or_else(|| UsageError(format!("help: unknown subcommand '{name}'"))),
        },
        Some("-V" | "--version") => Ok(Command::Version),
        Some("record") => parse_record(rest),
        Some("start") => parse_control("start", rest),
        Some("stop") => parse_control("stop", rest),
        Some("status") => parse_control("status", rest),
        _ => usage(format!(
            "unknown subcommand '{}' (expected record, start, stop or status; see --help)",
            first.to_string_lossy()
        )),
    }
}

fn subcommand_help(name: &str) -> Option<&'static str> {
    match name {
        "record" => Some(RECORD_HELP),
        "start" => Some(START_HELP),
        "stop" => Some(STOP_HELP),
        "status" => Some(STATUS_HELP),
        _ => None,
    }
}

/// Walks options of the forms `-x V`, `-xV`, `--long V` and `--long=V`.
struct Options<'a> {
    args: &'a [OsString],
    next: usize,
}

/// One option as written, with its inline value if it had one.
struct Flag<'a> {
    name: &'a str,
    inline: Option<&'a str>,
}

impl<'a> Options<'a> {
    fn new(args: &'a [OsString]) -> Self {
        Options { args, next: 0 }
    }

    /// The next argument if it looks like an option, else `None` (leaving it).
    fn flag(&mut self) -> Result<Option<Flag<'a>>, UsageError> {
        let Some(arg) = self.args.get(self.next) else {
            return Ok(None);
        };
        let text = match arg.to_str() {
            Some(t) if t.starts_with('-') && t != "-" => t,
            _ => return Ok(None),
        };
        self.next += 1;
        if let Some(long) = text.strip_prefix("--") {
            if long.is_empty() {
                return Ok(Some(Flag {
                    name: "--",
                    inline: None,
                }));
            }
            return Ok(Some(match long.find('=') {
                Some(eq) => Flag {
                    name: &text[..eq + 2],
                    inline: Some(&long[eq + 1..]),
                },
                None => Flag {
                    name: text,
                    inline: None,
                },
            }));
        }
        // A short flag: `-c100` carries its value inline.
        let split = text.char_indices().nth(2).map_or(text.len(), |(i, _)| i);
        let (name, tail) = text.split_at(split);
        Ok(Some(Flag {
            name,
            inline: (!tail.is_empty()).then_some(tail),
        }))
    }

    fn value(&mut self, flag: &Flag<'a>) -> Result<&'a str, UsageError> {
        if let Some(v) = flag.inline {
            return Ok(v);
        }
        let Some(v) = self.args.get(self.next) else {
            return usage(format!("{} needs a value", flag.name));
        };
        self.next += 1;
        v.to_str()
            .ok_or_else(|| UsageError(format!("{}: value is not valid UTF-8", flag.name)))
    }

    fn os_value(&mut self, flag: &Flag<'a>) -> Result<OsString, UsageError> {
        if let Some(v) = flag.inline {
            return Ok(v.into());
        }
        let Some(v) = self.args.get(self.next) else {
            return usage(format!("{} needs a value", flag.name));
        };
        self.next += 1;
        Ok(v.clone())
    }

    fn no_value(flag: &Flag<'a>) -> Result<(), UsageError> {
        match flag.inline {
            Some(_) => usage(format!("{} takes no value", flag.name)),
            None => Ok(()),
        }
    }

    fn remaining(&self) -> &'a [OsString] {
        &self.args[self.next..]
    }
}

/// Applies a session option; `Ok(false)` when `flag` is not one.
fn session_flag<'a>(
    opts: &mut Options<'a>,
    flag: &Flag<'a>,
    session: &mut SessionOptions,
) -> Result<bool, UsageError> {
    match flag.name {
        "-e" | "--event" => session.event = Some(parse_event(flag.name, opts.value(flag)?)?),
        "-c" | "--period" => {
            let n = parse_positive(flag.name, opts.value(flag)?)?;
            set_rate(session, Rate::Period(n), flag.name)?;
        }
        "-F" | "--freq" => {
            let n = parse_positive(flag.name, opts.value(flag)?)?;
            set_rate(session, Rate::Freq(n), flag.name)?;
        }
        "--lbr" => session.lbr = Some(parse_lbr(flag.name, opts.value(flag)?)?),
        "--dataflow" => session.dataflow = Some(parse_dataflow(flag.name, opts.value(flag)?)?),
        "-o" | "--output" => {
            let dir = opts.os_value(flag)?;
            if dir.is_empty() {
                return usage(format!("{}: the output directory is empty", flag.name));
            }
            session.output = Some(PathBuf::from(dir));
        }
        "--force-dir" => {
            Options::no_value(flag)?;
            session.force_dir = true;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

fn set_rate(session: &mut SessionOptions, rate: Rate, name: &str) -> Result<(), UsageError> {
    match (session.rate, rate) {
        (Some(Rate::Period(_)), Rate::Freq(_)) | (Some(Rate::Freq(_)), Rate::Period(_)) => usage(
            format!("{name}: give either -c/--period or -F/--freq, not both"),
        ),
        _ => {
            session.rate = Some(rate);
            Ok(())
        }
    }
}

/// Checks an event name against the list the library accepts.
pub fn parse_event(option: &str, value: &str) -> Result<String, UsageError> {
    if EVENTS.contains(&value) {
        Ok(value.to_owned())
    } else {
        usage(format!(
            "{option}: unknown event '{value}' (known: {})",
            EVENTS.join(", ")
        ))
    }
}

/// A data-flow look-ahead mode: on, off or verify.
pub fn parse_dataflow(option: &str, value: &str) -> Result<&'static str, UsageError> {
    DATAFLOW_MODES
        .iter()
        .find(|m| **m == value)
        .copied()
        .ok_or_else(|| UsageError(format!("{option}: '{value}' is not one of on, off, verify")))
}

/// A period or frequency: a whole number above zero.
pub fn parse_positive(option: &str, value: &str) -> Result<u64, UsageError> {
    match value.parse::<u64>() {
        Ok(0) => usage(format!("{option}: must be greater than 0")),
        Ok(n) => Ok(n),
        Err(_) => usage(format!("{option}: '{value}' is not a whole number")),
    }
}

/// The trace length: 1..=[`MAX_LBR`].
pub fn parse_lbr(option: &str, value: &str) -> Result<u32, UsageError> {
    match value.parse::<u64>() {
        Ok(n) if (1..=u64::from(MAX_LBR)).contains(&n) => Ok(n as u32),
        Ok(n) => usage(format!("{option}: {n} is outside 1..={MAX_LBR}")),
        Err(_) => usage(format!("{option}: '{value}' is not a whole number")),
    }
}

fn parse_record(args: &[OsString]) -> Result<Command, UsageError> {
    let mut opts = Options::new(args);
    let mut record = RecordArgs {
        session: SessionOptions::default(),
        lib: None,
        quiet: false,
        command: Vec::new(),
    };
    while let Some(flag) = opts.flag()? {
        if session_flag(&mut opts, &flag, &mut record.session)? {
            continue;
        }
        match flag.name {
            "--" => break,
            "-h" | "--help" => return Ok(Command::Help(RECORD_HELP)),
            "-q" | "--quiet" => {
                Options::no_value(&flag)?;
                record.quiet = true;
            }
            "--lib" => record.lib = Some(PathBuf::from(opts.os_value(&flag)?)),
            other => {
                return usage(format!(
                    "record: unknown option '{other}' (see record --help)"
                ))
            }
        }
    }
    record.command = opts.remaining().to_vec();
    if record.command.is_empty() {
        return usage(
            "record: no command given (usage: profiler-ctl record [OPTIONS] -- CMD [ARGS...])",
        );
    }
    Ok(Command::Record(record))
}

fn parse_control(name: &'static str, args: &[OsString]) -> Result<Command, UsageError> {
    let help = subcommand_help(name).expect("control subcommands have help");
    let mut opts = Options::new(args);
    let mut socket: Option<PathBuf> = None;
    let mut pid_asked = None;
    let mut timeout = DEFAULT_TIMEOUT;
    let mut session = SessionOptions::default();
    while let Some(flag) = opts.flag()? {
        let stop_flag = matches!(flag.name, "-o" | "--output" | "--force-dir");
        if (name == "start" || name == "stop" && stop_flag)
            && session_flag(&mut opts, &flag, &mut session)?
        {
            continue;
        }
        match flag.name {
            "-h" | "--help" => return Ok(Command::Help(help)),
            "-p" | "--pid" => {
                let value = opts.value(&flag)?;
                let pid = value
                    .parse::<u32>()
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(|| {
                        UsageError(format!("{}: '{value}' is not a process id", flag.name))
                    })?;
                if socket.is_some() {
                    return usage(format!(
                        "{}: give either --pid or --socket, once",
                        flag.name
                    ));
                }
                socket = Some(crate::client::default_socket(pid));
                pid_asked = Some(pid);
            }
            "-s" | "--socket" => {
                if socket.is_some() {
                    return usage(format!(
                        "{}: give either --pid or --socket, once",
                        flag.name
                    ));
                }
                socket = Some(PathBuf::from(opts.os_value(&flag)?));
            }
            "-t" | "--timeout" => {
                timeout = Duration::from_secs(parse_positive(flag.name, opts.value(&flag)?)?);
            }
            other => {
                return usage(format!(
                    "{name}: unknown option '{other}' (see {name} --help)"
                ))
            }
        }
    }
    if let Some(extra) = opts.remaining().first() {
        return usage(format!(
            "{name}: unexpected argument '{}'",
            extra.to_string_lossy()
        ));
    }
    let Some(socket) = socket else {
        return usage(format!(
            "{name}: say which program: --pid PID or --socket PATH"
        ));
    };
    let target = Target {
        socket,
        pid: pid_asked,
        timeout,
    };
    Ok(match name {
        "start" => Command::Start(target, session),
        "stop" => Command::Stop(target, session),
        _ => Command::Status(target),
    })
}

/// The `start` request line for the control protocol.
///
/// Values are separated by spaces in the protocol, so an output path with
/// whitespace (or one that is not UTF-8) cannot be sent and is refused.
pub fn start_request(session: &SessionOptions) -> Result<String, UsageError> {
    let mut line = String::from("start");
    if let Some(event) = &session.event {
        line.push_str(&format!(" event={event}"));
    }
    match session.rate {
        Some(Rate::Period(n)) => line.push_str(&format!(" period={n}")),
        Some(Rate::Freq(n)) => line.push_str(&format!(" freq={n}")),
        None => {}
    }
    if let Some(lbr) = session.lbr {
        line.push_str(&format!(" lbr={lbr}"));
    }
    if let Some(mode) = session.dataflow {
        line.push_str(&format!(" dataflow={mode}"));
    }
    push_output(&mut line, session)?;
    Ok(line)
}

/// The `stop` request line: `stop`, with `out=DIR` to write elsewhere.
pub fn stop_request(session: &SessionOptions) -> Result<String, UsageError> {
    let mut line = String::from("stop");
    push_output(&mut line, session)?;
    Ok(line)
}

/// Adds ` out=DIR` and ` force_dir=1` as given.
fn push_output(line: &mut String, session: &SessionOptions) -> Result<(), UsageError> {
    if let Some(dir) = &session.output {
        let text = dir
            .to_str()
            .ok_or_else(|| UsageError(format!("-o: '{}' is not valid UTF-8", dir.display())))?;
        if text.chars().any(char::is_whitespace) {
            return usage(format!(
                "-o: '{text}' contains whitespace, which the control protocol cannot carry"
            ));
        }
        line.push_str(&format!(" out={text}"));
    }
    if session.force_dir {
        line.push_str(" force_dir=1");
    }
    Ok(())
}

/// Whether this machine exposes a CPU PMU to perf (hardware events work).
pub fn machine_has_pmu() -> bool {
    ["cpu", "cpu_core", "cpu_atom"].iter().any(|name| {
        Path::new("/sys/bus/event_source/devices")
            .join(name)
            .exists()
    })
}

/// Refuses hardware events where the CPU has no PMU, naming the option.
pub fn check_event_available(event: &str, has_pmu: bool) -> Result<(), UsageError> {
    let hardware = matches!(event, "branches" | "instructions" | "cycles");
    if hardware && !has_pmu {
        return usage(format!(
            "-e: '{event}' is a hardware event and this machine has no PMU \
             (/sys/bus/event_source/devices/cpu is missing); use -e task-clock"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn record(list: &[&str]) -> Result<RecordArgs, UsageError> {
        let mut full = vec!["record"];
        full.extend_from_slice(list);
        match parse(&args(&full))? {
            Command::Record(r) => Ok(r),
            other => panic!("expected record, got {other:?}"),
        }
    }

    fn error(list: &[&str]) -> String {
        parse(&args(list)).expect_err("should be refused").0
    }

    #[test]
    fn record_takes_every_option_form() {
        let r = record(&[
            "-e",
            "cpu-clock",
            "-c100000",
            "--lbr=64",
            "-o",
            "out",
            "--lib",
            "/l.so",
            "-q",
            "--",
            "cmd",
            "-x",
        ])
        .unwrap();
        assert_eq!(r.session.event.as_deref(), Some("cpu-clock"));
        assert_eq!(r.session.rate, Some(Rate::Period(100000)));
        assert_eq!(r.session.lbr, Some(64));
        assert_eq!(r.session.output, Some(PathBuf::from("out")));
        assert_eq!(r.lib, Some(PathBuf::from("/l.so")));
        assert!(r.quiet);
        assert_eq!(r.command, args(&["cmd", "-x"]));
    }

    #[test]
    fn record_command_may_follow_without_double_dash() {
        let r = record(&["-F", "999", "ls", "-l", "--", "x"]).unwrap();
        assert_eq!(r.session.rate, Some(Rate::Freq(999)));
        assert_eq!(r.command, args(&["ls", "-l", "--", "x"]));
    }

    #[test]
    fn defaults_are_left_to_the_library() {
        let r = record(&["--", "true"]).unwrap();
        assert_eq!(r.session, SessionOptions::default());
        assert!(!r.quiet);
    }

    #[test]
    fn zero_period_and_frequency_are_refused() {
        assert_eq!(
            error(&["record", "-c", "0", "--", "true"]),
            "-c: must be greater than 0"
        );
        assert_eq!(
            error(&["record", "--freq=0", "--", "true"]),
            "--freq: must be greater than 0"
        );
        assert!(error(&["record", "-c", "ten", "--", "true"]).starts_with("-c: 'ten' is not"));
    }

    #[test]
    fn period_and_frequency_together_are_refused() {
        let e = error(&["record", "-c", "10", "-F", "100", "--", "true"]);
        assert!(
            e.starts_with("-F: give either -c/--period or -F/--freq"),
            "{e}"
        );
        let e = error(&["record", "-F", "100", "--period", "10", "--", "true"]);
        assert!(e.starts_with("--period: give either"), "{e}");
    }

    #[test]
    fn trace_length_is_bounded() {
        assert_eq!(
            record(&["--lbr", "1", "true"]).unwrap().session.lbr,
            Some(1)
        );
        assert_eq!(
            record(&["--lbr", "4096", "true"]).unwrap().session.lbr,
            Some(4096)
        );
        assert_eq!(
            error(&["record", "--lbr", "0", "true"]),
            "--lbr: 0 is outside 1..=4096"
        );
        assert_eq!(
            error(&["record", "--lbr", "4097", "true"]),
            "--lbr: 4097 is outside 1..=4096"
        );
        assert_eq!(
            error(&["record", "--lbr", "-3", "true"]),
            "--lbr: '-3' is not a whole number"
        );
    }

    #[test]
    fn unknown_event_is_refused_with_the_known_list() {
        let e = error(&["record", "-e", "cache-misses", "true"]);
        assert_eq!(
            e,
            "-e: unknown event 'cache-misses' (known: task-clock, cpu-clock, branches, instructions, cycles)"
        );
    }

    #[test]
    fn dataflow_modes_are_checked() {
        assert_eq!(
            record(&["--dataflow", "off", "true"])
                .unwrap()
                .session
                .dataflow,
            Some("off")
        );
        assert_eq!(
            error(&["record", "--dataflow", "maybe", "true"]),
            "--dataflow: 'maybe' is not one of on, off, verify"
        );
    }

    #[test]
    fn hardware_events_need_a_pmu() {
        assert!(check_event_available("task-clock", false).is_ok());
        assert!(check_event_available("branches", true).is_ok());
        let e = check_event_available("branches", false).unwrap_err().0;
        assert!(e.starts_with("-e: 'branches' is a hardware event"), "{e}");
    }

    #[test]
    fn missing_values_and_commands_are_named() {
        assert_eq!(error(&["record", "-o"]), "-o needs a value");
        assert!(error(&["record", "-q"]).starts_with("record: no command given"));
        assert_eq!(
            error(&["record", "--quiet=yes", "true"]),
            "--quiet takes no value"
        );
        assert!(
            error(&["record", "--bogus", "true"]).starts_with("record: unknown option '--bogus'")
        );
        assert!(error(&["frobnicate"]).starts_with("unknown subcommand 'frobnicate'"));
    }

    #[test]
    fn control_commands_need_a_target() {
        assert!(error(&["stop"]).starts_with("stop: say which program"));
        assert!(error(&["status", "--pid", "x"]).starts_with("--pid: 'x' is not a process id"));
        assert!(
            error(&["stop", "--pid", "1", "--socket", "/s"]).starts_with("--socket: give either")
        );
        assert!(error(&["stop", "--pid", "1", "-c", "5"]).starts_with("stop: unknown option '-c'"));
        match parse(&args(&["status", "-p", "42"])).unwrap() {
            Command::Status(t) => {
                assert_eq!(t.socket, crate::client::default_socket(42));
                assert_eq!(t.pid, Some(42));
                assert_eq!(t.timeout, DEFAULT_TIMEOUT);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn start_builds_the_protocol_line() {
        let cmd = parse(&args(&[
            "start",
            "--socket",
            "/s",
            "-e",
            "task-clock",
            "-F",
            "4000",
            "--lbr",
            "16",
            "--dataflow=verify",
            "-o",
            "/d",
        ]))
        .unwrap();
        let Command::Start(target, session) = cmd else {
            panic!("expected start")
        };
        assert_eq!(target.socket, PathBuf::from("/s"));
        assert_eq!(target.pid, None);
        assert_eq!(
            start_request(&session).unwrap(),
            "start event=task-clock freq=4000 lbr=16 dataflow=verify out=/d"
        );
        assert_eq!(start_request(&SessionOptions::default()).unwrap(), "start");
        let spaced = SessionOptions {
            output: Some("/a b".into()),
            ..Default::default()
        };
        assert!(start_request(&spaced)
            .unwrap_err()
            .0
            .starts_with("-o: '/a b' contains whitespace"));
    }

    #[test]
    fn stop_may_write_elsewhere() {
        let cmd = parse(&args(&["stop", "-s", "/s", "-o", "/d", "--force-dir"])).unwrap();
        let Command::Stop(_, session) = cmd else {
            panic!("expected stop")
        };
        assert_eq!(stop_request(&session).unwrap(), "stop out=/d force_dir=1");
        assert!(error(&["stop", "-s", "/s", "--force-dir=yes"])
            .starts_with("--force-dir takes no value"));
        let record = record(&["--force-dir", "true"]).unwrap();
        assert!(record.session.force_dir);
    }

    #[test]
    fn help_is_offered_everywhere() {
        assert_eq!(parse(&[]).unwrap(), Command::Help(MAIN_HELP));
        assert_eq!(parse(&args(&["--help"])).unwrap(), Command::Help(MAIN_HELP));
        assert_eq!(
            parse(&args(&["help", "stop"])).unwrap(),
            Command::Help(STOP_HELP)
        );
        assert_eq!(
            parse(&args(&["record", "--help"])).unwrap(),
            Command::Help(RECORD_HELP)
        );
        assert_eq!(
            parse(&args(&["start", "-h"])).unwrap(),
            Command::Help(START_HELP)
        );
        for text in [RECORD_HELP, START_HELP] {
            assert!(text.contains("default 32") && text.contains("task-clock where it does not"));
        }
        assert!(RECORD_HELP.contains("(default breakdance-out)"));
    }
}
