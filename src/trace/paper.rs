//! The `paper` engine: the paper's algorithm as it stands (Algorithm 1,
//! §2), the breakpoint-per-branch walk with nothing added. Every entry is
//! a transfer the walk decoded or a stop evaluated from the thread's own
//! registers and memory.

use super::engine::Needs;
use super::walk::Witness;

pub(super) struct Paper;

/// The walk's hooks, all empty; no emulator.
impl Witness for Paper {
    fn needs(&self) -> Needs {
        Needs {
            block_cache: true,
            emulator: false,
            predictions: false,
        }
    }
}
