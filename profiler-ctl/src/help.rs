//! The `--help` texts of profiler-ctl and its subcommands.

pub const MAIN_HELP: &str = "\
profiler-ctl: control the breakdance software branch tracer (libbreakdance.so)

Usage:
  profiler-ctl record [OPTIONS] -- CMD [ARGS...]   run CMD with profiling on from start to exit
  profiler-ctl start  (--pid PID | --socket PATH) [OPTIONS]
  profiler-ctl stop   (--pid PID | --socket PATH) [-o DIR [--force-dir]]
  profiler-ctl status (--pid PID | --socket PATH)
  profiler-ctl help [SUBCOMMAND]

A program runs under the tracer when libbreakdance.so is in its LD_PRELOAD;
`record` sets that up. start/stop/status talk to a running program through its
control socket: BREAKDANCE_SOCKET if the program has it, else
breakdance.<PID>.sock in $XDG_RUNTIME_DIR, else in $TMPDIR/breakdance-<UID>
(/tmp/breakdance-<UID>), a directory only that user can enter. They answer
only a socket served by the program asked about (--pid) or by a program of
your own user (--socket).

Outputs (in the output directory, written when a session stops):
  perf.script      branch traces in `perf script -F ip,brstack` form, for
                   llvm-profgen --perfscript
  NAME.afdo.txt    per module, for create_llvm_prof --profiler=text
  summary.json     counters of the session

Run `profiler-ctl help SUBCOMMAND` or `profiler-ctl SUBCOMMAND --help` for the
options of each subcommand.
";

pub const RECORD_HELP: &str = "\
profiler-ctl record: run a command with branch tracing on from start to exit

Usage: profiler-ctl record [OPTIONS] [--] CMD [ARGS...]

CMD runs with LD_PRELOAD=libbreakdance.so (added after any LD_PRELOAD already
set) and BREAKDANCE_AUTOSTART=1. Its stdin, stdout and stderr are its own.
SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH and SIGCONT are
passed on to it; before a terminating one (INT, TERM, HUP, QUIT) the profile is
asked to be written. The exit status is CMD's (killed by a signal: the same
signal). Child processes that CMD starts are profiled too, each into
OUTPUT/<comm>.<pid>/. Afterwards a summary is printed to stderr.

Options:
  -e, --event EVENT   sampling event: task-clock, cpu-clock, branches,
                      instructions, cycles (default: branches where the CPU
                      has a PMU, task-clock where it does not)
  -c, --period N      sample every N events: ns of CPU time for the clock
                      events (default 10000000, 10 ms), branches etc. for
                      the hardware ones (default 1000003)
  -F, --freq HZ       sample HZ times a second instead (not with -c)
      --lbr N         taken branches per trace, 1..=4096 (default 32)
      --dataflow MODE data-flow look-ahead: on (resolve branches from
                      registers without a breakpoint where it is safe), off
                      (the paper's algorithm), verify (predict and still
                      stop, counting mispredictions) (default on)
  -o, --output DIR    output directory, created mode 0700 if missing
                      (default breakdance-out); one that belongs to another
                      user is refused
      --force-dir     write into an output directory of another user
      --lib PATH      libbreakdance.so to use (default: $BREAKDANCE_LIB, else
                      the one next to the profiler-ctl executable)
  -q, --quiet         print no summary
  -h, --help          print this help

Exit status: CMD's; 2 for a bad option (CMD is not run); 126/127 when CMD
cannot be run.
";

pub const START_HELP: &str = "\
profiler-ctl start: start a tracing session in a running program

Usage: profiler-ctl start (--pid PID | --socket PATH) [OPTIONS]

The program must run with LD_PRELOAD=libbreakdance.so.

Options:
  -p, --pid PID       talk to the control socket of process PID
  -s, --socket PATH   talk to this control socket
  -e, --event EVENT   sampling event: task-clock, cpu-clock, branches,
                      instructions, cycles (default: branches where the CPU
                      has a PMU, task-clock where it does not)
  -c, --period N      sample every N events: ns of CPU time for the clock
                      events (default 10000000, 10 ms), branches etc. for
                      the hardware ones (default 1000003)
  -F, --freq HZ       sample HZ times a second instead (not with -c)
      --lbr N         taken branches per trace, 1..=4096 (default 32)
      --dataflow MODE data-flow look-ahead: on (resolve branches from
                      registers without a breakpoint where it is safe), off
                      (the paper's algorithm), verify (predict and still
                      stop, counting mispredictions) (default on)
  -o, --output DIR    output directory, created mode 0700 if missing
                      (default breakdance-out in the program's working
                      directory); one that belongs to another user is refused
      --force-dir     write into an output directory of another user
  -t, --timeout SECS  how long to wait for the answer (default 30)
  -h, --help          print this help
";

pub const STOP_HELP: &str = "\
profiler-ctl stop: end the tracing session of a running program

Usage: profiler-ctl stop (--pid PID | --socket PATH) [-o DIR [--force-dir]]

The program writes perf.script, NAME.afdo.txt and summary.json into its output
directory; stop prints where they are and a short summary. If writing fails,
the program keeps the data and a later stop tries again, into DIR if given.

Options:
  -p, --pid PID       talk to the control socket of process PID
  -s, --socket PATH   talk to this control socket
  -o, --output DIR    write into DIR instead of the session's directory
      --force-dir     even if DIR belongs to another user
  -t, --timeout SECS  how long to wait for the answer (default 30)
  -h, --help          print this help
";

pub const STATUS_HELP: &str = "\
profiler-ctl status: show the state and live counters of a running program

Usage: profiler-ctl status (--pid PID | --socket PATH)

Options:
  -p, --pid PID       talk to the control socket of process PID
  -s, --socket PATH   talk to this control socket
  -t, --timeout SECS  how long to wait for the answer (default 30)
  -h, --help          print this help
";
