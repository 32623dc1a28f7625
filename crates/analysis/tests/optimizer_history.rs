//! L-BFGS's history found and told apart from a leak, on runs made for
//! real on the CPU (tests/fixtures/recorded, `optimizer_fit.py lbfgs`):
//! 82,689 fp64 parameters, so each stored pair is 2 × 661,512 bytes.
//!
//! Before, the recording whose history was still growing (100 pairs
//! allowed, 4 stored per step, 6 steps) was a `[LEAK]` held by
//! `optimizer.state`, with the fix "do not keep tensors in
//! optimizer.state".

use vramscope_analysis::leaks::{find_leaks, FindingKind, LeakOptions, Severity};
use vramscope_analysis::lifetimes::Lifetimes;
use vramscope_analysis::optimizers::lbfgs::LbfgsHistory;
use vramscope_snapshot::{load, Snapshot};

const PAIR: u64 = 2 * 661_512;

fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

#[test]
fn the_history_is_its_pairs_of_flat_vectors() {
    let snap = recorded("lbfgs_full.pickle.gz");
    let l = Lifetimes::new(&snap, 0);
    let h = LbfgsHistory::find(&snap, &l).expect("an L-BFGS history");
    assert_eq!((h.history_size, h.recorded_size), (20, true));
    assert_eq!(h.lines.len(), 2, "y and s: {:?}", h.lines);
    assert_eq!(h.pair_bytes, PAIR);
    // 8 steps of 4 evaluations: 31 pairs stored, 20 kept, and a 21st
    // for the moment between its making and the oldest's drop.
    assert_eq!(h.pairs.len(), 31);
    assert_eq!(h.most_alive(&l), 21);
    let sgd = recorded("backward_blocks.pickle.gz");
    assert!(LbfgsHistory::find(&sgd, &Lifetimes::new(&sgd, 0)).is_none());
}

#[test]
fn a_growing_history_is_not_a_leak() {
    let snap = recorded("lbfgs_growing.pickle.gz");
    let r = find_leaks(&snap, 0, &LeakOptions::default());
    assert!(!r.leaks_found, "{}", r.verdict);
    let f = r
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::OptimizerHistory)
        .expect("the history's finding");
    assert_eq!(f.severity, Severity::Benign);
    // 23 pairs alive at the end of the last complete iteration, of 100.
    assert_eq!(f.bytes, 23 * PAIR);
    assert!(
        f.explanation.contains("stops growing at 100 pairs"),
        "{}",
        f.explanation
    );
    assert!(f.fix.contains("history_size=10"), "{}", f.fix);
    assert!(r.findings.iter().all(|f| f.kind != FindingKind::Growth));
}

#[test]
fn a_full_history_says_so() {
    let r = find_leaks(
        &recorded("lbfgs_full.pickle.gz"),
        0,
        &LeakOptions::default(),
    );
    let f = r
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::OptimizerHistory)
        .expect("the history's finding");
    assert_eq!(f.bytes, 20 * PAIR);
    assert!(
        f.explanation.contains("reached 20 pairs"),
        "{}",
        f.explanation
    );
    assert!(
        f.explanation.contains("history_size=20"),
        "{}",
        f.explanation
    );
}
