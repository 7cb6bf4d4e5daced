//! `fdo` experiment.

use crate::Options;
use anyhow::Result;

pub fn run(_opts: &Options) -> Result<usize> {
    anyhow::bail!("fdo: not built yet")
}
