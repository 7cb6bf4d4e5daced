//! A mistake in the command line, for every module that checks one (the
//! parser, `record`, the output directory's trust checks): printed as one
//! line, exit status 2.

use std::fmt;

/// A mistake in the command line: printed as one line, exit status 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}
