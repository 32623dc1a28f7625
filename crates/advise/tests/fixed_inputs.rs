//! A program that gives every training step the same inputs: pytorch/
//! examples' graph attention network (tests/fixtures/recorded,
//! `gat_full_graph`) trains on its one graph, 2,708 nodes at once, with an
//! 8-head attention over the dense adjacency (each head's 2,708 × 2,708
//! scores, 223.79 MiB for the eight). `advise` ranked first "half the
//! micro-batch ... fits" with a loop over `batch.chunk(2)`: there is no
//! batch to chunk, and half the nodes would quarter the attention, not
//! halve it, and change what is trained. The row now says the inputs are
//! the same every step and when splitting them holds; a loop that makes
//! its batch each step (ImageNet's loader) keeps the micro-batch row.

use vramscope_advise::{advise, AdviseOptions, ChangeClass};
use vramscope_snapshot::{load, Snapshot};

fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

fn half_batch(name: &str) -> vramscope_advise::Advice {
    let a = advise(&recorded(name), &AdviseOptions::default()).expect("advice");
    a.advice
        .into_iter()
        .chain(a.no_gain)
        .find(|r| r.class == ChangeClass::HalfBatch)
        .expect("a half_batch row")
}

#[test]
fn a_step_given_the_same_inputs_is_told_it_splits_them() {
    let row = half_batch("gat_full_graph.pickle.gz");
    assert!(
        row.change.starts_with("half the inputs per backward"),
        "{}",
        row.change
    );
    assert!(
        row.change
            .contains("only where their rows are independent samples"),
        "{}",
        row.change
    );
    // The features (2,708 × 1,433) and the dense adjacency (2,708²), fp32.
    assert!(
        row.how
            .contains("the same 2 input tensors (42.78 MiB, made once)"),
        "{}",
        row.how
    );
    assert!(row.how.contains("a graph's nodes"), "{}", row.how);
    assert!(
        row.code.contains("inputs.chunk(2), targets.chunk(2)"),
        "{}",
        row.code
    );
    assert!(!row.code.contains("batch.chunk"), "{}", row.code);
}

#[test]
fn a_step_that_makes_its_batch_keeps_the_micro_batch_row() {
    let row = half_batch("imagenet_zero_grad_late.pickle.gz");
    assert!(
        row.change.starts_with("half the micro-batch"),
        "{}",
        row.change
    );
    assert!(!row.how.contains("same"), "{}", row.how);
    assert!(row.code.contains("batch.chunk(2)"), "{}", row.code);
}
