//! The one rule every test and experiment of the workspace follows when
//! something it needs is missing (a compiler, llvm-profgen, a built
//! library, a libc feature): outside CI it says so on stderr and skips;
//! under `CI=true` it fails, naming what is missing and how to get it.
//! A CI run never passes by skipping.
//!
//! A crate of its own, with no dependencies, so that every crate's tests
//! can use it (x86-sem's and brr's included, which nothing else of the
//! workspace may be below).

/// Whether this is a CI run: the environment variable `CI` is exactly
/// `true` (what GitHub Actions, GitLab CI and `.ci/run` set).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// `present`, after applying the rule to its absence: `true` when it is
/// there; `false` (after saying `skipping: WHAT`) when it is not, outside
/// CI; a panic with `what` under CI.
#[track_caller]
pub fn present_or_skip(present: bool, what: &str) -> bool {
    if present {
        return true;
    }
    if in_ci() {
        panic!("CI=true and {what}");
    }
    eprintln!("skipping: {what}");
    false
}

/// Whether `tool` runs (`TOOL --version` starts), under the rule of
/// [`present_or_skip`].
#[track_caller]
pub fn have_tool(tool: &str) -> bool {
    let found = std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok();
    present_or_skip(
        found,
        &format!("{tool} is not installed (scripts/install-deps.sh installs it)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_thing_is_used_and_a_missing_one_fails_in_ci() {
        assert!(present_or_skip(true, "never printed"));
        let missing =
            std::panic::catch_unwind(|| present_or_skip(false, "the test tool is missing"));
        if in_ci() {
            let message = missing.expect_err("a missing tool must fail under CI=true");
            let text = message
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_default();
            assert!(text.contains("the test tool is missing"), "{text}");
        } else {
            assert_eq!(missing.ok(), Some(false));
        }
    }
}
