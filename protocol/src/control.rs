//! The control socket's messages. One request line in, one reply line out:
//! `start [key=value…]`, `stop`, `status`; the reply is `ok <json>` or
//! `error <message>`, the JSON a [`StatusReply`] for `start` and `status`
//! and a [`Summary`](crate::Summary) for `stop`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::counters::Counters;
use crate::options::{Event, OptionError, SessionOptions, StopOptions};

/// A request to the library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Start(SessionOptions),
    Stop(StopOptions),
    Status,
}

/// Why a request line was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    #[error("empty request (commands: start, stop, status)")]
    Empty,
    #[error("unknown command '{0}' (commands: start, stop, status)")]
    UnknownCommand(String),
    #[error("'{0}' takes no arguments")]
    TakesNoArguments(&'static str),
    #[error("{0}")]
    Option(#[from] OptionError),
}

impl Request {
    /// The request line, without its newline.
    pub fn to_line(&self) -> Result<String, OptionError> {
        Ok(match self {
            Request::Start(options) => {
                let words = options.to_words()?;
                if words.is_empty() {
                    "start".to_string()
                } else {
                    format!("start {words}")
                }
            }
            Request::Stop(options) => {
                let words = options.to_words()?;
                if words.is_empty() {
                    "stop".to_string()
                } else {
                    format!("stop {words}")
                }
            }
            Request::Status => "status".to_string(),
        })
    }

    /// Parses one request line.
    pub fn parse(line: &str) -> Result<Request, RequestError> {
        let line = line.trim();
        let (command, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        match command {
            "start" => Ok(Request::Start(SessionOptions::parse_words(rest)?)),
            "stop" => Ok(Request::Stop(StopOptions::parse_words(rest)?)),
            "status" if rest.trim().is_empty() => Ok(Request::Status),
            "status" => Err(RequestError::TakesNoArguments("status")),
            "" => Err(RequestError::Empty),
            _ => Err(RequestError::UnknownCommand(
                command
                    .chars()
                    .take(40)
                    .filter(|c| !c.is_control())
                    .collect(),
            )),
        }
    }
}

/// The reply to `start` and `status`.
// One reply is made per request: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum StatusReply {
    /// No session runs. `unwritten_session`: a stopped session's outputs
    /// could not be written, and `stop` will try again.
    Off { unwritten_session: bool },
    Running {
        event: Event,
        lbr: u32,
        output_dir: PathBuf,
        elapsed_ns: u64,
        threads: u64,
        /// The live counters, summed over threads.
        #[serde(flatten)]
        counters: Counters,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_bad_ones_are_named() {
        let start = Request::Start(SessionOptions {
            lbr: Some(16),
            output: Some("/d".into()),
            ..Default::default()
        });
        assert_eq!(start.to_line().unwrap(), "start lbr=16 out=/d");
        assert_eq!(Request::parse("start lbr=16 out=/d\n"), Ok(start));
        assert_eq!(
            Request::Start(SessionOptions::default()).to_line().unwrap(),
            "start"
        );
        assert_eq!(
            Request::parse(" stop "),
            Ok(Request::Stop(StopOptions::default()))
        );
        let elsewhere = Request::Stop(StopOptions {
            output: Some("/e".into()),
            force_dir: true,
        });
        assert_eq!(elsewhere.to_line().unwrap(), "stop out=/e force_dir=1");
        assert_eq!(Request::parse("stop out=/e force_dir=1"), Ok(elsewhere));
        assert_eq!(
            Request::parse("status now"),
            Err(RequestError::TakesNoArguments("status"))
        );
        assert_eq!(Request::parse(""), Err(RequestError::Empty));
        assert_eq!(
            Request::parse("frob\u{7} x").unwrap_err().to_string(),
            "unknown command 'frob' (commands: start, stop, status)"
        );
        assert_eq!(
            Request::parse("start lbr=0").unwrap_err().to_string(),
            "lbr must be between 1 and 4096, got '0'"
        );
    }

    #[test]
    fn status_carries_its_state_as_a_tag() {
        let off = serde_json::to_string(&StatusReply::Off {
            unwritten_session: false,
        })
        .unwrap();
        assert_eq!(off, r#"{"state":"off","unwritten_session":false}"#);
        let running = StatusReply::Running {
            event: Event::TaskClock,
            lbr: 32,
            output_dir: "/o".into(),
            elapsed_ns: 5,
            threads: 1,
            counters: Counters {
                samples: 4,
                ..Default::default()
            },
        };
        let text = serde_json::to_string(&running).unwrap();
        assert!(
            text.starts_with(r#"{"state":"running","event":"task-clock""#),
            "{text}"
        );
        assert!(text.contains(r#""samples":4"#), "{text}");
        assert_eq!(serde_json::from_str::<StatusReply>(&text).unwrap(), running);
    }
}
