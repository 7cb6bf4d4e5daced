//! Who owns what: the output directory profiler-ctl prepares for the
//! library, and user names for the messages that refuse someone else's
//! directory or socket. The library makes the same checks again when it
//! writes (src/output/dir.rs); these give the refusal before anything runs.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::usage::UsageError;

/// Our effective uid: the owner of what we create.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

pub use breakdance_protocol::user::describe_user;

/// Creates the output directory if needed (mode 0700), refuses one that
/// belongs to another user unless `force`, proves it writable with a
/// temporary file of an unguessable name, and returns it as an absolute
/// path (the traced program may change directory).
pub fn prepare_output_dir(dir: &Path, force: bool) -> Result<PathBuf, UsageError> {
    let shown = dir.display();
    let fail = |what: &str, e: std::io::Error| UsageError(format!("-o: {what} '{shown}': {e}"));
    let me = euid();
    let refuse = |what: &str, uid: u32| {
        UsageError(format!(
            "-o: output directory '{shown}' {what} {}, not {}: choose a directory of your own, \
             or pass --force-dir",
            describe_user(uid),
            describe_user(me)
        ))
    };
    // A symlink is judged by its owner before anything follows it.
    if let Ok(link) = fs::symlink_metadata(dir) {
        if !force && link.file_type().is_symlink() && link.uid() != me && link.uid() != 0 {
            return Err(refuse("is a symlink owned by", link.uid()));
        }
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| fail("cannot create output directory", e))?;
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)
        .map_err(|e| fail("cannot open output directory", e))?;
    let owner = opened
        .metadata()
        .map_err(|e| fail("cannot read output directory", e))?
        .uid();
    if !force && owner != me {
        return Err(refuse("belongs to", owner));
    }
    let absolute = fs::canonicalize(dir).map_err(|e| fail("cannot resolve output directory", e))?;
    tempfile::Builder::new()
        .prefix(".profiler-ctl-probe.")
        .tempfile_in(&absolute)
        .map_err(|e| fail("cannot write in output directory", e))?;
    Ok(absolute)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn output_dir_is_created_private_and_made_absolute() {
        let dir = std::env::temp_dir().join(format!("profiler-ctl-out-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let absolute = prepare_output_dir(&dir, false).unwrap();
        assert!(absolute.is_absolute());
        assert!(absolute.is_dir());
        let mode = fs::metadata(&absolute).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert_eq!(
            fs::read_dir(&absolute).unwrap().count(),
            0,
            "probe left behind"
        );
        let file = dir.join("file");
        fs::write(&file, b"x").unwrap();
        let e = prepare_output_dir(&file.join("sub"), false).unwrap_err().0;
        assert!(e.starts_with("-o: cannot create output directory"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn users_are_named() {
        assert_eq!(describe_user(0), "root (uid 0)");
        assert_eq!(describe_user(4_000_000_000), "uid 4000000000");
    }
}
