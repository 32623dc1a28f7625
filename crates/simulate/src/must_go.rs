//! "What must go": the least memory whose removal lets the failing request
//! succeed, found by replaying the allocator model, never by arithmetic.
//! Sums cannot answer it: under fragmentation, allocated plus the request
//! fit and the sums say nothing must go, while on the GPU the request
//! failed; and freeing one small block can release a whole segment.
//!
//! The blocks alive at the failing request are taken from the biggest
//! holders first (sites by bytes, each site's blocks largest first); the
//! search finds the shortest such prefix whose blocks, never allocated,
//! let the replay serve the request. That prefix less its last block is
//! replayed too: when it fails, the answer is the least of its kind.

use vramscope_snapshot::hash::FxHashMap as HashMap;

use crate::edits::Edits;
use serde::Serialize;
use vramscope_analysis::sites::{frame_label, site_frame};
use vramscope_analysis::{LiveBlock, Liveness};
use vramscope_snapshot::Snapshot;

use crate::replay::{replay, ReplaySetup};
use crate::settings::Settings;

/// Replays a search may run: a binary search over the holders' blocks
/// needs about log2(blocks) of them, plus the checks.
const MAX_REPLAYS: usize = 40;

/// The blocks that must go for the failing request to fit.
#[derive(Clone, Debug, Serialize)]
pub struct MustGo {
    /// The run (settings and changes) the search replayed.
    pub label: String,
    pub bytes: u64,
    pub blocks: usize,
    /// The sites they come from, in the order they were taken.
    pub sites: Vec<GoneSite>,
    /// Whether the same blocks less the last one were replayed and the
    /// request still failed.
    pub least: bool,
    pub replays: usize,
    /// The blocks themselves, in the order taken.
    #[serde(skip)]
    pub gone: Vec<LiveBlock>,
}

#[derive(Clone, Debug, Serialize)]
pub struct GoneSite {
    pub site: String,
    pub bytes: u64,
    pub blocks: usize,
}

/// Edits so that the live blocks `gone` are never allocated (those from
/// before the trace window are not there at its start).
pub fn never_allocated(edits: &mut Edits, gone: &[LiveBlock]) {
    for b in gone {
        match b.alloc_index {
            Some(i) => {
                edits.drop_alloc.insert(i as usize);
            }
            None => {
                edits.drop_seed.insert(b.addr);
            }
        }
    }
}

/// What a search replays: the run's settings and changes on a device of
/// `capacity` bytes, failing at entry `oom`.
pub(crate) struct Search<'a> {
    pub snap: &'a Snapshot,
    pub device: u32,
    pub settings: &'a Settings,
    pub edits: Option<&'a Edits>,
    pub capacity: u64,
    pub oom: usize,
    pub label: &'a str,
}

impl Search<'_> {
    /// Whether the request at `self.oom` is served with `gone` never allocated.
    fn fits(&self, gone: &[LiveBlock]) -> bool {
        let mut edits = self.edits.cloned().unwrap_or_default();
        never_allocated(&mut edits, gone);
        let setup = ReplaySetup {
            capacity: Some(self.capacity),
            edits: Some(&edits),
            curve_points: 0,
            tail: None,
            cold_start: false,
        };
        let r = replay(self.snap, self.device, self.settings.clone(), &setup);
        r.oom.is_none_or(|(i, _)| i > self.oom)
    }

    /// The least prefix of the holders' blocks that must go, if removing
    /// them all lets the request fit.
    pub fn run(&self) -> Option<MustGo> {
        let t = self.snap.trace(self.device)?;
        let live = Liveness::new(self.snap, self.device).live_after(t, self.oom.checked_sub(1));
        let already = |b: &LiveBlock| {
            self.edits.is_some_and(|e| match b.alloc_index {
                Some(i) => e.drop_alloc.contains(&(i as usize)),
                None => e.drop_seed.contains(&b.addr),
            })
        };
        let mut site_of = HashMap::default();
        let mut by_site: HashMap<Option<_>, (u64, Vec<LiveBlock>)> = HashMap::default();
        for b in live.into_iter().filter(|b| !already(b)) {
            let key = *site_of
                .entry(b.stack)
                .or_insert_with(|| site_frame(self.snap, b.stack));
            let e = by_site.entry(key).or_default();
            e.0 += b.size;
            e.1.push(b);
        }
        let mut sites: Vec<_> = by_site.into_iter().collect();
        sites.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
        let mut order: Vec<(Option<_>, LiveBlock)> = Vec::new();
        for (key, (_, mut blocks)) in sites {
            blocks.sort_by(|a, b| b.size.cmp(&a.size).then(a.addr.cmp(&b.addr)));
            order.extend(blocks.into_iter().map(|b| (key, b)));
        }
        let blocks: Vec<LiveBlock> = order.iter().map(|x| x.1).collect();
        let mut replays = 0;
        let mut memo: HashMap<usize, bool> = HashMap::default();
        let mut fits = |k: usize, replays: &mut usize| -> bool {
            *memo.entry(k).or_insert_with(|| {
                *replays += 1;
                self.fits(&blocks[..k])
            })
        };
        if blocks.is_empty() || !fits(blocks.len(), &mut replays) {
            return None;
        }
        // Smallest k that fits, assuming that more gone never hurts.
        let (mut lo, mut hi) = (0, blocks.len());
        while hi - lo > 1 && replays < MAX_REPLAYS {
            let mid = lo + (hi - lo) / 2;
            if fits(mid, &mut replays) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        // The model is not monotone everywhere (a freed block can change
        // which segment a later request splits): step down while one
        // fewer still fits.
        while hi > 1 && replays < MAX_REPLAYS && fits(hi - 1, &mut replays) {
            hi -= 1;
        }
        let least = hi == 1 || memo.get(&(hi - 1)) == Some(&false);
        let mut gone: Vec<GoneSite> = Vec::new();
        for (key, b) in &order[..hi] {
            let site = match key {
                Some(f) => frame_label(self.snap, *f),
                None => "<no stack recorded>".to_string(),
            };
            match gone.last_mut() {
                Some(g) if g.site == site => {
                    g.bytes += b.size;
                    g.blocks += 1;
                }
                _ => gone.push(GoneSite {
                    site,
                    bytes: b.size,
                    blocks: 1,
                }),
            }
        }
        Some(MustGo {
            label: self.label.to_string(),
            bytes: blocks[..hi].iter().map(|b| b.size).sum(),
            blocks: hi,
            sites: gone,
            least,
            replays,
            gone: blocks[..hi].to_vec(),
        })
    }
}
