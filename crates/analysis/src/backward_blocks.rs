//! Which part of the model a backward allocation was made for: one of its
//! repeated blocks, or a module with parameters beside them (an LM head).
//!
//! Backward runs in autograd's engine: an allocation it makes has only the
//! user's `loss.backward()` line on its stack, so a site table puts a
//! model's whole backward (its gradients, the recomputed activations of
//! checkpointed blocks, the temporaries) at that one line. The recorder
//! knows more: in each block's forward (and each module's beside the
//! blocks) it puts a pre-hook on the autograd node that made the output
//! (where the backward begins) and on the one that made its input (where it
//! ends; a reentrant checkpoint's block, whose forward ran without grad,
//! on the graph its recomputation makes inside backward), and writes each
//! backward as a `vramscope.backward#NAME`
//! annotation (`model.layers.3`, `lm_head`). An allocation inside one is
//! that module's, named with the repeated blocks grouped
//! (`model.layers[*]`), as the forward's parts are.

use vramscope_snapshot::{AnnotationStage, Snapshot};

/// Prefix of the recorder's backward annotations.
pub const BACKWARD_ANNOTATION: &str = "vramscope.backward#";

/// One device's blocks' backwards: (first event, last event, grouped name),
/// in trace order, not overlapping.
#[derive(Debug, Default)]
pub struct BackwardBlocks {
    spans: Vec<(u32, u32, String)>,
    /// Per backward pass: the events after the previous pass's last span
    /// and before this pass's first, (first, last, what they are). A
    /// backward allocation there was made before autograd reached the
    /// first marked module: for what the program computed from its output.
    before: Vec<(u32, u32, String)>,
}

impl BackwardBlocks {
    /// The spans the recorder wrote for `device` (none for a file without
    /// them, or a trace without times).
    pub fn new(snap: &Snapshot, device: u32) -> BackwardBlocks {
        // An allocation at the instant one block ends and the next begins
        // is the next one's: the end is exclusive.
        let raw = marked_spans(snap, device, BACKWARD_ANNOTATION, false);
        // A pass holds each module's backward once: a name met again
        // begins the next pass (the next step, or the next micro-batch).
        let mut before = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        let mut last_end = None::<usize>;
        for (k, &(name, first, _)) in raw.iter().enumerate() {
            if k == 0 || seen.contains(&name) {
                seen.clear();
                let from = last_end.map_or(0, |e| e + 1);
                if first > from {
                    before.push((from as u32, first as u32 - 1, before_label(name)));
                }
            }
            seen.push(name);
            last_end = Some(raw[k].2);
        }
        let spans = raw
            .into_iter()
            .map(|(name, first, last)| (first as u32, last as u32, grouped(name)))
            .collect();
        BackwardBlocks { spans, before }
    }

    /// What a backward allocation at `event` was for, where it came before
    /// autograd reached the first marked module of its pass: what the
    /// program computed from that module's output (the loss). Only for
    /// events known to be backward's: the range holds the forward before
    /// it too.
    pub fn before_the_model(&self, event: u32) -> Option<&str> {
        let k = self.before.partition_point(|r| r.0 <= event);
        let r = self.before.get(k.checked_sub(1)?)?;
        (event <= r.1).then_some(r.2.as_str())
    }

    /// The block whose backward made the allocation at `event`.
    pub fn at(&self, event: u32) -> Option<&str> {
        let k = self.spans.partition_point(|s| s.0 <= event);
        let s = self.spans.get(k.checked_sub(1)?)?;
        (event <= s.1).then_some(s.2.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

/// The recorder's START/END annotation pairs named `PREFIX…` on `device`,
/// as (name after the prefix, first event, last event), in trace order:
/// the events from the start's time to the end's (`end_inclusive`: events
/// at the end's instant count). None without event times.
pub fn marked_spans<'a>(
    snap: &'a Snapshot,
    device: u32,
    prefix: &str,
    end_inclusive: bool,
) -> Vec<(&'a str, usize, usize)> {
    let Some(t) = snap.trace(device).filter(|t| t.has_time()) else {
        return Vec::new();
    };
    let mut open: Vec<(&str, i64)> = Vec::new();
    let mut out = Vec::new();
    for a in &snap.annotations {
        let Some(name) = snap.str(a.name).strip_prefix(prefix) else {
            continue;
        };
        match a.stage {
            AnnotationStage::Start => open.push((name, a.time_us)),
            AnnotationStage::End => {
                let Some(k) = open.iter().rposition(|(n, _)| *n == name) else {
                    continue;
                };
                let (_, start) = open.remove(k);
                let first = t.time_us.partition_point(|&x| x < start);
                let last = t
                    .time_us
                    .partition_point(|&x| x < a.time_us || (end_inclusive && x == a.time_us));
                if last > first {
                    out.push((name, first, last - 1));
                }
            }
            AnnotationStage::Other => {}
        }
    }
    out.sort_by_key(|s| s.1);
    out
}

/// What autograd works through before it reaches `first`, the first
/// module whose backward the recorder marked: what came after that
/// module's output in forward. After a module beside the blocks (an LM
/// head) that is the loss; after a repeated block (where nothing after the
/// blocks was marked: a head whose weight is tied to the embedding), the
/// layers after them too.
fn before_label(first: &str) -> String {
    let g = grouped(first);
    if g.contains("[*]") {
        format!("after {g}'s output (any layers after the blocks, and the loss), in backward")
    } else {
        format!("after {g}'s output (the loss), in backward")
    }
}

/// `model.layers.3` → `model.layers[*]`: the recorder's module map groups
/// repeated blocks the same way.
pub fn grouped(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for (i, part) in path.split('.').enumerate() {
        if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str("[*]");
        } else {
            if i > 0 {
                out.push('.');
            }
            out.push_str(part);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_paths_are_grouped_like_the_module_map() {
        assert_eq!(grouped("model.layers.3"), "model.layers[*]");
        assert_eq!(
            grouped("encoder.block.11.layer.0"),
            "encoder.block[*].layer[*]"
        );
        assert_eq!(grouped("0"), "[*]");
        assert_eq!(grouped("h.2"), "h[*]");
        assert_eq!(grouped("blocks"), "blocks");
    }

    #[test]
    fn an_event_is_the_block_whose_span_holds_it() {
        let b = BackwardBlocks {
            spans: vec![
                (10, 19, "a[*]".into()),
                (20, 29, "b[*]".into()),
                (40, 45, "a[*]".into()),
            ],
            before: Vec::new(),
        };
        assert_eq!(b.at(9), None);
        assert_eq!(b.at(10), Some("a[*]"));
        assert_eq!(b.at(19), Some("a[*]"));
        assert_eq!(b.at(20), Some("b[*]"));
        assert_eq!(b.at(30), None);
        assert_eq!(b.at(45), Some("a[*]"));
        assert_eq!(b.at(46), None);
    }

    #[test]
    fn before_each_pass_is_the_loss() {
        let b = BackwardBlocks {
            spans: Vec::new(),
            before: vec![(0, 9, before_label("head")), (30, 39, before_label("h.3"))],
        };
        assert_eq!(
            b.before_the_model(0),
            Some("after head's output (the loss), in backward")
        );
        assert!(b.before_the_model(9).is_some());
        assert_eq!(
            b.before_the_model(35),
            Some("after h[*]'s output (any layers after the blocks, and the loss), in backward")
        );
        for e in [10, 29, 40] {
            assert_eq!(b.before_the_model(e), None);
        }
    }
}
