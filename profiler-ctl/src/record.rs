//! `profiler-ctl record`: run a command under the tracer from start to exit.

use std::env;
use std::ffi::{OsStr, OsString};
use std::io::ErrorKind;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};

use breakdance_protocol::{Request, SessionOptions, StopOptions, Summary};

use crate::cli::{self, RecordArgs, UsageError};
use crate::client::{self, Peer};
use crate::signals::{self, Exit, Reaped};
use crate::{check, profgen, summary};

/// The tracer library's file name.
use crate::library::find_library;

/// How long a terminating signal waits for the child to write its profile
/// before it is passed on.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the wait loop checks on the child even without a SIGCHLD.
const POLL: Duration = Duration::from_secs(1);

/// `existing` with `lib` added at the end (glibc accepts ':' between entries).
pub fn ld_preload_with(existing: Option<&OsStr>, lib: &Path) -> OsString {
    match existing {
        Some(list) if !list.is_empty() => {
            let mut joined = list.to_os_string();
            joined.push(":");
            joined.push(lib);
            joined
        }
        _ => lib.as_os_str().to_os_string(),
    }
}

/// The executable `program` names, the way execvp looks for it, made
/// absolute and free of symlinks (so it matches the module paths the
/// library reports).
pub fn resolve_program(program: &OsStr) -> Option<PathBuf> {
    let found = if program.as_encoded_bytes().contains(&b'/') {
        PathBuf::from(program)
    } else {
        which::which(program).ok()?
    };
    std::fs::canonicalize(found).ok()
}

/// All checks of `record` that can refuse it: run before anything starts.
struct Prepared {
    lib: PathBuf,
    output: PathBuf,
}

/// Creating the output directory is the one check that changes something,
/// so it comes last.
fn prepare(args: &RecordArgs) -> Result<Prepared, UsageError> {
    if let Some(event) = args.session.event {
        cli::check_event_available(event, cli::machine_has_pmu())?;
    }
    let lib = find_library(args.lib.as_deref())?;
    let output = args
        .session
        .output
        .clone()
        .unwrap_or_else(|| breakdance_protocol::DEFAULT_OUTPUT.into());
    let output = crate::trust::prepare_output_dir(&output, args.session.force_dir)?;
    Ok(Prepared { lib, output })
}

fn child_command(args: &RecordArgs, prepared: &Prepared) -> Command {
    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    for name in breakdance_protocol::ENV_VARIABLES {
        command.env_remove(name);
    }
    command.env(
        "LD_PRELOAD",
        ld_preload_with(env::var_os("LD_PRELOAD").as_deref(), &prepared.lib),
    );
    command.env("BREAKDANCE_AUTOSTART", "1");
    let options = SessionOptions {
        output: Some(prepared.output.clone()),
        ..args.session.options()
    };
    command.envs(options.to_env());
    command
}

/// Runs `record`. A [`UsageError`] in the returned error means nothing was
/// started (exit 2); a spawn failure carries exit 126 or 127.
pub fn run(args: &RecordArgs) -> Result<Exit> {
    let prepared = prepare(args)?;
    let started_at = SystemTime::now();
    let blocked = signals::block().context("cannot block signals")?;
    let mut command = child_command(args, &prepared);
    // SAFETY: the closure only calls async-signal-safe functions and does
    // not allocate (see `Blocked::restore_in_child`).
    unsafe {
        command.pre_exec(move || blocked.restore_in_child());
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let code = if e.kind() == ErrorKind::NotFound {
                127
            } else {
                126
            };
            eprintln!(
                "profiler-ctl: cannot run '{}': {e}",
                args.command[0].to_string_lossy()
            );
            return Ok(Exit::Code(code));
        }
    };
    let pid = child.id();
    let reaped = supervise(pid, &blocked)?;
    let binary = resolve_program(&args.command[0]);
    let (text, summary) = report(&prepared.output, pid, reaped, binary.as_deref(), started_at);
    if !args.quiet {
        eprint!("{text}");
    }
    if let Some(summary) = summary {
        let mut estimate = None;
        if args.profgen {
            let made = profgen::run(&summary);
            if !args.quiet {
                eprint!("{}", made.render());
            }
            estimate = made
                .written
                .iter()
                .find(|(module, _, _)| Some(module) == binary.as_ref())
                .map(|(_, _, more_samples)| *more_samples);
        }
        if summary.config.values {
            match crate::values::write_text(&summary.output_dir) {
                Ok(loads) if !args.quiet => eprint!(
                    "value profile: {} (the most recorded loads):\n{}",
                    summary
                        .output_dir
                        .join(crate::values::VALUES_TEXT_FILE)
                        .display(),
                    crate::values::render(&loads, Some(5))
                ),
                Ok(_) => {}
                Err(e) => eprintln!("profiler-ctl: no value profile: {e:#}"),
            }
        }
        if let (Some(binary), false) = (&binary, args.quiet) {
            eprint!(
                "{}",
                after_record_checks(binary, &prepared.output, estimate)
            );
        }
    }
    Ok(reaped.exit)
}

/// Passes signals on until the child ends, and returns how it ended.
fn supervise(pid: u32, blocked: &signals::Blocked) -> Result<Reaped> {
    let stop = Request::Stop(StopOptions::default())
        .to_line()
        .expect("stop carries no options");
    loop {
        if let Some(reaped) = signals::try_reap(pid).context("cannot wait for the child")? {
            return Ok(reaped);
        }
        let Some(signal) = blocked.wait(POLL).context("cannot wait for signals")? else {
            continue;
        };
        if signal == libc::SIGCHLD {
            continue;
        }
        if signals::is_terminating(signal) {
            // Written before the signal ends the child; a child that is not
            // (yet) traced has no socket, and the signal goes on regardless.
            let socket = client::default_socket(pid);
            let _ = client::request(&socket, Peer::Pid(pid), &stop, STOP_TIMEOUT);
        }
        if let Err(e) = signals::send(pid, signal) {
            if e.raw_os_error() != Some(libc::ESRCH) {
                eprintln!(
                    "profiler-ctl: cannot pass {} to pid {pid}: {e}",
                    signals::name(signal)
                );
            }
        }
    }
}

/// The text printed after the child ended, and its summary when it wrote
/// one.
fn report(
    output: &Path,
    pid: u32,
    reaped: Reaped,
    binary: Option<&Path>,
    started_at: SystemTime,
) -> (String, Option<Summary>) {
    let exit = reaped.exit;
    let how = match exit {
        Exit::Signal(signal) => format!("was killed by {}", signals::name(signal)),
        Exit::Code(code) => format!("exited with status {code}"),
    };
    let path = output.join("summary.json");
    let loaded = match Summary::load(output) {
        Ok(loaded) => loaded,
        Err(e) => return (format!("profiler-ctl: {e}\n"), None),
    };
    match loaded {
        Some(summary) if summary.pid == pid => {
            let children = summary::child_dirs(output, Some(started_at));
            let cpu = (reaped.user, reaped.system);
            let mut text = summary::render(&summary, binary, &children, Some(cpu));
            if let Exit::Signal(_) = exit {
                text.push_str(&format!(
                    "profiler-ctl: pid {pid} {how} after its profile was written\n"
                ));
            }
            (text, Some(summary))
        }
        Some(summary) => (
            format!(
                "profiler-ctl: {} is from an earlier run (pid {}), not from pid {pid}, which \
                 {how}; it may have died before writing its profile\n",
                path.display(),
                summary.pid,
            ),
            None,
        ),
        None => {
            let why = match exit {
                Exit::Signal(_) => {
                    "a process killed by a signal dies before it can write its profile"
                }
                Exit::Code(_) => {
                    "the library did not write one; its own messages above may say why"
                }
            };
            (
                format!(
                    "profiler-ctl: no profile: {} was not written; pid {pid} {how} ({why})\n",
                    path.display()
                ),
                None,
            )
        }
    }
}

/// `check`'s findings on the traced binary against this recording, as
/// lines after the summary.
fn after_record_checks(binary: &Path, output: &Path, estimate: Option<Option<f64>>) -> String {
    match check::run_knowing(binary, Some(output), estimate) {
        Ok(findings) if findings.is_empty() => String::new(),
        Ok(findings) => check::render(binary, &findings),
        Err(e) => format!("profiler-ctl: cannot check {}: {e:#}\n", binary.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_goes_after_an_existing_preload() {
        let lib = Path::new("/t/libbreakdance.so");
        assert_eq!(
            ld_preload_with(None, lib),
            OsString::from("/t/libbreakdance.so")
        );
        assert_eq!(
            ld_preload_with(Some(OsStr::new("")), lib),
            OsString::from("/t/libbreakdance.so")
        );
        assert_eq!(
            ld_preload_with(Some(OsStr::new("/a.so /b.so")), lib),
            OsString::from("/a.so /b.so:/t/libbreakdance.so")
        );
    }

    #[test]
    fn programs_are_found_like_execvp_finds_them() {
        let sh = resolve_program(OsStr::new("sh")).expect("sh is on PATH");
        assert!(sh.is_absolute() && sh.is_file(), "{}", sh.display());
        assert!(resolve_program(OsStr::new("no-such-program-xyz")).is_none());
        assert_eq!(
            resolve_program(OsStr::new("/bin/../bin/sh")),
            std::fs::canonicalize("/bin/sh").ok()
        );
    }

    #[test]
    fn a_missing_library_says_how_to_build_it() {
        let e = find_library(Some(Path::new("/nonexistent/libbreakdance.so")))
            .unwrap_err()
            .0;
        assert!(
            e.starts_with("--lib: /nonexistent/libbreakdance.so is not a file"),
            "{e}"
        );
        assert!(e.contains("cargo build --release"), "{e}");
    }

    fn reaped(exit: Exit) -> Reaped {
        Reaped {
            exit,
            user: Duration::ZERO,
            system: Duration::ZERO,
        }
    }

    #[test]
    fn a_missing_summary_is_reported_plainly() {
        let dir = std::env::temp_dir().join(format!("profiler-ctl-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (text, _) = report(
            &dir,
            77,
            reaped(Exit::Signal(libc::SIGKILL)),
            None,
            SystemTime::now(),
        );
        assert!(
            text.contains("summary.json was not written; pid 77 was killed by SIGKILL"),
            "{text}"
        );
        let mut written = Summary {
            schema: breakdance_protocol::SCHEMA_VERSION,
            pid: 12,
            ..Default::default()
        };
        std::fs::write(dir.join("summary.json"), written.to_json()).unwrap();
        let (text, _) = report(&dir, 77, reaped(Exit::Code(0)), None, SystemTime::now());
        assert!(
            text.contains("is from an earlier run (pid 12), not from pid 77"),
            "{text}"
        );
        written.pid = 77;
        std::fs::write(dir.join("summary.json"), written.to_json()).unwrap();
        let (text, summary) = report(&dir, 77, reaped(Exit::Code(0)), None, SystemTime::now());
        assert!(text.starts_with("breakdance: profiled"), "{text}");
        assert_eq!(summary, Some(written));
        std::fs::write(dir.join("summary.json"), br#"{"schema": 1}"#).unwrap();
        let (text, _) = report(&dir, 77, reaped(Exit::Code(0)), None, SystemTime::now());
        assert!(
            text.contains("has schema 1, this tool reads schema"),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
