//! Instrumented programs count edges correctly: `full` natively equals the
//! exact profile the emulator measures on the uninstrumented build, the
//! counter variant samples exactly every N-th site execution, and the brr
//! variant under the emulator records one edge per taken brr at rate 1/N,
//! and natively (SIGILL handler) records exactly the same samples (checked
//! on opmix, whose every brr costs a signal natively in a fraction of the
//! time charclass would take).

mod common;

use brr::instrument::Variant;
use brr::profile::{self, EdgeProfile};
use brr::workload;
use common::Cc;
use std::path::{Path, PathBuf};
use std::process::Command;

fn dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("instrumented");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn build(name: &str, src: &Path, cc: Cc, v: Variant) -> Option<PathBuf> {
    let tool = if cc == Cc::Gcc {
        "musl-gcc"
    } else {
        "clang-19"
    };
    if !common::have_tool(tool) || !common::have_tool("musl-gcc") {
        return None;
    }
    Some(
        workload::build_instrumented(&dir(), name, &[src.to_path_buf()], cc, v)
            .unwrap_or_else(|e| panic!("{e:#}")),
    )
}

/// Runs a command that may exit non-zero (opmix returns a hash bit field);
/// a signal or the emulator's own error status (125) fails the test.
fn output(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let code = out.status.code();
    assert!(
        code.is_some() && code != Some(125),
        "{cmd:?}: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs natively (or under brr-run) and reads the edge file.
fn run_edges(exe: &Path, args: &[&str], emulated: bool) -> (EdgeProfile, Vec<u8>) {
    let edges = exe.with_extension("edges");
    let _ = std::fs::remove_file(&edges);
    let out = if emulated {
        output(
            Command::new(env!("CARGO_BIN_EXE_brr-run"))
                .args(["--env", &format!("BRR_EDGES={}", edges.display())])
                .arg(exe)
                .args(args),
        )
    } else {
        output(Command::new(exe).args(args).env("BRR_EDGES", &edges))
    };
    (
        profile::sanitise_units(&profile::read_edges(&edges).unwrap()),
        out.stdout,
    )
}

/// `native`: also run the brr build natively under the SIGILL handler
/// (a signal per executed brr: seconds on charclass, so opmix does it).
fn check_workload(name: &str, args: &[&str], native: bool) {
    let src = common::workloads().join(format!("{name}.c"));
    for cc in [Cc::Gcc, Cc::Clang] {
        let Some(none) = build(name, &src, cc, Variant::None) else {
            continue;
        };
        let argv: Vec<String> = std::iter::once(none.display().to_string())
            .chain(args.iter().map(|s| s.to_string()))
            .collect();
        let (exact, _) = profile::exact_edges(&none, &argv, &[]).unwrap();
        let reference = output(Command::new(&none).args(args).env("BRR_EDGES", "/dev/null")).stdout;
        assert!(exact.len() > 5, "{name} {cc:?}: only {} sites", exact.len());

        let full = build(name, &src, cc, Variant::Full).unwrap();
        let (counts, stdout) = run_edges(&full, args, false);
        assert!(stdout == reference, "{name} {cc:?} full: output changed");
        assert_eq!(
            counts, exact,
            "{name} {cc:?}: full counts differ from the exact profile"
        );

        let executions = profile::total(&exact);
        let interval = 256u32;
        let counter = build(name, &src, cc, Variant::Counter { interval }).unwrap();
        let (samples, stdout) = run_edges(&counter, args, false);
        assert!(stdout == reference, "{name} {cc:?} counter: output changed");
        assert_eq!(
            profile::total(&samples),
            executions / u64::from(interval),
            "{name} {cc:?}: counter samples"
        );
        for (k, &(t, f)) in &samples {
            let (et, ef) = exact[k];
            assert!(
                t <= et && f <= ef,
                "{name} {cc:?} site {k:?}: sampled edge never executed"
            );
        }

        let brr_build = build(name, &src, cc, Variant::Brr { interval }).unwrap();
        let (samples, stdout) = run_edges(&brr_build, args, true);
        assert!(stdout == reference, "{name} {cc:?} brr: output changed");
        let n = profile::total(&samples) as f64;
        let mean = executions as f64 / f64::from(interval);
        assert!(
            (n - mean).abs() < 5.0 * mean.sqrt() + 1.0,
            "{name} {cc:?}: {n} brr samples, expected {mean:.0}"
        );
        for (k, &(t, f)) in &samples {
            let (et, ef) = exact[k];
            assert!(
                (t == 0 || et > 0) && (f == 0 || ef > 0),
                "{name} {cc:?} site {k:?}"
            );
        }

        if !native {
            continue;
        }
        // Natively, the SIGILL handler draws from the same LFSR with the
        // same seed (BRR_SEED unset: 1 in both): the same samples, site by
        // site, and the same output.
        let (native, stdout) = run_edges(&brr_build, args, false);
        assert!(
            stdout == reference,
            "{name} {cc:?} brr native: output changed"
        );
        assert!(!native.is_empty(), "{name} {cc:?}: no native brr samples");
        assert_eq!(
            native, samples,
            "{name} {cc:?}: the SIGILL handler's samples differ from the emulator's"
        );
    }
}

#[test]
fn charclass_edges() {
    check_workload("charclass", &["1"], false);
}

#[test]
fn opmix_edges() {
    check_workload("opmix", &[], true);
}

/// `brr-instrument --layout`: a malformed profile is refused in one line
/// that names the file's line; `none` and a well-formed profile lay out.
#[test]
fn layout_refuses_a_bad_profile_naming_the_line() {
    let d = dir().join("layout-cli");
    std::fs::create_dir_all(&d).unwrap();
    let asm = d.join("f.s");
    std::fs::write(
        &asm,
        "\t.text\nf:\n\tcmpl\t$1, %edi\n\tjg\t.L2\n\tmovl\t$2, %eax\n\tret\n.L2:\n\tmovl\t$3, %eax\n\tret\n",
    )
    .unwrap();
    let bad = d.join("bad.prof");
    std::fs::write(&bad, "f_s 0 10 1\nf_s zero 1 1\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_brr-instrument"))
        .arg("--layout")
        .arg(&bad)
        .arg(&asm)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("line 2") && err.contains("'zero'"), "{err}");
    // A good profile: the taken edge (site 0, 10 to 1) becomes the
    // fall-through, so the jg is inverted.
    let good = d.join("good.prof");
    std::fs::write(&good, "f_s 0 10 1\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_brr-instrument"))
        .arg("--layout")
        .arg(&good)
        .arg(&asm)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\tjle\t"), "{text}");
}
