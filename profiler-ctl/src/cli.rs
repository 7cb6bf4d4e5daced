//! The command line, declared with clap's derive. Values and defaults come
//! from the protocol crate, so the help shows what the library does.
//!
//! Parsing is pure. Checks that touch the machine (creating the output
//! directory, looking for a PMU) live in `trust::prepare_output_dir` and
//! [`check_event_available`] so that `record` runs all of them before it
//! starts anything.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use breakdance_protocol::{
    Event, Lookahead, OptionError, SessionOptions, StopOptions, Unwind, DEFAULT_BRANCH_PERIOD,
    DEFAULT_CALLSTACK, DEFAULT_CLOCK_PERIOD_NS, DEFAULT_EMULATE_LBR, DEFAULT_LBR, DEFAULT_OUTPUT,
    DEFAULT_TIMEOUT_SECS, MAX_CALLSTACK, MAX_LBR,
};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{value_parser, Args, Parser, Subcommand, ValueEnum};

pub use crate::usage::UsageError;

const ABOUT: &str = "control the breakdance software branch tracer (libbreakdance.so)";

const LONG_ABOUT: &str = "\
control the breakdance software branch tracer (libbreakdance.so)

A program runs under the tracer when libbreakdance.so is in its LD_PRELOAD;
`record` sets that up. start/stop/status talk to a running program through its
control socket: BREAKDANCE_SOCKET if the program has it, else
breakdance.<PID>.sock in $XDG_RUNTIME_DIR, else in $TMPDIR/breakdance-<UID>
(/tmp/breakdance-<UID>), a directory only that user can enter. They answer
only a socket served by the program asked about (--pid) or by a program of
your own user (--socket). check and report read a recording afterwards.";

const OUTPUTS: &str = "\
Outputs (in the output directory, written when a session stops):
  perf.script      branch traces in `perf script -F ip,brstack` form, for
                   llvm-profgen --perfscript
  NAME.afdo.txt    per module, for create_llvm_prof --profiler=text
  NAME.bolt.fdata  per module, for llvm-bolt -pa
  NAME.prof        per module with debug info, with --profgen: the
                   llvm-profgen profile for clang -fprofile-sample-use
  values.csv       with --values: per load instruction, the values it read
  values.txt       with --values, from record: values.csv by function and
                   source line, most recorded loads first
  summary.json     counters of the session";

#[derive(Debug, Parser)]
#[command(
    name = "profiler-ctl",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_long_help = OUTPUTS,
    propagate_version = true,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command with branch tracing on from start to exit
    ///
    /// CMD runs with LD_PRELOAD=libbreakdance.so (added after any LD_PRELOAD
    /// already set) and BREAKDANCE_AUTOSTART=1. Its stdin, stdout and stderr
    /// are its own. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2,
    /// SIGWINCH and SIGCONT are passed on to it; before a terminating one
    /// (INT, TERM, HUP, QUIT) the profile is asked to be written. The exit
    /// status is CMD's (killed by a signal: the same signal); 2 for a bad
    /// option (CMD is not run); 126/127 when CMD cannot be run. Child
    /// processes that CMD starts are profiled too, each into
    /// OUTPUT/<comm>.<pid>/. Afterwards a summary and the findings of
    /// `check` on CMD are printed to stderr.
    Record(RecordArgs),
    /// Start a tracing session in a running program
    ///
    /// The program must run with LD_PRELOAD=libbreakdance.so.
    Start(StartArgs),
    /// End the tracing session of a running program
    ///
    /// The program writes its outputs into its output directory; stop prints
    /// where they are and a short summary. If writing fails, the program
    /// keeps the data and a later stop tries again.
    Stop(StopArgs),
    /// Show the state and live counters of a running program
    Status(TargetArgs),
    /// Say why a binary's profile would be empty or weak, and how to fix it
    ///
    /// Checks BINARY for what AutoFDO needs (debug info, discriminators,
    /// DWARF 4 for create_llvm_prof) and, given the output directory DIR of
    /// a recording, that DIR was recorded from this very build and holds
    /// enough samples. One line per finding: the cause, then the flag or
    /// command that fixes it. Exit status 1 when there is a finding.
    Check(CheckArgs),
    /// Show where the time and the taken branches of a recording went
    ///
    /// Like `perf report` for branch stacks: the hottest functions by
    /// instructions covered and by taken branches, the hottest taken edges,
    /// and per module what was recorded and what was lost, symbolised from
    /// the modules' symbol tables and DWARF.
    Report(ReportArgs),
    /// Print a shell completion script
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Session settings shared by `start` and `record`; unset ones are left
/// to the library's defaults.
#[derive(Debug, Clone, Default, Args)]
pub struct SessionArgs {
    #[arg(
        short,
        long,
        value_enum,
        value_name = "EVENT",
        help = "sampling event [default: branches where the CPU has a PMU, task-clock where it does not]"
    )]
    pub event: Option<Event>,
    #[arg(
        short = 'c',
        long,
        value_name = "N",
        value_parser = value_parser!(u64).range(1..),
        conflicts_with = "freq",
        help = format!(
            "sample every N events: ns of CPU time for the clock events \
             [default: {DEFAULT_CLOCK_PERIOD_NS}], branches etc. for the hardware \
             ones [default: {DEFAULT_BRANCH_PERIOD}]"
        )
    )]
    pub period: Option<u64>,
    #[arg(
        short = 'F',
        long,
        value_name = "HZ",
        value_parser = value_parser!(u64).range(1..),
        help = "sample HZ times a second instead"
    )]
    pub freq: Option<u64>,
    #[arg(
        long,
        value_name = "N",
        value_parser = value_parser!(u32).range(1..=i64::from(MAX_LBR)),
        help = format!(
            "taken branches per trace, 1..={MAX_LBR} [default: {DEFAULT_EMULATE_LBR} in emulate \
             mode, {DEFAULT_LBR} in the others]"
        ),
        long_help = format!(
            "taken branches per trace, 1..={MAX_LBR} [default: {DEFAULT_EMULATE_LBR} in emulate \
             mode, {DEFAULT_LBR} (a hardware LBR's depth) in the others]\n\
             Each trace begins with a sample, which costs far more than an emulated \
             branch; longer traces spread that cost. Measured on five programs \
             (results/tracelen): 128 branches at a 3 ms period give a better profile \
             than 32 at 1 ms for less overhead, and at 10 ms 256 branches cost what 128 \
             do for a better profile (where no signal interrupts the code every few \
             milliseconds). Keep long traces at periods of 3 ms or more, so that a trace \
             ends well before the next sample."
        )
    )]
    pub lbr: Option<u32>,
    #[arg(
        long,
        value_name = "MODE",
        value_parser = lookahead,
        help = format!(
            "how branches are found past the sample: paper (a breakpoint on every \
             branch that needs the CPU state), emulate (whole trace emulated ahead, \
             proved at one checkpoint), verify (paper, checking every emulated \
             prediction) [default: {}]",
            Lookahead::default()
        )
    )]
    pub lookahead: Option<Lookahead>,
    #[arg(
        short = 'g',
        long = "call-graph",
        help = "take the call stack at each trace's newest branch (frame pointers, and the \
                trace's own calls): perf.script gets hybrid samples and --profgen a \
                context-sensitive profile",
        long_help = format!(
            "take the call stack at each trace's newest branch, as perf record -b -g does \
             with a hardware LBR, so that llvm-profgen builds a context-sensitive (CSSPGO) \
             profile.\n\
             The stack is taken from the emulated state where the trace's Nth branch went: \
             the calls the trace itself made are exact; older frames come from the \
             frame-pointer chain, so build with -fno-omit-frame-pointer (a function \
             without one hides its caller). At most --stack-depth frames \
             [default: {DEFAULT_CALLSTACK}]. Emulate mode only."
        )
    )]
    pub call_graph: bool,
    #[arg(
        long,
        value_name = "N",
        requires = "call_graph",
        value_parser = value_parser!(u32).range(1..=i64::from(MAX_CALLSTACK)),
        help = format!("frames per call stack with -g, 1..={MAX_CALLSTACK} [default: {DEFAULT_CALLSTACK}]")
    )]
    pub stack_depth: Option<u32>,
    #[arg(
        long,
        value_name = "HOW",
        requires = "call_graph",
        value_parser = unwind,
        help = "with -g, how the frames the trace did not see called are found: fp (the \
                frame-pointer chain, in the handler) or dwarf (8 KiB of stack copied in the \
                handler, unwound by the worker with the modules' .eh_frame: for code built \
                without frame pointers) [default: fp]"
    )]
    pub unwind: Option<Unwind>,
    #[arg(
        long,
        help = "also record the value every load of the emulated, validated segments read: \
                values.csv (and values.txt from record) gives each load's most frequent values \
                and its invariance",
        long_help = "also record the value every load read, for value profiles (which values \
                     a load sees, and how often its most frequent one): what value \
                     specialisation and memcpy-size specialisation need.\n\
                     A load is an instruction with a memory operand that only reads it, 1 to 8 \
                     bytes (mov, movzx, cmp and add from memory …), not the stack's pops and \
                     returns, string instructions, or instructions that also store. Only loads \
                     of segments validated at their checkpoint (or proven) are kept, so every \
                     value is one the program read. values.csv lists each load's ELF address, \
                     executions and values; `record` also writes values.txt, symbolised by \
                     function and source line. Emulate mode only."
    )]
    pub values: bool,
    #[arg(
        long,
        help = "validate every emulated segment at a checkpoint, even in a quiet process \
                (one thread, no asynchronous signal handler), whose private memory is \
                otherwise trusted to change only by the thread itself",
        long_help = "validate every emulated segment at a checkpoint, even in a quiet process.\n\
                     A process with one application thread and no handler for an \
                     asynchronous signal can change its private memory (heap, stacks, \
                     anonymous and data mappings) only by the sampled thread's own \
                     instructions, so emulate mode takes a segment that reads only such \
                     memory as proven, with no breakpoint stop. Another process writing that \
                     memory (a debugger, process_vm_writev) would make it wrong: this flag \
                     checks every segment's reads at a checkpoint instead, at the cost of \
                     the stops. Emulate mode only (the other modes always stop)."
    )]
    pub always_check: bool,
    #[arg(
        short,
        long,
        value_name = "DIR",
        value_parser = non_empty_path,
        help = format!(
            "output directory, created mode 0700 if missing; one that belongs to another \
             user is refused [default: {DEFAULT_OUTPUT}]"
        )
    )]
    pub output: Option<PathBuf>,
    /// Write into an output directory of another user
    #[arg(long)]
    pub force_dir: bool,
}

impl SessionArgs {
    pub fn options(&self) -> SessionOptions {
        SessionOptions {
            event: self.event,
            period: self.period,
            freq: self.freq,
            lbr: self.lbr,
            output: self.output.clone(),
            lookahead: self.lookahead,
            force_dir: self.force_dir,
            callstack: self
                .call_graph
                .then(|| self.stack_depth.unwrap_or(DEFAULT_CALLSTACK)),
            unwind: self.unwind,
            values: self.values.then_some(true),
            always_check: self.always_check.then_some(true),
        }
    }
}

/// An unwinding method by name.
fn unwind(value: &str) -> Result<Unwind, String> {
    let mut o = SessionOptions::default();
    o.set("unwind", value)
        .map_err(|_| "known: fp, dwarf".to_string())?;
    Ok(o.unwind.unwrap_or_default())
}

/// A look-ahead mode by name; a retired one is refused with the reason.
fn lookahead(value: &str) -> Result<Lookahead, String> {
    Lookahead::parse(value).map_err(|e| match e {
        OptionError::Lookahead(_) => {
            let known: Vec<&str> = Lookahead::ALL.iter().map(|m| m.name()).collect();
            format!("known: {}", known.join(", "))
        }
        other => other.to_string(),
    })
}

fn non_empty_path(value: &str) -> Result<PathBuf, String> {
    if value.is_empty() {
        Err("the output directory is empty".to_string())
    } else {
        Ok(PathBuf::from(value))
    }
}

#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub session: SessionArgs,
    /// libbreakdance.so to use [default: $BREAKDANCE_LIB, else the one next
    /// to the profiler-ctl executable]
    #[arg(long, value_name = "PATH")]
    pub lib: Option<PathBuf>,
    /// Print no summary and no findings
    #[arg(short, long)]
    pub quiet: bool,
    /// Also write NAME.prof with llvm-profgen-19 for every module with
    /// samples and debug info
    #[arg(long)]
    pub profgen: bool,
    /// The command to run, and its arguments
    #[arg(value_name = "CMD", required = true, trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

/// Which running program to talk to.
#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
pub struct Which {
    /// Talk to the control socket of process PID
    #[arg(short, long, value_name = "PID", value_parser = value_parser!(u32).range(1..))]
    pub pid: Option<u32>,
    /// Talk to this control socket
    #[arg(short, long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    #[command(flatten)]
    pub which: Which,
    /// How long to wait for the answer, in seconds
    #[arg(
        short,
        long,
        value_name = "SECS",
        default_value_t = DEFAULT_TIMEOUT_SECS,
        value_parser = value_parser!(u64).range(1..)
    )]
    pub timeout: u64,
}

impl TargetArgs {
    pub fn socket(&self) -> PathBuf {
        match (&self.which.socket, self.which.pid) {
            (Some(path), _) => path.clone(),
            (None, Some(pid)) => crate::client::default_socket(pid),
            (None, None) => unreachable!("clap requires --pid or --socket"),
        }
    }

    /// Who must be serving the socket: the process asked about, or with
    /// `--socket` any process of ours.
    pub fn peer(&self) -> crate::client::Peer {
        self.which
            .pid
            .map_or(crate::client::Peer::SameUser, crate::client::Peer::Pid)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout)
    }
}

#[derive(Debug, Clone, Args)]
pub struct StartArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub session: SessionArgs,
}

#[derive(Debug, Clone, Args)]
pub struct StopArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Write into DIR instead of the session's directory
    #[arg(short, long, value_name = "DIR", value_parser = non_empty_path)]
    pub output: Option<PathBuf>,
    /// Even if DIR belongs to another user
    #[arg(long, requires = "output")]
    pub force_dir: bool,
    /// Also write NAME.prof with llvm-profgen-19 for every module with
    /// samples and debug info
    #[arg(long)]
    pub profgen: bool,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The binary to check (an executable or a shared library)
    #[arg(value_name = "BINARY")]
    pub binary: PathBuf,
    /// The output directory of a recording of BINARY
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// The output directory of a recording
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Output for people or for scripts
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Rows in each table
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = value_parser!(u64).range(1..))]
    pub top: u64,
    /// Also draw the hottest paths as a flame-style SVG into FILE
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

impl StopArgs {
    pub fn options(&self) -> StopOptions {
        StopOptions {
            output: self.output.clone(),
            force_dir: self.force_dir,
        }
    }
}

/// What `parse` decided.
pub enum Parsed {
    Run(Cli),
    /// Help or version text, to print to stdout and exit 0.
    Print(String),
}

/// Parses the whole argument list (program name first). A mistake becomes
/// one line naming the option, as every error of profiler-ctl is.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, UsageError> {
    match Cli::try_parse_from(args) {
        Ok(cli) => {
            let session = match &cli.command {
                Command::Record(r) => Some(&r.session),
                Command::Start(s) => Some(&s.session),
                _ => None,
            };
            if let Some(s) = session {
                let mode = s.lookahead.unwrap_or_default();
                if s.call_graph && mode != Lookahead::Emulate {
                    return Err(UsageError(OptionError::CallstackMode.to_string()));
                }
                if s.values && mode != Lookahead::Emulate {
                    return Err(UsageError(OptionError::ValuesMode.to_string()));
                }
            }
            Ok(Parsed::Run(cli))
        }
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                Ok(Parsed::Print(e.render().to_string()))
            }
            _ => Err(one_line(&e)),
        },
    }
}

/// clap's message without its decorations, plus the accepted values when
/// clap lists them on a line of their own.
fn one_line(e: &clap::Error) -> UsageError {
    let rendered = e.render().to_string();
    let mut lines = rendered.lines();
    let first = lines.next().unwrap_or("bad command line");
    let mut line = first.strip_prefix("error: ").unwrap_or(first).to_string();
    if line.ends_with(':') {
        // A list follows on lines of its own, up to a blank line.
        let items: Vec<&str> = lines
            .take_while(|l| !l.trim().is_empty())
            .map(str::trim)
            .collect();
        line = format!("{line} {}", items.join(", "));
    }
    if let Some(ContextValue::Strings(valid)) = e.get(ContextKind::ValidValue) {
        line.push_str(&format!(" (known: {})", valid.join(", ")));
    }
    UsageError(line)
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
pub fn check_event_available(event: Event, has_pmu: bool) -> Result<(), UsageError> {
    if event.is_hardware() && !has_pmu {
        return Err(UsageError(format!(
            "--event: '{event}' is a hardware event and this machine has no PMU \
             (/sys/bus/event_source/devices/cpu is missing); use -e task-clock"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(list: &[&str]) -> Result<Cli, String> {
        let args = std::iter::once("profiler-ctl")
            .chain(list.iter().copied())
            .map(OsString::from);
        match parse(args) {
            Ok(Parsed::Run(cli)) => Ok(cli),
            Ok(Parsed::Print(text)) => Err(format!("printed: {text}")),
            Err(e) => Err(e.0),
        }
    }

    fn record(list: &[&str]) -> RecordArgs {
        let mut full = vec!["record"];
        full.extend_from_slice(list);
        match parsed(&full).unwrap().command {
            Command::Record(r) => r,
            other => panic!("expected record, got {other:?}"),
        }
    }

    fn error(list: &[&str]) -> String {
        parsed(list).expect_err("should be refused")
    }

    fn os(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
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
            "--profgen",
            "--",
            "cmd",
            "-x",
        ]);
        let o = r.session.options();
        assert_eq!(o.event, Some(Event::CpuClock));
        assert_eq!((o.period, o.lbr), (Some(100000), Some(64)));
        assert_eq!(o.output, Some(PathBuf::from("out")));
        assert_eq!(r.lib, Some(PathBuf::from("/l.so")));
        assert!(r.quiet && r.profgen);
        assert_eq!(r.command, os(&["cmd", "-x"]));
    }

    #[test]
    fn record_command_may_follow_without_double_dash() {
        let r = record(&["-F", "999", "ls", "-l", "--", "x"]);
        assert_eq!(r.session.freq, Some(999));
        assert_eq!(r.command, os(&["ls", "-l", "--", "x"]));
    }

    #[test]
    fn defaults_are_left_to_the_library() {
        let r = record(&["--", "true"]);
        assert_eq!(r.session.options(), SessionOptions::default());
        assert!(!r.quiet && !r.profgen);
    }

    #[test]
    fn bad_values_are_refused_naming_the_option() {
        for (args, expected) in [
            (&["-c", "0"][..], "invalid value '0' for '--period <N>': 0 is not in 1.."),
            (&["--freq=0"], "invalid value '0' for '--freq <HZ>'"),
            (&["-c", "ten"], "invalid value 'ten' for '--period <N>'"),
            (&["--lbr", "4097"], "invalid value '4097' for '--lbr <N>': 4097 is not in 1..=4096"),
            (&["--lbr", "0"], "invalid value '0' for '--lbr <N>'"),
            (&["-c", "10", "-F", "100"], "the argument '--period <N>' cannot be used with '--freq <HZ>'"),
            (
                &["-e", "cache-misses"],
                "invalid value 'cache-misses' for '--event <EVENT>' (known: task-clock, cpu-clock, branches, instructions, cycles)",
            ),
            (
                &["--lookahead", "maybe"],
                "invalid value 'maybe' for '--lookahead <MODE>': known: paper, emulate, verify",
            ),
            (
                &["--lookahead", "dataflow"],
                "invalid value 'dataflow' for '--lookahead <MODE>': lookahead 'dataflow' was retired: emulate needs fewer stops and less time on every workload measured; use emulate (the default), paper or verify",
            ),
            (&["-o", ""], "invalid value '' for '--output <DIR>': the output directory is empty"),
            (&["--quiet=yes"], "unexpected value 'yes' for '--quiet'"),
        ] {
            let mut full = vec!["record"];
            full.extend_from_slice(args);
            full.push("true");
            let e = error(&full);
            assert!(e.starts_with(expected), "{args:?}: {e}");
        }
        assert!(error(&["record", "-q"]).contains("<CMD>"));
        assert!(error(&["frobnicate"]).starts_with("unrecognized subcommand 'frobnicate'"));
    }

    #[test]
    fn event_aliases_and_modes_parse() {
        let r = record(&["-e", "cpu-cycles", "--lookahead", "verify", "true"]);
        assert_eq!(r.session.event, Some(Event::Cycles));
        assert_eq!(r.session.lookahead, Some(Lookahead::Verify));
    }

    #[test]
    fn hardware_events_need_a_pmu() {
        assert!(check_event_available(Event::TaskClock, false).is_ok());
        assert!(check_event_available(Event::Branches, true).is_ok());
        let e = check_event_available(Event::Branches, false).unwrap_err().0;
        assert!(
            e.starts_with("--event: 'branches' is a hardware event"),
            "{e}"
        );
    }

    #[test]
    fn control_commands_need_one_target() {
        assert!(error(&["stop"]).contains("--pid <PID>|--socket <PATH>"));
        assert!(error(&["status", "--pid", "x"]).starts_with("invalid value 'x' for '--pid <PID>'"));
        assert!(error(&["stop", "--pid", "1", "--socket", "/s"]).contains("cannot be used with"));
        assert!(error(&["stop", "--pid", "1", "-c", "5"]).starts_with("unexpected argument '-c'"));
        let Command::Status(t) = parsed(&["status", "-p", "42"]).unwrap().command else {
            panic!("expected status")
        };
        assert_eq!(t.socket(), crate::client::default_socket(42));
        assert_eq!(t.peer(), crate::client::Peer::Pid(42));
        assert_eq!(t.timeout(), Duration::from_secs(DEFAULT_TIMEOUT_SECS));
    }

    #[test]
    fn start_builds_the_request() {
        let cli = parsed(&[
            "start",
            "--socket",
            "/s",
            "-e",
            "task-clock",
            "-F",
            "4000",
            "--lbr",
            "16",
            "--lookahead=verify",
            "-o",
            "/d",
        ])
        .unwrap();
        let Command::Start(start) = cli.command else {
            panic!("expected start")
        };
        assert_eq!(start.target.socket(), PathBuf::from("/s"));
        let request = breakdance_protocol::Request::Start(start.session.options());
        assert_eq!(
            request.to_line().unwrap(),
            "start event=task-clock freq=4000 lbr=16 lookahead=verify out=/d"
        );
    }

    #[test]
    fn stop_may_write_elsewhere() {
        let Command::Stop(stop) = parsed(&["stop", "-s", "/s", "-o", "/d", "--force-dir"])
            .unwrap()
            .command
        else {
            panic!("expected stop")
        };
        assert_eq!(stop.target.peer(), crate::client::Peer::SameUser);
        let request = breakdance_protocol::Request::Stop(stop.options());
        assert_eq!(request.to_line().unwrap(), "stop out=/d force_dir=1");
        assert!(error(&["stop", "-s", "/s", "--force-dir=yes"])
            .starts_with("unexpected value 'yes' for '--force-dir'"));
        assert!(record(&["--force-dir", "true"]).session.force_dir);
    }

    #[test]
    fn help_shows_the_protocol_defaults() {
        let help = |args: &[&str]| match parse(
            std::iter::once("profiler-ctl")
                .chain(args.iter().copied())
                .map(OsString::from),
        ) {
            Ok(Parsed::Print(text)) => text,
            _ => panic!("{args:?} should print help"),
        };
        let record = help(&["record", "--help"]);
        for expected in [
            format!("[default: {DEFAULT_EMULATE_LBR} in emulate mode, {DEFAULT_LBR} (a hardware LBR's depth)"),
            format!("[default: {DEFAULT_OUTPUT}]"),
            format!("[default: {DEFAULT_CLOCK_PERIOD_NS}]"),
            "task-clock where it does not".to_string(),
            "--profgen".to_string(),
        ] {
            assert!(record.contains(&expected), "{expected}: {record}");
        }
        assert!(help(&["stop", "-h"]).contains(&format!("[default: {DEFAULT_TIMEOUT_SECS}]")));
        let main = help(&["--help"]);
        for sub in [
            "record",
            "start",
            "stop",
            "status",
            "check",
            "report",
            "completions",
        ] {
            assert!(main.contains(sub), "{sub}: {main}");
        }
        assert!(help(&[]).contains("Usage: profiler-ctl"));
        assert!(help(&["--version"]).starts_with("profiler-ctl "));
    }
}
