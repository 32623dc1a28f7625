//! The evaluation passes under `torch.no_grad()`, where the recorder saw
//! them run with autograd on.
//!
//! A validation loop written without `torch.no_grad()` keeps, for each
//! batch, every tensor its operations saved for a backward that never
//! comes, until the output holding the graph is dropped: the next batch's
//! forward runs beside it, and the last batch's graph stays through the
//! training that follows. The replay frees what the graphs keep as
//! `torch.no_grad()` would (`categories::evaluation_graphs`: each saved
//! tensor once the next is made), the outputs and losses as recorded.

use vramscope_analysis::categories::evaluation_graphs::graph_frees;
use vramscope_analysis::categories::Labelled;
use vramscope_simulate::edits::{for_blocks, peak_allocated, ChangeKind, Edits};
use vramscope_simulate::settings::Settings;
use vramscope_snapshot::Snapshot;
use vramscope_text::units::bytes;

use super::{Candidate, ChangeClass, Method};

/// The label of the blocks the replay frees (what `verdict` knows the
/// replay by).
pub(super) const GRAPHS: &str = "what the evaluation passes' graphs keep";

/// What the graphs of the evaluation passes with autograd on keep.
pub(super) struct Graphs {
    /// (block, the event after which it is freed without autograd).
    kept: Vec<(usize, usize)>,
    bytes: u64,
    /// Evaluation passes with a call that ran with autograd on.
    passes: usize,
    /// Peak allocated with what the graphs keep freed, and with each
    /// call's output dropped once the next is made too
    /// (`evaluation_graphs::GraphFrees::outputs`), where that is lower by more
    /// than 1%: the real peak lies between.
    chained: Option<(u64, u64)>,
}

impl Graphs {
    /// `None` where no evaluation pass ran with autograd on, or its graphs
    /// kept nothing (the recorder did not say: a snapshot PyTorch wrote).
    pub(super) fn new(snap: &Snapshot, device: u32, labelled: &Labelled) -> Option<Graphs> {
        let l = &labelled.lifetimes;
        let ev = &labelled.categories.evaluation;
        let graphs = graph_frees(snap, device, ev, l, &labelled.categories.category);
        let (kept, outputs) = (graphs.kept, graphs.outputs);
        if kept.is_empty() {
            return None;
        }
        let passes = ev.passes_with_grad();
        let mut g = Graphs {
            bytes: kept.iter().map(|&(b, _)| l.size[b]).sum(),
            kept,
            passes,
            chained: None,
        };
        if !outputs.is_empty() {
            let entries = snap.trace(device).map_or(0, |t| t.len());
            let kept = g.edits(snap, device, labelled);
            let mut both = kept.clone();
            both.merge(frees(snap, device, labelled, &outputs));
            let (high, low) = (
                peak_allocated(l, entries, &kept),
                peak_allocated(l, entries, &both),
            );
            if (low as f64) < high as f64 * 0.99 {
                g.chained = Some((low, high));
            }
        }
        Some(g)
    }

    /// The replay's edits: each kept block freed as without autograd.
    pub(super) fn edits(&self, snap: &Snapshot, device: u32, labelled: &Labelled) -> Edits {
        frees(snap, device, labelled, &self.kept)
    }

    /// How the replay frees them, in a sentence.
    pub(super) fn how(&self) -> String {
        format!(
            "the {} blocks ({}) the graphs of {} evaluation pass{} kept beyond the call or loss that made them \
             each freed once the next of them is made, as without autograd; each call's output and each loss as \
             recorded, with what a model in eval mode returned (a key/value cache). A model in training mode that \
             returns more than its last tensor, or keeps tensors of its own beyond the call, keeps them under \
             `torch.no_grad()` too, which this replay frees; a kernel that saves a buffer for backward (an \
             LSTM's workspace, pooling's indices) may not make it at all without autograd, which this replay \
             keeps: the real peak can be lower",
            self.kept.len(),
            bytes(self.bytes),
            self.passes,
            if self.passes == 1 { "" } else { "es" },
        )
    }

    /// Where dropping each call's output once the next is made lowers the
    /// peak too: by how much, and that the real peak lies between (the
    /// `no_grad_evaluation` row's; the half-evaluation-batch row halves
    /// as well, which these figures are not of).
    fn between(&self) -> String {
        self.chained.map_or(String::new(), |(low, high)| {
            format!(
                ". Where a call's output is the next call's input (`h = layer(h)`, a function that runs the layers \
                 itself), the graph kept it too, and without autograd it goes once the variable is rebound: with \
                 each call's output dropped once the next is made, the peak allocated would be {} rather than {}; \
                 the real one lies between (the lower if the program keeps no output of its own)",
                bytes(low),
                bytes(high)
            )
        })
    }
}

/// `blocks` (block, the event after which it is freed) as the replay's
/// edits.
fn frees(snap: &Snapshot, device: u32, labelled: &Labelled, blocks: &[(usize, usize)]) -> Edits {
    let edits: Vec<(usize, ChangeKind)> = blocks
        .iter()
        .map(|&(b, after)| (b, ChangeKind::FreeAfter(after)))
        .collect();
    for_blocks(snap, device, &labelled.lifetimes, &edits, GRAPHS)
}

/// The row, where an evaluation pass ran with autograd on and its graphs
/// kept anything.
pub(super) fn no_grad_candidate(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    graphs: Option<&Graphs>,
    recorded: &Settings,
) -> Option<Candidate> {
    let g = graphs?;
    Some(Candidate {
        class: ChangeClass::NoGradEvaluation,
        change: "the evaluation passes under `torch.no_grad()` (they ran with autograd on, keeping each batch's \
                 graph for a backward that never comes)"
            .into(),
        code: "@torch.no_grad()  # or: with torch.no_grad(): around the evaluation loop\n\
               def evaluate(model, loader):\n    model.eval()\n    for data, target in loader:\n        \
               output = model(data)"
            .into(),
        settings: recorded.clone(),
        method: Method::Replayed,
        edits: Some(g.edits(snap, device, labelled)),
        how: format!("replayed with {}{}", g.how(), g.between()),
    })
}
