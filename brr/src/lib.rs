//! Branch-on-random (Lee and Zilles, CGO 2008): the instruction's encoding in
//! x86-64 binaries, a model of its outcome generator, an x86-64 emulator that
//! runs annotated static binaries, and the instrumentation and experiments
//! that compare brr sampling with counter-based sampling.

pub mod coproc;
pub mod emu;
pub mod encoding;
pub mod experiment;
pub mod instrument;
pub mod lfsr;
pub mod loadvalues;
pub mod markov;
pub mod profile;
pub mod timing;
pub mod workload;
