//! `vramscope categories`: what the memory is on one device, at the peak, at
//! the end and at its highest per category, with the rules that gave the
//! labels (the evidence) and, for files that came labelled, how inference
//! alone compares.

use serde::Serialize;
use vramscope_snapshot::{Action, DeviceTrace, Snapshot};

use super::{agreement, categorize, Agreement, Categories, Category, CategoryTotal, Rule, Source};
use crate::lifetimes::{Lifetimes, BEFORE_WINDOW, NO_BLOCK};
use crate::liveness::Liveness;

/// Bytes at the peak given by one rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuleBytes {
    pub category: Category,
    pub rule: Rule,
    pub source: Option<Source>,
    pub bytes: u64,
    pub blocks: u64,
}

/// A category's highest point over the trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CategoryMax {
    pub category: Category,
    pub bytes: u64,
    /// First event after which it holds (`null`: at the start).
    pub event_index: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CategoryView {
    pub device: u32,
    pub peak_bytes: u64,
    pub peak_event_index: Option<u64>,
    pub at_peak: Vec<CategoryTotal>,
    pub at_end: Vec<CategoryTotal>,
    pub max: Vec<CategoryMax>,
    /// Why the blocks alive at the peak got their labels.
    pub rules_at_peak: Vec<RuleBytes>,
    /// Inference alone against the file's labels, when it has any.
    pub agreement: Option<Agreement>,
}

/// The view of `device`.
pub fn category_view(snap: &Snapshot, device: u32) -> CategoryView {
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let l = Lifetimes::new(snap, device);
    let c = categorize(snap, device, &l);
    let liveness = Liveness::new(snap, device);
    let lives = liveness.live_at_points(t, &[liveness.peak_index, t.len().checked_sub(1)]);
    let (peak, end) = (&lives[0], &lives[1]);
    let mut rules: Vec<RuleBytes> = Vec::new();
    for lb in peak {
        let (cat, rule, source) = match c.block_of(&l, lb) {
            Some(b) => (c.category[b], c.rule[b], c.source[b]),
            None => (Category::Unknown, Rule::NoEvidence, None),
        };
        match rules
            .iter_mut()
            .find(|r| r.category == cat && r.rule == rule && r.source == source)
        {
            Some(r) => {
                r.bytes += lb.size;
                r.blocks += 1;
            }
            None => rules.push(RuleBytes {
                category: cat,
                rule,
                source,
                bytes: lb.size,
                blocks: 1,
            }),
        }
    }
    rules.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.category.cmp(&b.category)));
    CategoryView {
        device,
        peak_bytes: liveness.peak_bytes,
        peak_event_index: liveness.peak_index.map(|i| i as u64),
        at_peak: c.totals(&l, peak),
        at_end: c.totals(&l, end),
        max: maxima(t, &l, &c),
        rules_at_peak: rules,
        agreement: agreement(snap, device),
    }
}

/// Each category's highest total over the trace, walking the blocks'
/// births and deaths.
fn maxima(t: &DeviceTrace, l: &Lifetimes, c: &Categories) -> Vec<CategoryMax> {
    let mut cur = [0u64; super::CATEGORIES];
    for b in 0..l.len() {
        if l.birth[b] == BEFORE_WINDOW {
            cur[c.category[b] as usize] += l.size[b];
        }
    }
    let mut best: Vec<(u64, Option<u64>)> = cur.iter().map(|&x| (x, None)).collect();
    for i in 0..t.len() {
        let b = l.event_block[i];
        if b == NO_BLOCK {
            continue;
        }
        let (b, k) = (b as usize, c.category[b as usize] as usize);
        match t.action[i] {
            Action::Alloc if l.birth[b] == i as u32 => cur[k] += l.size[b],
            Action::FreeCompleted if l.death[b] == i as u32 => {
                cur[k] = cur[k].saturating_sub(l.size[b])
            }
            _ => continue,
        }
        if cur[k] > best[k].0 {
            best[k] = (cur[k], Some(i as u64));
        }
    }
    let mut v: Vec<CategoryMax> = Category::ALL
        .into_iter()
        .filter(|c| best[*c as usize].0 > 0)
        .map(|c| CategoryMax {
            category: c,
            bytes: best[c as usize].0,
            event_index: best[c as usize].1,
        })
        .collect();
    v.sort_by_key(|m| std::cmp::Reverse(m.bytes));
    v
}
