//! The gradients' one-time finding tells gradients kept from gradients made
//! again: with `zero_grad(set_to_none=True)` (PyTorch's default) each
//! backward makes them anew, and they were said to be "allocated once and
//! kept" (a Whisper fine-tune, DeepLabV3, PPO); with `set_to_none=False`
//! the first backward's are kept, and that is what it says.

use vramscope_analysis::leaks::{find_leaks, Finding, FindingKind, LeakOptions, Severity};
use vramscope_snapshot::{load, Snapshot};

fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

/// The one-time finding about gradients.
fn gradients(name: &str) -> Finding {
    find_leaks(&recorded(name), 0, &LeakOptions::default())
        .findings
        .into_iter()
        .find(|f| f.kind == FindingKind::OneTime && f.title.starts_with("gradients: "))
        .expect("a gradients finding")
}

#[test]
fn gradients_set_to_none_are_made_by_each_backward() {
    // torchvision's DeepLabV3 (`segmentation.py`): `opt.zero_grad()` frees
    // every gradient between the forward and the backward.
    let f = gradients("segmentation_deeplabv3.pickle.gz");
    assert_eq!(f.severity, Severity::Benign);
    assert_eq!(
        f.title,
        "gradients: 42.07 MiB made by each backward pass, the same size every iteration (expected)"
    );
    assert!(
        f.explanation
            .contains("each backward pass makes them again"),
        "{}",
        f.explanation
    );
    // PPO's minibatch updates (`ppo.py`), the same.
    let f = gradients("ppo_zero_grad_late.pickle.gz");
    assert!(
        f.title.contains("made by each backward pass"),
        "{}",
        f.title
    );
}

#[test]
fn gradients_zeroed_in_place_are_kept() {
    // `keep_grads.py`: `zero_grad(set_to_none=False)`, an MLP of 525,568
    // parameters: 2.00 MiB of gradients made by the first backward.
    let f = gradients("keep_grads_mlp.pickle.gz");
    assert_eq!(
        f.title,
        "gradients: 2.00 MiB allocated once and kept (expected)"
    );
    assert!(
        f.explanation
            .contains("were allocated by the backward pass of iteration 1 and stay allocated"),
        "{}",
        f.explanation
    );
}
