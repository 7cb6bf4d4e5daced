//! `interferometry`: program interferometry (Wang and Jiménez) in brr's
//! timing model.
//!
//! Many semantically identical layouts of a program are linked, each with
//! its input sections (one per function: `-ffunction-sections`, and every
//! member of musl's libc.a) in a different order: `ld.lld-19
//! --shuffle-sections='.text*=SEED'`. Each layout runs under the timing model
//! three times: with the tournament predictor, the perfect one and gshare.
//! The tournament runs give points (MPKI, CPI); the least-squares line
//! CPI = m·MPKI + b through them, extrapolated to MPKI = 0, estimates the
//! CPI under perfect prediction, which the perfect runs measure directly:
//! the check real hardware cannot make. The gshare runs test the line as
//! a predictor of another predictor's CPI: each layout's gshare CPI should
//! fall within the fit's 95% prediction interval at its gshare MPKI.
//!
//! Workloads: bzip2 1.0.8 (Debian's sources) compressing generated text, and
//! `brr/workloads/opmix.c`. Each layout's text symbols are hashed to show
//! the layouts differ, and each run's output is hashed to show they compute
//! the same thing.

use crate::report::{fmt, Report, Table};
use crate::Options;
use anyhow::{bail, Context, Result};
use bench_harness::regression::{self, Fit};
use bench_harness::tools;
use brr::emu::syscall::Process;
use brr::timing::{self, Config, PredictorKind};
use brr::workload::{self, Compiler};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Layouts per workload unless `--layouts` says otherwise.
pub const DEFAULT_LAYOUTS: usize = 100;
const QUICK_LAYOUTS: usize = 6;
/// Jobs at once (the machines here have two cores).
const THREADS: usize = 2;
const LLD: &str = "ld.lld-19";

/// The figures of the paper this experiment is compared with.
const PAPER_R2: f64 = 0.27;
const PAPER_PERLBENCH: (f64, f64, f64) = (0.028, 0.517, 0.26);
const PAPER_LTAGE_GAIN: f64 = 0.048;

/// A program whose layouts are measured.
struct Subject {
    name: &'static str,
    sources: Vec<PathBuf>,
    args: Vec<String>,
}

/// One layout's measurements.
#[derive(Clone, Debug)]
struct Row {
    seed: u64,
    layout_hash: u64,
    symbols: Vec<(String, u64)>,
    tournament: timing::Report,
    perfect: timing::Report,
    gshare: timing::Report,
    output_hash: u64,
    status: i32,
}

/// FNV-1a, a stable hash for layout and output fingerprints.
fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// Runs the experiment with `opts.layouts` layouts per workload.
pub fn run(opts: &Options) -> Result<usize> {
    let n = opts.layouts.unwrap_or(if opts.quick {
        QUICK_LAYOUTS
    } else {
        DEFAULT_LAYOUTS
    });
    if n < 3 {
        bail!(
            "--layouts needs a whole number of at least 3 for interferometry (a line with \
             intervals needs 3 points), got '{n}'"
        );
    }
    let lld = tools::find(LLD)
        .with_context(|| format!("{LLD} is not on PATH: run scripts/install-deps.sh (lld-19)"))?;
    if tools::find("musl-gcc").is_none() {
        bail!("musl-gcc is not on PATH: run scripts/install-deps.sh (musl-tools)");
    }
    let work = opts
        .cache
        .join("interferometry")
        .join(if opts.quick { "quick" } else { "full" });
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    // gcc's -fuse-ld=lld runs `ld.lld`, which Debian only ships as ld.lld-19.
    let shim = work.join("lld-shim");
    std::fs::create_dir_all(&shim)?;
    let link = shim.join("ld.lld");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&lld, &link)
        .with_context(|| format!("cannot link {} to {}", link.display(), lld.display()))?;

    let mut rep = Report::new(
        &opts.results,
        "interferometry",
        "Program interferometry in brr's timing model",
    )?;
    let subjects = subjects(opts, &work)?;
    let config = Config::default();
    let mut md = String::new();
    let mut all_rows = Table::new(&[
        "workload",
        "seed",
        "layout_hash",
        "functions_moved",
        "instructions",
        "cycles",
        "cpi",
        "mpki",
        "l1i_mpki",
        "btb_mpki",
        "perfect_cycles",
        "perfect_cpi",
        "perfect_mpki",
        "perfect_l1i_mpki",
        "perfect_btb_mpki",
        "gshare_cycles",
        "gshare_cpi",
        "gshare_mpki",
        "gshare_pi_low",
        "gshare_pi_high",
        "gshare_in_pi",
        "output_hash",
        "exit_status",
    ]);
    let mut fits = Table::new(&[
        "workload",
        "layouts",
        "distinct_layouts",
        "m",
        "m_ci_low",
        "m_ci_high",
        "b",
        "b_ci_low",
        "b_ci_high",
        "b_pi_low",
        "b_pi_high",
        "r2",
        "mean_cpi",
        "mean_mpki",
        "mean_perfect_cpi",
        "b_minus_perfect_cpi",
        "perfect_cpi_in_b_ci",
        "perfect_layouts_in_pi",
        "predicted_gain",
        "measured_gain",
        "cycles_per_misprediction_m",
        "cycles_per_misprediction_measured",
        "mean_gshare_cpi",
        "mean_gshare_mpki",
        "gshare_layouts_in_pi",
    ]);
    for s in &subjects {
        let rows = match measure(s, &work, &shim, &config, n) {
            Ok(r) => r,
            Err(e) => {
                rep.fail(s.name, "measure layouts", &e);
                continue;
            }
        };
        let analysis = analyse(s.name, &rows);
        let fit = analysis.as_ref().ok().map(|(a, _)| a.fit.clone());
        let first = &rows[0].symbols;
        for r in &rows {
            let moved = moved(first, &r.symbols);
            let (t, p, g) = (&r.tournament, &r.perfect, &r.gshare);
            let band = fit.as_ref().map(|f| gshare_band(f, g));
            all_rows.push(vec![
                s.name.to_string(),
                r.seed.to_string(),
                format!("{:016x}", r.layout_hash),
                moved.to_string(),
                t.instructions.to_string(),
                t.cycles.to_string(),
                fmt(t.cpi(), 5),
                fmt(t.mpki(), 4),
                fmt(t.l1i_mpki(), 4),
                fmt(t.btb_mpki(), 4),
                p.cycles.to_string(),
                fmt(p.cpi(), 5),
                fmt(p.mpki(), 4),
                fmt(p.l1i_mpki(), 4),
                fmt(p.btb_mpki(), 4),
                g.cycles.to_string(),
                fmt(g.cpi(), 5),
                fmt(g.mpki(), 4),
                band.map_or("n/a".into(), |b| fmt(b.0, 5)),
                band.map_or("n/a".into(), |b| fmt(b.1, 5)),
                band.map_or("n/a".into(), |b| b.2.to_string()),
                format!("{:016x}", r.output_hash),
                r.status.to_string(),
            ]);
        }
        match analysis {
            Ok((a, row)) => {
                fits.push(row);
                md += &a.text;
                let svg = scatter_svg(s.name, &rows, &a.fit);
                rep.plot(&format!("scatter-{}", s.name), &svg)?;
                for problem in a.problems {
                    rep.fail(s.name, "check", &anyhow::anyhow!(problem));
                }
            }
            Err(e) => rep.fail(s.name, "fit", &e),
        }
    }
    rep.table("layouts", "Every layout", &all_rows)?;
    rep.table("fit", "Fit per workload", &fits)?;
    let mut summary = summary_md(opts, n, &config, &fits, &md);
    summary += &findings_md(&fits, config.mispredict_penalty)?;
    rep.write("summary.md", &summary)?;
    rep.note(
        "See [summary.md](summary.md) for the method, the fits and the comparison with the paper.",
    );
    rep.finish()
}

fn subjects(opts: &Options, work: &Path) -> Result<Vec<Subject>> {
    let tree = workload::bzip2_source(&opts.cache.join("debian-src"))?;
    let input = work.join("bzip2-input.txt");
    let words = if opts.quick { 1_500 } else { 10_000 };
    let text = workload::sample_text(words);
    if std::fs::read(&input).ok().as_deref() != Some(&text[..]) {
        std::fs::write(&input, &text)
            .with_context(|| format!("cannot write {}", input.display()))?;
    }
    Ok(vec![
        Subject {
            name: "bzip2",
            sources: workload::bzip2_sources(&tree),
            args: vec!["-c".into(), "-9".into(), input.display().to_string()],
        },
        Subject {
            name: "opmix",
            sources: vec![workload::workload_dir().join("opmix.c")],
            args: vec![],
        },
    ])
}

/// Compiles once, then links, fingerprints and runs `n` layouts.
fn measure(s: &Subject, work: &Path, shim: &Path, config: &Config, n: usize) -> Result<Vec<Row>> {
    let objdir = work.join(format!("{}-objs", s.name));
    std::fs::create_dir_all(&objdir)?;
    eprintln!(
        "[interferometry] {}: compiling {} file(s) with -ffunction-sections",
        s.name,
        s.sources.len()
    );
    let mut objs = Vec::new();
    for src in &s.sources {
        let obj = objdir
            .join(src.file_stem().context("source without a name")?)
            .with_extension("o");
        workload::run(
            Compiler::Gcc
                .cc()
                .args(workload::CFLAGS)
                .arg("-ffunction-sections")
                .arg("-c")
                .arg(src)
                .arg("-o")
                .arg(&obj),
        )?;
        objs.push(obj);
    }
    let layout_dir = work.join(format!("{}-layouts", s.name));
    std::fs::create_dir_all(&layout_dir)?;
    let seeds: Vec<u64> = (1..=n as u64).collect();
    let done = AtomicUsize::new(0);
    eprintln!(
        "[interferometry] {}: {n} layouts, each under the tournament, perfect and gshare predictors",
        s.name
    );
    brr::experiment::parallel(THREADS, &seeds, |&seed| {
        let exe = layout_dir.join(format!("{}-{seed}", s.name));
        link_layout(shim, &objs, seed, &exe)?;
        let symbols = text_symbols(&exe)?;
        let mut h = FNV_START;
        for (name, addr) in &symbols {
            h = fnv(name.as_bytes(), h);
            h = fnv(&addr.to_le_bytes(), h);
        }
        let out = layout_dir.join(format!("{}-{seed}.out", s.name));
        let (status, tournament, output_hash) =
            timed(&exe, s, &out, config, PredictorKind::Tournament)?;
        let (pstatus, perfect, phash) = timed(&exe, s, &out, config, PredictorKind::Perfect)?;
        let (gstatus, gshare, ghash) = timed(&exe, s, &out, config, PredictorKind::Gshare)?;
        let _ = std::fs::remove_file(&out);
        if (pstatus, phash) != (status, output_hash) {
            bail!("layout {seed}: the perfect-predictor run gave another output or exit status");
        }
        if (gstatus, ghash) != (status, output_hash) {
            bail!("layout {seed}: the gshare run gave another output or exit status");
        }
        let k = done.fetch_add(1, Ordering::Relaxed) + 1;
        eprintln!(
            "[interferometry] {} layout {k}/{n} (seed {seed}): CPI {:.4} MPKI {:.3}, perfect CPI {:.4}, gshare CPI {:.4} MPKI {:.3}",
            s.name,
            tournament.cpi(),
            tournament.mpki(),
            perfect.cpi(),
            gshare.cpi(),
            gshare.mpki()
        );
        Ok(Row {
            seed,
            layout_hash: h,
            symbols,
            tournament,
            perfect,
            gshare,
            output_hash,
            status,
        })
    })
}

/// Links a static musl executable with lld, text input sections shuffled.
fn link_layout(shim: &Path, objs: &[PathBuf], seed: u64, exe: &Path) -> Result<()> {
    workload::run(
        Command::new("musl-gcc")
            .arg("-static")
            .arg("-B")
            .arg(shim)
            .arg("-fuse-ld=lld")
            // musl-gcc's specs pass -dynamic-linker even with -static; GNU ld
            // ignores it there but lld would add a PT_INTERP.
            .arg("-Wl,--no-dynamic-linker")
            .arg(format!("-Wl,--shuffle-sections=.text*={seed}"))
            .args(objs)
            .arg("-o")
            .arg(exe),
    )
    .with_context(|| format!("linking layout {seed}"))?;
    Ok(())
}

/// The (name, address) of every function symbol, sorted by name.
pub(crate) fn text_symbols(exe: &Path) -> Result<Vec<(String, u64)>> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let data = std::fs::read(exe).with_context(|| format!("cannot read {}", exe.display()))?;
    let file = object::File::parse(&*data)
        .with_context(|| format!("{}: not an ELF file", exe.display()))?;
    let mut v: Vec<(String, u64)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
        .filter_map(|s| Some((s.name().ok()?.to_string(), s.address())))
        .collect();
    v.sort();
    if v.is_empty() {
        bail!("{}: no function symbols (stripped?)", exe.display());
    }
    Ok(v)
}

/// How many of `b`'s functions are at another address than in `a`.
pub(crate) fn moved(a: &[(String, u64)], b: &[(String, u64)]) -> usize {
    // Pairs, not a name → address map: static functions of different
    // files may share a name.
    let old: std::collections::HashSet<(&str, u64)> =
        a.iter().map(|(n, x)| (n.as_str(), *x)).collect();
    b.iter()
        .filter(|(n, x)| !old.contains(&(n.as_str(), *x)))
        .count()
}

/// One run under the timing model with `predictor`: exit status, report,
/// and the hash of what the program wrote on stdout.
fn timed(
    exe: &Path,
    s: &Subject,
    out: &Path,
    config: &Config,
    predictor: PredictorKind,
) -> Result<(i32, timing::Report, u64)> {
    use std::os::fd::IntoRawFd;
    // The same argv[0] for every layout: only code addresses may differ.
    let mut argv = vec![s.name.to_string()];
    argv.extend(s.args.iter().cloned());
    let mut p = Process::load(exe, &argv, &[], 1)
        .with_context(|| format!("cannot load {}", exe.display()))?;
    let file =
        std::fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
    p.stdio[1] = file.into_raw_fd();
    let config = Config {
        predictor,
        ..config.clone()
    };
    let r = timing::run(&mut p, &config, u64::MAX);
    // SAFETY: closes the descriptor opened above for this run only.
    unsafe { libc::close(p.stdio[1]) };
    let (status, report) = r.with_context(|| format!("timing run of {}", exe.display()))?;
    let bytes = std::fs::read(out).with_context(|| format!("cannot read {}", out.display()))?;
    Ok((status, report, fnv(&bytes, FNV_START)))
}

/// The tournament fit's 95% prediction interval at a gshare run's MPKI,
/// and whether the run's CPI lies in it.
fn gshare_band(f: &Fit, g: &timing::Report) -> (f64, f64, bool) {
    let x = g.mpki();
    let (c, h) = (f.predict(x), f.prediction_half_width(x));
    (c - h, c + h, (g.cpi() - c).abs() <= h)
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    s / n.max(1) as f64
}

/// What one workload's layouts say.
struct Analysis {
    fit: Fit,
    text: String,
    problems: Vec<String>,
}

fn analyse(name: &str, rows: &[Row]) -> Result<(Analysis, Vec<String>)> {
    let n = rows.len();
    let points: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (r.tournament.mpki(), r.tournament.cpi()))
        .collect();
    let fit = regression::fit(&points).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    let mut problems = Vec::new();
    let mut hashes: Vec<u64> = rows.iter().map(|r| r.layout_hash).collect();
    hashes.sort_unstable();
    hashes.dedup();
    let distinct = hashes.len();
    if distinct != n {
        problems.push(format!("only {distinct} distinct layouts of {n}"));
    }
    let outputs: std::collections::HashSet<(u64, i32)> =
        rows.iter().map(|r| (r.output_hash, r.status)).collect();
    if outputs.len() != 1 {
        problems.push(format!(
            "layouts disagree on output or exit status: {} different results",
            outputs.len()
        ));
    }
    if let Some(r) = rows.iter().find(|r| r.perfect.mispredictions() != 0) {
        problems.push(format!(
            "the perfect predictor mispredicted in layout {}",
            r.seed
        ));
    }
    let mut instr: Vec<u64> = rows.iter().map(|r| r.tournament.instructions).collect();
    instr.sort_unstable();
    instr.dedup();
    let moved: Vec<usize> = rows[1..]
        .iter()
        .map(|r| moved(&rows[0].symbols, &r.symbols))
        .collect();
    let functions = rows[0].symbols.len();
    let mean_cpi = mean(rows.iter().map(|r| r.tournament.cpi()));
    let mean_mpki = mean(rows.iter().map(|r| r.tournament.mpki()));
    let mean_perfect = mean(rows.iter().map(|r| r.perfect.cpi()));
    let min_perfect = rows
        .iter()
        .map(|r| r.perfect.cpi())
        .fold(f64::MAX, f64::min);
    let max_perfect = rows
        .iter()
        .map(|r| r.perfect.cpi())
        .fold(f64::MIN, f64::max);
    let (m_lo, m_hi) = fit.slope_ci();
    let (b_lo, b_hi) = fit.intercept_ci();
    let pi = fit.prediction_half_width(0.0);
    let in_ci = (b_lo..=b_hi).contains(&mean_perfect);
    let in_pi = rows
        .iter()
        .filter(|r| (r.perfect.cpi() - fit.intercept).abs() <= pi)
        .count();
    let mean_gshare_cpi = mean(rows.iter().map(|r| r.gshare.cpi()));
    let mean_gshare_mpki = mean(rows.iter().map(|r| r.gshare.mpki()));
    let gshare_bands: Vec<(f64, f64, bool)> =
        rows.iter().map(|r| gshare_band(&fit, &r.gshare)).collect();
    let gshare_in_pi = gshare_bands.iter().filter(|b| b.2).count();
    let gshare_mpki_min = rows
        .iter()
        .map(|r| r.gshare.mpki())
        .fold(f64::MAX, f64::min);
    let gshare_mpki_max = rows
        .iter()
        .map(|r| r.gshare.mpki())
        .fold(f64::MIN, f64::max);
    // Signed distance of each gshare CPI from the line, in prediction
    // half-widths: how far outside the interval the misses lie.
    let gshare_resid = mean(
        rows.iter()
            .map(|r| r.gshare.cpi() - fit.predict(r.gshare.mpki())),
    );
    let predicted_gain = mean_cpi / fit.intercept - 1.0;
    let measured_gain = mean_cpi / mean_perfect - 1.0;
    // Cycles a misprediction costs: the slope per 1000 instructions, and
    // the cycles the perfect predictor saved per misprediction it avoided.
    let per_m = fit.slope * 1000.0;
    let per_measured = mean(rows.iter().map(|r| {
        (r.tournament.cycles as f64 - r.perfect.cycles as f64)
            / r.tournament.mispredictions().max(1) as f64
    }));
    let mpki_min = points.iter().map(|p| p.0).fold(f64::MAX, f64::min);
    let mpki_max = points.iter().map(|p| p.0).fold(f64::MIN, f64::max);
    let cpi_min = points.iter().map(|p| p.1).fold(f64::MAX, f64::min);
    let cpi_max = points.iter().map(|p| p.1).fold(f64::MIN, f64::max);
    let mut t = String::new();
    let _ = writeln!(t, "## {name}\n");
    let _ = writeln!(
        t,
        "- Layouts: {n}, {distinct} distinct (hash of every function symbol's name and address); \
         {functions} functions; against layout 1, a median of {} functions moved (min {}, max {}).",
        median_usize(&moved),
        moved.iter().min().unwrap_or(&0),
        moved.iter().max().unwrap_or(&0)
    );
    let _ = writeln!(
        t,
        "- Same computation in every layout: {} (stdout hash and exit status; {} distinct \
         instruction count{}: {}).",
        if outputs.len() == 1 { "yes" } else { "NO" },
        instr.len(),
        if instr.len() == 1 { "" } else { "s" },
        instr
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        t,
        "- Tournament predictor: MPKI {mpki_min:.3} … {mpki_max:.3}, CPI {cpi_min:.4} … {cpi_max:.4} \
         (mean MPKI {mean_mpki:.3}, mean CPI {mean_cpi:.4})."
    );
    let _ = writeln!(
        t,
        "- Fit: **CPI = {:.5}·MPKI + {:.4}**, R² = {:.3}; m 95% CI [{m_lo:.5}, {m_hi:.5}], \
         b 95% CI [{b_lo:.4}, {b_hi:.4}], 95% prediction interval at MPKI = 0: \
         [{:.4}, {:.4}]; residual standard error {:.5}.",
        fit.slope,
        fit.intercept,
        fit.r2,
        fit.intercept - pi,
        fit.intercept + pi,
        fit.s
    );
    let _ = writeln!(
        t,
        "- Perfect predictor, measured: CPI {mean_perfect:.4} on average ({min_perfect:.4} … \
         {max_perfect:.4}), MPKI 0 in every layout. b − measured = {:+.4} ({:+.1}% of the measured \
         CPI); the measured mean is {} b's 95% CI; {in_pi} of {n} layouts' perfect CPI lie in the \
         prediction interval.",
        fit.intercept - mean_perfect,
        (fit.intercept / mean_perfect - 1.0) * 100.0,
        if in_ci { "inside" } else { "outside" }
    );
    let _ = writeln!(
        t,
        "- Gain of perfect prediction (mean CPI / perfect CPI − 1): predicted by the fit \
         {:+.1}%, measured {:+.1}%.",
        predicted_gain * 100.0,
        measured_gain * 100.0
    );
    let _ = writeln!(
        t,
        "- Cost of a misprediction: 1000·m = {per_m:.1} cycles from the fit; {per_measured:.1} \
         cycles measured (cycles saved by the perfect predictor per misprediction avoided); \
         the model's `mispredict_penalty` is {}.\n",
        Config::default().mispredict_penalty
    );
    let _ = writeln!(
        t,
        "- gshare alone (same layouts): MPKI {gshare_mpki_min:.3} … {gshare_mpki_max:.3} (mean \
         {mean_gshare_mpki:.3}), mean CPI {mean_gshare_cpi:.4}; the tournament fit predicts \
         {:.4} at the mean gshare MPKI; the gshare CPI lies on average {gshare_resid:+.4} from \
         the line; {gshare_in_pi} of {n} layouts' gshare CPI lie within the fit's 95% \
         prediction interval at their MPKI.",
        fit.predict(mean_gshare_mpki)
    );
    let _ = writeln!(t, "![{name}](scatter-{name}.svg)\n");
    let row = vec![
        name.to_string(),
        n.to_string(),
        distinct.to_string(),
        fmt(fit.slope, 6),
        fmt(m_lo, 6),
        fmt(m_hi, 6),
        fmt(fit.intercept, 5),
        fmt(b_lo, 5),
        fmt(b_hi, 5),
        fmt(fit.intercept - pi, 5),
        fmt(fit.intercept + pi, 5),
        fmt(fit.r2, 4),
        fmt(mean_cpi, 5),
        fmt(mean_mpki, 4),
        fmt(mean_perfect, 5),
        fmt(fit.intercept - mean_perfect, 5),
        in_ci.to_string(),
        in_pi.to_string(),
        fmt(predicted_gain, 4),
        fmt(measured_gain, 4),
        fmt(per_m, 2),
        fmt(per_measured, 2),
        fmt(mean_gshare_cpi, 5),
        fmt(mean_gshare_mpki, 4),
        gshare_in_pi.to_string(),
    ];
    Ok((
        Analysis {
            fit,
            text: t,
            problems,
        },
        row,
    ))
}

fn median_usize(v: &[usize]) -> usize {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn summary_md(opts: &Options, n: usize, config: &Config, fits: &Table, body: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Program interferometry in brr's timing model{}\n",
        if opts.quick { " (quick run)" } else { "" }
    );
    let _ = writeln!(
        s,
        "Method (after Wang and Jiménez, \"Program Interferometry\"): {n} layouts of each \
         workload, identical in what they compute, differing only in where each function lies. \
         Every source file is compiled once with `musl-gcc {} -ffunction-sections`; each layout \
         is linked static by `{LLD} --shuffle-sections='.text*=SEED'` (SEED = 1 … {n}), which \
         shuffles every text input section — the program's functions and musl's libc.a \
         members. Heap and stack placement are not varied (argv[0] and the environment are the \
         same in every run). Each layout runs under `brr::timing` (the defaults of \
         `brr/timing.conf`: {}-wide fetch, {}-cycle misprediction penalty, {}-entry {}-way BTB, \
         {} KiB L1I) three times: with the tournament predictor, giving a point (MPKI, CPI), \
         with the `perfect` predictor, which never mispredicts, and with `gshare` alone (the \
         tournament's gshare component), whose CPI is checked against the fit's 95% \
         prediction interval at its own MPKI. The line CPI = m·MPKI + b is fitted \
         to the tournament points by least squares (95% Student-t intervals, \
         `bench-harness/src/regression.rs`); b is the CPI the fit predicts with no \
         mispredictions, compared with the CPI the perfect predictor measures in the same \
         layouts. The model is deterministic, so the spread between layouts is due to layout \
         alone, not to noise.\n",
        workload::CFLAGS.join(" "),
        config.fetch_width,
        config.mispredict_penalty,
        config.btb_entries,
        config.btb_ways,
        config.l1i_size / 1024,
    );
    if !opts.quick && n < DEFAULT_LAYOUTS {
        let _ = writeln!(
            s,
            "**{n} layouts per workload, not the default {DEFAULT_LAYOUTS}** (`--layouts {n}`), \
             to fit the time available on this machine.\n"
        );
    }
    let _ = writeln!(
        s,
        "Files: `layouts.csv` (one row per workload and layout: layout hash, functions moved \
         against layout 1, instructions, cycles, CPI, MPKI, L1I and BTB misses per 1000 \
         instructions, the same under the perfect predictor, gshare's cycles, CPI and MPKI \
         with the fit's 95% prediction interval at that MPKI and whether its CPI lies in it, \
         output hash, exit status), \
         `fit.csv` (the fit per workload), `scatter-<workload>.svg` (left: the layouts with \
         their gshare runs as squares and the fitted line, its 95% confidence band and 95% \
         prediction interval; right: the line \
         extrapolated to MPKI = 0 beside the perfect predictor's measured CPIs).\n"
    );
    s += body;
    let _ = writeln!(s, "## Fits\n\n{}", fits.to_markdown());
    let _ = writeln!(
        s,
        "## Against the paper\n\n\
         The paper measured SPEC CPU 2006 on real hardware. It reports that branch \
         mispredictions explain on average {:.0}% of the variance of CPI across layouts \
         (R²); for perlbench it fits CPI = {}·MPKI + {}, from which perfect prediction would \
         gain {:.0}%; and it estimates the average gain of an L-TAGE predictor at {:.1}%. \
         Compare with the R², m, b and gains above, bearing in mind:\n\n\
         - here the perfect-prediction CPI is measured, not only extrapolated, so the \
           question the paper had to leave open — does b really estimate it? — has an \
           answer for this model: see \"b − measured\" per workload;\n\
         - the slope m is the cost of a misprediction per 1000 instructions; in this model it \
           should come near the {}-cycle penalty plus the work lost behind it;\n\
         - in a deterministic model R² measures how much of the layout-to-layout CPI \
           variation goes with MPKI rather than with the other things layout changes here \
           (I-cache and BTB conflicts, fetch-block alignment); on hardware, measurement noise \
           lowers it too;\n\
         - the workloads and inputs are small (bzip2 on generated text, opmix), the \
           predictor tables large (64K entries), so the MPKI spread between layouts is \
           narrow and b is an extrapolation far beyond the points.\n",
        PAPER_R2 * 100.0,
        PAPER_PERLBENCH.0,
        PAPER_PERLBENCH.1,
        PAPER_PERLBENCH.2 * 100.0,
        PAPER_LTAGE_GAIN * 100.0,
        config.mispredict_penalty
    );
    s
}

/// Replaces the "Findings" section of `DIR/summary.md` with one generated
/// from `DIR/fit.csv` (`bench-harness interferometry-findings`): the same
/// text a full run writes, without rerunning the layouts.
pub fn refresh_findings(opts: &Options) -> Result<usize> {
    let dir = opts.results.join("interferometry");
    let csv = dir.join("fit.csv");
    let text =
        std::fs::read_to_string(&csv).with_context(|| format!("cannot read {}", csv.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .with_context(|| format!("{} is empty", csv.display()))?
        .split(',')
        .collect();
    let mut fits = Table::new(&header);
    for (i, l) in lines.enumerate() {
        let cells: Vec<String> = l.split(',').map(str::to_string).collect();
        if cells.len() != header.len() {
            bail!(
                "{} line {}: {} cells under {} headers",
                csv.display(),
                i + 2,
                cells.len(),
                header.len()
            );
        }
        fits.push(cells);
    }
    let path = dir.join("summary.md");
    let old = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let keep = old
        .find(FINDINGS_HEADING)
        .map_or(old.as_str(), |i| &old[..i]);
    let new = format!(
        "{}\n{}",
        keep.trim_end(),
        findings_md(&fits, Config::default().mispredict_penalty)?
    );
    std::fs::write(&path, new).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!(
        "[interferometry] findings regenerated in {}",
        path.display()
    );
    Ok(0)
}

const FINDINGS_HEADING: &str = "## Findings";

/// The "Findings" section, generated from the fit table's numbers: b against
/// the measured perfect-predictor CPI and b's CI, predicted against measured
/// gain, and the slope's cost per misprediction against the measured one.
fn findings_md(fits: &Table, penalty: u32) -> Result<String> {
    let col = |name: &str| -> Result<usize> {
        fits.headers
            .iter()
            .position(|h| h == name)
            .with_context(|| format!("the fit table has no column '{name}'"))
    };
    let mut s = format!(
        "\n{FINDINGS_HEADING}\n\nGenerated from the fit table above ({} workload{}).\n\n",
        fits.rows.len(),
        if fits.rows.len() == 1 { "" } else { "s" }
    );
    for r in &fits.rows {
        let num = |name: &str| -> Result<f64> {
            let c = &r[col(name)?];
            c.parse()
                .with_context(|| format!("fit table column '{name}': '{c}' is not a number"))
        };
        let name = &r[col("workload")?];
        let (b, b_lo, b_hi) = (num("b")?, num("b_ci_low")?, num("b_ci_high")?);
        let perfect = num("mean_perfect_cpi")?;
        let (r2, n) = (num("r2")?, num("layouts")?);
        let in_pi = num("perfect_layouts_in_pi")?;
        let (pg, mg) = (num("predicted_gain")?, num("measured_gain")?);
        let (cm, cmeas) = (
            num("cycles_per_misprediction_m")?,
            num("cycles_per_misprediction_measured")?,
        );
        let inside = (b_lo..=b_hi).contains(&perfect);
        let _ = writeln!(
            s,
            "- **{name}**: R² = {r2:.3} over {n:.0} layouts. The intercept b = {b:.4} \
             (95% CI [{b_lo:.4}, {b_hi:.4}]) against a measured perfect-predictor CPI of \
             {perfect:.4}: b is {} by {:.4} ({:+.1}%), and the measured value lies {} b's CI; \
             {in_pi:.0} of {n:.0} layouts' perfect CPI lie in the 95% prediction interval. \
             Gain of perfect prediction: {:+.1}% predicted by the fit, {:+.1}% measured ({}). \
             Cycles per misprediction: {cm:.1} from the slope, {cmeas:.1} measured, against \
             a modelled penalty of {penalty} ({}).",
            if b >= perfect { "higher" } else { "lower" },
            (b - perfect).abs(),
            (b / perfect - 1.0) * 100.0,
            if inside { "inside" } else { "outside" },
            pg * 100.0,
            mg * 100.0,
            if pg < mg {
                "the fit underestimates it"
            } else {
                "the fit does not underestimate it"
            },
            if cm < cmeas {
                "the slope is lower than the measured cost"
            } else {
                "the slope is not lower than the measured cost"
            },
        );
        // Runs before the gshare runs existed have no such columns.
        if col("gshare_layouts_in_pi").is_ok() {
            let in_pi = num("gshare_layouts_in_pi")?;
            let _ = writeln!(
                s,
                "  Rerun with gshare alone: {in_pi:.0} of {n:.0} layouts' gshare CPI (mean \
                 {:.4} at mean MPKI {:.3}) lie within the tournament fit's 95% prediction \
                 interval at their MPKI: the line {} the other predictor's CPI.",
                num("mean_gshare_cpi")?,
                num("mean_gshare_mpki")?,
                if in_pi == n {
                    "predicts"
                } else if in_pi >= 0.95 * n {
                    "predicts, within the interval's 5% allowance,"
                } else {
                    "does not predict"
                }
            );
        }
    }
    let _ = writeln!(
        s,
        "\nThe CI of b reflects only the scatter of the points around the line, not any bias \
         of extrapolating it to MPKI = 0."
    );
    Ok(s)
}

/// "Nice" ticks covering `lo..hi`: steps of 1, 2 or 5 × 10^k.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|k| k * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let mut v = Vec::new();
    let mut x = (lo / step).ceil() * step;
    while x <= hi + step * 1e-9 {
        v.push(x);
        x += step;
    }
    v
}

fn tick_label(v: f64, step: f64) -> String {
    let digits = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    format!("{v:.digits$}")
}

/// One panel of the scatter figure: axes, ticks and a mapping to pixels.
struct Panel {
    /// Names the panel's clip path (unique within the figure).
    id: &'static str,
    x0: f64,
    y0: f64,
    w: f64,
    h: f64,
    xr: (f64, f64),
    yr: (f64, f64),
}

impl Panel {
    fn px(&self, x: f64) -> f64 {
        self.x0 + (x - self.xr.0) / (self.xr.1 - self.xr.0) * self.w
    }
    fn py(&self, y: f64) -> f64 {
        self.y0 + self.h - (y - self.yr.0) / (self.yr.1 - self.yr.0) * self.h
    }
    fn axes(&self, svg: &mut String, title: &str) {
        let _ = writeln!(
            svg,
            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="black"/>"#,
            self.x0, self.y0, self.w, self.h
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="13">{title}</text>"#,
            self.x0 + self.w / 2.0,
            self.y0 - 8.0
        );
        let xt = ticks(self.xr.0, self.xr.1);
        let xs = if xt.len() > 1 { xt[1] - xt[0] } else { 1.0 };
        for x in &xt {
            let px = self.px(*x);
            let _ = writeln!(
                svg,
                r##"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/><text x="{px:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"##,
                self.y0,
                self.y0 + self.h,
                self.y0 + self.h + 15.0,
                tick_label(*x, xs)
            );
        }
        let yt = ticks(self.yr.0, self.yr.1);
        let ys = if yt.len() > 1 { yt[1] - yt[0] } else { 1.0 };
        for y in &yt {
            let py = self.py(*y);
            let _ = writeln!(
                svg,
                r##"<line x1="{:.1}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end" font-size="11">{}</text>"##,
                self.x0,
                self.x0 + self.w,
                self.x0 - 5.0,
                py + 4.0,
                tick_label(*y, ys)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12">branch mispredictions per 1000 instructions (MPKI)</text>"#,
            self.x0 + self.w / 2.0,
            self.y0 + self.h + 34.0
        );
        let _ = writeln!(
            svg,
            r#"<text transform="translate({:.1},{:.1}) rotate(-90)" text-anchor="middle" font-size="12">cycles per instruction (CPI)</text>"#,
            self.x0 - 48.0,
            self.y0 + self.h / 2.0
        );
    }
    /// The fitted line with its confidence band and prediction interval,
    /// clipped to the panel.
    fn fit(&self, svg: &mut String, f: &Fit) {
        let _ = writeln!(
            svg,
            r#"<clipPath id="{}"><rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}"/></clipPath><g clip-path="url(#{})">"#,
            self.id, self.x0, self.y0, self.w, self.h, self.id
        );
        let steps = 60;
        let xs: Vec<f64> = (0..=steps)
            .map(|i| self.xr.0 + (self.xr.1 - self.xr.0) * i as f64 / steps as f64)
            .collect();
        let path = |g: &dyn Fn(f64) -> f64| {
            xs.iter()
                .map(|&x| format!("{:.1},{:.1}", self.px(x), self.py(g(x))))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let upper = path(&|x| f.predict(x) + f.confidence_half_width(x));
        let lower: Vec<String> = xs
            .iter()
            .rev()
            .map(|&x| {
                format!(
                    "{:.1},{:.1}",
                    self.px(x),
                    self.py(f.predict(x) - f.confidence_half_width(x))
                )
            })
            .collect();
        let _ = writeln!(
            svg,
            r##"<polygon points="{upper} {}" fill="#0072B2" fill-opacity="0.18" stroke="none"/>"##,
            lower.join(" ")
        );
        for sign in [1.0, -1.0] {
            let _ = writeln!(
                svg,
                r##"<polyline points="{}" fill="none" stroke="#0072B2" stroke-dasharray="5,4"/>"##,
                path(&|x| f.predict(x) + sign * f.prediction_half_width(x))
            );
        }
        let _ = writeln!(
            svg,
            r##"<polyline points="{}" fill="none" stroke="#0072B2" stroke-width="2"/>"##,
            path(&|x| f.predict(x))
        );
        svg.push_str("</g>\n");
    }
    fn dot(&self, svg: &mut String, x: f64, y: f64, color: &str) {
        let _ = writeln!(
            svg,
            r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}" fill-opacity="0.75"/>"#,
            self.px(x),
            self.py(y)
        );
    }
}

/// Padded range of `v`.
fn padded(v: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let lo = v.clone().fold(f64::MAX, f64::min);
    let hi = v.fold(f64::MIN, f64::max);
    let pad = ((hi - lo) * 0.08).max(hi.abs() * 1e-4).max(1e-9);
    (lo - pad, hi + pad)
}

/// The figure of one workload: the layouts with the fit (left), and the
/// fit extrapolated to MPKI = 0 beside the measured perfect-prediction CPIs
/// (right).
fn scatter_svg(name: &str, rows: &[Row], f: &Fit) -> String {
    let (width, height) = (1000.0, 470.0);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{:.0}" y="24" text-anchor="middle" font-size="16">{name}: CPI = {:.5}·MPKI + {:.4} (R² {:.3}, {} layouts)</text>"#,
        width / 2.0,
        f.slope,
        f.intercept,
        f.r2,
        rows.len()
    );
    let tour = |r: &Row| (r.tournament.mpki(), r.tournament.cpi());
    let gsh = |r: &Row| (r.gshare.mpki(), r.gshare.cpi());
    let xr = padded(rows.iter().flat_map(|r| [tour(r).0, gsh(r).0]));
    let band = |x: f64| f.prediction_half_width(x);
    let yr = padded(
        rows.iter()
            .flat_map(|r| [tour(r).1, gsh(r).1])
            .chain([
                f.predict(xr.0) - band(xr.0),
                f.predict(xr.1) + band(xr.1),
                f.predict(xr.0) + band(xr.0),
                f.predict(xr.1) - band(xr.1),
            ])
            .collect::<Vec<_>>()
            .into_iter(),
    );
    let left = Panel {
        id: "layouts",
        x0: 80.0,
        y0: 60.0,
        w: 380.0,
        h: 330.0,
        xr,
        yr,
    };
    left.axes(&mut svg, "tournament predictor, one point per layout");
    left.fit(&mut svg, f);
    for r in rows {
        let (x, y) = tour(r);
        left.dot(&mut svg, x, y, "#0072B2");
        // Squares, not circles: the other predictor, which the fit did
        // not see.
        let (x, y) = gsh(r);
        let _ = writeln!(
            svg,
            r##"<rect x="{:.1}" y="{:.1}" width="6" height="6" fill="#009E73" fill-opacity="0.75"/>"##,
            left.px(x) - 3.0,
            left.py(y) - 3.0
        );
    }
    let xr2 = (0.0, xr.1);
    let yr2 = padded(
        rows.iter()
            .flat_map(|r| [tour(r).1, r.perfect.cpi()])
            .chain([
                f.intercept - band(0.0),
                f.intercept + band(0.0),
                f.predict(xr.1) + band(xr.1),
            ])
            .collect::<Vec<_>>()
            .into_iter(),
    );
    let right = Panel {
        id: "extrapolated",
        x0: 570.0,
        y0: 60.0,
        w: 380.0,
        h: 330.0,
        xr: xr2,
        yr: yr2,
    };
    right.axes(
        &mut svg,
        "extrapolated to MPKI = 0 vs the perfect predictor",
    );
    right.fit(&mut svg, f);
    for r in rows {
        let (x, y) = tour(r);
        right.dot(&mut svg, x, y, "#0072B2");
        right.dot(&mut svg, 0.0, r.perfect.cpi(), "#E69F00");
    }
    let legend = [
        ("#0072B2", "layout, tournament predictor"),
        ("#E69F00", "same layout, perfect predictor (measured)"),
    ];
    let y = height - 34.0;
    let _ = writeln!(
        svg,
        r##"<rect x="{}" y="{}" width="8" height="8" fill="#009E73"/><text x="{}" y="{}" font-size="12">same layout, gshare (not fitted)</text>"##,
        90.0 + 330.0 * 2.0 - 4.0,
        y - 8.0,
        90.0 + 330.0 * 2.0 + 10.0,
        y
    );
    for (i, (c, label)) in legend.iter().enumerate() {
        let x = 90.0 + 330.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<circle cx="{x}" cy="{}" r="4" fill="{c}"/><text x="{}" y="{}" font-size="12">{label}</text>"#,
            y - 4.0,
            x + 10.0,
            y
        );
    }
    let _ = writeln!(
        svg,
        r##"<text x="90" y="{}" font-size="12">solid line: least-squares fit; shaded band: its 95% confidence interval; dashed lines: 95% prediction interval</text>"##,
        height - 12.0
    );
    svg += "</svg>\n";
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let t = ticks(0.512, 0.527);
        assert!(t.len() >= 3 && t[0] >= 0.512 && *t.last().unwrap() <= 0.527);
        assert_eq!(tick_label(0.515, 0.005), "0.515");
    }

    #[test]
    fn moved_counts_functions_at_new_addresses() {
        let a = vec![
            ("f".to_string(), 1),
            ("g".to_string(), 2),
            ("g".to_string(), 5),
        ];
        let b = vec![
            ("f".to_string(), 1),
            ("g".to_string(), 3),
            ("g".to_string(), 5),
        ];
        assert_eq!(moved(&a, &b), 1);
        assert_eq!(moved(&a, &a), 0, "two statics named g are not a move");
    }
}
