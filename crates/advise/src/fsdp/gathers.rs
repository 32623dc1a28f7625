//! What FSDP2 allocates beside the program's own memory (its all-gather
//! and reduce-scatter buffers, in its order), and how much each unit and
//! the root gather: every parameter they hold, frozen or not.

use std::collections::BTreeMap;

use vramscope_analysis::categories::{Category, Labelled};
use vramscope_analysis::lifetimes::BEFORE_WINDOW;
use vramscope_simulate::edits::Extra;
use vramscope_snapshot::Snapshot;
use vramscope_text::units::bytes;

use super::super::checkpoint::container;
use super::passes::Pass;

/// What FSDP2 allocates beside the program's own memory, as blocks the
/// recorded run never made.
pub(super) struct Gathers<'e> {
    pub(super) extra: &'e mut BTreeMap<usize, Vec<Extra>>,
    pub(super) id: u32,
    /// A unit's parameter bytes, and the root's: what is gathered.
    pub(super) unit: u64,
    pub(super) root: u64,
    /// A unit's trainable parameter bytes, and the root's: what is
    /// reduce-scattered (their gradients). Less than the parameters where
    /// some are frozen (LoRA's base model).
    pub(super) unit_rs: u64,
    pub(super) root_rs: u64,
    pub(super) ranks: f64,
    /// gloo's own copy of each buffer it gathers or reduces.
    pub(super) gloo: bool,
}

impl Gathers<'_> {
    /// A block of `size` made after entry `i` (nothing for 0 bytes).
    pub(super) fn make(&mut self, i: usize, size: u64) -> u32 {
        self.id += 1;
        if size > 0 {
            let id = self.id;
            self.extra
                .entry(i)
                .or_default()
                .push(Extra::Make { id, size });
        }
        self.id
    }

    pub(super) fn free(&mut self, i: usize, id: u32) {
        self.extra.entry(i).or_default().push(Extra::Free(id));
    }

    /// An all-gather's flat buffer made after entry `i` (with gloo, its
    /// copy made and freed beside it).
    fn gather(&mut self, i: usize, size: u64) -> u32 {
        let flat = self.make(i, size);
        if self.gloo {
            let copy = self.make(i, size);
            self.free(i, copy);
        }
        flat
    }

    /// One forward and backward: the root gathered for the whole pass,
    /// each unit's parameters while it runs, each gradient whole until its
    /// unit's reduce-scatter.
    pub(super) fn pass(&mut self, p: &Pass, grads: &[(usize, usize)], size: &[u64]) {
        let (unit, root, k) = (self.unit, self.root, p.units.len());
        let (unit_rs, root_rs) = (self.unit_rs, self.root_rs);
        let root_flat = self.gather(p.start, root);
        let root_params = self.make(p.start, root);
        let mut flat_prev = root_flat;
        for &(first, last, _) in &p.units {
            let before = first.saturating_sub(1);
            let flat = self.gather(before, unit);
            // FSDP2 frees the previous all-gather's buffer only now: the
            // next copy-in must not overwrite it.
            self.free(before, flat_prev);
            let params = self.make(before, unit);
            self.free(last, params);
            flat_prev = flat;
        }
        self.free(p.fwd_end, flat_prev);
        let reached = |u: usize| p.units[u].2;
        let done = |u: usize| if u > 0 { reached(u - 1) } else { p.bwd_end };
        // Each gradient whole from its birth (the block itself is kept at
        // 1/N; the rest is made beside it), by unit (k: the root).
        let mut owned: Vec<Vec<u32>> = vec![Vec::new(); k + 1];
        for &(birth, b) in grads {
            let u = (0..k).find(|&u| birth >= reached(u) && (u == 0 || birth < reached(u - 1)));
            let whole = size[b] - (size[b] as f64 / self.ranks) as u64;
            let id = self.make(birth, whole);
            owned[u.unwrap_or(k)].push(id);
        }
        // Backward, from the last unit: its parameters whole (the last
        // unit's gathered here, the others prefetched), the next unit's
        // buffer prefetched; when the next unit's backward starts, the
        // unit's parameters freed and its gradients reduce-scattered.
        let (mut prefetched, mut rs_prev, mut copy_prev) = (None, None, None);
        for u in (0..k).rev() {
            let flat = match prefetched.take() {
                Some(f) => f,
                None => self.gather(reached(u), unit),
            };
            let params = self.make(reached(u), unit);
            self.free(reached(u), flat);
            // gloo's copy of the last reduce-scatter outlives this copy-out.
            if let Some(c) = copy_prev.take() {
                self.free(reached(u), c);
            }
            if u > 0 {
                prefetched = Some(self.gather(reached(u), unit));
            }
            self.free(done(u), params);
            if let Some(r) = rs_prev.take() {
                self.free(done(u), r);
            }
            rs_prev = Some(self.make(done(u), unit_rs));
            for &id in &owned[u] {
                self.free(done(u), id);
            }
            if self.gloo {
                copy_prev = Some(self.make(done(u), unit_rs));
            }
        }
        // The root's reduce-scatter, at the end of backward.
        let end = p.bwd_end;
        for id in [copy_prev, Some(root_params), rs_prev]
            .into_iter()
            .flatten()
        {
            self.free(end, id);
        }
        let rs = self.make(end, root_rs);
        for &id in &owned[k] {
            self.free(end, id);
        }
        if self.gloo {
            let copy = self.make(end, root_rs);
            self.free(end, copy);
        }
        self.free(end, rs);
    }
}

/// What FSDP2 gathers: a unit's parameter bytes and the root's, and what
/// they were read from (`None`: the gradients, every parameter trains).
pub(super) struct Gathered {
    pub(super) unit: u64,
    pub(super) root: u64,
    pub(super) from: Option<String>,
}

/// The parameters gathered where not all of them train (a frozen base
/// model, LoRA's adapters the only gradients): the recorder's table of the
/// model's parameters by module gives each block's; without it, the
/// parameters alive when the first pass starts that make no gradient are
/// put in the root (whole for the whole pass: the most they can hold).
/// `None` where the gradients already tell them (every parameter trains).
pub(super) fn gathered_sizes(
    snap: &Snapshot,
    labelled: &Labelled,
    first_unit: Option<&String>,
    units: usize,
    passes: &[Pass],
    by_grads: (u64, u64),
) -> Option<Gathered> {
    let table = snap
        .source
        .recorder
        .as_ref()
        .map_or(&[][..], |r| r.parameters.as_slice());
    let all: u64 = table.iter().map(|g| g.bytes).sum();
    let trainable: u64 = table.iter().map(|g| g.trainable_bytes).sum();
    if !table.is_empty() && trainable < all {
        let frozen = all - trainable;
        let Some(first) = first_unit else {
            return Some(Gathered {
                unit: 0,
                root: all,
                from: Some(format!(
                    "the recorder's table of the model's parameters: {} of them frozen, gathered too",
                    bytes(frozen)
                )),
            });
        };
        // The blocks' paths as the table groups them: `model.layers[*]`.
        let group = format!("{}[*]", container(first));
        let in_blocks: Vec<_> = table
            .iter()
            .filter(|g| {
                g.path
                    .strip_prefix(&group)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
            })
            .collect();
        let copies = in_blocks.iter().map(|g| g.copies).max().unwrap_or(0) as usize;
        if copies == units && units > 0 {
            let block: u64 = in_blocks.iter().map(|g| g.bytes).sum();
            return Some(Gathered {
                unit: block / units as u64,
                root: all - block,
                from: Some(format!(
                    "the recorder's table of the model's parameters: {} of them frozen, gathered too",
                    bytes(frozen)
                )),
            });
        }
    }
    // No table (or one that does not name the blocks): the tagged
    // parameters alive as the first pass starts against the gradients.
    let p = passes.first()?;
    let l = &labelled.lifetimes;
    let cats = &labelled.categories;
    let params: u64 = (0..l.len())
        .filter(|&b| {
            let (birth, death) = l.span(b);
            cats.category.get(b) == Some(&Category::Parameter)
                && birth <= p.start
                && p.start < death
        })
        .map(|b| l.size[b])
        .sum();
    let grads: u64 = (0..l.len())
        .filter(|&b| {
            cats.category.get(b) == Some(&Category::Gradient)
                && l.birth[b] != BEFORE_WINDOW
                && (p.bwd_start..=p.bwd_end).contains(&(l.birth[b] as usize))
        })
        .map(|b| l.size[b])
        .sum();
    // Within 1%: a rounding, a parameter that made no gradient this pass.
    (params > grads + grads / 100).then(|| {
        let frozen = params - grads;
        Gathered {
            unit: by_grads.0,
            root: by_grads.1 + frozen,
            from: Some(if units > 0 {
                format!(
                    "read from the gradients born in one block's backward; the {} of parameters that make none \
                     (frozen, or unused in the pass) counted in the root, which block holds them not being recorded",
                    bytes(frozen)
                )
            } else {
                format!(
                    "the gradients born in one backward and the {} of parameters that make none (frozen, or \
                     unused in the pass)",
                    bytes(frozen)
                )
            }),
        }
    })
}
