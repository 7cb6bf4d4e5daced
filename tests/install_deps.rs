//! `scripts/install-deps.sh --check` fails when a tool the sources run
//! comes from a package nothing installs, or is not listed at all; and it
//! passes on this checkout once the packages are installed (under CI=true,
//! where scripts/test.sh installed them).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `SCRIPT --check` against the source tree `root`.
fn check(script: &Path, root: &Path) -> Output {
    Command::new("bash")
        .arg(script)
        .arg("--check")
        .env("INSTALL_DEPS_ROOT", root)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()))
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn scratch(tag: &str) -> PathBuf {
    bench_harness::tools::scratch_dir(tag).expect("scratch dir")
}

#[test]
fn the_check_passes_on_this_checkout() {
    let output = check(&repo().join("scripts/install-deps.sh"), repo());
    if !bench_harness::tools::in_ci() && !output.status.success() {
        eprintln!(
            "skipping: not every tool is installed here: {}",
            stderr(&output)
        );
        return;
    }
    assert!(output.status.success(), "{}", stderr(&output));
}

/// The script with a package taken out of what it installs.
#[test]
fn a_tool_whose_package_nothing_installs_fails_the_check() {
    let dir = scratch("deps-pkg");
    let text = std::fs::read_to_string(repo().join("scripts/install-deps.sh")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("PACKAGES=("))
        .expect("PACKAGES line");
    assert!(line.contains(" bolt-19 "), "{line}");
    let altered = text.replace(line, &line.replace(" bolt-19 ", " "));
    let script = dir.join("install-deps.sh");
    std::fs::write(&script, altered).unwrap();
    let output = check(&script, repo());
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!output.status.success(), "the check passed without bolt-19");
    assert!(
        stderr(&output)
            .contains("'llvm-bolt-19' comes from package bolt-19, which nothing installs"),
        "{}",
        stderr(&output)
    );
}

/// A source tree whose code runs a tool TOOLS does not list.
#[test]
fn a_tool_nobody_listed_fails_the_check() {
    let dir = scratch("deps-tool");
    for sub in ["src", "scripts", ".ci"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(
        dir.join("src/lib.rs"),
        "fn f() { let _ = std::process::Command::new(\"llvm-frobnicate-19\").status(); }\n",
    )
    .unwrap();
    std::fs::write(dir.join("scripts/run.sh"), "opt-19 -O2 x.ll\n").unwrap();
    let output = check(&repo().join("scripts/install-deps.sh"), &dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!output.status.success());
    for tool in ["llvm-frobnicate-19", "opt-19"] {
        assert!(
            stderr(&output).contains(&format!("the sources run '{tool}'")),
            "{tool}: {}",
            stderr(&output)
        );
    }
}
