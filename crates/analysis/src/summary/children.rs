//! The child processes a recording left out, in the sentence every command
//! says (the CLI's note on loading, `summary --json`'s `source.children`).
//!
//! `vramscope run train.py` where `train.py` starts its ranks with
//! `mp.spawn` (PyTorch's DDP tutorial) records the parent, which trains
//! nothing: its summary read a few hundred bytes, as if the program used no
//! memory. The recorder now carries the notes its unrecorded children left
//! (`RecorderInfo::children`): who they are, what they did, and how to
//! record them.

use vramscope_snapshot::Snapshot;
use vramscope_text::units::{bytes, count};

/// "2 child processes trained without being recorded (...): ...", or
/// `None` where the recorder noted none (or the file does not say: a
/// PyTorch file, an older recorder's).
pub fn unrecorded_children(snap: &Snapshot) -> Option<String> {
    let children = &snap.source.recorder.as_ref()?.children;
    if children.is_empty() {
        return None;
    }
    let gpu = children.iter().any(|c| !c.devices.is_empty());
    let each: Vec<String> = children
        .iter()
        .take(8)
        .map(|c| {
            let mut what: Vec<String> = c
                .devices
                .iter()
                .map(|(d, alloc, reserved)| {
                    format!(
                        "{d} peaked at {} allocated, {} reserved",
                        bytes(*alloc),
                        bytes(*reserved)
                    )
                })
                .collect();
            if c.steps > 0 {
                what.push(format!(
                    "{} optimizer step{}",
                    count(c.steps),
                    if c.steps == 1 { "" } else { "s" }
                ));
            } else if c.optimizers > 0 {
                what.push("stepped an optimizer".to_owned());
            }
            format!("pid {}: {}", c.pid, what.join(", "))
        })
        .collect();
    let more = children.len().saturating_sub(each.len());
    let n = children.len();
    Some(format!(
        "{n} child process{} of the recorded one {} without being recorded ({}{}): this file holds the recorded \
         process's memory only; record each with VRAMSCOPE_RECORD='run-{{pid}}.pickle' (a file per process), or start \
         the ranks with torchrun, whose ranks each record",
        if n == 1 { "" } else { "es" },
        if gpu { "used the GPU" } else { "trained" },
        each.join("; "),
        if more > 0 { format!("; and {more} more") } else { String::new() },
    ))
}
