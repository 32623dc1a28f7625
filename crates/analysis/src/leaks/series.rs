//! Per-site live bytes at the end of every iteration, and the shape of that
//! series: steady growth (a leak), growth then a sudden drop (what Python's
//! cycle collector leaves behind), one-time growth (optimizer state), flat.

use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::{FrameId, Snapshot, StackId};

use crate::iterations::Iterations;
use crate::lifetimes::{Lifetimes, BEFORE_WINDOW, STILL_ALIVE};
use crate::sites::{frame_location, is_noise, site_frame};

/// What a site's blocks did over the iterations, beyond the series.
#[derive(Clone, Debug, Default)]
pub struct SiteStats {
    pub site: Option<FrameId>,
    /// The frame the site called (the operator or library function), which
    /// tells apart two allocations made by one line, or by one function
    /// when the stack only has function-level lines (the profiler's).
    pub callee: Option<FrameId>,
    /// The first block allocated at the site.
    pub first_block: u32,
    /// Stack of the largest block, and its size.
    pub example: (u64, StackId),
    /// The same for the blocks that outlived their iteration (size 0 when
    /// none did), and the stack of the largest block that did not: one line
    /// can allocate through two paths, one that keeps its tensors and one
    /// that frees them (`forward` called from `validate` and from `train`).
    pub leak_example: (u64, StackId),
    pub freed_example: (u64, StackId),
    /// Blocks born in iteration k ≥ 1 and still alive after k + 1 ended.
    pub outliving: u64,
    pub outliving_bytes: u64,
    pub outliving_iterations: (u32, u32),
    /// Blocks freed during a garbage-collector run.
    pub gc_freed: u64,
    pub gc_freed_bytes: u64,
    /// Blocks of the site, all iterations.
    pub blocks: u64,
    /// Bytes of the site's blocks per category (index: `Category as usize`),
    /// of those that outlived their iteration when any did, else of all.
    pub category_bytes: [u64; crate::categories::CATEGORIES],
    pub outliving_category_bytes: [u64; crate::categories::CATEGORIES],
}

impl SiteStats {
    /// The stack to show: of a block that leaked when any did.
    pub fn shown_stack(&self) -> StackId {
        if self.leak_example.0 > 0 {
            self.leak_example.1
        } else {
            self.example.1
        }
    }

    /// What the site's memory is: the category of most of its bytes that
    /// outlived their iteration (all of them when none did).
    pub fn category(&self) -> Option<crate::categories::Category> {
        let v = if self.outliving > 0 {
            &self.outliving_category_bytes
        } else {
            &self.category_bytes
        };
        let k = (0..8).max_by_key(|&k| v[k])?;
        (v[k] > 0).then(|| crate::categories::Category::ALL[k])
    }
}

/// Iteration of each block's birth and death: 0 is setup, `n + 1` is after
/// the last iteration or still alive.
pub struct BlockIterations {
    pub born: Vec<u32>,
    pub died: Vec<u32>,
}

impl BlockIterations {
    pub fn new(l: &Lifetimes, its: &Iterations) -> BlockIterations {
        let after = its.list.len() as u32 + 1;
        let born = l
            .birth
            .iter()
            .map(|&b| {
                if b == BEFORE_WINDOW {
                    0
                } else {
                    its.of_event(b as usize)
                }
            })
            .collect();
        let died = l
            .death
            .iter()
            .map(|&d| {
                if d == STILL_ALIVE {
                    after
                } else {
                    its.of_event(d as usize)
                }
            })
            .collect();
        BlockIterations { born, died }
    }
}

/// Sites of all blocks, as dense ids, with their stats.
pub struct SiteTable {
    /// Site id of each block.
    pub of_block: Vec<u32>,
    pub stats: Vec<SiteStats>,
}

impl SiteTable {
    pub fn new(
        snap: &Snapshot,
        l: &Lifetimes,
        bi: &BlockIterations,
        complete: u32,
        in_gc: &dyn Fn(u32) -> bool,
        categories: &crate::categories::Categories,
    ) -> SiteTable {
        let mut of_stack: HashMap<StackId, u32> = HashMap::default();
        let mut of_frame: HashMap<(Option<FrameId>, Option<FrameId>), u32> = HashMap::default();
        let mut stats: Vec<SiteStats> = Vec::new();
        let mut of_block = Vec::with_capacity(l.len());
        for b in 0..l.len() {
            let stack = l.stack[b];
            let id = *of_stack.entry(stack).or_insert_with(|| {
                let f = site_frame(snap, stack);
                let callee = f.and_then(|f| callee_of(snap, stack, f));
                *of_frame.entry((f, callee)).or_insert_with(|| {
                    stats.push(SiteStats {
                        site: f,
                        callee,
                        first_block: b as u32,
                        ..Default::default()
                    });
                    (stats.len() - 1) as u32
                })
            });
            of_block.push(id);
            let s = &mut stats[id as usize];
            let size = l.size[b];
            s.blocks += 1;
            let cat = categories.category[b] as usize;
            s.category_bytes[cat] += size;
            if size > s.example.0 {
                s.example = (size, stack);
            }
            let (born, died) = (bi.born[b], bi.died[b]);
            if born >= 1 && born < complete && died > born + 1 {
                if size > s.leak_example.0 {
                    s.leak_example = (size, stack);
                }
                if s.outliving == 0 {
                    s.outliving_iterations = (born, born);
                }
                s.outliving += 1;
                s.outliving_bytes += size;
                s.outliving_category_bytes[cat] += size;
                let r = &mut s.outliving_iterations;
                *r = (r.0.min(born), r.1.max(born));
            } else if born >= 1 && died <= born + 1 && size > s.freed_example.0 {
                s.freed_example = (size, stack);
            }
            // Blocks from before the recording that a collection freed were
            // garbage before the first iteration: not a cycle the training
            // loop makes (and without a stack, nothing to point at).
            if l.death[b] != STILL_ALIVE && in_gc(l.death[b]) && l.birth[b] != BEFORE_WINDOW {
                s.gc_freed += 1;
                s.gc_freed_bytes += size;
            }
        }
        SiteTable { of_block, stats }
    }
}

/// The nearest frame inside `site` in `stack` that is not noise.
fn callee_of(snap: &Snapshot, stack: StackId, site: FrameId) -> Option<FrameId> {
    let frames = snap.stacks.get(stack);
    let at = frames.iter().position(|&f| f == site)?;
    frames[..at].iter().rev().copied().find(|&f| {
        let (file, _, name) = frame_location(snap, snap.frames.get(f));
        !is_noise(&file, &name)
    })
}

/// Live bytes of each site at the end of iterations `0..=complete`
/// (0: before the first), computed for all sites in one sort.
pub fn site_series(
    l: &Lifetimes,
    bi: &BlockIterations,
    sites: &SiteTable,
    complete: u32,
    mut visit: impl FnMut(u32, &[i64]),
) {
    // (site, iteration, delta): a block adds its size at the end of the
    // iteration it was born in and removes it at the end of the one it died in.
    let mut deltas: Vec<(u32, u32, i64)> = Vec::new();
    for b in 0..l.len() {
        let (born, died) = (bi.born[b], bi.died[b]);
        if born > complete || died <= born {
            continue;
        }
        let site = sites.of_block[b];
        deltas.push((site, born, l.size[b] as i64));
        if died <= complete {
            deltas.push((site, died, -(l.size[b] as i64)));
        }
    }
    deltas.sort_unstable_by_key(|&(s, k, _)| (s, k));
    let mut series = vec![0i64; complete as usize + 1];
    let mut i = 0;
    while i < deltas.len() {
        let site = deltas[i].0;
        series.iter_mut().for_each(|x| *x = 0);
        while i < deltas.len() && deltas[i].0 == site {
            series[deltas[i].1 as usize] += deltas[i].2;
            i += 1;
        }
        let mut acc = 0;
        for x in series.iter_mut() {
            acc += *x;
            *x = acc;
        }
        visit(site, &series);
    }
}

/// The shape of a series of live bytes at iteration ends.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// Grows in most iterations and hardly ever shrinks.
    Steady {
        per_iteration: f64,
        from: u32,
        to: u32,
    },
    /// Grows for a while, then drops at once, more than once or with growth after.
    SawTooth {
        rise: i64,
        drops: u32,
    },
    /// Grew in the first iteration(s), flat afterwards.
    OneTime {
        bytes: i64,
        by: u32,
    },
    Flat,
}

/// Classify `s[0..=n]`. Iteration 1 is warm-up (optimizer state, caches,
/// autotuning), so steady growth is measured from its end.
pub fn shape(s: &[i64], min_growth: u64) -> Shape {
    let n = s.len().saturating_sub(1);
    if n >= 3 {
        let steps = (n - 1) as f64;
        let (mut pos, mut neg, mut max_drop) = (0usize, 0usize, 0i64);
        for k in 2..=n {
            if s[k] > s[k - 1] {
                pos += 1;
            } else if s[k] < s[k - 1] {
                neg += 1;
                max_drop = max_drop.max(s[k - 1] - s[k]);
            }
        }
        let growth = s[n] - s[1];
        let per = growth as f64 / steps;
        if growth > 0
            && per >= min_growth as f64
            && pos as f64 >= 0.6 * steps
            && neg as f64 <= 0.2 * steps
            && max_drop * 2 <= growth
        {
            let from = (2..=n).find(|&k| s[k] > s[k - 1]).unwrap_or(2) as u32;
            return Shape::Steady {
                per_iteration: per,
                from,
                to: n as u32,
            };
        }
        // Saw-tooth: a rise over ≥ 2 iterations, then a drop of at least
        // half of it.
        let (mut trough, mut rising, mut drops, mut rise) = (s[1], 0u32, 0u32, 0i64);
        for k in 2..=n {
            if s[k] > s[k - 1] {
                rising += 1;
            } else if s[k] < s[k - 1] {
                let up = s[k - 1] - trough;
                if rising >= 2 && up > 0 && s[k - 1] - s[k] >= up / 2 {
                    drops += 1;
                    rise = rise.max(up);
                }
                trough = s[k];
                rising = 0;
            }
        }
        if drops >= 1 && rise as f64 >= min_growth as f64 * 2.0 {
            return Shape::SawTooth { rise, drops };
        }
    }
    if n >= 2 {
        // One-time: everything happened by the end of iteration 2.
        let by = if s[2] != s[1] { 2 } else { 1 };
        let jump = s[by] - s[0];
        let flat_after = (by + 1..=n).all(|k| (s[k] - s[by]).abs() * 100 <= jump.abs());
        if by < n && jump > 0 && flat_after && s[by] >= s[by - 1] {
            return Shape::OneTime {
                bytes: jump,
                by: by as u32,
            };
        }
    }
    Shape::Flat
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let steady = [0, 10, 20, 30, 40, 50];
        assert!(
            matches!(shape(&steady, 1), Shape::Steady { per_iteration, from: 2, to: 5 } if per_iteration == 10.0)
        );
        assert_eq!(shape(&[0, 0, 0, 0, 0], 1), Shape::Flat);
        assert_eq!(
            shape(&[0, 100, 100, 100, 100], 1),
            Shape::OneTime { bytes: 100, by: 1 }
        );
        assert_eq!(
            shape(&[0, 50, 100, 100, 100], 1),
            Shape::OneTime { bytes: 100, by: 2 }
        );
        let saw = [0, 0, 10, 20, 30, 0, 10, 20];
        assert!(matches!(
            shape(&saw, 1),
            Shape::SawTooth { rise: 30, drops: 1 }
        ));
        // Noise that goes up and down is neither.
        assert_eq!(shape(&[0, 10, 20, 10, 20, 10, 20, 10], 1), Shape::Flat);
        // Too short to tell.
        assert_eq!(shape(&[0, 10, 20], 1), Shape::Flat);
        // Below the threshold.
        assert!(!matches!(shape(&steady, 11), Shape::Steady { .. }));
    }
}
