//! `verify`: the emulator's predictions checked on every workload. Each run
//! records the training input with `--lookahead verify`, where the tracer
//! still stops at every branch the model predicts and compares the
//! prediction with what the CPU did; summary.json counts the predictions
//! checked (`verify_checked`) and the disagreements
//! (`verify_mismatches`: a wrong target, or a stop reached at another pc
//! or stack pointer than the model expected). Any mismatch is a model bug:
//! with the look-ahead on, that branch would have been recorded wrong.

use crate::profiler::Tracer;
use crate::report::{fmt, Report, Table};
use crate::runner;
use crate::workloads::{self, Input, Workspace};
use crate::Options;
use anyhow::{Context, Result};
use std::path::Path;

/// Task-clock period (ns): 1 ms, the overhead experiment's fastest rate.
const PERIOD_NS: u64 = 1_000_000;
const RUNS: usize = 3;
const QUICK_RUNS: usize = 1;

/// The counters this experiment reports, summed over runs.
#[derive(Default)]
struct Counts {
    traces: u64,
    breakpoints: u64,
    verified: u64,
    mismatches: u64,
    mismatched_stops: u64,
    pc_mismatch: u64,
    sp_mismatch: u64,
    wrong_registers: u64,
}

impl Counts {
    fn add_summary(&mut self, dir: &Path) -> Result<()> {
        let summary = breakdance_protocol::Summary::load(dir)?.with_context(|| {
            format!(
                "profiled run wrote no {}",
                dir.join("summary.json").display()
            )
        })?;
        let c = &summary.counters;
        self.traces += c.traces_started;
        self.breakpoints += c.breakpoints;
        self.verified += c.verify_checked;
        self.mismatches += c.verify_mismatches;
        self.mismatched_stops += c.verify_mismatched_stops;
        self.pc_mismatch += c.aborts.pc_mismatch;
        self.sp_mismatch += c.aborts.sp_mismatch;
        self.wrong_registers += c.verify_register_mismatches;
        Ok(())
    }
}

pub fn run(opts: &Options) -> Result<usize> {
    let mut rep = Report::new(
        &opts.results,
        "verify",
        "The emulator's predictions, verified",
    )?;
    let ws = Workspace {
        cache: opts.cache.clone(),
        quick: opts.quick,
    };
    let runs = if opts.quick { QUICK_RUNS } else { RUNS };
    let tracer = match Tracer::locate() {
        Ok(t) => t,
        Err(e) => {
            rep.fail("all", "locate tracer", &e);
            return rep.finish();
        }
    };
    let mut t = Table::new(&[
        "workload",
        "runs",
        "traces",
        "breakpoints",
        "predictions checked",
        "mismatches",
        "mismatches per 1000 checked",
        "of which wrong targets",
        "of which stops at another pc or sp",
        "stops with other registers than predicted",
        "pc_mismatch ends",
        "sp_mismatch ends",
    ]);
    let out = runner::tempfile_path("verify");
    for kind in workloads::kinds(opts.quick) {
        let w = match workloads::prepare(&ws, kind) {
            Ok(w) => w,
            Err(e) => {
                rep.fail(kind.name(), "prepare", &e);
                continue;
            }
        };
        let cmd = tracer.record_with(
            &w.command(Input::Train),
            PERIOD_NS,
            &out,
            &["--lookahead", "verify"],
        );
        let mut counts = Counts::default();
        let mut done = 0;
        for run in 0..runs {
            eprintln!("[verify] {} run {}/{runs}", w.name(), run + 1);
            let _ = std::fs::remove_dir_all(&out);
            match runner::run(&cmd).and_then(|_| counts.add_summary(&out)) {
                Ok(()) => done += 1,
                Err(e) => rep.fail(w.name(), &format!("verify run {}", run + 1), &e),
            }
        }
        if done == 0 {
            continue;
        }
        t.push(vec![
            w.name().to_string(),
            done.to_string(),
            counts.traces.to_string(),
            counts.breakpoints.to_string(),
            counts.verified.to_string(),
            counts.mismatches.to_string(),
            fmt(
                1000.0 * counts.mismatches as f64 / counts.verified as f64,
                2,
            ),
            (counts.mismatches - counts.mismatched_stops).to_string(),
            counts.mismatched_stops.to_string(),
            counts.wrong_registers.to_string(),
            counts.pc_mismatch.to_string(),
            counts.sp_mismatch.to_string(),
        ]);
    }
    let _ = std::fs::remove_dir_all(&out);
    rep.table(
        "verify",
        "Predictions of the emulator checked at a stop",
        &t,
    )?;
    rep.note(&format!(
        "Training input, task-clock every {} ms, `--lookahead verify`: the tracer follows the \
         paper's walk, stopping at every branch that needs the CPU state, and checks each \
         transfer against the x86 emulator's prediction made (on live memory) from the last \
         stop's exact state. \"mismatches\" counts wrong targets and predicted stops reached \
         at another pc or stack pointer; \"stops with other registers\" counts stops where \
         the target agreed but a register or defined flag did not; \"pc_mismatch ends\" and \
         \"sp_mismatch ends\" count every trace that ended so, predicted or not.",
        PERIOD_NS / 1_000_000
    ));
    rep.finish()
}
