//! AutoFDO profile tooling shared by `quality` and `fdo`: the exact
//! profile built from callgrind counts, create_llvm_prof (with a repair of
//! its corrupt names), the similarity llvm-profdata reports, and the tracer's
//! per-module AutoFDO text files.

use crate::quality::Reference;
use crate::runner::{self, Cmd};
use anyhow::{bail, Context, Result};
use bench_harness::afdo::AfdoProfile;
use bench_harness::elf::ElfModule;
use bench_harness::Branch;
use std::path::{Path, PathBuf};

/// An AutoFDO text profile holding the exact counts: one range per run of
/// adjacent instructions with equal counts, and every taken transfer. It is
/// what a perfect LBR sampling every branch would give.
pub fn exact_afdo(r: &Reference) -> AfdoProfile {
    let idx = r.module.instructions();
    let mut p = AfdoProfile::default();
    let mut open: Option<(u64, u64, u64, usize)> = None; // begin, end, count, position
    for (&addr, &count) in &r.counts.instructions {
        let pos = idx.position(addr);
        let extends = match (open, pos) {
            (Some((_, _, c, last)), Some(pos)) => c == count && pos == last + 1,
            _ => false,
        };
        if extends {
            let (b, _, c, _) = open.unwrap_or_default();
            open = Some((b, addr, c, pos.unwrap_or_default()));
            continue;
        }
        if let Some((b, e, c, _)) = open.take() {
            p.ranges
                .insert((r.module.afdo_offset(b), r.module.afdo_offset(e)), c);
        }
        if let Some(pos) = pos {
            open = Some((addr, addr, count, pos));
        }
    }
    if let Some((b, e, c, _)) = open {
        p.ranges
            .insert((r.module.afdo_offset(b), r.module.afdo_offset(e)), c);
    }
    for (e, c) in r.counts.taken_edges() {
        let edge = Branch {
            from: r.module.afdo_offset(e.from),
            to: r.module.afdo_offset(e.to),
        };
        *p.branches.entry(edge).or_insert(0) += c;
    }
    p
}

/// `create_llvm_prof --profiler=text` on an AutoFDO text file.
pub fn create_llvm_prof(afdo_text: &Path, binary: &Path, out: &Path, text: bool) -> Result<()> {
    let tool = runner::require_tool("create_llvm_prof", "autofdo")?;
    let fmt = if text { "text" } else { "binary" };
    runner::run(
        &Cmd::new(tool)
            .arg("--profiler=text")
            .arg(format!("--profile={}", afdo_text.display()))
            .arg(format!("--binary={}", binary.display()))
            .arg(format!("--out={}", out.display()))
            .arg(format!("--format={fmt}")),
    )?;
    let bytes = std::fs::read(out).unwrap_or_default();
    if bytes.is_empty() {
        bail!(
            "create_llvm_prof wrote an empty profile {} from {}",
            out.display(),
            afdo_text.display()
        );
    }
    if text {
        let (clean, dropped) = bench_harness::llvm_text::sanitize_llvm_text(&bytes);
        if dropped > 0 {
            std::fs::write(out, clean)?;
        }
    }
    Ok(())
}

/// Whole-program function-level similarity of two sample profiles, from
/// `llvm-profdata-19 overlap --sample` ("Whole program profile similarity").
pub fn profile_similarity(base: &Path, test: &Path) -> Result<f64> {
    let tool = runner::require_tool("llvm-profdata-19", "llvm-19")?;
    let out = runner::tempfile_path("overlap.txt");
    runner::run(
        &Cmd::new(tool)
            .args(["overlap", "--sample"])
            .arg(base)
            .arg(test)
            .stdout_to(&out),
    )?;
    let text = std::fs::read_to_string(&out)?;
    let _ = std::fs::remove_file(&out);
    // llvm-profdata stops early when one profile has no body counts (a
    // sparse profile at a low rate): nothing of it overlaps.
    if text.contains("Sum of sample counts for profile") && text.trim_end().ends_with("is 0.") {
        return Ok(0.0);
    }
    parse_similarity(&text).with_context(|| {
        format!(
            "llvm-profdata overlap printed no whole-program similarity for {} vs {}",
            base.display(),
            test.display()
        )
    })
}

fn parse_similarity(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| {
        l.to_lowercase()
            .contains("whole program profile similarity")
    })?;
    let v = line.rsplit(':').next()?.trim().trim_end_matches('%');
    v.parse::<f64>().ok().map(|p| p / 100.0)
}

/// The AutoFDO text file the tracer wrote for `module`, or an error.
pub fn tracer_afdo(out_dir: &Path, module: &ElfModule) -> Result<PathBuf> {
    let p = out_dir.join(format!("{}.afdo.txt", module.basename()));
    if p.is_file() {
        Ok(p)
    } else {
        bail!(
            "the tracer wrote no {} (no samples in {}?)",
            p.display(),
            module.basename()
        )
    }
}

/// Sums AutoFDO text profiles (of several runs of one module).
pub fn merge_afdo(files: &[PathBuf]) -> Result<AfdoProfile> {
    let mut m = AfdoProfile::default();
    for f in files {
        let p = bench_harness::afdo::parse_file(f).map_err(|e| anyhow::anyhow!("{e}"))?;
        for (k, v) in p.ranges {
            *m.ranges.entry(k).or_insert(0) += v;
        }
        for (k, v) in p.addresses {
            *m.addresses.entry(k).or_insert(0) += v;
        }
        for (k, v) in p.branches {
            *m.branches.entry(k).or_insert(0) += v;
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similarity_line_is_parsed() {
        let text = "Sample Profile Overlap:\n  Whole program profile similarity: 93.250%\n";
        assert_eq!(parse_similarity(text), Some(0.9325));
        assert_eq!(parse_similarity("nothing"), None);
    }
}
