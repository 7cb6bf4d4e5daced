//! profiler-ctl: runs programs under libbreakdance and controls running
//! ones; checks binaries and reports on recordings.

mod check;
mod cli;
mod client;
mod elf;
mod library;
mod profgen;
mod record;
mod report;
mod signals;
mod summary;
mod trust;
mod usage;
mod values;

use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use breakdance_protocol::{Request, StatusReply, Summary};
use clap::CommandFactory;

use cli::{Cli, Command, Parsed, TargetArgs, UsageError};
use client::Answer;
use signals::Exit;

fn main() -> ExitCode {
    let outcome = cli::parse(std::env::args_os())
        .map_err(anyhow::Error::from)
        .and_then(|parsed| match parsed {
            Parsed::Print(text) => {
                print!("{text}");
                Ok(Exit::Code(0))
            }
            Parsed::Run(cli) => run(cli),
        });
    match outcome {
        Ok(Exit::Code(code)) => ExitCode::from(code.clamp(0, 255) as u8),
        Ok(Exit::Signal(signal)) => signals::die_by(signal),
        Err(e) => {
            eprintln!("profiler-ctl: {e:#}");
            let usage = e.downcast_ref::<UsageError>().is_some();
            ExitCode::from(if usage { 2 } else { 1 })
        }
    }
}

fn run(cli: Cli) -> Result<Exit> {
    match cli.command {
        Command::Record(args) => return record::run(&args),
        Command::Start(args) => {
            let mut options = args.session.options();
            if let Some(event) = options.event {
                cli::check_event_available(event, cli::machine_has_pmu())?;
            }
            if let Some(dir) = &options.output {
                // The program's working directory is not ours: send a full path.
                options.output = Some(trust::prepare_output_dir(dir, options.force_dir)?);
            }
            let line = Request::Start(options)
                .to_line()
                .map_err(|e| UsageError(format!("--output: {e}")))?;
            let reply: StatusReply = control(&args.target, &line)?;
            println!("profiling started ({})", args.target.socket().display());
            print!("{}", summary::render_status(&reply));
        }
        Command::Stop(args) => {
            let socket = args.target.socket();
            let mut options = args.options();
            if let Some(dir) = &options.output {
                options.output = Some(trust::prepare_output_dir(dir, options.force_dir)?);
            }
            let line = Request::Stop(options)
                .to_line()
                .map_err(|e| UsageError(format!("--output: {e}")))?;
            let payload = request(&args.target, &line)?;
            // The reply is summary.json's text: its schema is checked the same way.
            let stopped = Summary::from_json(&payload, &socket)?;
            let children = summary::child_dirs(&stopped.output_dir, None);
            print!("{}", summary::render(&stopped, None, &children, None));
            if args.profgen {
                print!("{}", profgen::run(&stopped).render());
            }
        }
        Command::Status(target) => {
            let reply: StatusReply = control(&target, &Request::Status.to_line()?)?;
            println!("{}", target.socket().display());
            print!("{}", summary::render_status(&reply));
        }
        Command::Check(args) => {
            let findings = check::run(&args.binary, args.dir.as_deref())?;
            print!("{}", check::render(&args.binary, &findings));
            return Ok(Exit::Code(if findings.is_empty() { 0 } else { 1 }));
        }
        Command::Report(args) => report::run(&args)?,
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "profiler-ctl",
                &mut std::io::stdout(),
            );
        }
    }
    Ok(Exit::Code(0))
}

/// Sends one request and returns the payload of an `ok` answer; an
/// `error` answer becomes the error message itself.
fn request(target: &TargetArgs, line: &str) -> Result<String> {
    match client::request(&target.socket(), target.peer(), line, target.timeout())? {
        Answer::Error(message) => bail!("{message}"),
        Answer::Ok(payload) => Ok(payload),
    }
}

/// Sends one request and reads its typed answer.
fn control<T: serde::de::DeserializeOwned>(target: &TargetArgs, line: &str) -> Result<T> {
    let payload = request(target, line)?;
    serde_json::from_str(&payload).with_context(|| {
        format!(
            "the answer from {} is not what this profiler-ctl expects (is the library \
             from the same build?)",
            target.socket().display()
        )
    })
}
