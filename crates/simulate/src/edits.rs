//! Program changes for an allocator replay: "what if the allocations of
//! this site were never made, were freed earlier, or were half the size".
//!
//! A change names a site the way the rest of vramscope prints it
//! (`train.py:42 in step`) or any part of that (`train.py:42`); it applies
//! to every block whose site matches. [`resolve`] turns the changes into
//! [`Edits`] of the trace's entries, which the replay applies:
//!
//! * `drop`: the blocks are never allocated (nor freed);
//! * `free-early`: each block is freed at the end of the phase it was
//!   allocated in (forward, backward, optimizer step; else at the end of
//!   its iteration) when it lived longer than that. A memory trace records
//!   no reads of a tensor, so its last use is not known: the end of its
//!   phase is what a `del` at the end of that code would give;
//! * `scale=F`: each block asks for F times its size (F = 0.5: half the
//!   batch, for activations).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;
use vramscope_snapshot::{DeviceTrace, Snapshot, StackId};

use vramscope_analysis::categories::Phases;
use vramscope_analysis::iterations::find_iterations;
use vramscope_analysis::lifetimes::{Lifetimes, BEFORE_WINDOW, NO_BLOCK, STILL_ALIVE};
use vramscope_analysis::sites::{frame_label, site_frame};

/// What to do with the blocks of a site.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "factor")]
pub enum ChangeKind {
    Drop,
    FreeEarly,
    Scale(f64),
    /// Freed right after this trace entry (a `del` at a known point, such
    /// as the end of the iteration), when it lived past it.
    FreeAfter(usize),
}

/// One program change: a site and what happens to its blocks.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Change {
    pub site: String,
    #[serde(flatten)]
    pub kind: ChangeKind,
}

impl Change {
    /// `--scale SITE=F`: the site and the factor.
    pub fn parse_scale(spec: &str) -> Result<Change, String> {
        let (site, f) = spec
            .rsplit_once('=')
            .ok_or_else(|| format!("expected SITE=FACTOR, found {spec:?}"))?;
        let f: f64 = f
            .trim()
            .parse()
            .map_err(|_| format!("expected a number after '=' in {spec:?}"))?;
        if !(f > 0.0 && f.is_finite()) {
            return Err(format!("the factor must be above 0, found {f} in {spec:?}"));
        }
        Ok(Change {
            site: site.trim().to_owned(),
            kind: ChangeKind::Scale(f),
        })
    }

    /// How the change reads in a label: `drop model.py:12`.
    pub fn label(&self) -> String {
        match self.kind {
            ChangeKind::Drop => format!("drop {}", self.site),
            ChangeKind::FreeEarly => format!("free-early {}", self.site),
            ChangeKind::Scale(f) => format!("scale {}={f}", self.site),
            ChangeKind::FreeAfter(e) => format!("free {} after entry {e}", self.site),
        }
    }
}

/// What one change matched.
#[derive(Clone, Debug, Serialize)]
pub struct ChangeMatch {
    pub change: Change,
    /// The sites it matched (full labels).
    pub sites: Vec<String>,
    /// Blocks it applies to, and their bytes as recorded.
    pub blocks: u64,
    pub bytes: u64,
}

/// One step of a stretch of the trace run again after an entry
/// ([`Edits::rerun_after`]), each naming an `alloc` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rerun {
    /// The block is made again and stays until its recorded free.
    Make(usize),
    /// The block is made again for the rerun only...
    Pulse(usize),
    /// ...and freed again here.
    Unpulse(usize),
}

/// A block a change makes that the recorded run never made
/// ([`Edits::extra_after`]), known by an id of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extra {
    Make { id: u32, size: u64 },
    Free(u32),
}

/// The changes, as edits of one device's trace entries.
#[derive(Clone, Debug, Default)]
pub struct Edits {
    /// `alloc` entries not made.
    pub drop_alloc: HashSet<usize>,
    /// Blocks from before the window (by address) not there.
    pub drop_seed: HashSet<u64>,
    /// Size factor per `alloc` entry, and per block from before the window.
    pub scale_alloc: HashMap<usize, f64>,
    pub scale_seed: HashMap<u64, f64>,
    /// After entry `k`, free the blocks of these `alloc` entries (their
    /// recorded free is then ignored).
    pub free_after: BTreeMap<usize, Vec<usize>>,
    /// After entry `k`, free these blocks from before the window (by
    /// address; their recorded free then frees nothing).
    pub free_seed_after: BTreeMap<usize, Vec<u64>>,
    /// After entry `k`, run these steps in order: what a checkpointed
    /// layer's recomputation does when backward reaches it, its saved
    /// activations (freed early by `free_after`) made again (`Make`, freed
    /// by their recorded free) among
    /// the forward's own temporaries made and freed again (`Pulse`,
    /// `Unpulse`), in the order the recorded forward made them.
    pub rerun_after: BTreeMap<usize, Vec<Rerun>>,
    /// After entry `k`, allocate the blocks of these `alloc` entries ahead
    /// of their recorded `alloc` (which then makes nothing); their recorded
    /// free frees them: the gradients an earlier micro-batch made, alive
    /// while the next one runs (half the batch, gradients accumulated).
    pub born_after: BTreeMap<usize, Vec<usize>>,
    /// After entry `k`, free the blocks of these `alloc` entries, which
    /// outlive their recorded free until then (that free then frees
    /// nothing): the gradient a backward made and added in place to a kept
    /// one, kept as the gradient itself until the next `zero_grad` under
    /// `set_to_none=True`.
    pub free_late: BTreeMap<usize, Vec<usize>>,
    /// After entry `k`, make or free, in order, blocks the recorded run
    /// never made: the parameters FSDP gathers whole for a unit and the
    /// flat buffers of its collectives.
    pub extra_after: BTreeMap<usize, Vec<Extra>>,
    /// The program's own `torch.cuda.empty_cache()` calls not made: the
    /// cache kept where the recorded run released it.
    pub keep_cache: bool,
    pub matched: Vec<ChangeMatch>,
}

impl Edits {
    pub fn is_empty(&self) -> bool {
        self.drop_alloc.is_empty()
            && self.drop_seed.is_empty()
            && self.scale_alloc.is_empty()
            && self.scale_seed.is_empty()
            && self.free_after.is_empty()
            && self.free_seed_after.is_empty()
            && self.rerun_after.is_empty()
            && self.born_after.is_empty()
            && self.free_late.is_empty()
            && self.extra_after.is_empty()
            && !self.keep_cache
    }

    /// The `alloc` entries made ahead of their recorded place, each with
    /// the entry after which it is made.
    pub fn born_early(&self) -> HashMap<usize, usize> {
        by_entry(&self.born_after, |b, at| at < b)
    }

    /// The `alloc` entries freed after their recorded free, each with the
    /// entry after which it is freed.
    pub fn freed_late(&self) -> HashMap<usize, usize> {
        by_entry(&self.free_late, |b, at| b < at)
    }

    /// The size the `alloc` entry `entry` asks for under these edits,
    /// `size` as recorded.
    pub fn scaled(&self, entry: usize, size: u64) -> u64 {
        match self.scale_alloc.get(&entry) {
            Some(f) => ((size as f64 * f) as u64).max(1),
            None => size,
        }
    }

    /// Add `other`'s edits to these.
    pub fn merge(&mut self, other: Edits) {
        self.drop_alloc.extend(other.drop_alloc);
        self.drop_seed.extend(other.drop_seed);
        self.scale_alloc.extend(other.scale_alloc);
        self.scale_seed.extend(other.scale_seed);
        for (k, v) in other.free_after {
            self.free_after.entry(k).or_default().extend(v);
        }
        for (k, v) in other.rerun_after {
            self.rerun_after.entry(k).or_default().extend(v);
        }
        for (k, v) in other.born_after {
            self.born_after.entry(k).or_default().extend(v);
        }
        for (k, v) in other.free_late {
            self.free_late.entry(k).or_default().extend(v);
        }
        for (k, v) in other.extra_after {
            self.extra_after.entry(k).or_default().extend(v);
        }
        self.keep_cache |= other.keep_cache;
        self.matched.extend(other.matched);
    }
}

/// `alloc` entries listed after the entry they act at, turned round: each
/// entry with the entry it acts at, where `keep(entry, at)` holds.
fn by_entry(
    at: &BTreeMap<usize, Vec<usize>>,
    keep: impl Fn(usize, usize) -> bool,
) -> HashMap<usize, usize> {
    at.iter()
        .flat_map(|(&at, entries)| entries.iter().map(move |&b| (b, at)))
        .filter(|&(b, at)| keep(b, at))
        .collect()
}

/// A change whose site matched no block.
#[derive(Clone, Debug, PartialEq)]
pub struct UnknownSite {
    pub change: String,
    pub site: String,
    pub device: u32,
    pub known: String,
}

impl std::fmt::Display for UnknownSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: no allocation on device {} has a site matching {:?}; the largest sites: {}",
            self.change, self.device, self.site, self.known
        )
    }
}

impl std::error::Error for UnknownSite {}

/// Resolve `changes` against `device`'s trace.
pub fn resolve(snap: &Snapshot, device: u32, changes: &[Change]) -> Result<Edits, UnknownSite> {
    let mut edits = Edits::default();
    if changes.is_empty() {
        return Ok(edits);
    }
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let l = Lifetimes::new(snap, device);
    let mut label_of: HashMap<StackId, String> = HashMap::new();
    let labels: Vec<String> = l
        .stack
        .iter()
        .map(|&s| {
            label_of
                .entry(s)
                .or_insert_with(|| match site_frame(snap, s) {
                    Some(f) => frame_label(snap, f),
                    None => "<no stack recorded>".into(),
                })
                .clone()
        })
        .collect();
    let ends = PhaseEnds::new(snap, device, t);
    for c in changes {
        let mut m = ChangeMatch {
            change: c.clone(),
            sites: Vec::new(),
            blocks: 0,
            bytes: 0,
        };
        for (b, label) in labels.iter().enumerate() {
            if !(label == &c.site || label.contains(c.site.as_str())) {
                continue;
            }
            let applied = apply(&mut edits, &ends, &l, b, &c.kind);
            if applied {
                m.blocks += 1;
                m.bytes += l.size[b];
                if !m.sites.contains(label) {
                    m.sites.push(label.clone());
                }
            }
        }
        let matched_any = labels
            .iter()
            .any(|x| x == &c.site || x.contains(c.site.as_str()));
        if !matched_any {
            return Err(UnknownSite {
                change: c.label(),
                site: c.site.clone(),
                device,
                known: largest_sites(&l, &labels),
            });
        }
        edits.matched.push(m);
    }
    Ok(edits)
}

/// Apply `kind` to block `b` of `l`; whether it changed anything (a block
/// from before the window cannot be freed at the end of its phase, which
/// the trace does not show, nor one that dies within its phase).
fn apply(edits: &mut Edits, ends: &PhaseEnds, l: &Lifetimes, b: usize, kind: &ChangeKind) -> bool {
    let (birth, death) = (l.birth[b], l.death[b]);
    let before = birth == BEFORE_WINDOW;
    match *kind {
        ChangeKind::Drop if before => edits.drop_seed.insert(l.addr[b]),
        ChangeKind::Drop => edits.drop_alloc.insert(birth as usize),
        ChangeKind::Scale(f) if before => edits.scale_seed.insert(l.addr[b], f).is_none(),
        ChangeKind::Scale(f) => edits.scale_alloc.insert(birth as usize, f).is_none(),
        ChangeKind::FreeAfter(e) if before => {
            let lives_past = death == STILL_ALIVE || (death as usize) > e;
            if lives_past {
                edits.free_seed_after.entry(e).or_default().push(l.addr[b]);
            }
            lives_past
        }
        ChangeKind::FreeEarly if before => false,
        ChangeKind::FreeAfter(e) => {
            let lives_past = death == STILL_ALIVE || (death as usize) > e;
            if (birth as usize) <= e && lives_past {
                edits.free_after.entry(e).or_default().push(birth as usize);
            }
            (birth as usize) <= e && lives_past
        }
        ChangeKind::FreeEarly => match ends.end_of(birth as usize) {
            Some(end) if death == STILL_ALIVE || (death as usize) > end => {
                edits
                    .free_after
                    .entry(end)
                    .or_default()
                    .push(birth as usize);
                true
            }
            _ => false,
        },
    }
}

/// Edits that apply a change to chosen blocks of `l` (its block indices,
/// each with what happens to it), recorded as one [`ChangeMatch`] whose
/// site is `label`: how a change to memory of a kind (a category, a
/// phase) rather than of a site is replayed.
pub fn for_blocks(
    snap: &Snapshot,
    device: u32,
    l: &Lifetimes,
    blocks: &[(usize, ChangeKind)],
    label: &str,
) -> Edits {
    let mut edits = Edits::default();
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let frees = blocks.iter().any(|(_, k)| *k == ChangeKind::FreeEarly);
    let ends = if frees {
        PhaseEnds::new(snap, device, t)
    } else {
        PhaseEnds { last: Vec::new() }
    };
    let mut m = ChangeMatch {
        change: Change {
            site: label.to_owned(),
            kind: blocks.first().map_or(ChangeKind::Drop, |(_, k)| k.clone()),
        },
        sites: Vec::new(),
        blocks: 0,
        bytes: 0,
    };
    for (b, kind) in blocks {
        if *b < l.len() && apply(&mut edits, &ends, l, *b, kind) {
            m.blocks += 1;
            m.bytes += l.size[*b];
        }
    }
    edits.matched.push(m);
    edits
}

/// The highest allocated bytes of a trace of `entries` events with
/// `edits` applied, each block its own allocation: how a change is replayed
/// on a trace recorded without a caching allocator (vramscope's CPU
/// recorders), where the peak the program reaches is its peak allocated.
/// With no edits it is the trace's own peak allocated.
pub fn peak_allocated(l: &Lifetimes, entries: usize, edits: &Edits) -> u64 {
    let mut early: HashMap<usize, usize> = HashMap::new();
    for (&end, births) in &edits.free_after {
        for &k in births {
            early.insert(k, end);
        }
    }
    // Made again by a rerun: alive again from there to the recorded free.
    let mut remade: HashMap<usize, usize> = HashMap::new();
    // A rerun's own high point above what it leaves made, per entry.
    let mut rerun_top = vec![0i64; entries + 1];
    for (&at, steps) in &edits.rerun_after {
        let size_of = |k: usize| -> i64 {
            let b = l.event_block.get(k).copied().unwrap_or(NO_BLOCK);
            let size = l.size.get(b as usize).copied().unwrap_or(0);
            edits.scaled(k, size) as i64
        };
        let (mut run, mut top, mut made) = (0i64, 0i64, 0i64);
        for step in steps {
            match *step {
                Rerun::Make(k) => {
                    remade.insert(k, at);
                    run += size_of(k);
                    made += size_of(k);
                }
                Rerun::Pulse(k) => run += size_of(k),
                Rerun::Unpulse(k) => run -= size_of(k),
            }
            top = top.max(run);
        }
        if let Some(x) = rerun_top.get_mut(at) {
            *x = (*x).max(top - made);
        }
    }
    let born_early = edits.born_early();
    let late = edits.freed_late();
    let seed_early: HashMap<u64, usize> = edits
        .free_seed_after
        .iter()
        .flat_map(|(&at, addrs)| addrs.iter().map(move |&a| (a, at)))
        .collect();
    // delta[i]: the change of allocated bytes at event i.
    let mut delta = vec![0i64; entries + 1];
    let mut at_start: i64 = 0;
    for b in 0..l.len() {
        let (birth, before) = (l.birth[b] as usize, l.birth[b] == BEFORE_WINDOW);
        let (dropped, factor) = if before {
            (
                edits.drop_seed.contains(&l.addr[b]),
                edits.scale_seed.get(&l.addr[b]),
            )
        } else {
            (
                edits.drop_alloc.contains(&birth),
                edits.scale_alloc.get(&birth),
            )
        };
        if dropped {
            continue;
        }
        let size = factor.map_or(l.size[b], |f| ((l.size[b] as f64 * f) as u64).max(1)) as i64;
        let death = (l.death[b] != STILL_ALIVE).then_some(l.death[b] as usize);
        let end = match early.get(&birth).filter(|_| !before) {
            Some(&e) => {
                // Made again later: alive again from there to its recorded free.
                if let Some(&r) = remade.get(&birth).filter(|&&r| r > e) {
                    if let Some(d) = delta.get_mut(r) {
                        *d += size;
                    }
                    if let Some(d) = death.and_then(|x| delta.get_mut(x)) {
                        *d -= size;
                    }
                }
                Some(e)
            }
            None if before => seed_early.get(&l.addr[b]).copied().or(death),
            None => late.get(&birth).copied().or(death),
        };
        // Made ahead of its recorded alloc: counted from the entry it is
        // made after (as the replay makes it, once that entry is done).
        let made = born_early
            .get(&birth)
            .filter(|_| !before)
            .map_or(birth, |&at| at);
        if before {
            at_start += size;
        } else if let Some(d) = delta.get_mut(made) {
            *d += size;
        }
        if let Some(d) = end.and_then(|e| delta.get_mut(e)) {
            *d -= size;
        }
    }
    let mut now = at_start;
    let mut peak = at_start;
    let mut extra_size: HashMap<u32, i64> = HashMap::new();
    for (i, d) in delta.into_iter().enumerate() {
        now += d;
        peak = peak.max(now + rerun_top.get(i).copied().unwrap_or(0).max(0));
        // Made and freed in order after the entry, each step counted: a
        // buffer made before the last one is freed peaks with it.
        for x in edits.extra_after.get(&i).map_or(&[][..], |v| v.as_slice()) {
            match *x {
                Extra::Make { id, size } => {
                    now += size as i64;
                    *extra_size.entry(id).or_default() += size as i64;
                    peak = peak.max(now);
                }
                Extra::Free(id) => now -= extra_size.remove(&id).unwrap_or(0),
            }
        }
    }
    peak.max(0) as u64
}

/// The five sites with the most bytes allocated, for an error message.
fn largest_sites(l: &Lifetimes, labels: &[String]) -> String {
    let mut bytes: HashMap<&str, u64> = HashMap::new();
    for (b, label) in labels.iter().enumerate() {
        *bytes.entry(label).or_default() += l.size[b];
    }
    let mut v: Vec<(&str, u64)> = bytes.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.iter()
        .take(5)
        .map(|(s, _)| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where the phase (or, without phases, the iteration) of each event ends.
struct PhaseEnds {
    /// Per event: the index of the last event of its run.
    last: Vec<Option<usize>>,
}

impl PhaseEnds {
    fn new(snap: &Snapshot, device: u32, t: &DeviceTrace) -> PhaseEnds {
        let n = t.len();
        let mut last = vec![None; n];
        let phases = Phases::new(snap, t);
        let iterations = find_iterations(snap, device);
        if phases.any_marked && phases.run.len() == n {
            // A run of one phase never crosses the end of an iteration: an
            // evaluation forward at the end of one iteration and the next
            // iteration's training forward are two forwards, and what the
            // first made is freed where it ends (a fixed leak freed only
            // after the next forward would sit on that forward's peak).
            let mut iteration = vec![usize::MAX; n];
            for (k, it) in iterations.list.iter().enumerate() {
                for x in iteration.iter_mut().take(it.end.min(n)).skip(it.start) {
                    *x = k;
                }
            }
            let mut j = n;
            while j > 0 {
                let run = (phases.run[j - 1], iteration[j - 1]);
                let mut i = j;
                while i > 0 && (phases.run[i - 1], iteration[i - 1]) == run {
                    i -= 1;
                }
                for x in &mut last[i..j] {
                    *x = Some(j - 1);
                }
                j = i;
            }
            return PhaseEnds { last };
        }
        for it in iterations.list {
            for x in last.iter_mut().take(it.end.min(n)).skip(it.start) {
                *x = Some(it.end.min(n) - 1);
            }
        }
        PhaseEnds { last }
    }

    fn end_of(&self, i: usize) -> Option<usize> {
        self.last.get(i).copied().flatten()
    }
}
