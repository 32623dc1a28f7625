//! The parent of `mp.spawn`'s ranks (tests/fixtures/recorded,
//! `spawned_ranks_parent`: `vramscope run python/tests/scripts/spawned_ranks.py 2`)
//! trains nothing; its two children trained 3 steps each, unrecorded.
//! The summary says so, with how to record them.

use vramscope_analysis::summary::unrecorded_children;
use vramscope_analysis::{summarize, SummaryOptions};
use vramscope_snapshot::load;

#[test]
fn the_children_left_out_are_named_with_how_to_record_them() {
    let snap = load(
        &vramscope_testdata::recorded("spawned_ranks_parent.pickle.gz"),
        &Default::default(),
    )
    .expect("reads");
    let children = &snap.source.recorder.as_ref().expect("recorder").children;
    assert_eq!(children.len(), 2);
    assert!(children
        .iter()
        .all(|c| c.steps == 3 && c.devices.is_empty()));
    let note = unrecorded_children(&snap).expect("a note");
    assert!(
        note.starts_with("2 child processes of the recorded one trained without being recorded"),
        "{note}"
    );
    assert_eq!(note.matches(": 3 optimizer steps").count(), 2, "{note}");
    assert!(
        note.contains("VRAMSCOPE_RECORD='run-{pid}.pickle'"),
        "{note}"
    );
    // The summary's JSON carries it; a file whose recorder noted none, not.
    let s = summarize(&snap, &SummaryOptions::default());
    assert_eq!(s.source.children.as_deref(), Some(note.as_str()));
    let other = load(
        &vramscope_testdata::recorded("cnn_eval4x.pickle.gz"),
        &Default::default(),
    )
    .expect("reads");
    assert!(unrecorded_children(&other).is_none());
}
