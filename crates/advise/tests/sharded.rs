//! A program that shards already: pytorch/examples' FSDP2 example
//! (tests/fixtures/recorded, `fsdp2_example_rank0`: `fully_shard` on each
//! of its 10 layers and the root, 2 ranks over gloo) was told to shard its
//! optimizer state with `ZeroRedundancyOptimizer` (ZeRO-1) and tried with
//! FSDP2 again. Its state is its shards': neither is offered now, each
//! saying why.

use vramscope_advise::{advise, AdviseOptions, ChangeClass};
use vramscope_analysis::sharded::already_sharded;
use vramscope_snapshot::{load, Snapshot};

fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

#[test]
fn a_program_sharded_with_fully_shard_is_not_told_to_shard_again() {
    let snap = recorded("fsdp2_example_rank0.pickle.gz");
    let s = already_sharded(&snap).expect("sharded");
    assert_eq!(s.by, "FSDP2's fully_shard");
    assert!(s.parameters);
    let a = advise(&snap, &AdviseOptions::default()).expect("advice");
    let offered: Vec<ChangeClass> = a.advice.iter().chain(&a.no_gain).map(|r| r.class).collect();
    for class in [
        ChangeClass::ShardOptimizerState,
        ChangeClass::Fsdp,
        ChangeClass::CpuOffload,
    ] {
        assert!(!offered.contains(&class), "{class:?} in {offered:?}");
    }
    for change in ["ZeRO-1", "FSDP, ZeRO-3", "offloaded to the CPU"] {
        let n = a
            .not_offered
            .iter()
            .find(|n| n.change.contains(change))
            .unwrap_or_else(|| panic!("{change} not offered"));
        assert!(n.why.contains("FSDP2's fully_shard"), "{}", n.why);
    }
}

#[test]
fn a_program_that_does_not_shard_is_offered_sharding() {
    let snap = recorded("cnn_eval4x.pickle.gz");
    assert!(already_sharded(&snap).is_none());
    let a = advise(&snap, &AdviseOptions::default()).expect("advice");
    assert!(a
        .advice
        .iter()
        .chain(&a.no_gain)
        .any(|r| r.class == ChangeClass::ShardOptimizerState));
}
