//! `--profgen`: a compiler-ready profile (`NAME.prof`, for clang
//! `-fprofile-sample-use`) for every module of a recording that has samples
//! and debug info, made by llvm-profgen-19 from perf.script.
//!
//! A module is matched to its file by build id: the file at the recorded
//! path is used only when it is the very build that was recorded.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use breakdance_protocol::{ModuleSummary, Summary, PERF_SCRIPT_FILE};

use crate::elf::Binary;

/// The tool, as Debian's llvm-19 package names it.
pub const LLVM_PROFGEN: &str = "llvm-profgen-19";

/// What one llvm-profgen run said.
pub struct Generated {
    /// llvm-profgen's own estimate that the profile needs this many times
    /// more samples to be useful.
    pub more_samples: Option<f64>,
}

/// Runs llvm-profgen-19 on `perf_script` for `binary` into `output`.
pub fn generate(perf_script: &Path, binary: &Path, output: &Path) -> Result<Generated> {
    let tool = which::which(LLVM_PROFGEN).with_context(|| {
        format!(
            "{LLVM_PROFGEN} is not installed (apt-get install llvm-19, or scripts/install-deps.sh)"
        )
    })?;
    let run = Command::new(&tool)
        .arg(format!("--perfscript={}", perf_script.display()))
        .arg(format!("--binary={}", binary.display()))
        .arg(format!("--output={}", output.display()))
        .output()
        .with_context(|| format!("cannot run {}", tool.display()))?;
    let stderr = String::from_utf8_lossy(&run.stderr);
    if !run.status.success() {
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        bail!("{LLVM_PROFGEN} failed ({}): {last}", run.status);
    }
    Ok(Generated {
        more_samples: more_samples(&stderr),
    })
}

/// llvm-profgen's "estimated to optimize better with 12.3x more samples".
fn more_samples(stderr: &str) -> Option<f64> {
    let at = stderr.find("x more samples")?;
    let number = stderr[..at].rsplit(' ').next()?;
    number.parse().ok()
}

/// The outcome for every module with samples.
#[derive(Default)]
pub struct Outcome {
    /// (module, profile written, llvm-profgen's more-samples estimate).
    pub written: Vec<(PathBuf, PathBuf, Option<f64>)>,
    /// (module, why no profile).
    pub skipped: Vec<(PathBuf, String)>,
}

impl Outcome {
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (module, profile, more) in &self.written {
            let _ = write!(
                out,
                "profgen: {} -> {}",
                module.display(),
                profile.display()
            );
            if let Some(factor) = more {
                let _ = write!(
                    out,
                    " (llvm-profgen: {factor}x more samples would help: lower -c or run longer)"
                );
            }
            out.push('\n');
        }
        for (module, why) in &self.skipped {
            let _ = writeln!(out, "profgen: no profile for {}: {why}", module.display());
        }
        if !self.written.is_empty() {
            let (_, first, _) = &self.written[0];
            let _ = writeln!(
                out,
                "next: clang-19 -O2 -gdwarf-4 -fdebug-info-for-profiling -fprofile-sample-use={} ...",
                first.display()
            );
        }
        out
    }
}

/// Why `module` of the recording gets no profile, if it gets one.
fn obstacle(module: &ModuleSummary) -> Option<String> {
    if module
        .path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("libbreakdance"))
    {
        return Some("it is the tracer itself".to_string());
    }
    let binary = match Binary::open(&module.path) {
        Ok(binary) => binary,
        Err(e) => return Some(format!("{e:#}")),
    };
    match (&module.build_id, binary.build_id()) {
        (None, _) => {
            return Some(
                "it was recorded without a build id, so the file cannot be matched to the \
                 recording (link with -Wl,--build-id)"
                    .to_string(),
            )
        }
        (Some(recorded), Some(now)) if *recorded != now => {
            return Some(format!(
                "the file was rebuilt since the recording (build id {now}, recorded {recorded}): \
                 record again"
            ))
        }
        (Some(_), None) => return Some("the file now has no build id: it was rebuilt".to_string()),
        _ => {}
    }
    match binary.facts() {
        Err(e) => Some(format!("{e:#}")),
        Ok(f) if !f.has_debug_info && !f.has_symtab => Some(
            "it is stripped (no symbols, no debug info); llvm-profgen needs debug info".to_string(),
        ),
        Ok(f) if !f.has_debug_info => Some(
            "it has no debug info (built without -g); llvm-profgen needs debug info".to_string(),
        ),
        Ok(_) => None,
    }
}

/// Writes `<module>.prof` next to the recording's other outputs for each
/// module that has samples and debug info.
pub fn run(summary: &Summary) -> Outcome {
    let dir = &summary.output_dir;
    let perf_script = dir.join(PERF_SCRIPT_FILE);
    let mut outcome = Outcome::default();
    for module in &summary.modules {
        if let Some(why) = obstacle(module) {
            outcome.skipped.push((module.path.clone(), why));
            continue;
        }
        let stem = module
            .afdo
            .strip_suffix(".afdo.txt")
            .unwrap_or(&module.afdo);
        let profile = dir.join(format!("{stem}.prof"));
        match generate(&perf_script, &module.path, &profile) {
            Ok(g) => outcome
                .written
                .push((module.path.clone(), profile, g.more_samples)),
            Err(e) => outcome
                .skipped
                .push((module.path.clone(), format!("{e:#}"))),
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_estimate_is_read_from_llvm_profgen() {
        let stderr = "warning: Sample PGO is estimated to optimize better with 7.5x more \
                      samples. Please consider increasing sampling rate or profiling for \
                      longer duration to get more samples.\n";
        assert_eq!(more_samples(stderr), Some(7.5));
        assert_eq!(more_samples("all fine\n"), None);
    }
}
