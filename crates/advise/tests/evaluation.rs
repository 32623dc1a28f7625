//! A training loop that evaluates, against runs made for real on the CPU
//! (tests/fixtures/recorded, `advise_runs.py cnn eval4x…`): the CNN trains
//! on batches of 32 and, after its second and last steps, evaluates under
//! `torch.no_grad()` on two batches of 128, where it peaks.
//!
//! Before the evaluation passes were told apart, half the micro-batch
//! halved the evaluation's blocks too and read 44.40 → 23.4 MiB, while the
//! program changed as its code says (the training step in two chunks)
//! peaked where it did: a false "lower" of 47%.

use vramscope_advise::{advise, Advice, AdviseOptions, ChangeClass};
use vramscope_snapshot::{load, Snapshot};

fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

fn row(snap: &Snapshot, class: ChangeClass) -> Advice {
    let a = advise(snap, &AdviseOptions::default()).expect("advice");
    a.advice
        .iter()
        .chain(&a.no_gain)
        .find(|r| r.class == class)
        .unwrap_or_else(|| panic!("a {class:?} row"))
        .clone()
}

fn off(predicted: u64, real: u64) -> f64 {
    predicted as f64 / real as f64 - 1.0
}

#[test]
fn half_the_micro_batch_does_not_lower_a_peak_made_by_evaluation() {
    let snap = recorded("cnn_eval4x.pickle.gz");
    let half = row(&snap, ChangeClass::HalfBatch);
    // `advise_runs.py cnn eval4x_half_batch`: 46,554,652 B.
    assert!(
        off(half.peak_allocated, 46_554_652).abs() < 0.001,
        "{}",
        half.peak_allocated
    );
    assert!(half.how.contains("the evaluation passes'"), "{}", half.how);
}

#[test]
fn half_the_evaluation_batch_is_its_own_row_and_lowers_it() {
    let snap = recorded("cnn_eval4x.pickle.gz");
    let half = row(&snap, ChangeClass::HalfEvalBatch);
    // `advise_runs.py cnn eval4x_half_eval`: 34,930,504 B.
    let err = off(half.peak_allocated, 34_930_504);
    assert!(err.abs() < 0.01, "{:+.2}% off the real run", 100.0 * err);
    assert!(
        half.code.contains("batch_size=eval_batch_size // 2"),
        "{}",
        half.code
    );
    // Which evaluation the peak is in, by what calls the model: the
    // program's loop in `main` (`output = model(xb)`), peaking at 44.40 MiB.
    assert!(
        half.how
            .contains("by what calls the model, highest first: ")
            && half.how.contains("advise_runs.py:339 in main ← ")
            && half.how.contains("(peak 44.40 MiB)"),
        "{}",
        half.how
    );
}

#[test]
fn the_last_steps_gradients_freed_before_evaluating_are_replayed() {
    // zero_grad at the top of each step: the last step's gradients are
    // alive through the evaluation, where the run peaks.
    let snap = recorded("cnn_eval4x_zero_first.pickle.gz");
    let fix = row(&snap, ChangeClass::SetToNone);
    assert!(
        fix.change.contains("held through evaluation"),
        "{}",
        fix.change
    );
    // The program with zero_grad after the step (`eval4x`): 46,555,292 B.
    let err = off(fix.peak_allocated, 46_555_292);
    assert!(err.abs() < 0.001, "{:+.3}% off the real run", 100.0 * err);
}

/// `advise_runs.py cnn evalgrad4x`: the passes with the model in eval mode
/// and without `torch.no_grad()`. Made with it (`evalgrad4x_fixed`) the
/// program peaked at 46,555,292 B (92,840,092 as recorded); in four
/// batches of half the size as well (`evalgrad4x_half_eval`), 34,930,504.
#[test]
fn the_evaluation_under_no_grad_is_replayed_as_the_program_made_so_ran() {
    let snap = recorded("cnn_evalgrad4x.pickle.gz");
    let fix = row(&snap, ChangeClass::NoGradEvaluation);
    assert_eq!(fix.peak_allocated, 46_555_292, "{}", fix.how);
    assert!(fix.code.contains("torch.no_grad()"), "{}", fix.code);
    // Half the evaluation batch alone would keep the graphs: the row adds
    // `no_grad`, and says so.
    let half = row(&snap, ChangeClass::HalfEvalBatch);
    assert!(
        off(half.peak_allocated, 34_930_504).abs() < 0.001,
        "{}",
        half.peak_allocated
    );
    assert!(half.code.contains("with torch.no_grad()"), "{}", half.code);
    // A recording under no_grad has no such row.
    let a = advise(&recorded("cnn_eval4x.pickle.gz"), &AdviseOptions::default()).expect("advice");
    assert!(a
        .advice
        .iter()
        .chain(&a.no_gain)
        .all(|r| r.class != ChangeClass::NoGradEvaluation));
}

/// The zoo's GPT-2 (`advise_runs.py zoo_gpt2 evalgrad4x`) returns its
/// key/value cache with the logits; bound to `output`, it stays until the
/// next batch's is, with `no_grad` too. The recorder tagged it `output`,
/// so the replay keeps it: 189,234,488 B predicted and measured
/// (`evalgrad4x_fixed`), where freeing it read 8 MiB under.
#[test]
fn what_a_model_in_eval_mode_returns_is_kept_by_the_replay() {
    let snap = recorded("zoo_gpt2_evalgrad4x.pickle.gz");
    let fix = row(&snap, ChangeClass::NoGradEvaluation);
    assert_eq!(fix.peak_allocated, 189_234_488, "{}", fix.how);
}

/// The figure of "would be X MiB rather than Y MiB" in a row's `how`.
fn between(how: &str) -> Option<(f64, f64)> {
    let rest = how.split("the peak allocated would be ").nth(1)?;
    let mib = |s: &str| s.split(" MiB").next()?.trim().parse::<f64>().ok();
    let (low, high) = rest.split_once(" rather than ")?;
    Some((mib(low)?, mib(high)?))
}

#[test]
fn a_function_that_runs_the_layers_itself_is_told_where_the_real_peak_lies() {
    // pytorch/examples' Forward-Forward MNIST (`forward_forward_predict`):
    // its `predict` runs each layer itself (`h = layer(h)`) for ten labels,
    // with autograd on; the graph keeps every layer's output to the end.
    // The replay keeps each call's output as recorded, so it predicts
    // 63.00 MiB; the same script with `@torch.no_grad()` on `predict`
    // peaks at 38,763,624 B (its training step's peak).
    let snap = recorded("forward_forward_predict.pickle.gz");
    let no_grad = row(&snap, ChangeClass::NoGradEvaluation);
    let (low, high) = between(&no_grad.how).unwrap_or_else(|| panic!("{}", no_grad.how));
    let measured = 38_763_624.0 / (1u64 << 20) as f64;
    assert!(
        (low / measured - 1.0).abs() < 0.005,
        "{low} MiB, measured {measured}"
    );
    assert!((high - no_grad.peak_allocated as f64 / (1u64 << 20) as f64).abs() < 0.01);
    // A loop that binds one output per batch gets no such sentence: there
    // the outputs are the program's until the next batch's.
    let classic = row(
        &recorded("cnn_evalgrad4x.pickle.gz"),
        ChangeClass::NoGradEvaluation,
    );
    assert!(between(&classic.how).is_none(), "{}", classic.how);
}
