//! End-to-end: the C programs of `tests/programs/`, built with the system
//! `cc`, run natively and under `LD_PRELOAD=libephemeral.so`: the same
//! stdout, stderr and exit status; exact counts when P is never reached;
//! and a sampled bias within its bound when it is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh directory under the system's temporary directory.
fn scratch(what: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "ephemeral-test-{}-{what}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `libephemeral.so` of this build (cargo builds the cdylib with the
/// tests: target/<profile>/deps/ holds both).
fn library() -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let deps = deps.parent().unwrap();
    [
        deps.join("libephemeral.so"),
        deps.join("../libephemeral.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect("libephemeral.so was not built next to the tests")
}

/// Builds `tests/programs/NAME.c` with `cc -O2 -pthread` (PIE, the
/// compiler's default) and extra `flags`; `None` when cc is missing
/// outside CI (under CI=true a missing cc fails the test).
fn build(name: &str, flags: &[&str]) -> Option<PathBuf> {
    if !breakdance_testkit::have_tool("cc") {
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(format!("{name}.c"));
    let out = scratch("bin").join(name);
    let status = Command::new("cc")
        .args(["-O2", "-pthread"])
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success(), "cc failed on {}", src.display());
    Some(out)
}

fn run(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(program);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Runs `program` under the library with `EPHEMERAL_P = p`; returns the
/// output and the directory the profile went to.
fn profiled(program: &Path, args: &[&str], p: &str) -> (Output, PathBuf) {
    let dir = scratch("out");
    let lib = library();
    let out = run(
        program,
        args,
        &[
            ("LD_PRELOAD", lib.to_str().unwrap()),
            ("EPHEMERAL_OUTPUT", dir.to_str().unwrap()),
            ("EPHEMERAL_P", p),
        ],
    );
    (out, dir)
}

/// Per site: (taken, not taken, unhooks), from the one edges.csv in `dir`.
fn counts(dir: &Path) -> BTreeMap<u64, (u64, u64, u64)> {
    let csvs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".edges.csv"))
        .collect();
    assert_eq!(csvs.len(), 1, "one profile per run in {}", dir.display());
    let text = std::fs::read_to_string(&csvs[0]).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(ephemeral::output::CSV_HEADER));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            let site = u64::from_str_radix(f[0].trim_start_matches("0x"), 16).unwrap();
            (site, (n(3), n(4), n(7)))
        })
        .collect()
}

fn summary(dir: &Path) -> String {
    let p = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".summary.json"))
        .expect("a summary.json");
    std::fs::read_to_string(p).unwrap()
}

fn field(summary: &str, name: &str) -> u64 {
    let key = format!("\"{name}\": ");
    let at = summary.find(&key).unwrap() + key.len();
    summary[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn assert_same(program: &Path, args: &[&str], p: &str) -> PathBuf {
    let native = run(program, args, &[]);
    let (ours, dir) = profiled(program, args, p);
    let name = program.file_name().unwrap().to_string_lossy();
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&native.stdout),
        "{name} stdout at P={p}"
    );
    assert_eq!(
        String::from_utf8_lossy(&ours.stderr),
        String::from_utf8_lossy(&native.stderr),
        "{name} stderr at P={p}"
    );
    assert_eq!(ours.status, native.status, "{name} exit status at P={p}");
    dir
}

#[test]
fn output_and_exit_status_are_unchanged() {
    let mut programs = Vec::new();
    for (name, flags) in [
        ("quarter", &[][..]),
        ("quarter", &["-no-pie"][..]),
        ("threads", &[][..]),
        ("own_sigtrap", &[][..]),
    ] {
        let Some(p) = build(name, flags) else {
            return;
        };
        programs.push(p);
    }
    for program in &programs {
        // P = 10 churns hooks and unhooks; P = 10^9 keeps every hook.
        for p in ["10", "1000", "1000000000"] {
            let dir = assert_same(program, &[], p);
            let s = summary(&dir);
            assert!(field(&s, "sites") > 0, "{s}");
            assert!(field(&s, "hooked_executions") > 0, "{s}");
        }
    }
}

/// The application's SIGTRAP handler gets every trap that is not a hook's
/// (raise, its own int3), even though it was installed after ours.
#[test]
fn the_applications_own_sigtrap_reaches_it() {
    let Some(program) = build("own_sigtrap", &[]) else {
        return;
    };
    let (out, dir) = profiled(&program, &[], "10");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("handler reported back: 1"), "{text}");
    assert!(text.contains("traps after raise and int3: 6"), "{text}");
    assert!(
        text.contains("signal returned the sigaction handler: 1"),
        "{text}"
    );
    assert!(
        text.contains("old-style handler got 5, handler total 6"),
        "{text}"
    );
    assert!(out.status.success());
    // Five raise()s, one int3, one raise() to the old-style handler.
    assert_eq!(field(&summary(&dir), "foreign_traps"), 7);
}

/// An int3 nobody handles kills the process by SIGTRAP, as natively.
#[test]
fn an_unhandled_trap_keeps_its_default_action() {
    use std::os::unix::process::ExitStatusExt;
    let Some(program) = build("default_trap", &[]) else {
        return;
    };
    // No core file: only the status matters here.
    let shell = |prefix: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -c 0; {prefix} exec {}", program.display()))
            .output()
            .unwrap()
    };
    let native = shell("");
    let dir = scratch("out");
    let ours = shell(&format!(
        "LD_PRELOAD={} EPHEMERAL_OUTPUT={}",
        library().display(),
        dir.display()
    ));
    assert_eq!(native.status.signal(), Some(libc::SIGTRAP));
    assert_eq!(ours.status.signal(), native.status.signal());
    assert_eq!(ours.stdout, native.stdout);
}

/// With P above any site's executions nothing is unhooked and the counts
/// are exact: the 1-in-4 branch shows exactly N/4 one way and 3N/4 the
/// other (at -O2, PIE and not, whichever way the compiler laid it out);
/// at -O0 gcc and clang both jump over the `then` block when the condition
/// fails, so the direction is known too: taken 3N/4, not taken N/4.
#[test]
fn never_unhooked_counts_are_exact() {
    let n = 400_000u64;
    let (rare, common) = (n / 4, 3 * n / 4);
    for flags in [&[][..], &["-no-pie"][..], &["-O0"][..]] {
        let Some(program) = build("quarter", flags) else {
            return;
        };
        let (_, dir) = profiled(&program, &[&n.to_string()], "1000000000");
        let c = counts(&dir);
        let quarter: Vec<(u64, u64)> = c
            .values()
            .map(|&(t, nt, _)| (t, nt))
            .filter(|&(t, nt)| (t, nt) == (rare, common) || (t, nt) == (common, rare))
            .collect();
        assert_eq!(
            quarter.len(),
            1,
            "{flags:?}: one site with N/4 one way: {c:?}"
        );
        if flags == ["-O0"] {
            assert_eq!(quarter[0], (common, rare), "the direction at -O0: {c:?}");
        }
        assert!(c.values().all(|&(_, _, unhooks)| unhooks == 0));
    }
}

/// Four threads through one branch, never unhooked: the shared counters
/// lose no execution (4 × 300000, of which a third taken one way).
#[test]
fn threads_share_exact_counters() {
    let Some(program) = build("threads", &[]) else {
        return;
    };
    let (out, dir) = profiled(&program, &[], "1000000000");
    assert!(out.status.success());
    let total = 4 * 300_000u64;
    let c = counts(&dir);
    let hit = c
        .values()
        .filter(|&&(t, nt, _)| t + nt == total && (t == total / 3 || nt == total / 3))
        .count();
    assert_eq!(hit, 1, "{c:?}");
}

/// At P = 1000 each hooked stretch sees 1000 consecutive executions of
/// the period-4 pattern, which hold 250 ± 1 of the rare direction: the
/// sampled bias is within 1/P of 1/4 per stretch, so within 0.002 in all.
/// The run is long enough (40M executions) for several epochs, and the
/// test checks that it really sampled (unhooked and saw a fraction).
#[test]
fn sampled_bias_is_within_one_in_p() {
    let Some(program) = build("quarter", &[]) else {
        return;
    };
    let n = 40_000_000u64;
    let (out, dir) = profiled(&program, &[&n.to_string()], "1000");
    assert_eq!(out.status.code(), Some(3));
    let c = counts(&dir);
    let s = summary(&dir);
    assert!(field(&s, "epochs") >= 2, "{s}");
    // The loop's branch goes one way all but once; step's is the only
    // site whose rarer direction is above a tenth.
    let mixed: Vec<(u64, u64, u64)> = c
        .values()
        .copied()
        .filter(|&(t, nt, _)| t.min(nt) as f64 > 0.1 * (t + nt) as f64)
        .collect();
    assert_eq!(mixed.len(), 1, "{c:?}");
    let (t, nt, unhooks) = mixed[0];
    assert!(unhooks > 0, "the branch was never unhooked: {c:?}");
    assert!(t + nt < n, "every execution was seen: not sampled");
    let bias = t.min(nt) as f64 / (t + nt) as f64;
    assert!((bias - 0.25).abs() <= 0.002, "bias {bias} from {t}/{nt}");
}

/// The handler path allocates nothing: with malloc, calloc and realloc
/// counted (programs/count_malloc.c, preloaded first), a run that traps
/// 400000 times more allocates no more than a run that barely traps. The
/// slack of 16 covers start-up, whose count varies by a few from run to
/// run (the epoch thread's start) whatever the number of traps.
#[test]
fn the_trap_handler_does_not_allocate() {
    let Some(program) = build("quarter", &[]) else {
        return;
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/count_malloc.c");
    let shim = scratch("shim").join("libcount.so");
    let ok = Command::new("cc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&shim)
        .arg(&src)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cc failed on {}", src.display());
    let preload = format!("{} {}", shim.display(), library().display());
    let allocations = |n: u64, p: &str| -> (u64, u64) {
        let dir = scratch("out");
        let out = run(
            &program,
            &[&n.to_string()],
            &[
                ("LD_PRELOAD", &preload),
                ("EPHEMERAL_OUTPUT", dir.to_str().unwrap()),
                ("EPHEMERAL_P", p),
            ],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        let count = err
            .lines()
            .find_map(|l| l.strip_prefix("allocations "))
            .unwrap_or_else(|| panic!("no count from the shim: {err}"))
            .parse()
            .unwrap();
        (count, field(&summary(&dir), "hooked_executions"))
    };
    for p in ["1000000000", "10"] {
        let (few, few_traps) = allocations(1000, p);
        let (many, many_traps) = allocations(400_000, p);
        if p != "10" {
            assert!(
                many_traps >= few_traps + 400_000,
                "{few_traps} {many_traps}"
            );
        }
        assert!(
            many <= few + 16,
            "P={p}: {few} allocations at {few_traps} traps, {many} at {many_traps}"
        );
    }
}
