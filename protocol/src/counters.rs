//! The session's counters, each declared once.
//!
//! [`for_each_counter!`] is the one list of the session's counters: the
//! events the handlers count and every drop, wherever it happens. It
//! generates [`Counters`] here (the plain values that summary.json and the
//! `status` reply carry: counts at the top level under their own names,
//! drops together in `drops`) and, in the library, the per-thread atomic
//! counters the handlers bump. Adding a counter is one line in that list;
//! the library, summary.json, `status`, profiler-ctl and bench-harness all
//! follow. Counts by reason are declared the same way, once, with
//! `reasons!`.

use std::ops::AddAssign;

use serde::{Deserialize, Serialize};

/// What a counter measures, for readers that group counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterKind {
    /// Events.
    Count,
    /// Nanoseconds the library spent.
    Time,
    /// Nanoseconds of the traced threads' own CPU time (not the
    /// library's: kept out of its time).
    ThreadCpu,
}

/// Calls `$callback! { counts { $(#[doc] name: Kind,)* } drops { $(#[doc]
/// name,)* } }` with every counter of a session. A drop is data that was
/// collected and then lost, counted under the reason.
#[macro_export]
macro_rules! for_each_counter {
    ($($callback:tt)*) => {
        $($callback)*! {
            counts {
            /// Sampling signals taken.
            samples: Count,
            /// Traces begun at a sample.
            traces_started: Count,
            /// Watchdog samples that came while the thread's open trace was
            /// still moving from stop to stop (paper, verify), and
            /// samples taken as a stop (`merged_stops`): the trace goes on,
            /// and no trace is begun.
            samples_in_trace: Count,
            /// Samples that fell due while the handler of the thread's last
            /// sample ran (it lasted an eighth of a period or more):
            /// dropped as they arrive, since they would begin where that
            /// one did; no trace is begun.
            samples_in_handler: Count,
            /// Samples that found the thread at a breakpoint past its debug
            /// exception (RF set), where it will not fire: the stop's
            /// SIGTRAP merged into the sample's (one SIGTRAP pends at a
            /// time), or a new trace's first branch is the very instruction
            /// the last stop left the thread at. Taken as the stop.
            merged_stops: Count,
            /// Traces that reached their length.
            traces_completed: Count,
            /// Traces that ended before their first entry (written nowhere).
            traces_empty: Count,
            /// Taken branches recorded into buffers.
            entries_recorded: Count,
            /// Breakpoint stops.
            breakpoints: Count,
            /// Direct jumps and calls followed without stopping.
            statically_resolved: Count,
            /// Branches evaluated against the CPU state at a stop.
            dynamically_evaluated: Count,
            /// Of those, the taken ones.
            dynamic_taken: Count,
            /// Buffers handed to the worker and replaced.
            buffer_swaps: Count,
            /// Time in the sampling handler.
            sampling_ns: Time,
            /// Time in the breakpoint handler.
            breakpoint_ns: Time,
            /// Of the handlers' time, decoding: paper and verify modes' blocks,
            /// emulate mode's instructions the decoded code had no record of,
            /// from the index probe that missed to the records published
            /// (a part of `emulation_ns`).
            decode_ns: Time,
            /// Paper, verify: straight-line blocks the look-ahead decoded.
            blocks_decoded: Count,
            /// Paper, verify: blocks found in the decoded-block cache.
            blocks_cached: Count,
            /// Stops whose stack pointer was checked against a window, not an exact value.
            sp_windowed: Count,
            /// Predictions checked at a stop (verify mode).
            verify_checked: Count,
            /// Predictions a stop contradicted.
            verify_mismatches: Count,
            /// Of those, predicted stops reached at another pc or stack
            /// pointer than the model expected.
            verify_mismatched_stops: Count,
            /// Verify mode: stops at a predicted transfer where the
            /// registers were not the ones the emulator predicted (whatever
            /// the target; counted before, not as, a mismatch).
            verify_register_mismatches: Count,
            /// A second SIGTRAP for a stop already taken (same pc, same
            /// registers), dropped.
            duplicate_traps: Count,
            /// Emulate mode: segments emulated (each validated, or not, at
            /// one checkpoint).
            segments: Count,
            /// Emulate mode: instructions emulated (a rep string
            /// instruction counts once per step of up to 256 iterations).
            emulated_steps: Count,
            /// Emulate mode: instructions emulated in every pass, kept or
            /// not: a pass redone to end at an earlier checkpoint (a loop's
            /// last first-visited address, an rseq section, the start of a
            /// rep string instruction) runs the steps it then drops. The
            /// core's speed is `emulation_ns / emulated_steps_run`.
            emulated_steps_run: Count,
            /// Emulate mode: passes the emulator ran over a segment's
            /// steps: one per segment, and another for each time one was
            /// redone to end at an earlier checkpoint (`emulated_steps_run`
            /// counts their steps).
            emulated_passes: Count,
            /// Emulate mode: of the handlers' time, emulating.
            emulation_ns: Time,
            /// CPU time of the session's worker thread: aggregating full
            /// buffers, following the mappings, sweeping the thread table.
            worker_ns: Time,
            /// CPU time of starting and stopping the session, on the
            /// thread that did each: the tables, the maps, the threads'
            /// events, and at the stop closing them and writing every
            /// output but summary.json (written last, with this in it).
            start_stop_ns: Time,
            /// CPU time of the traced threads from their registration to
            /// the close of their slot (threads whose CPU clock could still
            /// be read then; not those already gone).
            threads_cpu_ns: ThreadCpu,
            /// Of `threads_cpu_ns`, the time a thread ran with its sampling
            /// event off: from each sample to the handler that arms the
            /// next (microseconds), and any stretch where nothing armed it
            /// again, when the thread could take no sample at all.
            sampling_off_ns: ThreadCpu,
            /// Emulate mode: instructions the emulator decoded (the
            /// process's shared decoded code, or its thread's own, missed;
            /// a miss in the shared code decodes the rest of its block).
            emulation_decodes: Count,
            /// Emulate mode: loads the emulator refused because they needed
            /// stack bytes below the red zone at the segment's start that
            /// the segment had not stored: the kernel's signal frame lies
            /// there, and the thread reads what the handler left. Each ends
            /// the pass before its instruction; the next segment starts
            /// there from the thread's exact state. (Verify mode's
            /// predictions end so too, uncounted.)
            indeterminate_loads: Count,
            /// Emulate mode: segments that completed the trace reading only
            /// memory no other thread can change (see `emulate::Segment::proven`), so
            /// exact with no checkpoint.
            segments_proven: Count,
            /// Emulate mode: taken branches of proven segments and proven
            /// tails (with `validated_entries`, all of `entries_recorded` in
            /// that mode).
            proven_entries: Count,
            /// Emulate mode: segments validated at a checkpoint before their
            /// last entries, a tail that read only memory no other thread
            /// can change (see `emulate::Segment::tail_entries`): one stop
            /// for a loop however many times it goes round.
            proven_tails: Count,
            /// Emulate mode: checkpoints reached and compared.
            checkpoints: Count,
            /// Emulate mode: breakpoint hits at a checkpoint's address before
            /// the one the prediction was for (a segment that went round a
            /// loop).
            checkpoint_extra_hits: Count,
            /// Emulate mode: segments dropped because the trace's watchdog
            /// sample came first (or the session stopped, or the thread
            /// ended).
            checkpoint_unreached: Count,
            /// Emulate mode: segments proven by the process being quiet
            /// while it had wrapped application handlers, kept once the
            /// thread's next sample showed that no handler ran (see
            /// `quiet::wrap`).
            segments_settled: Count,
            /// Emulate mode: such segments whose settling never came (the
            /// session stopped or the thread ended first, or two samples
            /// found the thread where the segment begins): dropped.
            segments_unsettled: Count,
            /// Emulate mode: checkpoints where a register differed from the
            /// prediction (the segment's entries were dropped).
            speculation_mismatch_registers: Count,
            /// Emulate mode: checkpoints where a memory word the segment
            /// read or wrote held another value (entries dropped).
            speculation_mismatch_memory: Count,
            /// Emulate mode: instructions left to the CPU (a syscall,
            /// cpuid, an instruction the emulator lacks) with a breakpoint
            /// after them.
            step_overs: Count,
            /// Emulate mode: taken branches validated at a checkpoint.
            validated_entries: Count,
            /// Handlers left half-way by an application's longjmp, taken
            /// back by the thread's next handler.
            handlers_abandoned: Count,
            /// Breakpoint events replaced after a late hit or an abandoned
            /// handler.
            breakpoints_renewed: Count,
            /// First samples that merged into an application's SIGTRAP,
            /// their event started as the sample would have started it.
            first_samples_revived: Count,
            /// Debug exceptions at the tracer's breakpoint the kernel could
            /// not attribute, dropped instead of passed to the application.
            stray_debug_traps: Count,
            /// `callstack`: traces written with the call stack taken at
            /// their newest branch.
            callstacks: Count,
            /// `callstack`: frames in those stacks, leaves included
            /// (`unwind=fp`; with `unwind=dwarf` the worker unwinds).
            callstack_frames: Count,
            /// `callstack`: stacks cut at the depth asked for (their
            /// frames go on beyond it).
            callstacks_truncated: Count,
            /// `callstack`: traces written without a stack: a trace that
            /// ended early (its newest validated branch is not where the
            /// emulation took the stack), or the buffer's frame store was
            /// full. With `callstacks`, every trace written.
            callstacks_missing: Count,
            /// `values`: loads of validated segments written to a buffer
            /// with their values (one per executed load instruction).
            loads_recorded: Count,
            }
            drops {
            /// Samples dropped because no free buffer was left.
            no_free_buffer,
            /// Samples dropped because a pool of per-thread state (the
            /// emulator, the decoded-block cache, verify's predictions,
            /// taken at a thread's first sample) was empty.
            no_free_state,
            /// Entries lost because a trace outgrew its buffer.
            buffer_overflow_entries,
            /// Threads not traced because the thread table was full.
            thread_table_full,
            /// Traces the aggregate's table had no room for.
            trace_table_full,
            /// The taken branches of those traces.
            trace_table_full_entries,
            /// `values`: loads of validated segments the buffer's value
            /// store had no room for.
            load_buffer_full,
            /// `values`: recorded loads the worker's table of load
            /// instructions had no room for (not in values.csv).
            load_table_full,
            }
        }
    };
}

macro_rules! define_counters {
    (
        counts { $($(#[$doc:meta])* $name:ident: $kind:ident,)* }
        drops { $($(#[$drop_doc:meta])* $drop:ident,)* }
    ) => {
        /// The counters of a session (or of one thread). Missing counters
        /// read as 0, so a reader accepts a summary written before a
        /// counter existed.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct Counters {
            $($(#[$doc])* pub $name: u64,)*
            /// Data collected and then lost, by reason.
            pub drops: Drops,
            /// Traces that ended early, by reason.
            pub aborts: Aborts,
        }

        /// Data collected and then lost, by reason.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct Drops {
            $($(#[$drop_doc])* pub $drop: u64,)*
        }

        impl Counters {
            /// The counts (not the drops nor the aborts): name, kind, value,
            /// in declaration order.
            pub fn entries(&self) -> Vec<(&'static str, CounterKind, u64)> {
                vec![$((stringify!($name), CounterKind::$kind, self.$name),)*]
            }
        }

        impl Drops {
            /// (reason, count), in declaration order.
            pub fn entries(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($drop), self.$drop),)*]
            }

            pub fn total(&self) -> u64 {
                0 $(+ self.$drop)*
            }
        }

        impl AddAssign for Counters {
            fn add_assign(&mut self, o: Counters) {
                $(self.$name += o.$name;)*
                $(self.drops.$drop += o.drops.$drop;)*
                self.aborts += o.aborts;
            }
        }
    };
}

for_each_counter!(define_counters);

impl Counters {
    /// Traces that ended early, for any reason.
    pub fn aborted(&self) -> u64 {
        self.aborts.total()
    }
}

/// Declares an enum of reasons and a struct counting each, with the
/// reason's summary.json name as the field name.
macro_rules! reasons {
    (
        $(#[$enum_doc:meta])* $enum:ident;
        $(#[$counts_doc:meta])* $counts:ident;
        $($(#[$doc:meta])* $variant:ident => $name:ident,)*
    ) => {
        $(#[$enum_doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum $enum {
            $($(#[$doc])* $variant,)*
        }

        impl $enum {
            pub const ALL: [$enum; [$(stringify!($name)),*].len()] = [$($enum::$variant),*];
            pub const COUNT: usize = Self::ALL.len();

            /// The name in summary.json.
            pub fn name(self) -> &'static str {
                match self {
                    $($enum::$variant => stringify!($name),)*
                }
            }
        }

        $(#[$counts_doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct $counts {
            $(pub $name: u64,)*
        }

        impl $counts {
            pub fn get(&self, reason: $enum) -> u64 {
                match reason {
                    $($enum::$variant => self.$name,)*
                }
            }

            pub fn get_mut(&mut self, reason: $enum) -> &mut u64 {
                match reason {
                    $($enum::$variant => &mut self.$name,)*
                }
            }

            pub fn from_fn(mut f: impl FnMut($enum) -> u64) -> $counts {
                $counts {
                    $($name: f($enum::$variant),)*
                }
            }

            /// (reason, count) for every reason, in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = ($enum, u64)> + '_ {
                $enum::ALL.into_iter().map(|r| (r, self.get(r)))
            }

            pub fn total(&self) -> u64 {
                self.iter().map(|(_, n)| n).sum()
            }
        }

        impl AddAssign for $counts {
            fn add_assign(&mut self, o: $counts) {
                $(self.$name += o.$name;)*
            }
        }
    };
}

reasons! {
    /// Why a trace ended early. Each reason has a counter in summary.json.
    AbortReason;
    /// Traces that ended early, by reason.
    Aborts;
    /// Breakpoint address inside an rseq critical section.
    Rseq => rseq,
    /// The breakpoint was hit with another stack pointer than expected
    /// (reached from a signal handler or a deeper frame).
    SpMismatch => sp_mismatch,
    /// The handler ran at a pc that is not the breakpoint's.
    PcMismatch => pc_mismatch,
    /// An instruction the look-ahead does not follow.
    UnsupportedInstruction => unsupported_instruction,
    /// Code outside the known executable file mappings (the vDSO included).
    OutsideMappings => outside_mappings,
    /// No transfer within the look-ahead limit.
    LookaheadLimit => lookahead_limit,
    /// A syscall that may not return to the next instruction.
    Syscall => syscall,
    /// The thread exited with a trace open.
    ThreadExit => thread_exit,
    /// The session stopped with a trace open.
    SessionStop => session_stop,
    /// The breakpoint could not be set (the ioctl failed).
    BreakpointFailed => breakpoint_failed,
    /// Emulate mode: at a checkpoint the thread's state was not the
    /// predicted one (registers or a logged memory word).
    SpeculationMismatch => speculation_mismatch,
    /// Emulate mode: the trace's watchdog sample came before the checkpoint
    /// was hit.
    CheckpointUnreached => checkpoint_unreached,
    /// Paper, verify: a watchdog period passed with no stop at
    /// the trace's breakpoint (the thread left that path by longjmp, or
    /// waits, or runs code where the breakpoint is not).
    BreakpointUnreached => breakpoint_unreached,
    /// Emulate mode: the next instruction faults (the program's own fault).
    EmulationFault => emulation_fault,
    /// The handler following the trace never returned (an application
    /// signal handler run inside it left by longjmp); the next handler of
    /// the thread ended the trace.
    HandlerAbandoned => handler_abandoned,
    /// Emulate mode: the trace's handlers had spent half a sampling period
    /// of CPU on it, 1 ms at least (code the emulation follows only a
    /// little at a time: the cap keeps the program's overhead bounded).
    HandlerBudget => handler_budget,
    /// Emulate mode: an application signal handler (wrapped by the
    /// library) ran while a segment that took the process's quietness for
    /// granted may have been running: that segment's entries were dropped.
    SignalHandler => signal_handler,
}

/// Calls `$callback! { $(#[doc] name: source,)* }` with every counter of
/// what the library met of its host program and survived: the one list
/// [`Host`] (summary.json's `host`) and the library's process-wide atomic
/// counters are generated from. `source` says where a counter is kept:
/// `process` (one atomic for the process, reset at each session's start)
/// or `thread` (the per-thread counter of the same name in
/// [`for_each_counter!`], summed over threads).
#[macro_export]
macro_rules! for_each_host_counter {
    ($($callback:tt)*) => {
        $($callback)*! {
            /// Handlers left half-way by an application's longjmp, taken
            /// back by the thread's next handler.
            handlers_abandoned: thread,
            /// Slots a closer gave up waiting for (a handler still running,
            /// or abandoned, after the wait).
            slots_busy_at_stop: process,
            /// Threads that closed their own slot as they ended (return,
            /// pthread_exit, cancellation).
            threads_exited: process,
            /// Slots of threads that ended without closing them (threads
            /// the session found running at start), closed by the worker's
            /// sweep.
            threads_gone: process,
            /// Lookups in the handler's mapping table that gave up while it
            /// was being replaced.
            exec_map_lookups_given_up: process,
            /// Code reads in a mapping the table listed that faulted: the
            /// code was unmapped or protected since the table's last
            /// refresh; the trace ended there (`outside_mappings`) instead
            /// of faulting in the handler.
            code_unreadable: process,
            /// Samples' and stops' SIGTRAPs that the kernel delivered
            /// while blocked, just ahead of a fault's SIGSEGV or SIGBUS,
            /// put back pending (see `trace::chain`) so that the fault is
            /// handled where it happened.
            sigtraps_put_back: process,
            /// Such SIGTRAPs that the kernel refused to take back (the
            /// sample or stop was lost).
            sigtraps_lost: process,
            /// SIGTRAPs the application raised at itself while it blocked
            /// SIGTRAP, which the kernel dropped because one of ours
            /// already waited: delivered to the application after ours.
            application_sigtraps_delivered: process,
            /// Breakpoint events replaced after a hit delivered late (the
            /// thread had SIGTRAP blocked) or an abandoned handler.
            breakpoints_renewed: thread,
            /// Threads' first samples that merged into an application's
            /// SIGTRAP waiting blocked, their event started as the sample
            /// would have started it.
            first_samples_revived: thread,
            /// Debug exceptions at the tracer's breakpoint that the kernel
            /// could not attribute, dropped instead of passed to the
            /// application.
            stray_debug_traps: thread,
        }
    };
}

macro_rules! define_host {
    ($($(#[doc = $doc:literal])* $name:ident: $source:ident,)*) => {
        /// What the library met of its host program and survived.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct Host {
            $($(#[doc = $doc])* pub $name: u64,)*
        }
    };
}

for_each_host_counter!(define_host);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_flat_and_named_once() {
        let mut c = Counters {
            samples: 3,
            ..Default::default()
        };
        c.drops.no_free_buffer = 1;
        *c.aborts.get_mut(AbortReason::SpMismatch) += 2;
        let v = serde_json::to_value(c).unwrap();
        assert_eq!(v["samples"], 3);
        assert_eq!(v["drops"]["no_free_buffer"], 1);
        assert_eq!(v["aborts"]["sp_mismatch"], 2);
        let times: Vec<_> = c
            .entries()
            .into_iter()
            .filter(|(_, k, _)| *k == CounterKind::Time)
            .map(|(n, _, _)| n)
            .collect();
        assert_eq!(
            times,
            [
                "sampling_ns",
                "breakpoint_ns",
                "decode_ns",
                "emulation_ns",
                "worker_ns",
                "start_stop_ns"
            ]
        );
        let mut sum = c;
        sum += c;
        assert_eq!((sum.samples, sum.aborted(), sum.drops.total()), (6, 4, 2));
        // A counter the reader does not know of yet reads as 0.
        let old: Counters = serde_json::from_str(r#"{"samples": 5}"#).unwrap();
        assert_eq!((old.samples, old.breakpoints), (5, 0));
    }

    #[test]
    fn reasons_have_stable_names() {
        assert_eq!(AbortReason::COUNT, 17);
        assert_eq!(AbortReason::ALL[2].name(), "pc_mismatch");
        let a = Aborts::from_fn(|r| r as u64);
        assert_eq!(a.get(AbortReason::BreakpointFailed), 9);
        assert_eq!(a.total(), (0..17).sum::<u64>());
        // A new reason goes last: older summaries keep their meaning.
        assert_eq!(AbortReason::ALL[15].name(), "handler_budget");
        assert_eq!(AbortReason::ALL[16].name(), "signal_handler");
    }
}
