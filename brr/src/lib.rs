//! Branch-on-random.
