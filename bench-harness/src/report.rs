//! Result files of an experiment: CSV and markdown tables, SVG plots, and the
//! list of failed steps, all under `results/<experiment>/`.

use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A table of formatted cells, written both as CSV and as markdown.
pub struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; it must have a cell for every header (a shorter row
    /// would shift every later column of the CSV).
    pub fn push(&mut self, row: Vec<String>) {
        assert_eq!(
            row.len(),
            self.headers.len(),
            "a row of {} cells under {} headers: {row:?}",
            row.len(),
            self.headers.len()
        );
        self.rows.push(row);
    }

    pub fn to_csv(&self) -> String {
        let mut out = String::new();
        let line = |cells: &[String]| {
            cells
                .iter()
                .map(|c| csv_cell(c))
                .collect::<Vec<_>>()
                .join(",")
        };
        let _ = writeln!(out, "{}", line(&self.headers));
        for r in &self.rows {
            let _ = writeln!(out, "{}", line(r));
        }
        out
    }

    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "| {} |", self.headers.join(" | "));
        let seps: Vec<&str> = self.headers.iter().map(|_| "---").collect();
        let _ = writeln!(out, "|{}|", seps.join("|"));
        for r in &self.rows {
            let cells: Vec<String> = r.iter().map(|c| c.replace('|', "\\|")).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        out
    }
}

fn csv_cell(c: &str) -> String {
    if c.contains([',', '"', '\n']) {
        format!("\"{}\"", c.replace('"', "\"\""))
    } else {
        c.to_string()
    }
}

/// A step that failed: which workload, what was run, and what it said.
pub struct Failure {
    pub workload: String,
    pub step: String,
    pub message: String,
}

/// The output directory of one experiment and the failures seen so far.
pub struct Report {
    pub dir: PathBuf,
    experiment: String,
    markdown: String,
    pub failures: Vec<Failure>,
}

impl Report {
    /// Creates (or reuses) `results_root/<experiment>/`.
    pub fn new(results_root: &Path, experiment: &str, title: &str) -> Result<Report> {
        let dir = results_root.join(experiment);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create results directory {}", dir.display()))?;
        Ok(Report {
            dir,
            experiment: experiment.to_string(),
            markdown: format!("# {title}\n\n"),
            failures: Vec::new(),
        })
    }

    /// Records a failed step and prints it at once, so a long run shows it.
    pub fn fail(&mut self, workload: &str, step: &str, err: &anyhow::Error) {
        let message = format!("{err:#}");
        eprintln!("[{}] FAILED {workload}: {step}: {message}", self.experiment);
        self.failures.push(Failure {
            workload: workload.to_string(),
            step: step.to_string(),
            message,
        });
    }

    /// Writes `NAME.csv` and adds the table to the markdown report.
    pub fn table(&mut self, name: &str, heading: &str, table: &Table) -> Result<()> {
        self.write(&format!("{name}.csv"), &table.to_csv())?;
        let _ = write!(self.markdown, "## {heading}\n\n{}\n", table.to_markdown());
        Ok(())
    }

    /// Adds free text (a paragraph) to the markdown report.
    pub fn note(&mut self, text: &str) {
        let _ = write!(self.markdown, "{text}\n\n");
    }

    /// Writes `NAME.svg` and links it from the markdown report.
    pub fn plot(&mut self, name: &str, svg: &str) -> Result<()> {
        self.write(&format!("{name}.svg"), svg)?;
        let _ = write!(self.markdown, "![{name}]({name}.svg)\n\n");
        Ok(())
    }

    pub fn write(&self, file: &str, contents: &str) -> Result<()> {
        let path = self.dir.join(file);
        std::fs::write(&path, contents).with_context(|| format!("cannot write {}", path.display()))
    }

    /// Writes `README.md` (tables, plots, failures) and `failures.csv`.
    pub fn finish(mut self) -> Result<usize> {
        let mut failures = Table::new(&["workload", "step", "error"]);
        for f in &self.failures {
            failures.push(vec![f.workload.clone(), f.step.clone(), f.message.clone()]);
        }
        self.write("failures.csv", &failures.to_csv())?;
        if !self.failures.is_empty() {
            let _ = write!(
                self.markdown,
                "## Failed steps\n\n{}\n",
                failures.to_markdown()
            );
        }
        self.write("README.md", &self.markdown)?;
        eprintln!(
            "[{}] wrote {} ({} failed steps)",
            self.experiment,
            self.dir.display(),
            self.failures.len()
        );
        Ok(self.failures.len())
    }
}

/// Median of a non-empty sample (mean of the two middle values when even).
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Geometric mean of the positive finite values (NaN when there are none).
pub fn geomean(values: &[f64]) -> f64 {
    let logs: Vec<f64> = values
        .iter()
        .filter(|v| v.is_finite() && **v > 0.0)
        .map(|v| v.ln())
        .collect();
    if logs.is_empty() {
        f64::NAN
    } else {
        (logs.iter().sum::<f64>() / logs.len() as f64).exp()
    }
}

/// `median (min–max)` of per-round values, the median with 3 decimals and
/// the spread with 2; "n/a" when there are none.
pub fn spread(values: &[f64]) -> String {
    let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return "n/a".into();
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{} ({}–{})", fmt(median(&v), 3), fmt(lo, 2), fmt(hi, 2))
}

/// Formats a number with `digits` decimals, or "n/a" when it is not finite.
pub fn fmt(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        "n/a".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_geomean() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!((geomean(&[1.0, 4.0]) - 2.0).abs() < 1e-12);
        assert!(median(&[]).is_nan());
        assert_eq!(spread(&[1.1, 0.9, 1.0]), "1.000 (0.90–1.10)");
        assert_eq!(spread(&[f64::NAN]), "n/a");
    }

    #[test]
    fn csv_quotes_cells_with_commas() {
        let mut t = Table::new(&["a", "b"]);
        t.push(vec!["x,y".into(), "say \"hi\"".into()]);
        assert_eq!(t.to_csv(), "a,b\n\"x,y\",\"say \"\"hi\"\"\"\n");
        assert!(t.to_markdown().starts_with("| a | b |\n|---|---|\n"));
    }
}
