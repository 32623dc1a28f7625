//! `zero_grad()` between the forward and `backward()`, as pytorch/examples'
//! ImageNet script calls it (tests/fixtures/recorded,
//! `imagenet_zero_grad_late`: ResNet-18, SGD with momentum, batch 8): the
//! last step's gradients, 44.59 MiB, are held through every forward.
//! `leaks` warned of it, and `advise` offered no row for its fix, ranking
//! 8-bit optimizer state first; the fix is replayed now, against the same
//! script with `optimizer.zero_grad()` moved to the top of the loop.

use vramscope_advise::{advise, Advice, AdviseOptions, ChangeClass};
use vramscope_analysis::leaks::{find_leaks, Finding, FindingKind, LeakOptions, Severity};
use vramscope_snapshot::{load, Snapshot};

fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

/// The fixture's `held_gradients` finding, its peak as recorded and the
/// `zero_grad_first` row.
fn held_and_fix(name: &str) -> (Finding, u64, Advice) {
    let snap = recorded(name);
    let leaks = find_leaks(&snap, 0, &LeakOptions::default());
    let held = leaks
        .findings
        .into_iter()
        .find(|f| f.kind == FindingKind::HeldGradients)
        .expect("held gradients");
    let a = advise(&snap, &AdviseOptions::default()).expect("advice");
    let row = a
        .advice
        .into_iter()
        .find(|r| r.class == ChangeClass::ZeroGradFirst)
        .expect("a zero_grad_first row");
    (held, a.baseline.peak_allocated, row)
}

#[test]
fn zero_grad_before_the_forward_gives_the_peak_of_the_script_changed_so() {
    let (held, baseline, row) = held_and_fix("imagenet_zero_grad_late.pickle.gz");
    assert_eq!(held.severity, Severity::Warning);
    // Every parameter's gradient: 46,758,048 B.
    assert_eq!(held.bytes, 46_758_048);
    assert_eq!(baseline, 182_404_060);
    // main.py with `optimizer.zero_grad()` moved above `model(images)`:
    // 169,175,776 B.
    assert_eq!(row.peak_allocated, 169_175_776);
    let first = row
        .code
        .find("zero_grad(set_to_none=True)")
        .expect("zero_grad");
    assert!(
        first < row.code.find("model(").expect("the forward"),
        "{}",
        row.code
    );
}

#[test]
fn a_detector_whose_backward_peaks_as_high_gains_what_the_real_fix_gained() {
    // torchvision's Faster R-CNN as its reference script trains it
    // (`detection_zero_grad_late`): 72.36 MiB of gradients held through
    // each forward, but the backward after it peaks 11.53 MiB lower than
    // the forward: that much, not 72.36 MiB, comes off. The run peaks in
    // its last forward, after the last whole iteration: the replay moves
    // the gradients held there too (before, it kept them and gained 0 B).
    let (held, baseline, row) = held_and_fix("detection_zero_grad_late.pickle.gz");
    assert_eq!(held.bytes, 75_880_016);
    // 11.53 MiB of a 905 MiB peak: more than the 1% a warning needs.
    assert_eq!(held.severity, Severity::Warning);
    assert!(
        held.explanation.contains(
            "but the backward pass after it peaks at 892.50 MiB: without them the iteration's peak is 11.53 MiB lower"
        ),
        "{}",
        held.explanation
    );
    assert_eq!(baseline, 949_095_102);
    // detection_zero_grad.py fixed (`zero_grad()` first), recorded the
    // same way: 937,002,956 B.
    assert_eq!(row.peak_allocated, 937_002_956);
}

#[test]
fn a_reinforcement_learners_minibatch_updates_gain_what_the_real_fix_gained() {
    // PPO as CleanRL's ppo.py structures it (`ppo_zero_grad_late`): rollouts
    // under no_grad, then minibatch updates of an actor-critic with
    // `zero_grad()` between the forward and `backward()`. The gradients
    // (651.03 KiB, every parameter's) are held through each minibatch's
    // forward, whose peak is 173.49 KiB above its backward's.
    let (held, baseline, row) = held_and_fix("ppo_zero_grad_late.pickle.gz");
    assert_eq!(held.bytes, 666_652); // 166,663 fp32 parameters
    assert_eq!(held.severity, Severity::Warning);
    assert!(
        held.explanation
            .contains("without them the iteration's peak is 173.49 KiB lower"),
        "{}",
        held.explanation
    );
    assert_eq!(baseline, 3_533_292);
    // ppo.py fixed (`zero_grad()` before the minibatch's forward), recorded
    // the same way: 3,355,640 B, to the byte.
    assert_eq!(row.peak_allocated, 3_355_640);
}

#[test]
fn gradients_freed_before_the_forward_give_no_row() {
    // The classic loop (`zero_grad` after the step): nothing held, no row.
    let a = advise(&recorded("cnn_eval4x.pickle.gz"), &AdviseOptions::default()).expect("advice");
    assert!(a
        .advice
        .iter()
        .chain(&a.no_gain)
        .all(|r| r.class != ChangeClass::ZeroGradFirst));
}

/// Two optimizers: a GAN's generator gradients, kept from its step
/// through the discriminator's in the next loop, where the run peaks.
/// The row replays each optimizer's `zero_grad(set_to_none=True)` right
/// after its own step, against the scripts changed so.
fn recorded_peak(name: &str) -> u64 {
    let snap = recorded(name);
    vramscope_analysis::summary::summarize(&snap, &Default::default()).devices[0]
        .peak
        .allocated_bytes
}

#[test]
fn a_gans_gradients_freed_after_each_optimizers_step_give_the_peak_of_the_script_changed_so() {
    // WGAN-GP: three critic steps per generator step; the generator's
    // 531,464 B of gradients kept through them. The script with
    // `optimizerG.zero_grad(set_to_none=True)` after `optimizerG.step()`
    // peaked at 5,436,640 B.
    let (held, baseline, row) = held_and_fix("wgan_gp.pickle.gz");
    assert_eq!(held.bytes, 531_464);
    assert_eq!(baseline, 5_968_104);
    assert_eq!(
        row.change,
        "each optimizer's gradients freed right after its own step"
    );
    assert!(
        row.code
            .contains("opt_g.step()\nopt_g.zero_grad(set_to_none=True)"),
        "{}",
        row.code
    );
    assert_eq!(
        row.peak_allocated,
        recorded_peak("wgan_gp_zero_grad.pickle.gz")
    );
    assert_eq!(row.peak_allocated, 5_436_640);
    // DCGAN: the generator's 1,482,496 B through the discriminator's
    // step; the script with both optimizers zeroed after their steps (and
    // the discriminator frozen for the generator's) peaked 1,482,496 B
    // lower.
    let (held, baseline, row) = held_and_fix("gan_dcgan.pickle.gz");
    assert_eq!(held.bytes, 1_482_496);
    assert_eq!(baseline, 17_808_632);
    assert_eq!(
        row.peak_allocated,
        recorded_peak("gan_dcgan_fixed.pickle.gz")
    );
}

#[test]
fn a_wgan_gps_kept_costs_freed_give_the_peak_of_the_script_changed_so() {
    // The critic costs kept with their graphs keep each step's
    // interpolated points and the gradient the penalty gave them: an
    // input's gradient, freed with the leak (taken for a kept parameter
    // gradient, the replay left it and gained half of what the script
    // with `disc_costs.append(D_cost.item())` gained, 8,208 B).
    let snap = recorded("wgan_gp.pickle.gz");
    let a = advise(&snap, &AdviseOptions::default()).expect("advice");
    let row = a
        .advice
        .iter()
        .find(|r| r.class == ChangeClass::FixLeak && r.change.contains("held by `disc_costs`"))
        .expect("the leak's row");
    assert!(
        row.code.contains("`disc_costs.append(D_cost.item())`"),
        "{}",
        row.code
    );
    assert_eq!(row.peak_allocated, recorded_peak("wgan_gp_item.pickle.gz"));
    assert_eq!(a.baseline.peak_allocated - row.peak_allocated, 8_208);
    // No `set_to_none` row: the program keeps no parameter's gradient
    // from one step to the next.
    assert!(a.advice.iter().all(|r| r.class != ChangeClass::SetToNone));
}

#[test]
fn two_optimizers_stepping_after_one_backward_each_free_their_own_gradients_after_their_own_step() {
    // One model, an encoder with AdamW and a decoder with SGD, both
    // stepping after each backward, `zero_grad()` after the forward
    // (`two_optimizers`): every gradient held through the next forward.
    // Each gradient is freed as the step that named it ends: the
    // decoder's after the decoder's step, not after the encoder's, which
    // ends first (two points a step, where the first step to end after the
    // backward gave one). The script with each `zero_grad(set_to_none=True)`
    // after its own step peaked at 83,930,136 B.
    let snap = recorded("two_optimizers.pickle.gz");
    let report = find_leaks(&snap, 0, &LeakOptions::default());
    let moves = match &report.held_fix {
        vramscope_analysis::leaks::HeldFix::AfterOwnStep(m) => m.clone(),
        other => panic!("{other:?}"),
    };
    let mut points: Vec<usize> = moves.iter().map(|&(_, at)| at).collect();
    points.sort_unstable();
    points.dedup();
    // Four iterations, two points each (the encoder's gradients freed as
    // its step ends, the decoder's as the decoder's does), but the last
    // step ends with the recording, nothing after it to free them at.
    assert_eq!(points.len(), 2 * 4 - 1, "{points:?}");
    let (held, baseline, row) = held_and_fix("two_optimizers.pickle.gz");
    assert_eq!(held.severity, Severity::Warning);
    assert_eq!(baseline, 90_237_988);
    assert_eq!(
        row.peak_allocated,
        recorded_peak("two_optimizers_fixed.pickle.gz")
    );
    assert_eq!(row.peak_allocated, 83_930_136);
}
