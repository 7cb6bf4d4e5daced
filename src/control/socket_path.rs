//! Binding the control socket so that no one else can take its place or
//! reach it. Where it lives is `breakdance_protocol::socket_path`'s rule,
//! which profiler-ctl follows too (from the program's `/proc/PID/environ`).
//!
//! The default directory (`$XDG_RUNTIME_DIR`, or `$TMPDIR/breakdance-<uid>`
//! created mode 0700) is checked on every use (it must be a real
//! directory, not a symlink, owned by the effective uid, with no access for
//! group or others) and refused with a message naming it when it is not:
//! another user who created `/tmp/breakdance-0` first gets a refusal, not
//! our socket.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use crate::sys;
pub use breakdance_protocol::socket_path::SocketPlace;

/// Why the default socket directory was refused.
#[derive(Debug, thiserror::Error)]
pub enum SocketDirError {
    #[error("control socket directory {}: {source}", dir.display())]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "control socket directory {} is a symlink or not a directory: remove it, or set \
         BREAKDANCE_SOCKET",
        dir.display()
    )]
    NotADirectory { dir: PathBuf },
    #[error(
        "control socket directory {} belongs to {owner}, not to {me}: remove it, or set \
         XDG_RUNTIME_DIR or BREAKDANCE_SOCKET",
        dir.display()
    )]
    Owner {
        dir: PathBuf,
        owner: String,
        me: String,
    },
    #[error(
        "control socket directory {} has mode {mode:o}, which lets others in: chmod 700 it",
        dir.display()
    )]
    Mode { dir: PathBuf, mode: u32 },
}

/// A directory only we can enter, held open. Binding through `via`
/// (`/proc/self/fd/N`) puts the socket in the directory that was checked,
/// even if its path were renamed away meanwhile.
pub struct PrivateDir {
    _dir: File,
    via: PathBuf,
}

impl PrivateDir {
    /// Opens `dir` (creating it mode 0700 first when `create`) and checks it.
    pub fn open(dir: &Path, create: bool) -> Result<PrivateDir, SocketDirError> {
        let io = |source| SocketDirError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        if create {
            match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(e)),
            }
        }
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(dir);
        let file = match opened {
            Ok(f) => f,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                return Err(SocketDirError::NotADirectory {
                    dir: dir.to_path_buf(),
                })
            }
            Err(e) => return Err(io(e)),
        };
        let meta = file.metadata().map_err(io)?;
        let me = sys::geteuid();
        if meta.uid() != me {
            return Err(SocketDirError::Owner {
                dir: dir.to_path_buf(),
                owner: breakdance_protocol::user::describe_user(meta.uid()),
                me: breakdance_protocol::user::describe_user(me),
            });
        }
        if meta.mode() & 0o077 != 0 {
            return Err(SocketDirError::Mode {
                dir: dir.to_path_buf(),
                mode: meta.mode() & 0o7777,
            });
        }
        let via = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        Ok(PrivateDir { _dir: file, via })
    }
}

/// Binds the socket at `place` (see [`bind_at`]); a default directory that
/// fails its checks is refused.
pub fn bind(place: &SocketPlace) -> Result<UnixListener, BindError> {
    match place {
        SocketPlace::Explicit(p) => bind_at(p).map_err(BindError::Socket),
        SocketPlace::Private { dir, name, create } => {
            let private = PrivateDir::open(dir, *create)?;
            bind_at(&private.via.join(name)).map_err(BindError::Socket)
        }
    }
}

/// Why the control socket was not bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(transparent)]
    Dir(#[from] SocketDirError),
    #[error("{0}")]
    Socket(std::io::Error),
}

/// Binds `path` with mode 0600 from the start, replacing a stale socket
/// left by a dead process but never one that answers, nor a file that is
/// not a socket.
pub fn bind_at(path: &Path) -> std::io::Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a socket",
            ));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "another live process listens on it",
            ));
        }
        std::fs::remove_file(path)?;
    }
    sys::bind_private_unix(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("bd-sockdir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_private_directory_is_made_and_checked() {
        let base = scratch("private");
        let dir = base.join("breakdance-x");
        let place = SocketPlace::Private {
            dir: dir.clone(),
            name: "s.sock".into(),
            create: true,
        };
        let _listener = bind(&place).unwrap();
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("s.sock")), 0o600);
        assert!(bind(&place).is_err(), "a live socket must not be replaced");

        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = bind(&place).unwrap_err().to_string();
        assert!(e.contains("has mode 755"), "{e}");
        let linked = base.join("linked");
        std::os::unix::fs::symlink(&dir, &linked).unwrap();
        let e = PrivateDir::open(&linked, true).err().unwrap().to_string();
        assert!(e.contains("is a symlink"), "{e}");
        std::fs::remove_dir_all(base).unwrap();
    }

    /// A client that finds the socket's path finds a listener: binding
    /// at the path itself refused connections between bind and listen.
    /// Every listener stays open to the end and the client never waits (a
    /// full backlog answers EAGAIN), so a refusal means only that.
    #[test]
    fn the_path_appears_listening() {
        use std::os::unix::ffi::OsStrExt;
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = scratch("listening");
        let path = dir.join("s.sock");
        let done = AtomicBool::new(false);
        // SAFETY: sockaddr_un is plain data; zero is a valid value.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr.sun_path.iter_mut().zip(path.as_os_str().as_bytes()) {
            *d = *s as libc::c_char;
        }
        let connect_refused = || {
            // SAFETY: a fresh socket, connected to a valid address, closed.
            unsafe {
                let fd = libc::socket(
                    libc::AF_UNIX,
                    libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                    0,
                );
                assert!(fd >= 0);
                let ret = libc::connect(
                    fd,
                    (&addr as *const libc::sockaddr_un).cast(),
                    std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
                );
                let refused = ret != 0
                    && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECONNREFUSED);
                libc::close(fd);
                refused
            }
        };
        let refused = std::thread::scope(|s| {
            let client = s.spawn(|| {
                let mut refused = 0u32;
                while !done.load(Ordering::Relaxed) {
                    refused += u32::from(connect_refused());
                }
                refused
            });
            let mut open = Vec::new();
            for _ in 0..300 {
                open.push(bind_at(&path).unwrap());
                std::fs::remove_file(&path).unwrap();
            }
            done.store(true, Ordering::Relaxed);
            client.join().unwrap()
        });
        assert_eq!(refused, 0, "connections refused at a path that existed");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert!(left.is_empty(), "temporary names left behind: {left:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn bind_refuses_live_sockets_and_plain_files() {
        let dir = scratch("bind");
        let path = dir.join("s.sock");
        let _listener = bind_at(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(
            bind_at(&path).is_err(),
            "a live socket must not be replaced"
        );
        let file = dir.join("plain");
        std::fs::write(&file, b"x").unwrap();
        assert!(bind_at(&file).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
