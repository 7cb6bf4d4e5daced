//! brr-instrument: add edge-profiling instrumentation to compiler assembly.

use anyhow::{bail, Context, Result};
use brr::instrument::{rewrite, Variant, RUNTIME_C};
use std::io::Write;
use std::path::{Path, PathBuf};

const HELP: &str = "\
brr-instrument: add edge-profiling instrumentation at every conditional branch
of gcc or clang assembly (-S output, AT&T syntax)

USAGE:
    brr-instrument --variant VARIANT [--interval N] [-o OUT.s] [--sites SITES.txt] INPUT.s
    brr-instrument --layout PROFILE|none [-o OUT.s] [--unit NAME] INPUT.s
    brr-instrument --runtime > edge_rt.c
    brr-instrument --sigill-runtime > brr_sigill.c
    brr-instrument --ephemeral-runtime > eph_rt.c

VARIANTS:
    none      unchanged code; a marker symbol __brr_site_<unit>_<i> at each jcc
    full      count every execution of both edges of every jcc
    counter   counter-based sampling (Lee and Zilles, Figures 1 and 4): a global
              countdown checked in line at each site; every N-th site execution
              records the edge taken
    brr       branch-on-random sampling (Figure 8): `brr log2(N)-1, stub` before
              each jcc, recording code out of line, taken 1 time in N on average
    ephemeral ephemeral instrumentation (Traub, Schechter and Smith): each jcc
              in its 6-byte rel32 form, hooked at start-up by a jmp to a
              stub that counts the edge; after $BRR_EPH_P executions
              (default 1000) the stub writes the jcc back; a timer signal
              (ITIMER_VIRTUAL, $BRR_EPH_EPOCH_US, default 10000) re-hooks
              every unhooked site. Link with --ephemeral-runtime as well.
    N (--interval) is a power of two, 2 ... 65536, for counter and brr.

Link the program with the runtime (`--runtime` prints its C source; compile it
with -DBRR_INTERVAL=N for the counter variant). At exit the program writes one
line per site, `UNIT SITE TAKEN FALLTHROUGH`, to $BRR_EDGES (default
brr-edges.txt). A brr build runs under brr-run, or natively when linked with
the SIGILL handler (`--sigill-runtime`): real CPUs reject brr with #UD and the
handler emulates it with a thread-local LFSR seeded from $BRR_SEED (default 1,
the same outcomes as `brr-run --seed 1`).

OPTIONS:
    --variant V     none, full, counter, brr or ephemeral
    --layout FILE   instead of instrumenting, lay the code out by the edge
                    profile FILE (lines UNIT SITE TAKEN FALLTHROUGH, as the
                    runtime writes them; weights may be fractional; the unit's
                    sanitised or plain name): mutual-most-likely traces, each
                    laid out so its likely edges fall through (trace layout:
                    branch inversion, no tail duplication). `none` keeps the
                    block order (the baseline; .cfi_* in bodies dropped)
    --interval N    sampling interval for counter and brr
    --unit NAME     unit name in the output (default: the input's file name)
    -o OUT          output file (default: standard output)
    --sites FILE    also write the site table: SITE FUNCTION LINE CONDITION TARGET
    --runtime       print the edge runtime's C source and exit
    --sigill-runtime
                    print the SIGILL handler's C source and exit
    --ephemeral-runtime
                    print the ephemeral variant's runtime (hooking, timer) and exit
    -h, --help      this text
";

fn main() {
    if let Err(e) = real_main() {
        eprintln!("brr-instrument: {e:#}");
        std::process::exit(2);
    }
}

fn real_main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut variant, mut interval, mut out, mut sites, mut input, mut unit) =
        (None, None, None, None, None, None);
    let mut layout_profile: Option<String> = None;
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match a.as_str() {
            "-h" | "--help" => {
                print!("{HELP}");
                return Ok(());
            }
            "--runtime" => {
                print!("{RUNTIME_C}");
                return Ok(());
            }
            "--sigill-runtime" => {
                print!("{}", brr::instrument::sigill_runtime_c());
                return Ok(());
            }
            "--ephemeral-runtime" => {
                print!("{}", brr::instrument::EPHEMERAL_RUNTIME_C);
                return Ok(());
            }
            "--variant" => variant = Some(value("--variant")?),
            "--layout" => layout_profile = Some(value("--layout")?),
            "--interval" => {
                let v = value("--interval")?;
                interval = Some(
                    v.parse::<u32>()
                        .with_context(|| format!("--interval: '{v}' is not a number"))?,
                );
            }
            "--unit" => unit = Some(value("--unit")?),
            "-o" => out = Some(PathBuf::from(value("-o")?)),
            "--sites" => sites = Some(PathBuf::from(value("--sites")?)),
            s if s.starts_with('-') => bail!("unknown option '{s}' (see --help)"),
            _ if input.is_some() => bail!("more than one input file given"),
            _ => input = Some(PathBuf::from(a)),
        }
    }
    if let Some(profile) = layout_profile {
        if variant.is_some() {
            bail!("--layout and --variant exclude each other");
        }
        let input = input.context("no input assembly file given (see --help)")?;
        let text = std::fs::read_to_string(&input)
            .with_context(|| format!("cannot read {}", input.display()))?;
        let unit = unit.unwrap_or_else(|| file_name(&input));
        let weights = if profile == "none" {
            None
        } else {
            let p = std::fs::read_to_string(&profile)
                .with_context(|| format!("cannot read {profile}"))?;
            let all = brr::instrument::layout::parse_profile(&p)
                .map_err(|e| anyhow::anyhow!("{profile}: {e}"))?;
            Some(brr::instrument::layout::weights_for_unit(&all, &unit))
        };
        let l = brr::instrument::layout::layout(&text, weights.as_ref());
        for (name, why) in &l.stats.skipped {
            eprintln!("brr-instrument: {name} left as it was: {why}");
        }
        return match out {
            Some(path) => std::fs::write(&path, &l.text)
                .with_context(|| format!("cannot write {}", path.display())),
            None => Ok(std::io::stdout().write_all(l.text.as_bytes())?),
        };
    }
    let variant = variant.context("--variant is required (none, full, counter, brr, ephemeral)")?;
    let variant = Variant::parse(&variant, interval).map_err(anyhow::Error::msg)?;
    let input = input.context("no input assembly file given (see --help)")?;
    let text = std::fs::read_to_string(&input)
        .with_context(|| format!("cannot read {}", input.display()))?;
    let unit = unit.unwrap_or_else(|| file_name(&input));
    let r = rewrite(&text, &unit, variant);
    match out {
        Some(path) => std::fs::write(&path, &r.text)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => std::io::stdout().write_all(r.text.as_bytes())?,
    }
    if let Some(path) = sites {
        let table: String = r
            .sites
            .iter()
            .map(|s| {
                format!(
                    "{} {} {} {} {}\n",
                    s.index, s.function, s.line, s.condition, s.target
                )
            })
            .collect();
        std::fs::write(&path, table).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unit".into())
}
