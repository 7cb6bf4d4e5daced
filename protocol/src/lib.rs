//! What the parts of breakdance say to each other.
//!
//! One crate owns every format that crosses a process boundary, so the
//! library that writes them and the tools that read them cannot drift
//! apart:
//! - [`Summary`]: summary.json, written by the library when a session
//!   stops, read by profiler-ctl and bench-harness;
//! - [`Request`], [`StatusReply`]: the control socket's
//!   messages;
//! - [`SessionOptions`] and the constants a session is configured with
//!   (trace length, events, look-ahead modes, default paths), shared by the
//!   library's parser and profiler-ctl's command line;
//! - [`perfscript`]: the perf.script text the library writes for
//!   llvm-profgen, with its one reader (profiler-ctl, bench-harness, the
//!   tests);
//! - [`elf_layout`]: the rule that turns runtime addresses into the ELF
//!   virtual addresses and profile offsets every output names code by;
//! - [`socket_path`]: where a process's control socket lives, for the
//!   library that binds it and profiler-ctl that finds it;
//! - [`user`]: how both name a user in a refusal;
//! - [`values`]: values.csv, the value profile of a session with
//!   `values`, read by profiler-ctl and bench-harness.
//!
//! The crate is on the ground floor: it imports nothing of the tracer.

mod control;
mod counters;
pub mod elf_layout;
mod options;
pub mod perfscript;
pub mod socket_path;
mod summary;
pub mod user;
pub mod values;

pub use control::{Request, RequestError, StatusReply};
pub use counters::{AbortReason, Aborts, CounterKind, Counters, Drops, Host};
pub use options::{
    Event, Lookahead, OptionError, SessionOptions, StopOptions, Unwind, DEFAULT_BRANCH_PERIOD,
    DEFAULT_CALLSTACK, DEFAULT_CLOCK_PERIOD_NS, DEFAULT_EMULATE_LBR, DEFAULT_LBR, DEFAULT_OUTPUT,
    DEFAULT_TIMEOUT_SECS, ENV_VARIABLES, LIBRARY_FILE, MAX_CALLSTACK, MAX_LBR, PERF_SCRIPT_FILE,
    SUMMARY_FILE,
};
pub use summary::{ModuleSummary, SchemaError, SessionConfig, Summary, SCHEMA_VERSION};
