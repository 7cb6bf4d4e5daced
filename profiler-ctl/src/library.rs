//! Where libbreakdance.so is, for `record` and for the control client's
//! hints.

use std::env;
use std::path::{Path, PathBuf};

use crate::usage::UsageError;

/// The library's file name.
pub const LIBRARY: &str = breakdance_protocol::LIBRARY_FILE;

/// Finds libbreakdance.so: `--lib`, else `$BREAKDANCE_LIB`, else next to
/// the profiler-ctl executable. Returns an absolute path.
pub fn find_library(lib: Option<&Path>) -> Result<PathBuf, UsageError> {
    let (path, source) = match (lib, env::var_os("BREAKDANCE_LIB")) {
        (Some(path), _) => (path.to_path_buf(), "--lib"),
        (None, Some(path)) if !path.is_empty() => (PathBuf::from(path), "$BREAKDANCE_LIB"),
        _ => {
            let exe = env::current_exe().map_err(|e| {
                UsageError(format!(
                    "cannot find {LIBRARY}: cannot locate profiler-ctl itself: {e}"
                ))
            })?;
            let next_to = exe
                .parent()
                .map(|d| d.join(LIBRARY))
                .unwrap_or_else(|| LIBRARY.into());
            if !next_to.is_file() {
                return Err(UsageError(format!(
                    "cannot find {LIBRARY}: no --lib, no $BREAKDANCE_LIB, and none at {}; \
                     build it with `cargo build --release` in the breakdance workspace \
                     (it lands in target/release/ next to profiler-ctl) or pass --lib PATH",
                    next_to.display()
                )));
            }
            (next_to, "next to profiler-ctl")
        }
    };
    if !path.is_file() {
        return Err(UsageError(format!(
            "{source}: {} is not a file; build the library with `cargo build --release` \
             (target/release/{LIBRARY})",
            path.display()
        )));
    }
    std::fs::canonicalize(&path)
        .map_err(|e| UsageError(format!("{source}: cannot resolve {}: {e}", path.display())))
}
