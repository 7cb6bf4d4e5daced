//! A flame-style view of hot paths: call stacks rebuilt from the calls and
//! returns inside each trace, weighted by the instructions the trace
//! covered under them, drawn by `inferno`.
//!
//! A trace is a window of a few dozen taken branches, so a stack starts at
//! the function the trace started in; a return past it makes the caller
//! the new bottom frame. The view shows hot paths, not whole call stacks.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use iced_x86::FlowControl;

use super::Place;
use breakdance_protocol::perfscript::PerfScript;

/// Instructions covered under each stack, bottom frame first.
#[derive(Default)]
pub struct Stacks {
    weights: HashMap<Vec<Place>, u64>,
}

impl Stacks {
    pub fn build(
        script: &PerfScript,
        walked: &HashMap<(u64, u64), Vec<(Place, u64)>>,
        place: impl Fn(u64) -> Option<Place>,
        kind: impl Fn(u64) -> Option<FlowControl>,
    ) -> Stacks {
        let mut stacks = Stacks::default();
        for trace in &script.traces {
            let entries: Vec<_> = trace.execution_order().copied().collect();
            let mut stack: Vec<Place> = Vec::new();
            for (i, e) in entries.iter().enumerate() {
                let (Some(source), Some(target)) = (place(e.from), place(e.to)) else {
                    stack.clear();
                    continue;
                };
                if stack.is_empty() {
                    stack.push(source);
                }
                match kind(e.from) {
                    Some(FlowControl::Call | FlowControl::IndirectCall) => stack.push(target),
                    Some(FlowControl::Return) => {
                        stack.pop();
                        if stack.last() != Some(&target) {
                            // Returned past the trace's first frame, or
                            // into a frame the stack does not know.
                            stack.clear();
                            stack.push(target);
                        }
                    }
                    _ => {
                        if let Some(top) = stack.last_mut() {
                            *top = target;
                        }
                    }
                }
                let Some(next) = entries.get(i + 1) else {
                    break;
                };
                if let Some(parts) = walked.get(&(e.to, next.from)) {
                    let instructions: u64 = parts.iter().map(|(_, n)| n).sum();
                    *stacks.weights.entry(stack.clone()).or_default() += instructions * trace.count;
                }
            }
        }
        stacks
    }

    /// Writes the flame graph to `path`, frames named by `name`.
    pub fn write_svg(
        &self,
        path: &Path,
        title: &str,
        name: impl Fn(Place) -> String,
    ) -> Result<()> {
        let mut lines: Vec<String> = self
            .weights
            .iter()
            .map(|(stack, weight)| {
                let frames: Vec<String> =
                    stack.iter().map(|p| name(*p).replace(';', ":")).collect();
                format!("{} {weight}", frames.join(";"))
            })
            .collect();
        lines.sort();
        let mut options = inferno::flamegraph::Options::default();
        options.title = title.to_string();
        options.count_name = "instructions".to_string();
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), file)
            .with_context(|| format!("cannot draw {}", path.display()))
    }
}
