//! The writer: annotates the aggregate with its modules and writes
//! perf.script, one AutoFDO text and one BOLT profile per module with
//! samples, and summary.json (the protocol crate's [`Summary`]). Every
//! file is written to a temporary name in the output directory and renamed
//! into place, so a reader never sees half a file and a failed write leaves
//! the previous file intact; `dir` says how the directory and the names are
//! kept out of other users' reach.

pub mod dir;
pub mod formats;

use std::path::PathBuf;

use breakdance_protocol::{
    ModuleSummary, SessionConfig, Summary, PERF_SCRIPT_FILE, SCHEMA_VERSION, SUMMARY_FILE,
};

use breakdance_protocol::values::VALUES_FILE;

use crate::aggregate::Aggregate;
use crate::modules::Module;
use crate::trace::counters::CounterValues;

/// A failed write: the directory refused, or a file, named.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Dir(#[from] dir::DirError),
    #[error(transparent)]
    File(#[from] dir::FileError),
}

/// What summary.json reports besides the aggregate.
pub struct SessionReport {
    pub pid: i32,
    pub command: String,
    pub output_dir: PathBuf,
    pub config: SessionConfig,
    pub duration_ns: u64,
    pub threads: u64,
    pub counters: CounterValues,
    pub thread_table_full: u64,
    pub host: breakdance_protocol::Host,
}

/// File names for a module's profiles: its basename, made unique when two
/// modules share one.
fn module_file_stem(module: &Module, used: &mut Vec<String>) -> String {
    let base = module.basename();
    let mut stem = base.clone();
    let mut i = 2;
    while used.contains(&stem) {
        stem = format!("{base}.{i}");
        i += 1;
    }
    used.push(stem.clone());
    stem
}

/// Writes all outputs of a session into `report.output_dir` (`force`: even
/// when it belongs to another user); returns the text of summary.json (the
/// `stop` reply), without its final newline. Every name is checked before
/// the first file is written, so a refusal leaves the directory as it was.
pub fn write_session(
    report: &SessionReport,
    agg: &Aggregate,
    modules: &[Module],
    force: bool,
) -> Result<String, WriteError> {
    let cpu_at_write = crate::sys::thread_cpu_ns();
    let dir = dir::OutputDir::open(&report.output_dir, force)?;
    let mut used = Vec::new();
    let mut profiles = Vec::new();
    for m in modules {
        let p = formats::module_profile(agg, m);
        if !p.is_empty() {
            let stem = module_file_stem(m, &mut used);
            profiles.push((
                m,
                format!("{stem}.afdo.txt"),
                format!("{stem}.bolt.fdata"),
                p,
            ));
        }
    }
    let mut files = vec![PERF_SCRIPT_FILE.to_string()];
    let values = report.config.values;
    if values {
        files.push(VALUES_FILE.to_string());
    }
    for (_, afdo, bolt, _) in &profiles {
        files.push(afdo.clone());
        files.push(bolt.clone());
    }
    files.push(SUMMARY_FILE.to_string());
    for name in &files {
        dir.check_replaceable(name)?;
    }

    dir.write_atomic(
        PERF_SCRIPT_FILE,
        formats::perf_script(agg, modules, report.pid).as_bytes(),
    )?;
    if values {
        dir.write_atomic(VALUES_FILE, formats::values_csv(agg, modules).as_bytes())?;
    }
    let mut module_rows = Vec::new();
    for (m, afdo, bolt, p) in profiles {
        dir.write_atomic(&afdo, formats::afdo_text(&p, &m.layout).as_bytes())?;
        dir.write_atomic(&bolt, formats::bolt_preaggregated(&p).as_bytes())?;
        module_rows.push((m, afdo, bolt, p.branch_count()));
    }

    // Drops after the handlers: the thread table (at registration) and
    // the aggregate's trace table.
    let mut counters = report.counters;
    counters.drops.thread_table_full += report.thread_table_full;
    counters.drops.trace_table_full += agg.traces_not_kept;
    counters.drops.trace_table_full_entries += agg.entries_not_kept;
    counters.drops.load_table_full += agg.loads_not_kept;
    // This write (a retry after a failed one counts its own).
    counters.start_stop_ns += crate::sys::thread_cpu_ns().saturating_sub(cpu_at_write);
    let summary = Summary {
        schema: SCHEMA_VERSION,
        pid: report.pid as u32,
        command: report.command.clone(),
        output_dir: report.output_dir.clone(),
        config: report.config.clone(),
        duration_ns: report.duration_ns,
        threads: report.threads,
        counters,
        traces_aborted: report.counters.aborted(),
        traces_written: agg.traces_seen - agg.traces_not_kept,
        distinct_traces: agg.distinct() as u64,
        entries_written: agg.entries_kept(),
        modules: module_rows
            .into_iter()
            .map(|(m, afdo, bolt, branches)| ModuleSummary {
                path: m.path.clone(),
                build_id: m.build_id.clone(),
                load_address: m.load_address,
                bias: m.bias,
                afdo,
                bolt,
                branches,
            })
            .collect(),
        host: report.host,
        files,
    };
    let text = summary.to_json();
    dir.write_atomic(SUMMARY_FILE, format!("{text}\n").as_bytes())?;
    Ok(text)
}
