//! `fdo-layouts`: layout-noise error bars for the FDO speedups. Program
//! interferometry (Wang and Jiménez) shows that where the linker happens to
//! put each function moves run time by a few per cent on its own; the FDO
//! speedups of `fdo` differ by about that much. Here every variant is
//! compiled once with `-ffunction-sections` and linked `K` times by lld with
//! `--shuffle-sections='.text*=SEED'` (from lld's `--reproduce` archive of
//! the one real link, so no recompilation), each layout timed on the
//! evaluation input in interleaved rounds. The speedup of a variant is then
//! a distribution over layouts, not one number from one arbitrary layout.
//!
//! Results go beside `fdo`'s in `results/fdo/`: layouts.csv (every run),
//! layouts_summary.csv, layouts_pairs.csv, layouts_ffs.csv,
//! layouts_binaries.csv, layouts.svg, and a section of README.md between
//! the markers below (which `fdo` keeps when it rewrites the README).

use super::{instrumented_pgo_with, profgen_profile, rebuilt_kinds, Training};
use super::{QUICK_TRAIN_RUNS, TRAIN_RUNS};
use crate::interferometry::{moved, text_symbols};
use crate::profiler::Tracer;
use crate::quality;
use crate::report::{fmt, median, Table};
use crate::runner::{self, Cmd, Timing};
use crate::workloads::{self, Input, Kind, Workload, Workspace};
use crate::Options;
use anyhow::{bail, Context, Result};
use breakdance_protocol::Lookahead;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const DEFAULT_LAYOUTS: usize = 10;
const QUICK_LAYOUTS: usize = 2;
const ROUNDS: usize = 3;
const QUICK_ROUNDS: usize = 1;
/// Bootstrap resamples for the speedup intervals.
const RESAMPLES: usize = 4000;
const LLD: &str = "ld.lld-19";
pub(crate) const BEGIN: &str = "<!-- fdo-layouts: begin (written by bench-harness fdo-layouts) -->";
pub(crate) const END: &str = "<!-- fdo-layouts: end -->";

/// The variants linked in shuffled layouts; the first is the baseline.
const BASELINE: &str = "baseline -O2";
const EMULATE: &str = "AutoFDO, ours (emulate) via llvm-profgen";
const LONG: &str = "AutoFDO, ours (emulate, N = 128, 3 ms) via llvm-profgen";
const EXACT: &str = "AutoFDO, exact (callgrind)";
const PGO: &str = "instrumented PGO";

/// How a timed binary was linked.
#[derive(Clone, Debug, PartialEq)]
enum Layout {
    /// `fdo`'s own baseline: no -ffunction-sections, the system's GNU ld.
    GnuLd,
    /// No -ffunction-sections, lld.
    LldNoSections,
    /// -ffunction-sections, lld in input order (the compiler's own link).
    Unshuffled,
    /// -ffunction-sections, lld with `--shuffle-sections='.text*=SEED'`.
    Seed(u64),
}

impl Layout {
    fn label(&self) -> String {
        match self {
            Layout::GnuLd => "GNU ld, no -ffunction-sections".into(),
            Layout::LldNoSections => "lld, no -ffunction-sections".into(),
            Layout::Unshuffled => "lld, unshuffled".into(),
            Layout::Seed(s) => format!("seed {s}"),
        }
    }

    fn seed(&self) -> String {
        match self {
            Layout::Seed(s) => s.to_string(),
            _ => String::new(),
        }
    }
}

/// One binary to time.
struct Bin {
    variant: &'static str,
    layout: Layout,
    path: PathBuf,
    times: Vec<Timing>,
    failed: bool,
}

/// The flags of every shuffled variant: one section per function, lld, the
/// hot/unlikely prefixes FDO gives functions kept as output sections (so a
/// shuffle reorders functions within hot, plain and unlikely text, never
/// undoing the split the profile asked for), and the link archived.
fn section_flags(archive: &Path) -> Vec<String> {
    vec![
        "-ffunction-sections".into(),
        "-fuse-ld=lld".into(),
        "-Wl,-z,keep-text-section-prefix".into(),
        format!("-Wl,--reproduce={}", archive.display()),
    ]
}

pub fn run(opts: &Options) -> Result<usize> {
    let k = opts.layouts.unwrap_or(if opts.quick {
        QUICK_LAYOUTS
    } else {
        DEFAULT_LAYOUTS
    });
    if k < 2 {
        bail!("--layouts must be at least 2 for fdo-layouts (a spread needs two layouts), got {k}");
    }
    let rounds = if opts.quick { QUICK_ROUNDS } else { ROUNDS };
    let train_runs = if opts.quick {
        QUICK_TRAIN_RUNS
    } else {
        TRAIN_RUNS
    };
    let lld = runner::require_tool(LLD, "lld-19")?;
    let tar = runner::require_tool("tar", "tar")?;
    let out = opts.results.join("fdo");
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let ws = Workspace {
        cache: opts.cache.clone(),
        quick: opts.quick,
    };
    let tracer = Tracer::locate();
    let mut failures: Vec<(String, String, String)> = Vec::new();
    let mut fail = |w: &str, step: &str, e: &anyhow::Error| {
        eprintln!("[fdo-layouts] FAILED {w}: {step}: {e:#}");
        failures.push((w.to_string(), step.to_string(), format!("{e:#}")));
    };
    let mut plan: Vec<(Workload, Vec<Bin>)> = Vec::new();
    let mut checks = Table::new(&[
        "workload",
        "variant",
        "layout",
        "binary",
        "functions",
        "functions moved from unshuffled",
        "output as unshuffled",
    ]);
    for kind in rebuilt_kinds(opts.quick) {
        let name = kind.name();
        let w = match workloads::prepare(&ws, kind) {
            Ok(w) => w,
            Err(e) => {
                fail(name, "prepare", &e);
                continue;
            }
        };
        let dir = ws.cache.join("runs").join("fdo-layouts").join(name);
        std::fs::create_dir_all(&dir)?;
        let mut bins: Vec<Bin> = Vec::new();
        let t = || tracer.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"));
        let archive = |tag: &str| dir.join(format!("{tag}.tar"));
        let build = |tag: &str, extra: &[String]| -> Result<PathBuf> {
            let mut flags = section_flags(&archive(tag));
            flags.extend_from_slice(extra);
            w.build_variant(&ws, &format!("layouts-{tag}"), &flags)
        };
        let sample_use = |p: &Path| vec![format!("-fprofile-sample-use={}", p.display())];
        type Step<'a> = Box<dyn Fn() -> Result<PathBuf> + 'a>;
        let mut steps: Vec<(&'static str, &str, Step)> = vec![
            (BASELINE, "baseline", Box::new(|| build("baseline", &[]))),
            (
                EMULATE,
                "afdo-emulate",
                Box::new(|| {
                    let tr = Training::at_1ms(Lookahead::Emulate);
                    let prof = profgen_profile(t()?, &w, &dir, train_runs, tr)?;
                    build("afdo-emulate", &sample_use(&prof))
                }),
            ),
        ];
        if !opts.quick {
            steps.push((
                LONG,
                "afdo-emulate-n128-p3",
                Box::new(|| {
                    let tr = Training {
                        mode: Lookahead::Emulate,
                        period_ns: 3_000_000,
                        lbr: 128,
                    };
                    let prof = profgen_profile(t()?, &w, &dir, train_runs, tr)?;
                    build("afdo-emulate-n128-p3", &sample_use(&prof))
                }),
            ));
            steps.push((
                EXACT,
                "afdo-exact",
                Box::new(|| {
                    let r = quality::reference(&ws, &w, Input::Train)?;
                    let prof = quality::exact_profile(&r, &w.binary, &dir)?;
                    build("afdo-exact", &sample_use(&prof))
                }),
            ));
        }
        steps.push((
            PGO,
            "pgo",
            Box::new(|| {
                instrumented_pgo_with(&ws, &w, &dir, &section_flags(&archive("pgo")), "-layouts")
            }),
        ));
        for (variant, tag, step) in &steps {
            eprintln!("[fdo-layouts] {name}: {variant}");
            let dir_name = match *tag {
                "pgo" => "pgo-use-layouts".to_string(),
                t => format!("layouts-{t}"),
            };
            let built = ws
                .cache
                .join("build")
                .join(name)
                .join(dir_name)
                .join(w.binary.file_name().context("a binary without a name")?);
            let reused = opts.reuse_builds && built.is_file() && archive(tag).is_file();
            if reused {
                eprintln!("[fdo-layouts] {name}: reusing {}", built.display());
            }
            let linked = if reused { Ok(built) } else { step() }.and_then(|unshuffled| {
                let layouts = relink(&lld, &tar, &archive(tag), &dir.join(tag), k)?;
                Ok((unshuffled, layouts))
            });
            let (unshuffled, layouts) = match linked {
                Ok(v) => v,
                Err(e) => {
                    fail(name, variant, &e);
                    continue;
                }
            };
            let mut add = |layout: Layout, path: PathBuf| {
                bins.push(Bin {
                    variant,
                    layout,
                    path,
                    times: Vec::new(),
                    failed: false,
                })
            };
            add(Layout::Unshuffled, unshuffled);
            for (seed, path) in layouts {
                add(Layout::Seed(seed), path);
            }
        }
        drop(steps);
        // The baseline as `fdo` links it, and with lld: after the shuffled
        // variants, so the check below compares them with the baseline's
        // unshuffled link.
        let fixed = |layout: Layout, path: PathBuf| Bin {
            variant: BASELINE,
            layout,
            path,
            times: Vec::new(),
            failed: false,
        };
        bins.push(fixed(Layout::GnuLd, w.binary.clone()));
        eprintln!("[fdo-layouts] {name}: baseline, lld without -ffunction-sections");
        let lld_built = ws.cache.join("build").join(name).join("layouts-lld");
        let lld_built = lld_built.join(w.binary.file_name().context("a binary without a name")?);
        let lld_build = if opts.reuse_builds && lld_built.is_file() {
            Ok(lld_built)
        } else {
            w.build_variant(&ws, "layouts-lld", &["-fuse-ld=lld".to_string()])
        };
        match lld_build {
            Ok(path) => bins.push(fixed(Layout::LldNoSections, path)),
            Err(e) => fail(name, "baseline, lld without -ffunction-sections", &e),
        }
        // Every layout must compute what its unshuffled link computes.
        if let Err(e) = check_layouts(&w, &ws.cache, &dir, &mut bins, &mut checks) {
            fail(name, "layout check", &e);
            continue;
        }
        plan.push((w, bins));
    }
    // Interleaved: each round runs every binary of every workload once,
    // layouts in turn, each variant's seed j next to the others' seed j.
    for round in 0..rounds {
        for (w, bins) in plan.iter_mut() {
            eprintln!(
                "[fdo-layouts] {}: timing round {}/{rounds} ({} binaries)",
                w.name(),
                round + 1,
                bins.len()
            );
            for i in interleaved(bins) {
                let b = &mut bins[i];
                if b.failed {
                    continue;
                }
                match runner::run_timed(&w.command_with(&b.path, Input::Eval)) {
                    Ok(t) => b.times.push(t),
                    Err(e) => {
                        fail(
                            w.name(),
                            &format!("timing {} ({})", b.variant, b.layout.label()),
                            &e,
                        );
                        b.failed = true;
                    }
                }
            }
        }
    }
    let failed = failures.len();
    write(&out, &plan, k, rounds, &checks, &failures, opts)?;
    Ok(failed)
}

/// The order binaries run in within a round: the j-th binary of every
/// variant, then the (j+1)-th, so load that drifts during a round falls on
/// all variants alike rather than on whichever was timed in a block.
fn interleaved(bins: &[Bin]) -> Vec<usize> {
    let mut variants: Vec<&str> = Vec::new();
    let mut key: Vec<(usize, usize, usize)> = Vec::new();
    let mut seen: Vec<usize> = Vec::new();
    for (i, b) in bins.iter().enumerate() {
        let v = match variants.iter().position(|v| *v == b.variant) {
            Some(v) => v,
            None => {
                variants.push(b.variant);
                seen.push(0);
                variants.len() - 1
            }
        };
        key.push((seen[v], v, i));
        seen[v] += 1;
    }
    key.sort_unstable();
    key.into_iter().map(|(_, _, i)| i).collect()
}

/// Unpacks lld's `--reproduce` archive into `dir` and links it again for
/// seeds 1..=k; returns (seed, binary).
fn relink(
    lld: &Path,
    tar: &Path,
    archive: &Path,
    dir: &Path,
    k: usize,
) -> Result<Vec<(u64, PathBuf)>> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    runner::run(
        &Cmd::new(tar)
            .arg("xf")
            .arg(archive)
            .arg("-C")
            .arg(dir)
            .cwd(dir),
    )
    .with_context(|| format!("unpacking {}", archive.display()))?;
    // The archive holds one directory, named after it.
    let stem = archive.file_stem().context("an archive without a name")?;
    let root = dir.join(stem);
    if !root.join("response.txt").is_file() {
        bail!(
            "{} holds no {}/response.txt",
            archive.display(),
            stem.to_string_lossy()
        );
    }
    (1..=k as u64)
        .map(|seed| {
            let exe = dir.join(format!("seed-{seed}"));
            runner::run(
                &Cmd::new(lld)
                    .arg("@response.txt")
                    .arg(format!("--shuffle-sections=.text*={seed}"))
                    .arg("-o")
                    .arg(&exe)
                    .cwd(&root),
            )
            .with_context(|| format!("linking layout {seed} from {}", archive.display()))?;
            Ok((seed, exe))
        })
        .collect()
}

/// Runs every binary once on the evaluation input (untimed; a warm-up as
/// well) and fails unless each shuffled layout prints what its variant's
/// unshuffled link prints and has its functions somewhere else.
fn check_layouts(
    w: &Workload,
    cache: &Path,
    dir: &Path,
    bins: &mut [Bin],
    checks: &mut Table,
) -> Result<()> {
    let output = |b: &Bin| -> Result<Vec<u8>> {
        let file = dir.join("check.out");
        runner::run(&w.command_with(&b.path, Input::Eval).stdout_to(&file))?;
        let bytes = std::fs::read(&file)?;
        let _ = std::fs::remove_file(&file);
        // speedtest1 prints each test's time: compare the text around them.
        Ok(if w.kind == Kind::Sqlite {
            mask_digits(&bytes)
        } else {
            bytes
        })
    };
    // Per variant: its unshuffled link's output and functions.
    type Reference = (&'static str, Vec<u8>, Vec<(String, u64)>);
    let mut reference: Vec<Reference> = Vec::new();
    for b in bins.iter() {
        let syms = text_symbols(&b.path)?;
        let out = output(b)?;
        let (moved_n, compared) = if b.layout == Layout::Unshuffled {
            reference.push((b.variant, out, syms.clone()));
            (0, "reference")
        } else {
            let Some((v, ref_out, ref_syms)) = reference.iter().find(|r| r.0 == b.variant) else {
                bail!(
                    "{}: {} before its unshuffled link",
                    b.variant,
                    b.layout.label()
                );
            };
            if *ref_out != out {
                bail!(
                    "{v}: {} prints other output than the unshuffled link",
                    b.layout.label()
                );
            }
            let n = moved(ref_syms, &syms);
            if let Layout::Seed(seed) = b.layout {
                if n == 0 {
                    bail!("{v}: layout {seed} has every function where the unshuffled link has it");
                }
            }
            (n, "yes")
        };
        let shown = b.path.strip_prefix(cache).unwrap_or(&b.path);
        checks.push(vec![
            w.name().into(),
            b.variant.into(),
            b.layout.label(),
            shown.display().to_string(),
            syms.len().to_string(),
            moved_n.to_string(),
            compared.into(),
        ]);
    }
    Ok(())
}

/// Each run of ASCII digits replaced by one `#`.
fn mask_digits(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    for &c in bytes {
        if c.is_ascii_digit() {
            if out.last() != Some(&b'#') {
                out.push(b'#');
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Sample standard deviation (n − 1).
fn sd(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return f64::NAN;
    }
    let m = mean(v);
    (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// The `q` quantile (0..=1) by linear interpolation between order statistics.
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    let pos = q * (s.len() - 1) as f64;
    let (i, f) = (pos.floor() as usize, pos.fract());
    if i + 1 < s.len() {
        s[i] * (1.0 - f) + s[i + 1] * f
    } else {
        s[i]
    }
}

/// mean(a) / mean(b) and its 95% percentile-bootstrap interval, layouts of
/// `a` and of `b` resampled independently (fixed seed: reproducible).
fn boot_ratio(a: &[f64], b: &[f64]) -> (f64, f64, f64) {
    let point = mean(a) / mean(b);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let mut draw = |v: &[f64]| (0..v.len()).map(|_| v[next(v.len())]).sum::<f64>() / v.len() as f64;
    let ratios: Vec<f64> = (0..RESAMPLES).map(|_| draw(a) / draw(b)).collect();
    (point, quantile(&ratios, 0.025), quantile(&ratios, 0.975))
}

/// Per-layout CPU time (median over rounds) of one variant's shuffled
/// layouts, and the pooled within-layout (run-to-run) standard deviation.
fn per_layout(bins: &[Bin], variant: &str) -> (Vec<f64>, f64) {
    let mut medians = Vec::new();
    let (mut ss, mut df) = (0.0, 0usize);
    for b in bins
        .iter()
        .filter(|b| b.variant == variant && matches!(b.layout, Layout::Seed(_)) && !b.failed)
    {
        let t: Vec<f64> = b.times.iter().map(Timing::cpu_s).collect();
        if t.is_empty() {
            continue;
        }
        medians.push(median(&t));
        if t.len() > 1 {
            let m = mean(&t);
            ss += t.iter().map(|x| (x - m).powi(2)).sum::<f64>();
            df += t.len() - 1;
        }
    }
    let within = if df > 0 {
        (ss / df as f64).sqrt()
    } else {
        f64::NAN
    };
    (medians, within)
}

fn fixed_time(bins: &[Bin], variant: &str, layout: &Layout) -> f64 {
    bins.iter()
        .find(|b| b.variant == variant && b.layout == *layout && !b.failed)
        .map(|b| median(&b.times.iter().map(Timing::cpu_s).collect::<Vec<_>>()))
        .unwrap_or(f64::NAN)
}

/// Every result file, and the README section.
fn write(
    out: &Path,
    plan: &[(Workload, Vec<Bin>)],
    k: usize,
    rounds: usize,
    checks: &Table,
    failures: &[(String, String, String)],
    opts: &Options,
) -> Result<()> {
    let (quick, reuse) = (opts.quick, opts.reuse_builds);
    let put = |file: &str, text: &str| {
        let p = out.join(file);
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))
    };
    let mut raw = Table::new(&[
        "workload", "variant", "layout", "seed", "round", "wall_s", "cpu_s",
    ]);
    for (w, bins) in plan {
        for b in bins {
            for (r, t) in b.times.iter().enumerate() {
                raw.push(vec![
                    w.name().into(),
                    b.variant.into(),
                    b.layout.label(),
                    b.layout.seed(),
                    r.to_string(),
                    fmt(t.wall_s, 4),
                    fmt(t.cpu_s(), 4),
                ]);
            }
        }
    }
    put("layouts.csv", &raw.to_csv())?;
    put("layouts_binaries.csv", &checks.to_csv())?;
    let mut fails = Table::new(&["workload", "step", "error"]);
    for (w, s, e) in failures {
        fails.push(vec![w.clone(), s.clone(), e.clone()]);
    }
    put("layouts_failures.csv", &fails.to_csv())?;

    let mut summary = Table::new(&[
        "workload",
        "variant",
        "layouts",
        "rounds",
        "mean CPU time (s)",
        "speedup",
        "speedup 95% CI",
        "single-layout 95% range",
        "layout CV (%)",
        "run-to-run CV (%)",
        "unshuffled lld speedup",
        "exceeds layout noise",
    ]);
    let mut pairs = Table::new(&[
        "workload",
        "variant A",
        "variant B",
        "time B / time A",
        "95% CI",
        "exceeds layout noise",
    ]);
    let mut ffs = Table::new(&[
        "workload",
        "baseline binary",
        "CPU time (s)",
        "time / shuffled -ffunction-sections mean",
        "percentile among shuffled layouts",
    ]);
    let mut plot: Vec<PlotRow> = Vec::new();
    for (w, bins) in plan {
        let name = w.name();
        let (base, _) = per_layout(bins, BASELINE);
        if base.is_empty() {
            continue;
        }
        let base_mean = mean(&base);
        let variants: Vec<&'static str> = {
            let mut v: Vec<&'static str> = Vec::new();
            for b in bins.iter().filter(|b| matches!(b.layout, Layout::Seed(_))) {
                if !v.contains(&b.variant) {
                    v.push(b.variant);
                }
            }
            v
        };
        let mut layouts_of = Vec::new();
        for &v in &variants {
            let (t, within) = per_layout(bins, v);
            if t.is_empty() {
                continue;
            }
            let m = mean(&t);
            let (s, lo, hi) = boot_ratio(&base, &t);
            let single: Vec<f64> = t.iter().map(|x| base_mean / x).collect();
            let exceeds = if v == BASELINE {
                String::new()
            } else if lo > 1.0 || hi < 1.0 {
                "yes".into()
            } else {
                "no".into()
            };
            summary.push(vec![
                name.into(),
                v.into(),
                t.len().to_string(),
                rounds.to_string(),
                fmt(m, 4),
                fmt(s, 3),
                format!("{}–{}", fmt(lo, 3), fmt(hi, 3)),
                format!(
                    "{}–{}",
                    fmt(quantile(&single, 0.025), 3),
                    fmt(quantile(&single, 0.975), 3)
                ),
                fmt(100.0 * sd(&t) / m, 2),
                fmt(100.0 * within / m, 2),
                fmt(base_mean / fixed_time(bins, v, &Layout::Unshuffled), 3),
                exceeds,
            ]);
            plot.push(PlotRow {
                workload: name,
                variant: v,
                speedup: s,
                lo,
                hi,
                single,
            });
            layouts_of.push((v, t));
        }
        for i in 1..layouts_of.len() {
            for j in i + 1..layouts_of.len() {
                let (a, ta) = &layouts_of[i];
                let (b, tb) = &layouts_of[j];
                let (r, lo, hi) = boot_ratio(tb, ta);
                pairs.push(vec![
                    name.into(),
                    a.to_string(),
                    b.to_string(),
                    fmt(r, 3),
                    format!("{}–{}", fmt(lo, 3), fmt(hi, 3)),
                    if lo > 1.0 || hi < 1.0 { "yes" } else { "no" }.into(),
                ]);
            }
        }
        for layout in [Layout::GnuLd, Layout::LldNoSections, Layout::Unshuffled] {
            let t = fixed_time(bins, BASELINE, &layout);
            let below = base.iter().filter(|x| **x < t).count();
            ffs.push(vec![
                name.into(),
                if layout == Layout::Unshuffled {
                    "lld, -ffunction-sections, unshuffled".into()
                } else {
                    layout.label()
                },
                fmt(t, 4),
                fmt(t / base_mean, 3),
                fmt(100.0 * below as f64 / base.len() as f64, 0),
            ]);
        }
    }
    put("layouts_summary.csv", &summary.to_csv())?;
    put("layouts_pairs.csv", &pairs.to_csv())?;
    put("layouts_ffs.csv", &ffs.to_csv())?;
    put("layouts.svg", &svg(&plot))?;

    let mut md = String::new();
    let _ = write!(
        md,
        "## Layout noise: the speedups over {k} shuffled code layouts\n\n\
         `bench-harness fdo-layouts{}`. Each variant is compiled once with \
         `-ffunction-sections` and linked by lld with `-z keep-text-section-prefix` \
         (FDO's hot and unlikely functions stay in their own parts of .text; the shuffle \
         reorders functions within each part); lld's `--reproduce` archive of that link is \
         linked again {k} times with `--shuffle-sections='.text*=SEED'`, SEED = 1 … {k}. Every \
         layout is checked to print what the unshuffled link prints (speedtest1's times \
         masked) and to have moved its functions (layouts_binaries.csv). {rounds} interleaved \
         round(s) run every binary of every workload once on the evaluation input, the \
         variants interleaved layout by layout; CPU time (user + system from wait4). Profiles: the training input, as in `fdo`, retrained {}.\n\n\
         A layout's time is its median over the rounds. **speedup** = mean over the \
         baseline's layouts / mean over the variant's layouts, the expected time of a \
         random layout; **95% CI**: percentile bootstrap ({RESAMPLES} resamples) of the \
         layouts of both, resampled independently; **exceeds layout noise**: the interval \
         excludes 1. **single-layout 95% range**: 2.5th–97.5th percentile over the \
         variant's layouts of the baseline's mean / that layout's time — the spread a \
         speedup measured on one arbitrary layout (as in the table above) can land \
         anywhere in. **layout CV**: standard deviation over layouts / mean; **run-to-run \
         CV**: the within-layout standard deviation over the rounds, pooled over layouts, \
         / mean (what rerunning one layout gives). **unshuffled lld speedup**: the \
         variant's own unshuffled link against the baseline's layout mean.\n\n",
        match (quick, reuse) {
            (true, true) => " --quick --reuse-builds",
            (true, false) => " --quick",
            (false, true) => " --reuse-builds",
            (false, false) => "",
        },
        if reuse {
            "by the run that built the binaries (this one reused them)"
        } else {
            "in this run"
        }
    );
    let _ = write!(
        md,
        "### Speedup over -O2 with layout spread\n\n{}\n",
        summary.to_markdown()
    );
    md.push_str("![layouts](layouts.svg)\n\n");
    let _ = write!(
        md,
        "### FDO variants against each other\n\n\
         time B / time A > 1: A is faster. Interval as above.\n\n{}\n",
        pairs.to_markdown()
    );
    let _ = write!(
        md,
        "### Does -ffunction-sections change the baseline?\n\n\
         The baseline without -ffunction-sections (`fdo`'s, GNU ld; and lld), and the \
         -ffunction-sections build in lld's input order, against the mean of its shuffled \
         layouts; the percentile says where each falls among those layouts.\n\n{}\n",
        ffs.to_markdown()
    );
    if !failures.is_empty() {
        let _ = write!(md, "### Failed steps\n\n{}\n", fails.to_markdown());
    }
    splice_section(&out.join("README.md"), &md)
}

/// Puts `section` between the markers in `readme` (appending them when
/// absent), leaving the rest of the file as it is.
pub(crate) fn splice_section(readme: &Path, section: &str) -> Result<()> {
    let old = std::fs::read_to_string(readme).unwrap_or_default();
    let block = format!("{BEGIN}\n{section}{END}\n");
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if e > b => {
            format!(
                "{}{block}{}",
                &old[..b],
                old[e + END.len()..].trim_start_matches('\n')
            )
        }
        _ if old.is_empty() => format!("# Feedback-directed optimisation\n\n{block}"),
        _ => format!("{}\n{block}", old.trim_end_matches('\n').to_string() + "\n"),
    };
    std::fs::write(readme, new).with_context(|| format!("cannot write {}", readme.display()))
}

/// The layout section of an existing README (without its markers), for
/// `fdo` to put back when it rewrites the file.
pub(crate) fn existing_section(readme: &Path) -> Option<String> {
    let old = std::fs::read_to_string(readme).ok()?;
    let b = old.find(BEGIN)? + BEGIN.len();
    let e = old[b..].find(END)? + b;
    Some(old[b..e].trim_start_matches('\n').to_string())
}

struct PlotRow {
    workload: &'static str,
    variant: &'static str,
    speedup: f64,
    lo: f64,
    hi: f64,
    single: Vec<f64>,
}

/// Speedup per workload and variant: each layout a small grey dot, the
/// speedup a coloured diamond with its 95% bootstrap interval as a bar.
fn svg(rows: &[PlotRow]) -> String {
    const COLORS: [&str; 6] = [
        "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9",
    ];
    let (w, h) = (900.0, 460.0);
    let (left, right, top, bottom) = (70.0, 250.0, 40.0, 50.0);
    let vals = rows
        .iter()
        .flat_map(|r| r.single.iter().copied().chain([r.lo, r.hi, 1.0]))
        .filter(|v| v.is_finite());
    let (mut lo, mut hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if !lo.is_finite() {
        (lo, hi) = (0.9, 1.1);
    }
    let pad = (hi - lo).max(0.02) * 0.08;
    let (lo, hi) = (lo - pad, hi + pad);
    let py = |v: f64| top + (hi - v) / (hi - lo) * (h - top - bottom);
    let mut workloads: Vec<&str> = Vec::new();
    let mut variants: Vec<&str> = Vec::new();
    for r in rows {
        if !workloads.contains(&r.workload) {
            workloads.push(r.workload);
        }
        if !variants.contains(&r.variant) {
            variants.push(r.variant);
        }
    }
    let group = (w - left - right) / workloads.len().max(1) as f64;
    let slot = group / (variants.len() + 1) as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"13\">\n\
         <rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" font-size=\"16\" text-anchor=\"middle\">Speedup over -O2 across shuffled layouts (CPU time)</text>\n",
        w / 2.0
    );
    // Axis with about six round ticks.
    let step = [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5]
        .into_iter()
        .find(|st| (hi - lo) / st <= 8.0)
        .unwrap_or(1.0);
    let mut t = (lo / step).ceil() * step;
    while t <= hi {
        let y = py(t);
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{t:.3}</text>",
            w - right,
            left - 6.0,
            y + 4.0
        );
        t += step;
    }
    let y1 = py(1.0);
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" x2=\"{}\" y1=\"{y1:.1}\" y2=\"{y1:.1}\" stroke=\"#444\" stroke-dasharray=\"5,4\"/>\n\
         <text transform=\"translate(18,{:.1}) rotate(-90)\" text-anchor=\"middle\">baseline mean / variant time</text>",
        w - right,
        (top + h - bottom) / 2.0
    );
    for (gi, wl) in workloads.iter().enumerate() {
        let x0 = left + gi as f64 * group;
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{wl}</text>",
            x0 + group / 2.0,
            h - bottom + 22.0
        );
        for r in rows.iter().filter(|r| r.workload == *wl) {
            let vi = variants.iter().position(|v| *v == r.variant).unwrap_or(0);
            let x = x0 + slot * (vi + 1) as f64;
            let c = COLORS[vi % COLORS.len()];
            for (i, v) in r.single.iter().enumerate() {
                let jitter = ((i % 5) as f64 - 2.0) * 2.0;
                let _ = writeln!(
                    s,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.2\" fill=\"#999\"/>",
                    x - 9.0 + jitter,
                    py(*v)
                );
            }
            if r.lo.is_finite() && r.hi.is_finite() {
                let _ = writeln!(
                    s,
                    "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{c}\" stroke-width=\"2.5\"/>\
                     <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{c}\" stroke-width=\"2\"/>\
                     <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{c}\" stroke-width=\"2\"/>",
                    py(r.lo),
                    py(r.hi),
                    x - 5.0,
                    x + 5.0,
                    py(r.lo),
                    py(r.lo),
                    x - 5.0,
                    x + 5.0,
                    py(r.hi),
                    py(r.hi)
                );
            }
            if r.speedup.is_finite() {
                let y = py(r.speedup);
                let _ = writeln!(
                    s,
                    "<path d=\"M{x:.1},{:.1} l5,5 l-5,5 l-5,-5 z\" fill=\"{c}\"/>",
                    y - 5.0
                );
            }
        }
    }
    for (vi, v) in variants.iter().enumerate() {
        let y = top + 10.0 + vi as f64 * 38.0;
        let x = w - right + 14.0;
        let c = COLORS[vi % COLORS.len()];
        let _ = writeln!(
            s,
            "<rect x=\"{x}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{c}\"/>",
            y - 9.0
        );
        // Legend text wrapped at about 30 characters.
        let mut line = String::new();
        let mut n = 0;
        for word in v.split(' ') {
            if line.len() + word.len() > 30 {
                let _ = writeln!(
                    s,
                    "<text x=\"{}\" y=\"{}\">{}</text>",
                    x + 16.0,
                    y + 14.0 * n as f64,
                    xml(&line)
                );
                line.clear();
                n += 1;
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\">{}</text>",
            x + 16.0,
            y + 14.0 * n as f64,
            xml(&line)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" fill=\"#666\">grey: one layout each; bar: 95% bootstrap CI</text>",
        w - right + 14.0,
        h - bottom + 22.0
    );
    s.push_str("</svg>\n");
    s
}

fn xml(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_interleave_variants_layout_by_layout() {
        let bin = |variant| Bin {
            variant,
            layout: Layout::Unshuffled,
            path: PathBuf::new(),
            times: Vec::new(),
            failed: false,
        };
        let bins = [bin("a"), bin("a"), bin("a"), bin("b"), bin("b")];
        assert_eq!(interleaved(&bins), [0, 3, 1, 4, 2]);
    }

    #[test]
    fn digits_are_masked_run_by_run() {
        assert_eq!(mask_digits(b"t 0.089s x12"), b"t #.#s x#".to_vec());
    }

    #[test]
    fn quantiles_interpolate() {
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), 4.0);
        assert!((quantile(&v, 0.5) - 2.5).abs() < 1e-12);
    }

    #[test]
    fn bootstrap_interval_holds_the_ratio_and_excludes_one_when_apart() {
        let a = [1.10, 1.11, 1.09, 1.10, 1.12];
        let b = [1.00, 1.01, 0.99, 1.00, 1.02];
        let (r, lo, hi) = boot_ratio(&a, &b);
        assert!(lo <= r && r <= hi);
        assert!(lo > 1.0, "{lo}");
        let (_, lo, hi) = boot_ratio(&b, &[1.02, 0.98, 1.01, 0.99, 1.0]);
        assert!(lo < 1.0 && hi > 1.0);
    }

    #[test]
    fn section_is_replaced_not_duplicated() {
        let dir = std::env::temp_dir().join(format!("bd-fdo-layouts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("README.md");
        std::fs::write(&p, "# T\n\nbody\n").unwrap();
        splice_section(&p, "one\n").unwrap();
        splice_section(&p, "two\n").unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.starts_with("# T\n\nbody\n"), "{text}");
        assert!(text.contains("two") && !text.contains("one"), "{text}");
        assert_eq!(text.matches(BEGIN).count(), 1);
        assert_eq!(existing_section(&p).unwrap(), "two\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
