//! Per-thread counters, written by the handlers with relaxed atomic adds
//! (lock-free, async-signal-safe) and summed by the control thread for
//! `status` and summary.json.

use std::sync::atomic::{AtomicU64, Ordering};

use breakdance_protocol::{Aborts, Drops};

use crate::buffer::AbortReason;

/// Generates the atomic counters from the protocol crate's one list of
/// counters ([`breakdance_protocol::for_each_counter`]), so a counter
/// declared there exists here, in summary.json and in `status` alike.
/// The atomic counters are flat (`c.no_free_buffer`), the drops among
/// them; the protocol's plain values group the drops.
macro_rules! counters {
    (
        counts { $($(#[$doc:meta])* $name:ident: $kind:ident,)* }
        drops { $($(#[$drop_doc:meta])* $drop:ident,)* }
    ) => {
        /// Event counts of one thread (or the sum over threads).
        #[derive(Default)]
        pub struct Counters {
            $($(#[$doc])* pub $name: AtomicU64,)*
            $($(#[$drop_doc])* pub $drop: AtomicU64,)*
            pub aborts: [AtomicU64; AbortReason::COUNT],
        }

        impl Counters {
            pub fn values(&self) -> CounterValues {
                CounterValues {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                    drops: Drops {
                        $($drop: self.$drop.load(Ordering::Relaxed),)*
                    },
                    aborts: Aborts::from_fn(|r| self.aborts[r as usize].load(Ordering::Relaxed)),
                }
            }

            /// Adds `v` into these counters (retiring a thread into the
            /// session totals).
            pub fn absorb(&self, v: &CounterValues) {
                $(self.$name.fetch_add(v.$name, Ordering::Relaxed);)*
                $(self.$drop.fetch_add(v.drops.$drop, Ordering::Relaxed);)*
                for (r, n) in v.aborts.iter() {
                    self.aborts[r as usize].fetch_add(n, Ordering::Relaxed);
                }
            }

            pub fn reset(&self) {
                $(self.$name.store(0, Ordering::Relaxed);)*
                $(self.$drop.store(0, Ordering::Relaxed);)*
                for a in &self.aborts {
                    a.store(0, Ordering::Relaxed);
                }
            }
        }
    };
}

breakdance_protocol::for_each_counter!(counters);

/// A plain copy of [`Counters`]: the protocol's type, which summary.json
/// and `status` carry.
pub type CounterValues = breakdance_protocol::Counters;

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
