//! values.txt: the session's value profile (values.csv, written by the
//! library with `values`) symbolised for a reader: per load instruction,
//! its function, source line, how often it was recorded, its top-1
//! invariance and its most frequent values.

use std::collections::HashMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use breakdance_protocol::values::{parse_values, LoadRow, VALUES_FILE};

use crate::elf::{Binary, Function};

/// The symbolised profile's file name, beside values.csv.
pub const VALUES_TEXT_FILE: &str = "values.txt";
/// Values shown per load.
const SHOWN_VALUES: usize = 4;

/// A load row with where it is in the source.
pub struct Symbolised {
    pub row: LoadRow,
    /// `function+0xOFFSET`, or the address when no symbol covers it.
    pub place: String,
    /// `file:line`, or "?" without debug info.
    pub line: String,
}

/// Reads `dir`/values.csv and symbolises every row (each module opened
/// once). Modules that cannot be read keep bare addresses.
pub fn load(dir: &Path) -> Result<Vec<Symbolised>> {
    let path = dir.join(VALUES_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let rows = parse_values(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut by_module: HashMap<PathBuf, Vec<u64>> = HashMap::new();
    for r in &rows {
        by_module.entry(r.module.clone()).or_default().push(r.vaddr);
    }
    let mut symbols: HashMap<PathBuf, (Vec<Function>, HashMap<u64, String>)> = HashMap::new();
    for (module, addresses) in by_module {
        let Ok(binary) = Binary::open(&module) else {
            continue;
        };
        let functions = binary.functions().unwrap_or_default();
        let lines = binary.source_lines(&addresses);
        symbols.insert(module, (functions, lines));
    }
    Ok(rows
        .into_iter()
        .map(|row| {
            let (place, line) = match symbols.get(&row.module) {
                Some((functions, lines)) => (
                    place_of(functions, row.vaddr),
                    lines.get(&row.vaddr).cloned().unwrap_or_else(|| "?".into()),
                ),
                None => (format!("{:#x}", row.vaddr), "?".into()),
            };
            Symbolised { row, place, line }
        })
        .collect())
}

/// `function+0xOFFSET` for a link-time address.
fn place_of(functions: &[Function], vaddr: u64) -> String {
    match crate::elf::function_index(functions, vaddr).map(|i| &functions[i]) {
        Some(f) => format!("{}+{:#x}", f.name, vaddr - f.address),
        None => format!("{vaddr:#x}"),
    }
}

/// The table: one line per load, most recorded first.
pub fn render(loads: &[Symbolised], limit: Option<usize>) -> String {
    let total: u64 = loads.iter().map(|l| l.row.executions).sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# value profile: {} load instructions, {total} loads recorded (validated segments only)",
        loads.len()
    );
    let _ = writeln!(
        out,
        "# invariance: the share of a load's executions that read its most frequent value"
    );
    let _ = writeln!(
        out,
        "{:>10}  {:>10}  {:<40}  {:<24}  {:<18}  top values (value ×count)",
        "executions", "invariance", "load", "source", "module"
    );
    for l in loads.iter().take(limit.unwrap_or(usize::MAX)) {
        let values: Vec<String> = l
            .row
            .values
            .iter()
            .take(SHOWN_VALUES)
            .map(|(v, n)| format!("{v:#x} ×{n}"))
            .collect();
        let more = if l.row.values.len() > SHOWN_VALUES || l.row.other > 0 {
            ", …"
        } else {
            ""
        };
        let module = crate::elf::file_name(&l.row.module);
        let _ = writeln!(
            out,
            "{:>10}  {:>9.1}%  {:<40}  {:<24}  {:<18}  {}{more}",
            l.row.executions,
            100.0 * l.row.invariance(),
            l.place,
            l.line,
            module,
            values.join(", ")
        );
    }
    out
}

/// Writes `dir`/values.txt from values.csv; returns the loads, for a
/// caller that shows the top ones.
pub fn write_text(dir: &Path) -> Result<Vec<Symbolised>> {
    let loads = load(dir)?;
    let path = dir.join(VALUES_TEXT_FILE);
    std::fs::write(&path, render(&loads, None))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(loads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_is_placed_in_the_function_that_covers_it() {
        let f = |name: &str, address, size| Function {
            name: name.into(),
            address,
            size,
        };
        let functions = [f("a", 0x100, 0x20), f("b", 0x140, 0x10)];
        assert_eq!(place_of(&functions, 0x11b), "a+0x1b");
        assert_eq!(place_of(&functions, 0x130), "0x130");
        assert_eq!(place_of(&functions, 0x140), "b+0x0");
        assert_eq!(place_of(&functions, 0x90), "0x90");
    }
}
