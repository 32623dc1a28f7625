//! The terminal map: one line per segment with a bar whose cells show what
//! fills each slice of the segment, then the device's totals; and the
//! `--json` form. The map itself is `vramscope_analysis::segments_map`.

use std::collections::HashMap;
use std::fmt::Write;

use vramscope_analysis::segments_map::{SegmentView, SegmentsMap};
use vramscope_text::units::{bytes, count};

/// How the map is drawn.
#[derive(Clone, Debug)]
pub struct MapOptions {
    /// Cells per bar.
    pub width: usize,
    /// ANSI colours (only for terminals).
    pub color: bool,
    /// With more segments than this, identical ones share one line.
    pub group_above: usize,
}

impl Default for MapOptions {
    fn default() -> Self {
        MapOptions {
            width: 100,
            color: false,
            group_above: 40,
        }
    }
}

/// What fills a slice of a segment. The order is the tie-break: on equal
/// bytes the earlier state is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Cell {
    Allocated,
    Waste,
    Pending,
    Free,
    /// Covered by no block in the dump.
    Uncovered,
}

const CELLS: [Cell; 5] = [
    Cell::Allocated,
    Cell::Waste,
    Cell::Pending,
    Cell::Free,
    Cell::Uncovered,
];

impl Cell {
    fn glyph(self) -> char {
        match self {
            Cell::Allocated => '█',
            Cell::Waste => '▒',
            Cell::Pending => '▓',
            Cell::Free => '░',
            Cell::Uncovered => '·',
        }
    }

    fn ansi(self) -> &'static str {
        match self {
            Cell::Allocated => "\x1b[32m",
            Cell::Waste => "\x1b[33m",
            Cell::Pending => "\x1b[35m",
            Cell::Free => "\x1b[90m",
            Cell::Uncovered => "\x1b[0m",
        }
    }
}

/// The dominant state of each of `width` equal slices of `s`.
fn cells(s: &SegmentView, width: usize) -> Vec<Cell> {
    // Pieces in address order; an allocated block is its requested bytes
    // followed by the rounding at its tail.
    let mut pieces: Vec<(u64, u64, Cell)> = Vec::with_capacity(s.blocks.len() + 4);
    let seg_end = s.address.saturating_add(s.size);
    for b in &s.blocks {
        let a = b.address.clamp(s.address, seg_end) - s.address;
        let e = b.address.saturating_add(b.size).clamp(s.address, seg_end) - s.address;
        match b.state {
            "active_allocated" => {
                let r = a + b.requested_size.min(e - a);
                pieces.push((a, r, Cell::Allocated));
                pieces.push((r, e, Cell::Waste));
            }
            "active_pending_free" => pieces.push((a, e, Cell::Pending)),
            "inactive" => pieces.push((a, e, Cell::Free)),
            _ => {}
        }
    }
    pieces.retain(|p| p.1 > p.0);
    pieces.sort_by_key(|p| p.0);
    let size = s.size as u128;
    let w = width.max(1) as u128;
    let mut out = Vec::with_capacity(width);
    let mut p = 0;
    for k in 0..w {
        let lo = (k * size / w) as u64;
        let hi = ((k + 1) * size / w) as u64;
        let mut fill = [0u64; 5];
        let mut j = p;
        while j < pieces.len() && pieces[j].0 < hi {
            let (a, e, c) = pieces[j];
            fill[c as usize] += e.min(hi).saturating_sub(a.max(lo));
            if e <= hi {
                // Entirely before the next cell: never needed again.
                if j == p {
                    p += 1;
                }
            }
            j += 1;
        }
        let covered: u64 = fill.iter().sum();
        fill[Cell::Uncovered as usize] = (hi - lo).saturating_sub(covered);
        let best = CELLS.iter().copied().fold(Cell::Uncovered, |best, c| {
            if fill[c as usize] > fill[best as usize]
                || (fill[c as usize] == fill[best as usize] && (c as usize) < best as usize)
            {
                c
            } else {
                best
            }
        });
        out.push(best);
    }
    out
}

fn bar(cells: &[Cell], color: bool) -> String {
    let mut o = String::with_capacity(cells.len() * 3 + 16);
    let mut prev = None;
    for &c in cells {
        if color && prev != Some(c) {
            o.push_str(c.ansi());
            prev = Some(c);
        }
        o.push(c.glyph());
    }
    if color {
        o.push_str("\x1b[0m");
    }
    o
}

/// Render `map` for a terminal; `name` labels the input (a file name).
pub fn segments_text(map: &SegmentsMap, name: &str, opts: &MapOptions) -> String {
    let mut o = String::new();
    let t = &map.totals;
    let _ = writeln!(o, "{name} · device {} · {}", map.device, map.moment);
    if map.reconstructed {
        let _ = writeln!(
            o,
            "Reconstructed from the trace: segment events undone from the end state, live blocks\n\
             placed by address and rounded as the allocator rounds them, the gaps between them\n\
             counted as cached free."
        );
    }
    if map.unplaced_blocks > 0 {
        let _ = writeln!(
            o,
            "warning: {} live blocks ({}) lie outside every reconstructed segment and are not counted",
            count(map.unplaced_blocks),
            bytes(map.unplaced_bytes)
        );
    }
    let _ = writeln!(
        o,
        "{} segments, {} blocks; each bar is one segment in {} cells\n\
         █ allocated  ▒ rounding waste  ▓ pending free  ░ cached free  (a cell shows what fills most of it)\n",
        count(t.segments),
        count(t.blocks),
        opts.width
    );
    if map.segments.is_empty() {
        let _ = writeln!(o, "No segments on this device at this moment.\n");
    } else {
        let rows: Vec<(&SegmentView, Vec<Cell>)> = map
            .segments
            .iter()
            .map(|s| (s, cells(s, opts.width)))
            .collect();
        let grouping = rows.len() > opts.group_above;
        // Lines keyed by everything they show, so that only identical
        // lines are folded into one.
        type Key = (u64, String, Vec<Cell>, u64, u64, u64, u64);
        let key = |s: &SegmentView, c: &[Cell]| -> Key {
            let f = (s.allocated_bytes, s.pending_free_bytes, s.cached_free_bytes);
            (
                s.size,
                s.kind(),
                c.to_vec(),
                f.0,
                f.1,
                f.2,
                s.largest_free_block,
            )
        };
        let mut times: HashMap<Key, u64> = HashMap::new();
        if grouping {
            for (s, c) in &rows {
                *times.entry(key(s, c)).or_insert(0) += 1;
            }
        }
        let _ = writeln!(
            o,
            "{:>16}  {:>10}  {:<10}  {:<w$}  {:>10}  {:>10}  {:>12}",
            "address",
            "size",
            "type",
            "map",
            "allocated",
            "cached free",
            "largest free",
            w = opts.width
        );
        for (s, c) in &rows {
            let mut addr = format!("{:#x}", s.address);
            let mut note = String::new();
            if grouping {
                match times.get_mut(&key(s, c)) {
                    Some(0) => continue,
                    Some(n) if *n > 1 => {
                        addr = format!("×{} identical", count(*n));
                        note = format!("  each; first at {:#x}", s.address);
                        *n = 0;
                    }
                    _ => {}
                }
            }
            let _ = writeln!(
                o,
                "{addr:>16}  {:>10}  {:<10}  {}  {:>10}  {:>10}  {:>12}{note}",
                bytes(s.size),
                s.kind(),
                bar(c, opts.color),
                bytes(s.allocated_bytes),
                bytes(s.cached_free_bytes),
                bytes(s.largest_free_block)
            );
        }
        o.push('\n');
    }
    let waste = if t.rounding_waste_bytes > 0 {
        format!(" (rounding waste {})", bytes(t.rounding_waste_bytes))
    } else {
        String::new()
    };
    let _ = writeln!(
        o,
        "Reserved            {} in {} segments\n\
         Allocated           {}{waste}\n\
         Pending free        {}\n\
         Cached free         {} in {} blocks\n\
         Largest free block  {}\n\
         Fragmentation       {:.1}%  (1 − largest free block ÷ cached free)",
        bytes(t.reserved_bytes),
        count(t.segments),
        bytes(t.allocated_bytes),
        bytes(t.pending_free_bytes),
        bytes(t.cached_free_bytes),
        count(t.free_blocks),
        bytes(t.largest_free_block),
        100.0 * t.fragmentation_ratio
    );
    o
}

/// The `--json` form (pretty-printed, stable field names).
pub fn segments_json(map: &SegmentsMap) -> String {
    let mut s =
        serde_json::to_string_pretty(map).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}
