//! Per-thread counters, written by the handlers with relaxed atomic adds
//! (lock-free, async-signal-safe) and summed by the control thread for
//! `status` and summary.json.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::buffer::AbortReason;

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// Event counts of one thread (or the sum over threads).
        #[derive(Default)]
        pub struct Counters {
            $(pub $name: AtomicU64,)*
            pub aborts: [AtomicU64; AbortReason::ALL.len()],
        }

        /// A plain copy of [`Counters`].
        #[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
        pub struct CounterValues {
            $(pub $name: u64,)*
            pub aborts: [u64; AbortReason::ALL.len()],
        }

        impl Counters {
            pub fn values(&self) -> CounterValues {
                CounterValues {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                    aborts: std::array::from_fn(|i| self.aborts[i].load(Ordering::Relaxed)),
                }
            }

            /// Adds `v` into these counters (retiring a thread into the
            /// session totals).
            pub fn absorb(&self, v: &CounterValues) {
                $(self.$name.fetch_add(v.$name, Ordering::Relaxed);)*
                for (a, b) in self.aborts.iter().zip(v.aborts) {
                    a.fetch_add(b, Ordering::Relaxed);
                }
            }

            pub fn reset(&self) {
                $(self.$name.store(0, Ordering::Relaxed);)*
                for a in &self.aborts {
                    a.store(0, Ordering::Relaxed);
                }
            }
        }

        impl std::ops::AddAssign for CounterValues {
            fn add_assign(&mut self, o: CounterValues) {
                $(self.$name += o.$name;)*
                for (a, b) in self.aborts.iter_mut().zip(o.aborts) {
                    *a += b;
                }
            }
        }
    };
}

counters!(
    samples,
    traces_started,
    traces_completed,
    traces_empty,
    entries_recorded,
    breakpoints,
    statically_resolved,
    dynamically_evaluated,
    dynamic_taken,
    buffer_swaps,
    no_free_buffer,
    full_buffer_entries_lost,
    sampling_ns,
    breakpoint_ns,
    decode_ns,
    segments_decoded,
    segments_cached,
    sp_windowed,
    dataflow_resolved,
    dataflow_taken,
    dataflow_verified,
    dataflow_mismatches,
    dataflow_mismatched_stops,
    revisit_hits,
    verify_register_mismatches,
    duplicate_traps,
    segments,
    emulated_steps,
    emulation_ns,
    checkpoints,
    checkpoint_extra_hits,
    checkpoint_unreached,
    speculation_mismatch_registers,
    speculation_mismatch_memory,
    step_overs,
    speculated_taken,
    handlers_abandoned,
    breakpoints_renewed,
    stray_debug_traps,
);

impl Counters {
    /// Adds one. Async-signal-safe.
    #[inline]
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    #[inline]
    pub fn abort(&self, reason: AbortReason) {
        self.aborts[reason as usize].fetch_add(1, Ordering::Relaxed);
    }
}

impl CounterValues {
    pub fn aborted(&self) -> u64 {
        self.aborts.iter().sum()
    }
}
