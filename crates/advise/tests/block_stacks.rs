//! Checkpointing advice for a file without the recorder's block marks: the
//! calls of the repeated blocks read from the stacks give the same replay
//! as the marks. The H200's GPT was recorded with `vramscope.record`; with
//! its `vramscope.block#` annotations removed it is what PyTorch's own
//! `_record_memory_history` writes.

use vramscope_advise::{advise, Advice, AdviseOptions, ChangeClass};
use vramscope_snapshot::{load, Snapshot};

fn checkpoint_rows(snap: &Snapshot) -> Vec<Advice> {
    let opts = AdviseOptions {
        capacity: Some(3 << 30),
        ..Default::default()
    };
    let a = advise(snap, &opts).expect("advice");
    a.advice
        .into_iter()
        .filter(|r| r.class == ChangeClass::Checkpoint)
        .collect()
}

#[test]
fn blocks_read_from_the_stacks_replay_as_the_recorders_marks() {
    let mut snap = load(
        &vramscope_testdata::gpu("advise_baseline.pickle"),
        &Default::default(),
    )
    .expect("reads");
    let marked = checkpoint_rows(&snap);
    let block = |s: &Snapshot, a: &vramscope_snapshot::Annotation| {
        s.str(a.name).starts_with("vramscope.block#")
    };
    let keep: Vec<bool> = snap.annotations.iter().map(|a| !block(&snap, a)).collect();
    let mut k = keep.iter();
    snap.annotations.retain(|_| *k.next().unwrap_or(&true));
    assert!(keep.iter().any(|k| !k), "the fixture has block marks");
    let read = checkpoint_rows(&snap);
    // Every block wrapped, and the fewest that fit 3 GiB (the first two).
    assert_eq!(marked.len(), 2);
    assert_eq!(read.len(), 2);
    for (m, r) in marked.iter().zip(&read) {
        assert_eq!(
            m.peak_reserved, r.peak_reserved,
            "{} / {}",
            m.change, r.change
        );
        assert_eq!(m.peak_allocated, r.peak_allocated);
        assert_eq!(m.acts_on_bytes, r.acts_on_bytes);
        assert_eq!(m.acts_on_blocks, r.acts_on_blocks);
    }
    assert!(
        marked[0].change.contains("every block of model.blocks"),
        "{}",
        marked[0].change
    );
    assert!(
        read[0].change.contains("every block called at")
            && read[0].change.contains("common.py:40 in forward"),
        "{}",
        read[0].change
    );
    assert!(
        read[1]
            .change
            .contains("the first 2 of the 6 blocks (#0, #1 at"),
        "{}",
        read[1].change
    );
    assert!(
        read[0]
            .code
            .contains("common.py:40 in forward, where the forward calls each block"),
        "{}",
        read[0].code
    );
}
