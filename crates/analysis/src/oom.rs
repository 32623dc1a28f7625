//! Why an allocation ran out of memory, from the figures a file holds.
//!
//! Four causes, several of which can hold at once:
//!
//! * **one request larger than the device** (or than the memory fraction's
//!   limit): nothing else matters;
//! * **memory outside this allocator**: the device's total less what the
//!   allocator reserved and what was free (other processes, NCCL buffers,
//!   cuDNN/cuBLAS handles, another allocator such as CuPy's). PyTorch's
//!   files do not hold the device's total; `vramscope.record` stores it;
//! * **capacity**: what was allocated plus the request exceeds what the
//!   allocator could have had (reserved + free);
//! * **fragmentation**: it did not, yet no free block or new segment could
//!   serve the request, because cached blocks are bound to segments that
//!   live blocks pin.
//!
//! The dominant cause is the one whose removal alone makes the request
//! fit: the size of the request for the first; fragmentation when the
//! request fit in the allocator's share; otherwise memory outside when it
//! holds more than the shortfall and a quarter of the device (another
//! process on the GPU), else capacity.

use std::collections::HashMap;

use serde::Serialize;
use vramscope_gpus::allocator;
use vramscope_snapshot::{BlockState, Snapshot};

use crate::sites::{frame_label, site_frame};
use vramscope_text::units::bytes;

/// Segments of the pool a request draws from that hold free memory and
/// live blocks at once: the free memory is cached, but the segment cannot
/// be released while those blocks live.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Pinned {
    pub segments: u64,
    /// Free bytes in them, and in how many pieces.
    pub free_bytes: u64,
    pub free_blocks: u64,
    /// The live blocks that pin them, by site, largest first: (site, bytes, blocks).
    pub sites: Vec<(String, u64, u64)>,
}

/// The pinned segments of `device`'s dump for a request of `request`
/// bytes (its pool: large segments above 1 MiB, as PyTorch's `get_pool`).
pub fn pinned(snap: &Snapshot, device: u32, request: u64) -> Pinned {
    let large = !allocator::is_small(request);
    let mut p = Pinned::default();
    let mut by_site: HashMap<Option<_>, (u64, u64)> = HashMap::new();
    for seg in snap.segments_of(device) {
        let is_large = seg.total_size > allocator::SMALL_BUFFER || seg.is_expandable;
        if is_large != large {
            continue;
        }
        let blocks = snap.blocks_of(seg);
        let free: Vec<_> = blocks
            .iter()
            .filter(|b| b.state == BlockState::Inactive)
            .collect();
        let live: Vec<_> = blocks
            .iter()
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .collect();
        if free.is_empty() || live.is_empty() {
            continue;
        }
        p.segments += 1;
        p.free_bytes += free.iter().map(|b| b.size).sum::<u64>();
        p.free_blocks += free.len() as u64;
        for b in live {
            let e = by_site.entry(site_frame(snap, b.stack)).or_default();
            e.0 += b.size;
            e.1 += 1;
        }
    }
    let mut sites: Vec<_> = by_site.into_iter().collect();
    sites.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    p.sites = sites
        .into_iter()
        .take(3)
        .map(|(f, (n, c))| {
            let site = f.map_or_else(
                || "<no stack recorded>".to_string(),
                |f| frame_label(snap, f),
            );
            (site, n, c)
        })
        .collect();
    p
}

/// One cause and the bytes it accounts for.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OomCause {
    /// `too_large`, `outside`, `capacity` or `fragmentation`.
    pub kind: &'static str,
    /// The request beyond the device's limit; the memory held outside the
    /// allocator; allocated plus the request beyond what it could have;
    /// cached bytes that could not serve the request.
    pub bytes: u64,
}

/// The figures of one OOM, as the file (and the recorder) give them.
#[derive(Clone, Copy, Debug, Default)]
pub struct OomFigures {
    pub request: u64,
    pub allocated: u64,
    pub reserved: u64,
    /// Free device memory when it failed (PyTorch's `oom` entry).
    pub free: Option<u64>,
    /// The device's total memory (recorder), and the memory fraction's
    /// limit when one was set.
    pub total: Option<u64>,
    pub limit: Option<u64>,
    /// The largest free block then, when known.
    pub largest_free: Option<u64>,
    /// Of the memory outside this allocator, this process's and other
    /// processes' (NVML, measured at a dump taken at this OOM).
    pub outside_split: Option<(u64, u64)>,
}

/// Every cause that holds, the dominant first, and the sentence that says so.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OomDiagnosis {
    pub causes: Vec<OomCause>,
    /// Memory held outside this allocator (total − reserved − free), when
    /// the device's total is known.
    pub outside_bytes: Option<u64>,
    pub device_total_bytes: Option<u64>,
    pub sentence: String,
}

impl OomDiagnosis {
    /// The dominant cause's kind (`unknown` when the file cannot tell).
    pub fn dominant(&self) -> &'static str {
        self.causes.first().map_or("unknown", |c| c.kind)
    }
}

/// Diagnose one OOM; `pinned`: its pool's pinned segments, when the
/// file's segments are those of the OOM (the trace ends there).
pub fn diagnose(f: &OomFigures, pinned: Option<&Pinned>) -> OomDiagnosis {
    let cached = f.reserved.saturating_sub(f.allocated);
    let outside = match (f.total, f.free) {
        (Some(t), Some(free)) => Some(t.saturating_sub(f.reserved + free)),
        _ => None,
    };
    let ceiling = f.limit.or(f.total);
    let mut causes = Vec::new();
    // The sentence of each cause, by kind.
    let mut text: Vec<(&'static str, String)> = Vec::new();
    if let Some(c) = ceiling.filter(|&c| f.request > c) {
        causes.push(OomCause {
            kind: "too_large",
            bytes: f.request - c,
        });
        text.push((
            "too_large",
            format!(
                "one request larger than the device: {} asked for, {} is all {} (no setting or freeing helps; that tensor must shrink or be split)",
                bytes(f.request),
                bytes(c),
                if f.limit.is_some() { "the memory fraction allows" } else { "the device has" }
            ),
        ));
    }
    let Some(free) = f.free else {
        let mut sentence = text.into_iter().map(|t| t.1).collect::<Vec<_>>().join("; ");
        if sentence.is_empty() {
            sentence = "the file does not say how much was free on the device, so why it failed cannot be told from it".into();
        }
        return OomDiagnosis {
            causes,
            outside_bytes: None,
            device_total_bytes: f.total,
            sentence,
        };
    };
    let usable = f.reserved + free;
    let shortfall = (f.allocated + f.request).saturating_sub(usable);
    let capacity = shortfall > 0;
    let outside_dominates = outside
        .is_some_and(|o| o >= shortfall && f.total.is_some_and(|t| o.saturating_mul(4) >= t));
    let cause = |kind, bytes| OomCause { kind, bytes };
    let out = outside.filter(|&o| o > 0).map(|o| cause("outside", o));
    if capacity && outside_dominates {
        causes.extend(out);
        causes.push(cause("capacity", shortfall));
    } else if capacity {
        causes.push(cause("capacity", shortfall));
        causes.extend(out);
    } else {
        causes.push(cause("fragmentation", cached));
        causes.extend(out);
    }
    if capacity {
        text.push((
            "capacity",
            format!(
                "{} allocated plus the {} request exceed the {} the allocator could have (reserved {} + free {}) by {}",
                bytes(f.allocated),
                bytes(f.request),
                bytes(usable),
                bytes(f.reserved),
                bytes(free),
                bytes(shortfall)
            ),
        ));
    } else {
        let pieces = match pinned.filter(|p| p.segments > 0) {
            Some(p) => {
                let sites: Vec<String> = p
                    .sites
                    .iter()
                    .map(|(s, n, c)| {
                        format!(
                            "{} in {c} block{} at {s}",
                            bytes(*n),
                            if *c == 1 { "" } else { "s" }
                        )
                    })
                    .collect();
                format!(
                    "{} of it free in {} pieces inside {} segments that live blocks pin ({})",
                    bytes(p.free_bytes),
                    p.free_blocks,
                    p.segments,
                    sites.join(", ")
                )
            }
            None => "in blocks bound to segments that live blocks pin".to_string(),
        };
        let largest = f
            .largest_free
            .map(|l| format!(", the largest free block {}", bytes(l)))
            .unwrap_or_default();
        text.push((
            "fragmentation",
            format!(
                "{} allocated plus the {} request fit in the {} the allocator could have (reserved {} + free {}), but not as one piece: \
                 {} was cached, {pieces}{largest}, and the device's free {} was less than the new segment the request needed",
                bytes(f.allocated),
                bytes(f.request),
                bytes(usable),
                bytes(f.reserved),
                bytes(free),
                bytes(cached),
                bytes(free)
            ),
        ));
    }
    let mut tail = String::new();
    match (outside, f.total) {
        (Some(o), Some(t)) if o > 0 => text.push((
            "outside",
            format!(
                "{} of the device's {} was held outside this allocator ({}){}",
                bytes(o),
                bytes(t),
                match f.outside_split {
                    Some((mine, others)) => format!(
                        "by NVML at the dump: {} by this process (the CUDA context, NCCL, library handles, another allocator), \
                         {} by other processes and the driver",
                        bytes(mine),
                        bytes(others)
                    ),
                    None => "other processes, NCCL, library handles, another allocator: total − reserved − free".into(),
                },
                if capacity && outside_dominates {
                    format!(", more than the {} that was missing", bytes(shortfall))
                } else {
                    String::new()
                }
            ),
        )),
        (Some(_), Some(t)) => tail = format!(" Nothing of the device's {} was held outside this allocator.", bytes(t)),
        _ => {
            tail = " The device's total memory is not in the file, so how much of it other processes or libraries held \
                    cannot be told (vramscope.record stores it)."
                .into()
        }
    }
    let name = |k: &'static str| -> &'static str {
        match k {
            "too_large" => "one request larger than the device",
            "outside" => "memory outside this allocator",
            k => k,
        }
    };
    let mut parts = Vec::new();
    for (n, c) in causes.iter().enumerate() {
        let Some((_, t)) = text.iter().find(|(k, _)| *k == c.kind) else {
            continue;
        };
        let lead = match (n, causes.len()) {
            (_, 1) => format!("{}: ", name(c.kind)),
            (0, _) => format!("{} (dominant): ", name(c.kind)),
            _ => format!("Also {}: ", name(c.kind)),
        };
        // "one request larger..." carries its own name.
        let t = t
            .strip_prefix("one request larger than the device: ")
            .unwrap_or(t);
        parts.push(format!("{lead}{t}"));
    }
    let sentence = format!("{}.{tail}", parts.join(". "));
    OomDiagnosis {
        causes,
        outside_bytes: outside,
        device_total_bytes: f.total,
        sentence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    /// With NVML's figures from a dump at the OOM, the memory outside is
    /// split between this process (the ballast was a CuPy cudaMalloc in
    /// the same process) and the others.
    #[test]
    fn outside_memory_is_split_by_process_where_nvml_measured_it() {
        let outside = 146_887_475_200u64;
        let d = diagnose(
            &OomFigures {
                request: GIB,
                allocated: 762 * MIB,
                reserved: 2_663_383_040,
                free: Some(559_022_080),
                total: Some(150_109_880_320),
                limit: None,
                largest_free: Some(14 * MIB),
                outside_split: Some((outside - 3 * MIB, 3 * MIB)),
            },
            None,
        );
        assert_eq!(d.outside_bytes, Some(outside));
        assert!(
            d.sentence
                .contains("by NVML at the dump: 136.80 GiB by this process")
                && d.sentence.contains("3.00 MiB by other processes"),
            "{}",
            d.sentence
        );
    }

    #[test]
    fn fragmentation_inside_a_device_held_mostly_outside() {
        // oom_frag_default on the H200 (facts_frag_default.json).
        let d = diagnose(
            &OomFigures {
                request: GIB,
                allocated: 762 * MIB,
                reserved: 2_663_383_040,
                free: Some(559_022_080),
                total: Some(150_109_880_320),
                limit: None,
                largest_free: Some(14 * MIB),
                outside_split: None,
            },
            None,
        );
        assert_eq!(d.dominant(), "fragmentation");
        assert_eq!(d.outside_bytes, Some(146_887_475_200));
        assert_eq!(d.causes[1].kind, "outside");
        assert!(
            d.sentence.starts_with("fragmentation (dominant)"),
            "{}",
            d.sentence
        );
        assert!(
            d.sentence.contains("the largest free block 14.00 MiB"),
            "{}",
            d.sentence
        );
        assert!(
            d.sentence
                .contains("Also memory outside this allocator: 136.80 GiB"),
            "{}",
            d.sentence
        );
    }

    #[test]
    fn outside_memory_dominates_a_capacity_oom_it_explains() {
        let d = diagnose(
            &OomFigures {
                request: 144 * MIB,
                allocated: 2_800 * MIB,
                reserved: 2_820 * MIB,
                free: Some(23 * MIB),
                total: Some(140 * GIB),
                ..Default::default()
            },
            None,
        );
        assert_eq!(d.dominant(), "outside");
        assert_eq!(d.causes[1].kind, "capacity");
        assert_eq!(d.causes[1].bytes, (2_800 + 144 - 2_843) * MIB);
        // Without the device's total, capacity alone, and said so.
        let d = diagnose(
            &OomFigures {
                total: None,
                request: 144 * MIB,
                allocated: 2_800 * MIB,
                reserved: 2_820 * MIB,
                free: Some(23 * MIB),
                ..Default::default()
            },
            None,
        );
        assert_eq!(d.dominant(), "capacity");
        assert!(d.sentence.contains("cannot be told"));
    }

    #[test]
    fn a_request_larger_than_the_device_comes_first() {
        let d = diagnose(
            &OomFigures {
                request: 100 * GIB,
                allocated: GIB,
                reserved: 2 * GIB,
                free: Some(70 * GIB),
                total: Some(80 * GIB),
                ..Default::default()
            },
            None,
        );
        assert_eq!(d.dominant(), "too_large");
        assert_eq!(d.causes[0].bytes, 20 * GIB);
    }
}
