//! Smoke test of the `ephemeral-native` experiment's scoring on a small C
//! program (ephemeral-native/tests/programs/quarter.c), with the real
//! tools: callgrind's exact counts, libephemeral.so's counts, and the
//! tracer's traces, all turned into conditional-branch edges by the
//! experiment's own code (`src/ephemeral_native/edges.rs`).
//!
//! Needs cc, valgrind, and the two libraries built
//! (`cargo build --release -p ephemeral-native -p breakdance`); under
//! CI=true a missing one fails the test.

#[path = "../src/ephemeral_native/edges.rs"]
#[allow(dead_code)]
mod edges;

use bench_harness::callgrind;
use bench_harness::elf::ModuleMap;
use bench_harness::overlap::{add_module_traces, overlap};
use bench_harness::perfscript;
use breakdance_testkit::{have_tool, present_or_skip};
use edges::Edges;
use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "bench-harness-ephemeral-native-{}-{what}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// target/<profile>/NAME, where `cargo build --release` puts it.
fn built(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().parent().unwrap().join(name);
    present_or_skip(
        lib.is_file(),
        &format!(
            "{} is not built (cargo build --release -p ephemeral-native -p breakdance)",
            lib.display()
        ),
    )
    .then_some(lib)
}

fn run(program: &Path, arg: &str, env: &[(&str, &str)]) {
    let mut c = Command::new(program);
    c.arg(arg).envs(env.iter().copied());
    let out = c.output().unwrap();
    // quarter.c exits with 3 on purpose.
    assert_eq!(out.status.code(), Some(3), "{program:?}: {out:?}");
}

fn exact(program: &Path, arg: &str, dir: &Path, rows: &[edges::SiteRow]) -> Edges {
    let out = dir.join(format!("callgrind-{arg}.out"));
    let done = Command::new("valgrind")
        .args(callgrind::valgrind_args(&out))
        .arg("-q")
        .arg(program)
        .arg(arg)
        .output()
        .unwrap();
    assert_eq!(done.status.code(), Some(3), "{done:?}");
    let profile = callgrind::parse_file(&out).unwrap();
    let (_, counts) = profile.object_by_basename("quarter").expect("the program");
    edges::exact_edges(rows, counts)
}

/// Taken entries and fall-through ranges of the program in the tracer's
/// perf.script, at link-time addresses (as `quality::recorded`).
fn traced(script: &Path, rows: &[edges::SiteRow]) -> Edges {
    let script = perfscript::parse_file(script).unwrap();
    let (map, _) = ModuleMap::from_mmaps(&script.mmaps);
    let (hot, _) = map
        .module_by_basename("quarter")
        .expect("the program's mmap");
    let (mut taken, mut ranges) = (Edges::new(), Vec::new());
    add_module_traces(&script, &map, hot, &mut taken, &mut ranges);
    edges::traced_edges(rows, &taken, &ranges)
}

#[test]
fn ephemeral_and_tracer_edges_score_against_callgrind() {
    if !have_tool("cc") || !have_tool("valgrind") {
        return;
    }
    let (Some(eph), Some(bd)) = (built("libephemeral.so"), built("libbreakdance.so")) else {
        return;
    };
    let dir = scratch("run");
    let program = dir.join("quarter");
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../ephemeral-native/tests/programs/quarter.c");
    assert!(Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&program)
        .arg(&src)
        .status()
        .unwrap()
        .success());
    let profiled = |p: &str, n: &str| {
        let out = dir.join(format!("eph-{p}-{n}"));
        run(
            &program,
            n,
            &[
                ("LD_PRELOAD", eph.to_str().unwrap()),
                ("EPHEMERAL_OUTPUT", out.to_str().unwrap()),
                ("EPHEMERAL_P", p),
            ],
        );
        edges::read_run(&out).unwrap()
    };

    // Never unhooked: the counts are callgrind's, edge for edge.
    let small = "200000";
    let (rows, summary) = profiled("1000000000", small);
    assert!(summary["sites"].as_u64().unwrap() > 0);
    let exact_small = exact(&program, small, &dir, &rows);
    let full = edges::ephemeral_edges(&rows);
    assert_eq!(
        full, exact_small,
        "exact ephemeral counts against callgrind"
    );
    assert!((overlap(&full, &exact_small) - 1.0).abs() < 1e-12);

    // Sampled: never more than the exact count on any edge, and the
    // biases hold at callgrind's site counts.
    let (rows10, summary10) = profiled("10", small);
    assert!(summary10["unhooks"].as_u64().unwrap() > 0, "{summary10}");
    let sampled = edges::ephemeral_edges(&rows10);
    for (e, n) in &sampled {
        assert!(*n <= exact_small.get(e).copied().unwrap_or(0), "{e:?}: {n}");
    }
    let raw = overlap(&sampled, &exact_small);
    assert!(raw > 0.0 && raw < 1.0, "raw overlap {raw}");
    let biased = overlap(
        &edges::rescaled(&rows10, &sampled, &exact_small),
        &exact_small,
    );
    assert!(biased > 0.9, "bias overlap {biased}");

    // The tracer, sampling every 1 ms of a longer run: every edge it
    // shows is a real one, and its profile is close to the exact one.
    let long = "20000000";
    let out = dir.join("tracer");
    run(
        &program,
        long,
        &[
            ("LD_PRELOAD", bd.to_str().unwrap()),
            ("BREAKDANCE_AUTOSTART", "1"),
            ("BREAKDANCE_EVENT", "task-clock"),
            ("BREAKDANCE_PERIOD", "1000000"),
            ("BREAKDANCE_LOOKAHEAD", "emulate"),
            ("BREAKDANCE_OUTPUT", out.to_str().unwrap()),
        ],
    );
    let exact_long = exact(&program, long, &dir, &rows);
    let from_traces = traced(&out.join("perf.script"), &rows);
    assert!(!from_traces.is_empty(), "no traced edge");
    for e in from_traces.keys() {
        assert!(
            exact_long.contains_key(e),
            "a traced edge callgrind never saw: {e:?}"
        );
    }
    let o = overlap(&from_traces, &exact_long);
    assert!(o > 0.9, "tracer overlap {o}");
    let _ = std::fs::remove_dir_all(&dir);
}
