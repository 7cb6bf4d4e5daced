//! What the library met of its host program and survived: the
//! process-wide counters of `breakdance_protocol::for_each_host_counter!`
//! (those kept per process; the per-thread ones are the session's
//! counters), generated from that one list, reset at each session's start
//! and read into summary.json's `host`. On the ground floor, so that any
//! room may count (the handlers' mapping table counts its given-up
//! lookups and unreadable code here). Async-signal-safe: relaxed atomics.

use std::sync::atomic::{AtomicU64, Ordering};

use breakdance_protocol::{Counters, Host};

/// The slot a counter has here: an atomic when the process keeps it,
/// nothing when it is a per-thread counter.
macro_rules! slot {
    (process) => {
        AtomicU64
    };
    (thread) => {
        ()
    };
}

/// A counter's value for the report.
macro_rules! value {
    (process, $own:expr, $threads:expr) => {
        $own.load(Ordering::Relaxed)
    };
    (thread, $own:expr, $threads:expr) => {
        $threads
    };
}

/// A counter's slot at the process's start.
macro_rules! zero {
    (process) => {
        AtomicU64::new(0)
    };
    (thread) => {
        ()
    };
}

macro_rules! reset {
    (process, $own:expr) => {
        $own.store(0, Ordering::Relaxed)
    };
    (thread, $own:expr) => {
        ()
    };
}

macro_rules! host_counters {
    ($($(#[doc = $doc:literal])* $name:ident: $source:ident,)*) => {
        /// The process-wide host counters (see the module doc).
        pub struct HostCounters {
            $($(#[doc = $doc])* pub $name: slot!($source),)*
        }

        impl HostCounters {
            const fn new() -> HostCounters {
                HostCounters {
                    $($name: zero!($source),)*
                }
            }

            /// Zeroes every process-wide counter (at a session's start).
            pub fn reset(&self) {
                $(reset!($source, self.$name);)*
            }

            /// The report: process-wide counters from here, per-thread
            /// ones from the session's summed counters.
            pub fn report(&self, threads: &Counters) -> Host {
                Host {
                    $($name: value!($source, self.$name, threads.$name),)*
                }
            }
        }
    };
}

breakdance_protocol::for_each_host_counter!(host_counters);

/// The process's host counters.
pub static HOST: HostCounters = HostCounters::new();

/// Counts one event of a process-wide host counter.
#[inline]
pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! set {
        (process, $own:expr, $threads:expr, $n:expr) => {
            $own.store($n, Ordering::Relaxed)
        };
        (thread, $own:expr, $threads:expr, $n:expr) => {
            $threads = $n
        };
    }

    /// Gives every host counter a value of its own, where it is kept:
    /// 1, 2, 3, … in declaration order.
    macro_rules! number_them {
        ($($(#[doc = $doc:literal])* $name:ident: $source:ident,)*) => {
            fn number_them(h: &HostCounters, threads: &mut Counters) {
                let mut n = 0;
                $(n += 1; set!($source, h.$name, threads.$name, n);)*
            }
        };
    }
    breakdance_protocol::for_each_host_counter!(number_them);

    #[test]
    fn the_report_reads_each_counter_where_it_is_kept_and_reset_zeroes_the_process_ones() {
        let h = HostCounters::new();
        let mut threads = Counters::default();
        number_them(&h, &mut threads);
        let report = serde_json::to_value(h.report(&threads)).unwrap();
        let values: Vec<u64> = report
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .collect();
        let mut sorted = values.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (1..=values.len() as u64).collect::<Vec<_>>());
        h.reset();
        let after = h.report(&threads);
        assert_eq!(after.threads_gone, 0);
        assert_eq!(after.code_unreadable, 0);
        assert_eq!(after.exec_map_lookups_given_up, 0);
        assert_eq!(after.handlers_abandoned, threads.handlers_abandoned);
        assert_ne!(after.handlers_abandoned, 0);
    }
}
