//! A trace PyTorch's allocator could not have written (an `alloc` at an
//! address still allocated, a free of another size than its block) is read
//! as it is, and the file's warnings say so; a consistent one, with frees
//! of blocks from before its window, says nothing.

use vramscope_snapshot::{decode_bytes, Snapshot};
use vramscope_testdata::hand_trace;

fn read(entries: &[(&str, u64, u64, &str)]) -> Snapshot {
    decode_bytes(hand_trace(entries).as_bytes(), &Default::default()).expect("a snapshot")
}

fn inconsistencies(s: &Snapshot) -> Vec<&String> {
    s.source
        .warnings
        .iter()
        .filter(|w| w.contains("PyTorch writes neither"))
        .collect()
}

#[test]
fn an_alloc_over_a_live_block_and_a_resized_free_are_flagged() {
    let snap = read(&[
        ("alloc", 0x1000, 512, "[]"),
        ("alloc", 0x2000, 256, "[]"),
        // 0x1000 again without its free.
        ("alloc", 0x1000, 1024, "[]"),
        ("free_completed", 0x2000, 128, "[]"),
        ("alloc", 0x1000, 512, "[]"),
    ]);
    let w = inconsistencies(&snap);
    assert_eq!(w.len(), 1, "{:?}", snap.source.warnings);
    assert!(
        w[0].starts_with(
            "device 0: 2 alloc event(s) at an address whose block is still allocated (the first: event 2, 0x1000)"
        ),
        "{}",
        w[0]
    );
    assert!(
        w[0].contains("1 free event(s) of another size than the block allocated at their address (the first: event 3, 0x2000)"),
        "{}",
        w[0]
    );
    // The events are kept as they were.
    assert_eq!(snap.traces[0].len(), 5);
}

#[test]
fn frees_of_blocks_from_before_the_window_are_not_flagged() {
    let snap = read(&[
        ("free_requested", 0x9000, 4096, "[]"),
        ("free_completed", 0x9000, 4096, "[]"),
        ("alloc", 0x9000, 512, "[]"),
        ("free_completed", 0x9000, 512, "[]"),
        ("alloc", 0x9000, 2048, "[]"),
    ]);
    assert!(
        inconsistencies(&snap).is_empty(),
        "{:?}",
        snap.source.warnings
    );
}

/// The real and recorded files of the repository are consistent.
#[test]
fn the_real_files_are_consistent() {
    for name in [
        "magma27_cs336_windows.pickle",
        "nothanmin_cs336_999segments.pickle",
        "wedsonlin_medium_1024_training_memory_snapshot.pickle",
        "decomfl_opt_zo_fl_memory.pickle",
    ] {
        let snap = decode_bytes(&vramscope_testdata::real_bytes(name), &Default::default())
            .expect("reads");
        assert!(
            !snap.traces.is_empty() && snap.traces.iter().any(|t| t.len() > 100),
            "{name}"
        );
        assert!(
            inconsistencies(&snap).is_empty(),
            "{name}: {:?}",
            snap.source.warnings
        );
    }
}
