//! Analysis shared by the experiments and the end-to-end tests: readers for
//! the reference counts (callgrind) and for breakdance's outputs (perf.script,
//! AutoFDO text), ELF address mapping, the trace validator and the overlap
//! metric. Pure logic: nothing here depends on the tracer crate.

pub mod afdo;
pub mod callgrind;
pub mod elf;
pub mod ephemeral;
pub mod llvm_text;
pub mod overlap;
pub mod perfscript;
pub mod regression;
pub mod tools;
pub mod validate;

use std::fmt;
use std::path::Path;

/// One taken control transfer {from, to}, in whatever address space the
/// owner states: the type perf.script's reader gives (protocol's).
pub use breakdance_protocol::perfscript::Branch;

/// A malformed input: which format, where, and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The format being read (`callgrind`, `perf.script`, …).
    pub format: &'static str,
    /// The file, when the input came from one.
    pub path: Option<String>,
    /// 1-based line number; 0 when the error is about the whole input.
    pub line: usize,
    /// What was wrong.
    pub message: String,
}

impl ParseError {
    /// An error at `line` of a `format` input.
    pub fn new(format: &'static str, line: usize, message: String) -> Self {
        ParseError {
            format,
            path: None,
            line,
            message,
        }
    }

    /// A file that could not be read.
    pub fn io(format: &'static str, path: &Path, error: std::io::Error) -> Self {
        ParseError {
            format,
            path: Some(path.display().to_string()),
            line: 0,
            message: format!("cannot read: {error}"),
        }
    }

    /// The same error, naming the file it came from.
    pub fn in_file(mut self, path: &Path) -> Self {
        self.path = Some(path.display().to_string());
        self
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.format)?;
        if let Some(path) = &self.path {
            write!(f, " file {path}")?;
        }
        if self.line > 0 {
            write!(f, " line {}", self.line)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ParseError {}
