//! profiler-ctl: runs programs under libbreakdance and controls running ones.

mod cli;
mod client;
mod help;
mod record;
mod signals;
mod summary;
mod trust;

use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use cli::{Command, Target, UsageError};
use client::{Answer, Peer};
use signals::Exit;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let outcome = cli::parse(&args)
        .map_err(anyhow::Error::from)
        .and_then(|command| run(&command));
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

fn run(command: &Command) -> Result<Exit> {
    match command {
        Command::Help(text) => print!("{text}"),
        Command::Version => println!("profiler-ctl {}", env!("CARGO_PKG_VERSION")),
        Command::Record(args) => return record::run(args),
        Command::Start(target, session) => {
            if let Some(event) = &session.event {
                cli::check_event_available(event, cli::machine_has_pmu())?;
            }
            let mut session = session.clone();
            if let Some(dir) = &session.output {
                // The program's working directory is not ours: send a full path.
                session.output = Some(trust::prepare_output_dir(dir, session.force_dir)?);
            }
            let payload = control(target, &cli::start_request(&session)?)?;
            println!("profiling started ({})", target.socket.display());
            print!("{}", summary::render_fields(&payload));
        }
        Command::Stop(target, session) => {
            let mut session = session.clone();
            if let Some(dir) = &session.output {
                session.output = Some(trust::prepare_output_dir(dir, session.force_dir)?);
            }
            let payload = control(target, &cli::stop_request(&session)?)?;
            let children = payload
                .get("output_dir")
                .and_then(Value::as_str)
                .map(|dir| summary::child_dirs(std::path::Path::new(dir), None))
                .unwrap_or_default();
            print!("{}", summary::render(&payload, None, &children, None));
        }
        Command::Status(target) => {
            let payload = control(target, "status")?;
            println!("{}", target.socket.display());
            print!("{}", summary::render_fields(&payload));
        }
    }
    Ok(Exit::Code(0))
}

/// Sends one request; an `error` answer becomes the error message itself.
fn control(target: &Target, request: &str) -> Result<Value> {
    let peer = target.pid.map_or(Peer::SameUser, Peer::Pid);
    match client::request(&target.socket, peer, request, target.timeout)? {
        Answer::Error(message) => bail!("{message}"),
        Answer::Ok(payload) if payload.is_empty() => Ok(Value::Object(Default::default())),
        Answer::Ok(payload) => serde_json::from_str(&payload)
            .with_context(|| format!("the answer from {} is not JSON", target.socket.display())),
    }
}
