//! The output directory, opened so that nobody else can steer a write.
//!
//! A profiler often runs as root on a machine shared with other users, and
//! is often pointed at a directory under /tmp. So:
//! - a missing directory is created mode 0700;
//! - an existing one must belong to the caller (its effective uid), unless
//!   the user forces it (`--force-dir`, `force_dir=1`,
//!   `BREAKDANCE_FORCE_DIR=1`); a symlink naming it must belong to the
//!   caller or root;
//! - once checked, the directory is held open and every file is made
//!   through that descriptor (`/proc/self/fd/N/…`), so renaming the path
//!   away afterwards redirects nothing;
//! - each file is written to a temporary name that cannot be guessed,
//!   created with `O_CREAT | O_EXCL | O_NOFOLLOW` (so a planted symlink
//!   fails the create instead of being followed), then renamed over the
//!   final name;
//! - a final name that exists and is not a regular file (a planted
//!   symlink, a fifo, a directory) is refused before anything is written:
//!   the rename would not follow it, but a user who finds their profile
//!   replaced by a link deserves to be told.
//!
//! The checks are on the directory itself. A parent directory that others
//! can write into can still be raced; the README's threat model says so.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::sys;

/// Why an output directory was refused.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    #[error("output directory {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("output directory {} is not a directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error(
        "output directory {} belongs to {owner}, not to {me}: choose a directory of your own, \
         or force it (--force-dir, force_dir=1, BREAKDANCE_FORCE_DIR=1)",
        path.display()
    )]
    Foreign {
        path: PathBuf,
        owner: String,
        me: String,
    },
    #[error(
        "output directory {} is a symlink owned by {owner}, not by {me} or root: name the real \
         directory, or force it (--force-dir, force_dir=1, BREAKDANCE_FORCE_DIR=1)",
        path.display()
    )]
    ForeignSymlink {
        path: PathBuf,
        owner: String,
        me: String,
    },
}

/// A checked output directory, held open.
pub struct OutputDir {
    path: PathBuf,
    /// Keeps the directory open: `via` names it through this descriptor.
    _dir: File,
    /// `/proc/self/fd/N`: the directory we checked, whatever its path names now.
    via: PathBuf,
}

/// A file that cannot be written, named.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot write {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "will not write {}: it is a {kind}, not a file (remove it, or write elsewhere)",
        path.display()
    )]
    NotAFile { path: PathBuf, kind: &'static str },
}

fn kind_of(ft: std::fs::FileType) -> &'static str {
    if ft.is_symlink() {
        "symlink"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_fifo() {
        "fifo"
    } else if ft.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

fn open_dir(path: &Path, follow: bool) -> std::io::Result<File> {
    let mut flags = libc::O_DIRECTORY;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    OpenOptions::new().read(true).custom_flags(flags).open(path)
}

impl OutputDir {
    /// Creates `path` (mode 0700, parents too) when missing, then opens and
    /// checks it. `force` accepts a directory or symlink of another user.
    pub fn open(path: &Path, force: bool) -> Result<OutputDir, DirError> {
        let io = |source| DirError::Io {
            path: path.to_path_buf(),
            source,
        };
        let me = sys::geteuid();
        // A symlink is judged by its owner before anything follows it.
        let check_link = || -> Result<(), DirError> {
            match std::fs::symlink_metadata(path) {
                Ok(link)
                    if link.file_type().is_symlink()
                        && !force
                        && link.uid() != me
                        && link.uid() != 0 =>
                {
                    Err(DirError::ForeignSymlink {
                        path: path.to_path_buf(),
                        owner: breakdance_protocol::user::describe_user(link.uid()),
                        me: breakdance_protocol::user::describe_user(me),
                    })
                }
                _ => Ok(()),
            }
        };
        check_link()?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(io)?;
        let dir = match open_dir(path, false) {
            Ok(dir) => dir,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                check_link()?;
                open_dir(path, true).map_err(io)?
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                return Err(DirError::NotADirectory {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => return Err(io(e)),
        };
        let meta = dir.metadata().map_err(io)?;
        if !force && meta.uid() != me {
            return Err(DirError::Foreign {
                path: path.to_path_buf(),
                owner: breakdance_protocol::user::describe_user(meta.uid()),
                me: breakdance_protocol::user::describe_user(me),
            });
        }
        let via = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        Ok(OutputDir {
            path: path.to_path_buf(),
            _dir: dir,
            via,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Proves the directory writable: a temporary file is made and removed.
    pub fn probe(&self) -> Result<(), FileError> {
        self.temporary(".breakdance-probe").map(drop)
    }

    /// Refuses `name` when it exists and is not a regular file.
    pub fn check_replaceable(&self, name: &str) -> Result<(), FileError> {
        match std::fs::symlink_metadata(self.via.join(name)) {
            Ok(meta) if meta.file_type().is_file() => Ok(()),
            Ok(meta) => Err(FileError::NotAFile {
                path: self.path.join(name),
                kind: kind_of(meta.file_type()),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(FileError::Io {
                path: self.path.join(name),
                source,
            }),
        }
    }

    fn temporary(&self, prefix: &str) -> Result<tempfile::NamedTempFile<File>, FileError> {
        tempfile::Builder::new()
            .prefix(prefix)
            .suffix(".tmp")
            .rand_bytes(12)
            .make_in(&self.via, |p| {
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(p)
            })
            .map_err(|source| FileError::Io {
                path: self.path.join(format!("{prefix}*.tmp")),
                source,
            })
    }

    /// Writes `contents` to `name` atomically: a reader sees the old file
    /// or the new one, and a failure leaves the old one in place.
    ///
    /// Not synced to the disk: the files are written at the application's
    /// exit, on its time, and an fdatasync each cost about 100 µs of its
    /// CPU and 0.2-0.6 ms of its wall time (six files on SQLite: 0.57 ms
    /// of a 3.96 ms start and stop, results/speed round 16). A process
    /// that dies after the rename leaves whole files, as a reader sees
    /// them; what a machine that loses power keeps is the file system's
    /// affair, as for `perf record`'s own perf.data (ext4, by default,
    /// writes out a file renamed over an existing one with the rename:
    /// `auto_da_alloc`).
    pub fn write_atomic(&self, name: &str, contents: &[u8]) -> Result<(), FileError> {
        self.check_replaceable(name)?;
        let mut tmp = self.temporary(&format!(".{name}."))?;
        let err = |source| FileError::Io {
            path: self.path.join(name),
            source,
        };
        tmp.write_all(contents).map_err(err)?;
        tmp.persist(self.via.join(name))
            .map(drop)
            .map_err(|e| err(e.error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("bd-outdir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_new_directory_is_private_and_files_land_in_it() {
        let base = scratch("new");
        let out = base.join("a/b");
        let dir = OutputDir::open(&out, false).unwrap();
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        dir.probe().unwrap();
        dir.write_atomic("x.txt", b"one").unwrap();
        dir.write_atomic("x.txt", b"two").unwrap();
        assert_eq!(std::fs::read(out.join("x.txt")).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
        assert_eq!(names.len(), 1, "temporary files left behind: {names:?}");
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn a_planted_symlink_is_refused_and_its_target_kept() {
        let base = scratch("link");
        let victim = base.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let out = base.join("out");
        let dir = OutputDir::open(&out, false).unwrap();
        std::os::unix::fs::symlink(&victim, out.join("perf.script")).unwrap();
        let e = dir.write_atomic("perf.script", b"profile").unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "will not write {}: it is a symlink",
                out.join("perf.script").display()
            )),
            "{e}"
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn the_directory_written_is_the_one_checked() {
        let base = scratch("moved");
        let out = base.join("out");
        let dir = OutputDir::open(&out, false).unwrap();
        std::fs::rename(&out, base.join("moved")).unwrap();
        std::fs::create_dir(&out).unwrap();
        dir.write_atomic("f", b"x").unwrap();
        assert!(base.join("moved/f").is_file());
        assert!(!out.join("f").exists());
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn a_file_in_place_of_the_directory_is_named() {
        let base = scratch("file");
        let out = base.join("out");
        std::fs::write(&out, b"").unwrap();
        let e = OutputDir::open(&out, false).err().unwrap();
        assert!(e.to_string().contains(&*out.to_string_lossy()), "{e}");
        std::fs::remove_dir_all(base).unwrap();
    }
}
