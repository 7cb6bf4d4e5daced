//! Where the control socket of a process lives: the one rule the library
//! (which binds it) and profiler-ctl (which finds it from the program's
//! environment) both follow.
//!
//! `BREAKDANCE_SOCKET` names it outright. Otherwise it is
//! `DIR/breakdance.<pid>.sock` in a directory only the process's user can
//! enter: `$XDG_RUNTIME_DIR` when set to an absolute path, else
//! `$TMPDIR/breakdance-<uid>` (`/tmp` without an absolute TMPDIR), which
//! the library creates mode 0700. Empty values count as unset. Checking and
//! binding the directory is the library's (src/control/socket_path.rs).

use std::path::PathBuf;

/// A socket path, and how it must be bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SocketPlace {
    /// Named by the user: bound where it says.
    Explicit(PathBuf),
    /// `dir/name`, with `dir` checked (and created when `create`).
    Private {
        dir: PathBuf,
        name: String,
        create: bool,
    },
}

impl SocketPlace {
    pub fn path(&self) -> PathBuf {
        match self {
            SocketPlace::Explicit(p) => p.clone(),
            SocketPlace::Private { dir, name, .. } => dir.join(name),
        }
    }
}

/// The socket's file name for process `pid`.
pub fn socket_name(pid: i32) -> String {
    format!("breakdance.{pid}.sock")
}

/// A non-empty value of `var` from `get`.
fn non_empty(get: &impl Fn(&str) -> Option<String>, var: &str) -> Option<String> {
    get(var).filter(|v| !v.is_empty())
}

/// An absolute value of `var` (relative ones are ignored, as the XDG base
/// directory rules say).
fn absolute_var(get: &impl Fn(&str) -> Option<String>, var: &str) -> Option<PathBuf> {
    non_empty(get, var)
        .filter(|v| v.starts_with('/'))
        .map(PathBuf::from)
}

/// Where the control socket of process `pid`, running as `uid`, goes, read
/// from `get` (that process's environment).
pub fn socket_place(pid: i32, uid: u32, get: impl Fn(&str) -> Option<String>) -> SocketPlace {
    if let Some(p) = non_empty(&get, "BREAKDANCE_SOCKET") {
        return SocketPlace::Explicit(PathBuf::from(p));
    }
    match absolute_var(&get, "XDG_RUNTIME_DIR") {
        Some(dir) => SocketPlace::Private {
            dir,
            name: socket_name(pid),
            create: false,
        },
        None => SocketPlace::Private {
            dir: absolute_var(&get, "TMPDIR")
                .unwrap_or_else(|| PathBuf::from("/tmp"))
                .join(format!("breakdance-{uid}")),
            name: socket_name(pid),
            create: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn explicit_then_runtime_dir_then_tmpdir() {
        assert_eq!(
            socket_place(
                7,
                0,
                env(&[("BREAKDANCE_SOCKET", "/s"), ("XDG_RUNTIME_DIR", "/r")])
            ),
            SocketPlace::Explicit(PathBuf::from("/s"))
        );
        assert_eq!(
            socket_place(
                7,
                0,
                env(&[("BREAKDANCE_SOCKET", ""), ("XDG_RUNTIME_DIR", "/r")])
            )
            .path(),
            PathBuf::from("/r/breakdance.7.sock")
        );
        assert_eq!(
            socket_place(
                7,
                1000,
                env(&[("XDG_RUNTIME_DIR", "rel"), ("TMPDIR", "/t")])
            ),
            SocketPlace::Private {
                dir: PathBuf::from("/t/breakdance-1000"),
                name: "breakdance.7.sock".into(),
                create: true
            }
        );
        assert_eq!(
            socket_place(7, 0, env(&[("TMPDIR", "")])).path(),
            PathBuf::from("/tmp/breakdance-0/breakdance.7.sock")
        );
    }
}
