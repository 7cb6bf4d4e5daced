//! perf.script, as bench-harness reads it: the reader is the protocol
//! crate's (one reader for what the library writes); this adds reading
//! from a file and the harness's error type.

use std::path::Path;

use crate::ParseError;

pub use breakdance_protocol::perfscript::{Mmap, PerfScript, Trace};

/// Reads and parses a perf.script file.
pub fn parse_file(path: &Path) -> Result<PerfScript, ParseError> {
    let text = std::fs::read_to_string(path).map_err(|e| ParseError::io("perf.script", path, e))?;
    parse(&text).map_err(|e| e.in_file(path))
}

/// Parses perf.script text.
pub fn parse(text: &str) -> Result<PerfScript, ParseError> {
    PerfScript::parse(text).map_err(|e| ParseError::new("perf.script", e.line, e.message))
}
