//! The optimizer-state rows follow the program's optimizer: the 8-bit
//! class of the same algorithm or none, ZeRO-1 and CPU offload of the same
//! class, and L-BFGS's own change (a shorter history), against runs made
//! for real on the CPU (tests/fixtures/recorded, `optimizer_fit.py`).
//!
//! Before, every program was told `bnb.optim.AdamW8bit` and
//! `optimizer_class=torch.optim.AdamW`, whatever it trained with: for
//! pytorch/examples' time_sequence_prediction (L-BFGS), a change of
//! algorithm ranked second, and its history called a leak to free.

use vramscope_advise::{advise, Advice, AdviseOptions, Advising, ChangeClass};
use vramscope_snapshot::{load, Snapshot};

fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

fn rows(a: &Advising) -> impl Iterator<Item = &Advice> {
    a.advice.iter().chain(&a.no_gain)
}

fn row(a: &Advising, class: ChangeClass) -> Option<&Advice> {
    rows(a).find(|r| r.class == class)
}

fn why_not(a: &Advising, change: &str) -> String {
    a.not_offered
        .iter()
        .find(|n| n.change.contains(change))
        .unwrap_or_else(|| panic!("{change} not offered, with why: {:?}", a.not_offered))
        .why
        .clone()
}

fn off(predicted: u64, real: u64) -> f64 {
    predicted as f64 / real as f64 - 1.0
}

#[test]
fn a_shorter_lbfgs_history_gives_the_peak_of_the_program_run_with_it() {
    // `optimizer_fit.py lbfgs 6 100 4` (the history still growing) and
    // `lbfgs 8 20 4` (full from the fifth step), each against the same
    // program with history_size=10: 21,670,313 B both.
    for (name, recorded_peak) in [
        ("lbfgs_growing.pickle.gz", 37_546_793),
        ("lbfgs_full.pickle.gz", 34_900_713),
    ] {
        let a = advise(&recorded(name), &AdviseOptions::default()).expect("advice");
        assert_eq!(a.baseline.peak_allocated, recorded_peak, "{name}");
        let r = row(&a, ChangeClass::ShorterHistory).expect("a shorter_history row");
        assert!(r.change.contains("history_size=10"), "{}", r.change);
        // The 0-d tensors kept beside the pairs stay as recorded: a few
        // hundred bytes over.
        let o = off(r.peak_allocated, 21_670_313);
        assert!(
            (0.0..0.0001).contains(&o),
            "{name}: {} ({o:+.5})",
            r.peak_allocated
        );
    }
}

#[test]
fn lbfgs_is_not_told_to_change_its_algorithm() {
    let a = advise(
        &recorded("lbfgs_growing.pickle.gz"),
        &AdviseOptions::default(),
    )
    .expect("advice");
    for class in [
        ChangeClass::OptimizerState8bit,
        ChangeClass::PagedOptimizerState8bit,
        ChangeClass::ShardOptimizerState,
        ChangeClass::CpuOffload,
        ChangeClass::Fsdp,
        ChangeClass::FixLeak,
    ] {
        assert!(row(&a, class).is_none(), "{class:?} offered for L-BFGS");
    }
    assert!(why_not(&a, "8-bit").contains("no 8-bit LBFGS"));
    assert!(why_not(&a, "ZeRO-1").contains("all parameters at once"));
    assert!(why_not(&a, "FSDP").contains("_gather_flat_grad"));
    // Half the batch keeps the closure L-BFGS evaluates.
    let half = row(&a, ChangeClass::HalfBatch).expect("half batch");
    assert!(
        half.code.contains("optimizer.step(closure)"),
        "{}",
        half.code
    );
}

#[test]
fn sgd_with_momentum_gets_sgd8bit_and_its_own_class_sharded() {
    // backward_blocks: SGD, momentum 0.9.
    let a = advise(
        &recorded("backward_blocks.pickle.gz"),
        &AdviseOptions::default(),
    )
    .expect("advice");
    let eight = row(&a, ChangeClass::OptimizerState8bit).expect("8-bit row");
    assert!(eight.code.contains("bnb.optim.SGD8bit"), "{}", eight.code);
    assert!(!eight.code.contains("AdamW"), "{}", eight.code);
    // bitsandbytes pages Adam, AdamW and Lion only.
    assert!(row(&a, ChangeClass::PagedOptimizerState8bit).is_none());
    if let Some(zero) = row(&a, ChangeClass::ShardOptimizerState) {
        assert!(
            zero.code.contains("optimizer_class=torch.optim.SGD"),
            "{}",
            zero.code
        );
    }
}

#[test]
fn adamw_keeps_its_8_bit_row_and_small_tensors_stay_32_bit() {
    let a = advise(&recorded("cnn_eval4x.pickle.gz"), &AdviseOptions::default()).expect("advice");
    let eight = row(&a, ChangeClass::OptimizerState8bit).expect("8-bit row");
    assert!(eight.code.contains("bnb.optim.AdamW8bit"), "{}", eight.code);
    assert!(
        eight.code.contains("from torchao.optim import AdamW8bit"),
        "{}",
        eight.code
    );
    assert!(
        eight.how.contains("4,096 elements or more"),
        "{}",
        eight.how
    );
}
