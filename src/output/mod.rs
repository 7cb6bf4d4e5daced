//! The writer: annotates the aggregate with its modules and writes
//! perf.script, one AutoFDO text and one BOLT profile per module with
//! samples, and summary.json. Every file is written to a temporary name in
//! the output directory and renamed into place, so a reader never sees half
//! a file and a failed write leaves the previous file intact; `dir` says
//! how the directory and the names are kept out of other users' reach.

pub mod dir;
pub mod formats;

use std::path::PathBuf;

use crate::aggregate::Aggregate;
use crate::buffer::AbortReason;
use crate::modules::Module;
use crate::trace::counters::CounterValues;

use formats::Json;

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
    pub event: String,
    pub period: Option<u64>,
    pub freq: Option<u64>,
    pub lbr: usize,
    pub dataflow: String,
    pub duration_ns: u64,
    pub threads: u64,
    pub counters: CounterValues,
    pub thread_table_full: u64,
    pub host: HostReport,
}

/// What the library met of its host program and survived: summary.json's
/// `host` object.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostReport {
    /// Handlers left half-way by an application's longjmp, taken back by
    /// the thread's next handler.
    pub handlers_abandoned: u64,
    /// Slots a closer gave up waiting for (a handler still running, or
    /// abandoned, after the wait).
    pub slots_busy_at_stop: u64,
    /// Stuck slots whose sampling the worker re-armed.
    pub stuck_slots_poked: u64,
    /// Threads that closed their own slot as they ended.
    pub threads_exited: u64,
    /// Slots of threads that ended without closing them, closed by the
    /// worker's sweep.
    pub threads_gone: u64,
    /// Lookups in the handler's mapping table that gave up while it was
    /// being replaced.
    pub exec_map_lookups_given_up: u64,
    /// Breakpoint events replaced after a hit delivered late (the thread
    /// had SIGTRAP blocked) or an abandoned handler.
    pub breakpoints_renewed: u64,
    /// Debug exceptions at the tracer's breakpoint that the kernel could
    /// not attribute, dropped instead of passed to the application.
    pub stray_debug_traps: u64,
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
    let mut files = vec!["perf.script".to_string()];
    for (_, afdo, bolt, _) in &profiles {
        files.push(afdo.clone());
        files.push(bolt.clone());
    }
    files.push("summary.json".to_string());
    for name in &files {
        dir.check_replaceable(name)?;
    }

    dir.write_atomic(
        "perf.script",
        formats::perf_script(agg, modules, report.pid).as_bytes(),
    )?;
    let mut module_rows = Vec::new();
    for (m, afdo, bolt, p) in profiles {
        dir.write_atomic(&afdo, formats::afdo_text(&p).as_bytes())?;
        dir.write_atomic(&bolt, formats::bolt_preaggregated(&p).as_bytes())?;
        module_rows.push((m, afdo, bolt, p.branch_count()));
    }

    let c = &report.counters;
    let mut j = Json::new();
    j.begin_object(None)
        .num("pid", report.pid as u64)
        .str("command", &report.command)
        .str("output_dir", &report.output_dir.to_string_lossy());
    j.begin_object(Some("config"))
        .str("event", &report.event)
        .opt_num("period", report.period)
        .opt_num("freq", report.freq)
        .num("lbr", report.lbr as u64)
        .str("lookahead", &report.dataflow)
        .end_object();
    j.num("duration_ns", report.duration_ns)
        .num("threads", report.threads)
        .num("samples", c.samples)
        .num("traces_started", c.traces_started)
        .num("traces_completed", c.traces_completed)
        .num("traces_aborted", c.aborted())
        .num("traces_empty", c.traces_empty)
        .num("traces_written", agg.traces_seen - agg.traces_not_kept)
        .num("distinct_traces", agg.traces.len() as u64)
        .num("entries_recorded", c.entries_recorded)
        .num("entries_written", agg.entries_kept())
        .num("breakpoints", c.breakpoints)
        .num("statically_resolved", c.statically_resolved)
        .num("dynamically_evaluated", c.dynamically_evaluated)
        .num("dynamic_taken", c.dynamic_taken)
        .num("buffer_swaps", c.buffer_swaps)
        .num("sp_windowed", c.sp_windowed)
        .num("segments_decoded", c.segments_decoded)
        .num("segments_cached", c.segments_cached)
        .num("dataflow_resolved", c.dataflow_resolved)
        .num("dataflow_taken", c.dataflow_taken)
        .num("dataflow_verified", c.dataflow_verified)
        .num("dataflow_mismatches", c.dataflow_mismatches)
        .num("dataflow_mismatched_stops", c.dataflow_mismatched_stops)
        .num("revisit_hits", c.revisit_hits)
        .num("verify_register_mismatches", c.verify_register_mismatches)
        .num("duplicate_traps", c.duplicate_traps);
    j.begin_object(Some("emulation"))
        .num("segments", c.segments)
        .num("emulated_steps", c.emulated_steps)
        .num("checkpoints", c.checkpoints)
        .num("checkpoint_extra_hits", c.checkpoint_extra_hits)
        .num("checkpoint_unreached", c.checkpoint_unreached)
        .num("mismatch_registers", c.speculation_mismatch_registers)
        .num("mismatch_memory", c.speculation_mismatch_memory)
        .num("step_overs", c.step_overs)
        .num("entries_validated", c.speculated_taken)
        .end_object();
    j.begin_object(Some("handler_ns"))
        .num("sampling", c.sampling_ns)
        .num("breakpoint", c.breakpoint_ns)
        .num("decode", c.decode_ns)
        .num("emulation", c.emulation_ns)
        .end_object();
    j.begin_object(Some("aborts"));
    for r in AbortReason::ALL {
        j.num(r.name(), c.aborts[r as usize]);
    }
    j.end_object();
    j.begin_object(Some("drops"))
        .num("no_free_buffer", c.no_free_buffer)
        .num("thread_table_full", report.thread_table_full)
        .num("trace_table_full", agg.traces_not_kept)
        .num("trace_table_full_entries", agg.entries_not_kept)
        .num("buffer_overflow_entries", c.full_buffer_entries_lost)
        .end_object();
    let h = &report.host;
    j.begin_object(Some("host"))
        .num("handlers_abandoned", h.handlers_abandoned)
        .num("slots_busy_at_stop", h.slots_busy_at_stop)
        .num("stuck_slots_poked", h.stuck_slots_poked)
        .num("threads_exited", h.threads_exited)
        .num("threads_gone", h.threads_gone)
        .num("exec_map_lookups_given_up", h.exec_map_lookups_given_up)
        .num("breakpoints_renewed", h.breakpoints_renewed)
        .num("stray_debug_traps", h.stray_debug_traps)
        .end_object();
    j.begin_array("modules");
    for (m, afdo, bolt, branches) in &module_rows {
        j.begin_object(None)
            .str("path", &m.path.to_string_lossy())
            .str("build_id", m.build_id.as_deref().unwrap_or(""))
            .str("load_address", &format!("{:#x}", m.load_address))
            .str("bias", &format!("{:#x}", m.bias))
            .str("afdo", afdo)
            .str("bolt", bolt)
            .num("branches", *branches)
            .end_object();
    }
    j.end_array();
    j.begin_array("files");
    for f in &files {
        j.item_str(f);
    }
    j.end_array().end_object();
    let text = j.finish();
    dir.write_atomic("summary.json", format!("{text}\n").as_bytes())?;
    Ok(text)
}
