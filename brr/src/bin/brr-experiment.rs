//! brr-experiment: run the branch-on-random experiments.

use anyhow::{bail, Result};
use std::path::PathBuf;

const HELP: &str = "\
brr-experiment: branch-on-random experiments (what `bench-harness brr` runs)

USAGE:
    brr-experiment [--quick] [OUT_DIR]

Builds the workloads (the paper's microbenchmark, bzip2 from Debian sources,
a loop that resonates with counter sampling) with every instrumentation
variant, measures the overhead per site of counter-based and brr sampling in
the timing model for intervals 2^1..2^16, and the accuracy (overlap with the
exact edge profile) at 2^10 and 2^13. Writes overhead.csv, accuracy.csv,
summary.md and SVG charts into OUT_DIR (default results/brr).

    --quick     a small subset (microbenchmark and resonance loop only, three
                intervals, two seeds): a smoke test of the whole pipeline
    -h, --help  this text

Intermediate builds go to $BRR_WORK_DIR (default: the system temp dir).
bzip2's sources are fetched with `apt-get source --download-only bzip2`
(needs a bookworm deb-src line in the apt sources).
";

fn main() {
    if let Err(e) = real_main() {
        eprintln!("brr-experiment: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let mut quick = false;
    let mut out = None;
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "-h" | "--help" => {
                print!("{HELP}");
                return Ok(());
            }
            "--quick" => quick = true,
            s if s.starts_with('-') => bail!("unknown option '{s}' (see --help)"),
            _ if out.is_some() => bail!("more than one output directory given"),
            _ => out = Some(PathBuf::from(a)),
        }
    }
    let out = out.unwrap_or_else(|| PathBuf::from("results/brr"));
    brr::experiment::run(&out, quick)?;
    eprintln!("brr-experiment: results in {}", out.display());
    Ok(())
}
