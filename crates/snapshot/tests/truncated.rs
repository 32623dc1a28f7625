//! Files cut short while being written: what the reader keeps is whole. A
//! segment cut in the middle of its block list is dropped (with a warning)
//! rather than shown as a segment with nothing allocated.

use vramscope_snapshot::{decode_bytes, Snapshot};

fn read(bytes: &[u8]) -> Option<Snapshot> {
    decode_bytes(bytes, &Default::default()).ok()
}

#[test]
fn every_segment_kept_from_a_cut_file_is_whole() {
    let full = vramscope_testdata::real_bytes("decomfl_opt_zo_fl_memory.pickle");
    let whole = read(&full).expect("the whole file reads");
    assert!(!whole.source.truncated);
    let mut dropped = 0;
    // Cuts across the segments (they come first in the file).
    for cut in (200..full.len() / 3).step_by(full.len() / 60) {
        let Some(snap) = read(&full[..cut]) else {
            continue;
        };
        assert!(snap.source.truncated, "cut at {cut}");
        for s in &snap.segments {
            let covered: u64 = snap.blocks_of(s).iter().map(|b| b.size).sum();
            assert_eq!(
                covered, s.total_size,
                "cut at {cut}: segment 0x{:x} kept without all its blocks",
                s.address
            );
        }
        // Never more segments than the file has.
        assert!(snap.segments.len() <= whole.segments.len());
        dropped += snap
            .source
            .warnings
            .iter()
            .filter(|w| w.starts_with("dropped the last segment"))
            .count();
    }
    assert!(dropped > 0, "no cut fell inside a segment's blocks");
}
