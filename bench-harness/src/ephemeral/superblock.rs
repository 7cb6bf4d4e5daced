//! `bench-harness ephemeral-superblock`: the ephemeral-instrumentation
//! paper's application result (superblock scheduling from ephemeral
//! profiles does about as well as from complete ones), in brr's timing
//! model, with trace layout (`brr::instrument::layout`) as the
//! profile-driven transformation.
//!
//! For each workload the profiles are taken on a training input: exact edge
//! counts, ephemeral instrumentation at some P (the biases through each
//! procedure's Markov chain, as in the main experiment), counter and brr
//! sampling at one interval each, and the exact profile with every branch's
//! edges swapped (a deliberately wrong profile, the control). The compiler's
//! assembly is laid out by each profile (and by none: the baseline, the
//! compiler's block order), and every build runs on the evaluation input
//! under the timing model; its output must be byte-identical to the
//! baseline's.

use super::{keyed, keyed_f64, markov_weights, site_sum, unit_procedures, Workload};
use crate::overlap;
use anyhow::{bail, Context, Result};
use brr::emu::syscall::Process;
use brr::instrument::layout::{self, SiteWeights};
use brr::instrument::Variant;
use brr::profile::{self, EdgeProfile};
use brr::timing;
use brr::workload::{self, Compiler};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The paper's superblock result for wc: the same improvement from the
/// ephemeral and the complete profile.
pub const PAPER_WC: f64 = 72.3;

/// The exact profile's gain, as a fraction of the baseline's cycles, below
/// which shares of it are not given ("-"): a ratio of two tiny differences.
const MIN_GAIN: f64 = 0.001;

/// One workload: evaluated on `workload.args`, profiled on `train_args`.
#[derive(Clone, Debug)]
pub struct Case {
    pub workload: Workload,
    pub train_args: Vec<String>,
    /// How the training input differs from the evaluation input.
    pub train_note: String,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub work: PathBuf,
    pub cases: Vec<Case>,
    /// Ephemeral persistences profiled.
    pub persistences: Vec<u64>,
    pub counter_interval: u32,
    pub brr_interval: u32,
    pub epoch: u64,
    pub timing: timing::Config,
}

/// One laid-out build run on the evaluation input.
#[derive(Clone, Debug)]
pub struct Point {
    /// "none" (baseline), "exact", "ephemeral P=…", "counter-…", "brr-…",
    /// "exact, inverted".
    pub profile: String,
    pub cycles: u64,
    pub instructions: u64,
    /// Taken conditional branches and taken direct jumps in the run.
    pub taken_conditional: u64,
    pub taken_jumps: u64,
    /// Sites the profiling run recorded at least one edge of (the layout
    /// counts a site without data as unknown: bias 1/2; ephemeral's Markov
    /// weights give such a site a flow all the same).
    pub sites_profiled: usize,
    /// Mispredicted branches (all kinds) in the run.
    pub mispredictions: u64,
    /// Cycles of the same build under the perfect direction predictor:
    /// the layout's effect on the front end without the predictor's
    /// address-dependent aliasing.
    pub cycles_perfect: u64,
    /// Overlap of the profile with the exact training profile.
    pub overlap: f64,
    pub stats: layout::Stats,
}

#[derive(Clone, Debug)]
pub struct Measured {
    pub name: String,
    pub train: String,
    pub eval: String,
    pub train_note: String,
    pub points: Vec<Point>,
}

impl Measured {
    pub fn point(&self, profile: &str) -> Option<&Point> {
        self.points.iter().find(|p| p.profile == profile)
    }
    pub fn baseline(&self) -> &Point {
        &self.points[0]
    }
    /// Speedup over the baseline in percent (base / cycles − 1).
    pub fn speedup(&self, p: &Point) -> f64 {
        (self.baseline().cycles as f64 / p.cycles as f64 - 1.0) * 100.0
    }
    /// Speedup under the perfect predictor.
    pub fn speedup_perfect(&self, p: &Point) -> f64 {
        (self.baseline().cycles_perfect as f64 / p.cycles_perfect as f64 - 1.0) * 100.0
    }
    /// The share of the exact profile's cycle reduction under the perfect
    /// predictor.
    pub fn share_of_exact_perfect(&self, p: &Point) -> Option<f64> {
        let base = self.baseline().cycles_perfect as f64;
        let exact = self.point("exact")?.cycles_perfect as f64;
        (base - exact > MIN_GAIN * base).then(|| (base - p.cycles_perfect as f64) / (base - exact))
    }
    /// The share of the exact profile's cycle reduction this point gets.
    pub fn share_of_exact(&self, p: &Point) -> Option<f64> {
        let base = self.baseline().cycles as f64;
        let exact = self.point("exact")?.cycles as f64;
        (base - exact > MIN_GAIN * base).then(|| (base - p.cycles as f64) / (base - exact))
    }
}

fn progress(msg: &str) {
    eprintln!("[ephemeral-superblock] {msg}");
}

/// Training inputs for the main experiment's workloads (`default_workloads`).
pub fn default_cases(cache: &Path, quick: bool) -> Result<Vec<Case>> {
    let mut out = Vec::new();
    for w in super::default_workloads(cache, quick)? {
        let (train_args, note) = match w.name.as_str() {
            "charclass" => (
                vec!["1".into(), "4242".into()],
                "the same generator with seed 4242 (evaluation: seed 12345)".to_string(),
            ),
            "flip" => {
                let n: u64 = w.args[0].parse().unwrap_or(1_000_000);
                (
                    vec![(n * 3 / 10).to_string()],
                    format!(
                        "{} iterations (evaluation: {n}); flip's input is only its length, \
                         so both runs share the random sequence's start",
                        n * 3 / 10
                    ),
                )
            }
            "bzip2" => {
                let tree = workload::bzip2_source(&cache.join("debian-src"))?;
                let train = tree.join("bzip2.c");
                (
                    vec!["-c".into(), "-k".into(), train.display().to_string()],
                    "compressing bzip2's own bzip2.c, 58 KB of C (evaluation: the 20000-word \
                     sample text)"
                        .to_string(),
                )
            }
            _ => (w.args.clone(), "the evaluation input itself".to_string()),
        };
        out.push(Case {
            workload: w,
            train_args,
            train_note: note,
        });
    }
    Ok(out)
}

/// Runs `exe` under the emulator, functionally or under the timing model,
/// with standard output to `stdout`.
fn run(
    exe: &Path,
    args: &[String],
    env: &[String],
    epoch: Option<u64>,
    stdout: &Path,
    timing_config: Option<&timing::Config>,
) -> Result<(Option<timing::Report>, u64)> {
    let mut argv = vec![exe.display().to_string()];
    argv.extend(args.iter().cloned());
    let mut p = Process::load(exe, &argv, env, 1)?;
    p.epoch = epoch;
    let file = std::fs::File::create(stdout)
        .with_context(|| format!("cannot create {}", stdout.display()))?;
    use std::os::fd::AsRawFd;
    p.stdio[1] = file.as_raw_fd();
    let (status, report) = match timing_config {
        Some(c) => {
            let (s, r) = timing::run(&mut p, c, u64::MAX)
                .with_context(|| format!("timing run of {}", exe.display()))?;
            (s, Some(r))
        }
        None => (
            p.run(u64::MAX)
                .with_context(|| format!("emulated run of {}", exe.display()))?,
            None,
        ),
    };
    if status != 0 {
        bail!("{} exited with status {status}", exe.display());
    }
    Ok((report, p.machine.icount))
}

/// A profile as the layout pass reads it: per sanitised unit, per site.
type Weights = HashMap<String, SiteWeights>;

fn from_counts(p: &EdgeProfile) -> Weights {
    let mut w = Weights::new();
    for ((u, s), &(t, f)) in p {
        w.entry(u.clone())
            .or_default()
            .insert(*s, (t as f64, f as f64));
    }
    w
}

fn from_markov(m: &BTreeMap<(String, usize, bool), f64>) -> Weights {
    let mut w = Weights::new();
    for ((u, s, taken), &v) in m {
        let e = w.entry(u.clone()).or_default().entry(*s).or_default();
        if *taken {
            e.0 = v;
        } else {
            e.1 = v;
        }
    }
    w
}

/// The profile file (`UNIT SITE TAKEN FALLTHROUGH`), as
/// `brr-instrument --layout` reads it.
fn profile_text(w: &Weights) -> String {
    let mut rows: Vec<(&String, &usize, &(f64, f64))> = w
        .iter()
        .flat_map(|(u, m)| m.iter().map(move |(s, v)| (u, s, v)))
        .collect();
    rows.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut s = String::new();
    for (u, site, (t, f)) in rows {
        let _ = writeln!(s, "{u} {site} {t} {f}");
    }
    s
}

/// Measures every case of `plan`.
pub fn measure(plan: &Plan) -> Result<Vec<Measured>> {
    std::fs::create_dir_all(&plan.work)
        .with_context(|| format!("cannot create {}", plan.work.display()))?;
    plan.cases
        .iter()
        .map(|c| measure_one(plan, c).with_context(|| format!("workload {}", c.workload.name)))
        .collect()
}

fn measure_one(plan: &Plan, case: &Case) -> Result<Measured> {
    let w = &case.workload;
    let work = &plan.work;
    let build = |v: Variant| {
        progress(&format!("{}: building {}", w.name, v.label()));
        workload::build_instrumented(work, &w.name, &w.sources, Compiler::Gcc, v)
    };
    let scratch = work.join(format!("{}-train.out", w.name));
    // Profiles on the training input.
    let none = build(Variant::None)?;
    let mut argv = vec![none.display().to_string()];
    argv.extend(case.train_args.iter().cloned());
    progress(&format!("{}: exact profile (training input)", w.name));
    let (exact, status) = profile::exact_edges_quiet(&none, &argv, &[])?;
    if status != 0 {
        bail!(
            "{} exited with status {status} on the training input",
            w.name
        );
    }
    let exact_keyed = keyed(&exact);
    // (label, weights, overlap with exact, sites the run recorded).
    let recorded_sites = |p: &EdgeProfile| p.values().filter(|&&(t, f)| t + f > 0).count();
    let mut profiles: Vec<(String, Option<Weights>, f64, usize)> = vec![
        ("none".into(), None, 0.0, 0),
        (
            "exact".into(),
            Some(from_counts(&exact)),
            1.0,
            recorded_sites(&exact),
        ),
    ];
    let eph = build(Variant::Ephemeral)?;
    let procs = unit_procedures(work, w)?;
    for &p in &plan.persistences {
        progress(&format!("{}: ephemeral P={p} (training input)", w.name));
        let edges = work.join(format!("{}-eph-{p}.edges", w.name));
        let _ = std::fs::remove_file(&edges);
        let env = vec![
            format!("BRR_EDGES={}", edges.display()),
            format!("BRR_EPH_P={p}"),
        ];
        run(
            &eph,
            &case.train_args,
            &env,
            Some(plan.epoch),
            &scratch,
            None,
        )?;
        let recorded = profile::sanitise_units(&profile::read_edges(&edges)?);
        let m = markov_weights(&procs, &recorded, |u, s| site_sum(&recorded, u, s));
        let ov = overlap::overlap(&exact_keyed, &keyed_f64(&m));
        profiles.push((
            format!("ephemeral P={p}"),
            Some(from_markov(&m)),
            ov,
            recorded_sites(&recorded),
        ));
    }
    for v in [
        Variant::Counter {
            interval: plan.counter_interval,
        },
        Variant::Brr {
            interval: plan.brr_interval,
        },
    ] {
        let exe = build(v)?;
        progress(&format!("{}: {} (training input)", w.name, v.label()));
        let edges = work.join(format!("{}-{}.edges", w.name, v.label()));
        let _ = std::fs::remove_file(&edges);
        let env = vec![format!("BRR_EDGES={}", edges.display())];
        run(&exe, &case.train_args, &env, None, &scratch, None)?;
        let recorded = profile::sanitise_units(&profile::read_edges(&edges)?);
        let ov = overlap::overlap(&exact_keyed, &keyed(&recorded));
        profiles.push((
            v.label(),
            Some(from_counts(&recorded)),
            ov,
            recorded_sites(&recorded),
        ));
    }
    let wrong: EdgeProfile = exact
        .iter()
        .map(|(k, &(t, f))| (k.clone(), (f, t)))
        .collect();
    let ov = overlap::overlap(&exact_keyed, &keyed(&wrong));
    profiles.push((
        "exact, inverted".into(),
        Some(from_counts(&wrong)),
        ov,
        recorded_sites(&wrong),
    ));

    // The compiler's assembly, once.
    let asm_dir = work.join(format!("{}-sb-asm", w.name));
    std::fs::create_dir_all(&asm_dir)
        .with_context(|| format!("cannot create {}", asm_dir.display()))?;
    let mut units = Vec::new();
    for src in &w.sources {
        let unit = src
            .file_name()
            .context("source without a name")?
            .to_string_lossy()
            .into_owned();
        let asm = asm_dir.join(format!("{unit}.s"));
        workload::run(
            Compiler::Gcc
                .cc()
                .args(workload::CFLAGS)
                .arg("-S")
                .arg(src)
                .arg("-o")
                .arg(&asm),
        )?;
        let text = std::fs::read_to_string(&asm)
            .with_context(|| format!("cannot read {}", asm.display()))?;
        units.push((unit, text));
    }
    let mut points = Vec::new();
    let mut base_output: Option<Vec<u8>> = None;
    for (k, (label, weights, ov, sites_profiled)) in profiles.iter().enumerate() {
        // Same-length paths for every build: argv[0] is on the guest's
        // stack, and a longer one moves it.
        let dir = work.join(format!("{}-sb", w.name)).join(format!("{k:02}"));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        // The profile goes through its file, as brr-instrument reads it.
        let parsed = match weights {
            Some(wt) => {
                let file = dir.join("profile.txt");
                let text = profile_text(wt);
                std::fs::write(&file, &text)
                    .with_context(|| format!("cannot write {}", file.display()))?;
                Some(
                    layout::parse_profile(&text)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?,
                )
            }
            None => None,
        };
        let mut stats = layout::Stats::default();
        let mut objs = Vec::new();
        for (unit, text) in &units {
            let uw = parsed.as_ref().map(|p| layout::weights_for_unit(p, unit));
            let l = layout::layout(text, uw.as_ref());
            stats.procedures += l.stats.procedures;
            stats.reordered += l.stats.reordered;
            stats.inverted += l.stats.inverted;
            stats.jumps_added += l.stats.jumps_added;
            stats.jumps_removed += l.stats.jumps_removed;
            stats.skipped.extend(l.stats.skipped);
            let s = dir.join(format!("{unit}.s"));
            std::fs::write(&s, &l.text).with_context(|| format!("cannot write {}", s.display()))?;
            let o = dir.join(format!("{unit}.o"));
            workload::run(Compiler::Gcc.cc().arg("-c").arg(&s).arg("-o").arg(&o))?;
            objs.push(o);
        }
        let exe = dir.join("prog");
        workload::link(&objs, &exe)?;
        progress(&format!("{}: layout '{label}': timing run", w.name));
        let out = dir.join("stdout");
        let (report, instructions) = run(&exe, &w.args, &[], None, &out, Some(&plan.timing))?;
        let report = report.context("no timing report")?;
        let bytes =
            std::fs::read(&out).with_context(|| format!("cannot read {}", out.display()))?;
        match &base_output {
            None => base_output = Some(bytes),
            Some(b) if *b == bytes => {}
            Some(_) => bail!(
                "{}: the layout by '{label}' changed the program's output ({} against the \
                 baseline's)",
                w.name,
                out.display()
            ),
        }
        let perfect = timing::Config {
            predictor: timing::PredictorKind::Perfect,
            ..plan.timing.clone()
        };
        let (perfect_report, _) = run(&exe, &w.args, &[], None, &out, Some(&perfect))?;
        let cycles_perfect = perfect_report.context("no timing report")?.cycles;
        let kind = |name: &str| {
            report
                .kinds
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(0, |(_, k)| k.taken)
        };
        points.push(Point {
            profile: label.clone(),
            cycles: report.cycles,
            instructions,
            taken_conditional: kind("conditional"),
            taken_jumps: kind("direct-jump"),
            sites_profiled: *sites_profiled,
            mispredictions: report.mispredictions(),
            cycles_perfect,
            overlap: *ov,
            stats,
        });
    }
    Ok(Measured {
        name: w.name.clone(),
        train: case.train_args.join(" "),
        eval: w.args.join(" "),
        train_note: case.train_note.clone(),
        points,
    })
}

/// Heading of the section this experiment writes into `summary.md`.
pub const HEADING: &str = "## Superblock layout from each profile";

/// The section for `summary.md`.
pub fn section(plan: &Plan, results: &[Measured], quick: bool) -> String {
    let mut md = format!("{HEADING}{}\n\n", if quick { " (quick run)" } else { "" });
    let _ = writeln!(
        md,
        "The paper's application: superblock scheduling driven by ephemeral profiles did about \
         as well as driven by complete ones (wc: {PAPER_WC} % improvement from either, Alpha \
         21164). Here the transformation is trace layout (`brr::instrument::layout`, \
         `brr-instrument --layout PROFILE`): in each procedure the blocks are grouped into \
         traces by mutual-most-likely selection, block weights from the procedure's Markov \
         chain over the profiled branch biases, and each trace is laid out so that its likely \
         edges fall through (a jcc whose likely edge was taken is inverted, a broken \
         fall-through gets a `jmp`, a `jmp` to the next block is dropped). Side entrances \
         are not removed by tail duplication and nothing is scheduled across branches, so \
         this is the layout half of superblock formation, not a scheduler. Profiles come from \
         a training input, cycles from the evaluation input: exact edge counts, ephemeral \
         instrumentation (P = {}, epoch {}, the Markov edge weights as above), counter \
         sampling at interval {} and brr at {} (the main experiment's nearest costs to \
         ephemeral at P = 1000: counter-1024 costs about the same per site, brr is cheaper \
         at every interval, and 16 is its closest above 0.5 cycles per site), and the exact \
         profile with every branch's two edges swapped (deliberately wrong). \"none\" is the \
         compiler's block order (only `.cfi_*` directives in procedure bodies dropped, which \
         emit no code). Every laid-out build's output on the evaluation input is \
         byte-identical to the baseline's (checked in the run). Speedup = baseline cycles / \
         cycles − 1; share = (baseline − cycles) / (baseline − exact-profile cycles). One run \
         per point: the model is deterministic.\n",
        plan.persistences
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        plan.epoch,
        plan.counter_interval,
        plan.brr_interval
    );
    let _ = writeln!(
        md,
        "Does the timing model reward layout at all? Yes, through the front end, without any \
         change to it: a predicted-taken branch, conditional or not, ends its fetch block \
         (`fetch_width` = 3: the block's remaining slots are lost, as on cores that fetch \
         one aligned block per cycle and must redirect to the target), a taken transfer the \
         BTB misses costs `decode_redirect_penalty` = 4, and a not-taken jcc costs only its \
         slot. Real front ends pay for taken branches in the same way, which is why \
         profile-driven layout (Pettis and Hansen) pays on them: fetch delivers a \
         contiguous block per cycle, and a taken branch ends the block and redirects fetch. \
         Nothing is scheduled across branches here, so the speedups are layout's alone: \
         the larger scheduling scope a superblock gives an in-order core like the 21164 \
         is not measured (and this model is an \
         out-of-order core, which finds much of that parallelism itself). Layout also moves branches to other addresses, \
         which changes the direction predictor's aliasing: the runs are repeated with the \
         perfect predictor (`predictor = perfect`), which leaves only the front-end effect.\n"
    );
    for m in results {
        let _ = writeln!(
            md,
            "### {}\n\nTraining input: {}. Evaluation: `{}`.\n",
            m.name,
            m.train_note,
            m.eval
                .split(' ')
                .map(|a| a.rsplit('/').next().unwrap_or(a))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let _ = writeln!(
            md,
            "| profile | overlap with exact | sites with data | cycles | speedup % | share of exact gain | instructions | taken jcc | taken jmp | mispredictions | cycles, perfect predictor | speedup %, perfect predictor | share, perfect predictor | procedures reordered | jcc inverted | jmp added | jmp removed |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for p in &m.points {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {} | {:.2} | {} | {} | {} | {} | {} |",
                p.profile,
                if p.profile == "none" {
                    "-".into()
                } else {
                    format!("{:.3}", p.overlap)
                },
                p.sites_profiled,
                p.cycles,
                m.speedup(p),
                m.share_of_exact(p)
                    .map_or_else(|| "-".into(), |s| format!("{:.2}", s)),
                p.instructions,
                p.taken_conditional,
                p.taken_jumps,
                p.mispredictions,
                p.cycles_perfect,
                m.speedup_perfect(p),
                m.share_of_exact_perfect(p)
                    .map_or_else(|| "-".into(), |x| format!("{x:.2}")),
                p.stats.reordered,
                p.stats.inverted,
                p.stats.jumps_added,
                p.stats.jumps_removed
            );
        }
        md.push('\n');
    }
    md.push_str(&findings(results));
    md
}

fn findings(results: &[Measured]) -> String {
    let mut s = String::from(
        "Beside the paper (generated from the runs above). Each cell: speedup % with the \
         tournament predictor / with the perfect predictor (share of the exact profile's gain \
         under the perfect predictor, where aliasing does not blur it):\n\n",
    );
    let mut header = String::from("| workload | exact |");
    let mut rule = String::from("|---|---|");
    let labels: Vec<String> = results
        .first()
        .map(|m| {
            m.points
                .iter()
                .map(|p| p.profile.clone())
                .filter(|l| l != "none" && l != "exact")
                .collect()
        })
        .unwrap_or_default();
    for l in &labels {
        let _ = write!(header, " {l} |");
        rule.push_str("---|");
    }
    let _ = writeln!(s, "{header}\n{rule}");
    let _ = writeln!(
        s,
        "| wc (paper: Alpha 21164, superblock scheduling; complete vs ephemeral profile) | \
         {PAPER_WC} |{}",
        labels
            .iter()
            .map(|l| if l.starts_with("ephemeral") {
                format!(" {PAPER_WC} (1.00) |")
            } else {
                " - |".to_string()
            })
            .collect::<String>()
    );
    for m in results {
        let cell = |p: &Point| {
            format!(
                "{:.2} / {:.2} ({})",
                m.speedup(p),
                m.speedup_perfect(p),
                m.share_of_exact_perfect(p)
                    .map_or_else(|| "-".into(), |x| format!("{x:.2}"))
            )
        };
        let _ = write!(
            s,
            "| {} | {} |",
            m.name,
            m.point("exact").map_or_else(
                || "-".into(),
                |p| format!("{:.2} / {:.2}", m.speedup(p), m.speedup_perfect(p))
            )
        );
        for l in &labels {
            let _ = write!(s, " {} |", m.point(l).map_or_else(|| "-".into(), cell));
        }
        s.push('\n');
    }
    s.push('\n');
    s.push_str(
        "Reading it: a sampled profile gives no data for the branches it never sampled \
         (\"sites with data\" against the exact profile's), and one or two samples give a \
         branch an extreme bias; the layout follows either. Ephemeral instrumentation \
         records every branch that runs in an epoch, up to P executions of it, so it misses \
         no branch that runs in a sampled epoch (the paper's argument for it). The \
         wrong profile shows what layout costs when it is misled. The program built to \
         benefit (`bench-harness/tests/ephemeral.rs`: a loop whose common case gcc is told \
         is rare) gains about 20 % from the exact profile's layout in the same model, so \
         the small gains on these workloads mostly say how much gcc's own layout (with its \
         static branch predictions) already gets right, not that the model cannot reward \
         layout.\n\n",
    );
    s
}

/// Writes `superblock.csv` into `out` and puts the section into
/// `out/summary.md` (replacing an earlier one, before "## Against the
/// paper" when there is one).
pub fn write(plan: &Plan, results: &[Measured], out: &Path, quick: bool) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut csv = String::from(
        "workload,profile,overlap_with_exact,sites_profiled,cycles,instructions,taken_conditional,taken_jumps,\
         speedup_percent,share_of_exact_gain,mispredictions,cycles_perfect_predictor,\
         speedup_percent_perfect_predictor,share_of_exact_gain_perfect_predictor,\
         procedures_reordered,inverted,jumps_added,\
         jumps_removed\n",
    );
    for m in results {
        for p in &m.points {
            let _ = writeln!(
                csv,
                "{},{},{:.4},{},{},{},{},{},{:.4},{},{},{},{:.4},{},{},{},{},{}",
                m.name,
                p.profile,
                p.overlap,
                p.sites_profiled,
                p.cycles,
                p.instructions,
                p.taken_conditional,
                p.taken_jumps,
                m.speedup(p),
                m.share_of_exact(p)
                    .map_or_else(String::new, |x| format!("{x:.4}")),
                p.mispredictions,
                p.cycles_perfect,
                m.speedup_perfect(p),
                m.share_of_exact_perfect(p)
                    .map_or_else(String::new, |x| format!("{x:.4}")),
                p.stats.reordered,
                p.stats.inverted,
                p.stats.jumps_added,
                p.stats.jumps_removed
            );
        }
    }
    let path = out.join("superblock.csv");
    std::fs::write(&path, csv).with_context(|| format!("cannot write {}", path.display()))?;
    let summary = out.join("summary.md");
    let old = std::fs::read_to_string(&summary).unwrap_or_default();
    let new = splice(&old, &section(plan, results, quick));
    std::fs::write(&summary, new).with_context(|| format!("cannot write {}", summary.display()))
}

/// `summary` with its superblock section replaced by `section` (or inserted
/// before "## Against the paper", or appended).
pub fn splice(summary: &str, section: &str) -> String {
    let without = match summary.find(HEADING) {
        Some(start) => {
            let rest = &summary[start + HEADING.len()..];
            let end = rest
                .find("\n## ")
                .map_or(summary.len(), |e| start + HEADING.len() + e + 1);
            format!("{}{}", &summary[..start], &summary[end..])
        }
        None => summary.to_string(),
    };
    match without.find("## Against the paper") {
        Some(at) => format!("{}{section}\n{}", &without[..at], &without[at..]),
        None if without.is_empty() => section.to_string(),
        None => format!(
            "{}\n{section}",
            without.trim_end_matches('\n').to_string() + "\n"
        ),
    }
}

/// The existing superblock section of `summary`, if any (kept when the
/// main experiment rewrites `summary.md`).
pub fn existing_section(summary: &str) -> Option<String> {
    let start = summary.find(HEADING)?;
    let rest = &summary[start + HEADING.len()..];
    let end = rest
        .find("\n## ")
        .map_or(summary.len(), |e| start + HEADING.len() + e + 1);
    Some(summary[start..end].to_string())
}
