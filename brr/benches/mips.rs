//! Functional-mode speed of the emulator in million instructions per second:
//! the paper's microbenchmark (and bzip2 when its sources are available),
//! five runs each, median reported. Run with `cargo bench -p brr`.

use brr::emu::syscall::Process;
use brr::workload::{self, Compiler};
use std::path::{Path, PathBuf};
use std::time::Instant;

const RUNS: usize = 5;

fn median_mips(exe: &Path, args: &[&str], stdin: Option<&Path>) -> (f64, u64) {
    let mut argv = vec![exe.display().to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let mut rates = Vec::new();
    let mut icount = 0;
    for _ in 0..RUNS {
        if let Some(input) = stdin {
            redirect_stdin(input);
        }
        let mut p = Process::load(exe, &argv, &[], 1).expect("load");
        let t = Instant::now();
        p.run(u64::MAX).expect("run");
        let secs = t.elapsed().as_secs_f64();
        icount = p.machine.icount;
        rates.push(icount as f64 / secs / 1e6);
    }
    rates.sort_by(f64::total_cmp);
    (rates[RUNS / 2], icount)
}

fn redirect_stdin(path: &Path) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).expect("open input");
    // SAFETY: dup2 onto fd 0 with a valid open descriptor.
    unsafe { libc::dup2(f.as_raw_fd(), 0) };
}

fn main() {
    // Guest output goes to /dev/null so the table stays readable.
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: keeps our stdout in fd 3 and points fd 1 at /dev/null.
    let out = unsafe { libc::dup(1) };
    unsafe { libc::dup2(null.as_raw_fd(), 1) };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench");
    std::fs::create_dir_all(&dir).unwrap();
    let mut lines = vec!["workload             instructions   MIPS (median of 5)".to_string()];
    for cc in [Compiler::Gcc, Compiler::Clang] {
        let exe = workload::build_static(
            &dir,
            "charclass",
            &[workload::workload_dir().join("charclass.c")],
            cc,
            &[],
        )
        .expect("build");
        let (mips, n) = median_mips(&exe, &["4"], None);
        lines.push(format!("charclass-{:<10} {n:>12}   {mips:.1}", cc.name()));
    }
    if let Ok(tree) = workload::bzip2_source(&dir.join("debian-src")) {
        let input = dir.join("bzip2-input.txt");
        std::fs::write(&input, workload::sample_text(60_000)).unwrap();
        let exe = workload::build_static(
            &dir,
            "bzip2",
            &workload::bzip2_sources(&tree),
            Compiler::Gcc,
            &[],
        )
        .expect("build");
        let (mips, n) = median_mips(&exe, &["-c"], Some(&input));
        lines.push(format!("bzip2-gcc -c         {n:>12}   {mips:.1}"));
    }
    let text = lines.join("\n") + "\n";
    // SAFETY: `out` is the saved stdout descriptor.
    unsafe { libc::write(out, text.as_ptr().cast(), text.len()) };
}
