//! Evaluation passes inside a recording that trains, on runs recorded for
//! real on the CPU (tests/fixtures/recorded/README.md): the CNN of
//! `advise_runs.py` trained on batches of 32 and evaluated under
//! `torch.no_grad()` on batches of 128 after its second and last steps;
//! the language model of `reload_eval.py`, trained with no optimizer,
//! saved, loaded back with `torch.load` and evaluated.

use vramscope_analysis::categories::{Labelled, Phase};
use vramscope_analysis::leaks::{find_leaks, Finding, FindingKind, LeakOptions, Severity};
use vramscope_analysis::summary::{summarize, SummaryOptions};
use vramscope_snapshot::{load, Snapshot};

fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

fn findings(snap: &Snapshot) -> Vec<Finding> {
    let opts = LeakOptions {
        read_sources: false,
        ..Default::default()
    };
    find_leaks(snap, 0, &opts).findings
}

#[test]
fn the_forwards_no_backward_used_are_the_evaluation_passes() {
    let snap = recorded("cnn_eval4x.pickle.gz");
    let l = Labelled::new(&snap, 0);
    let (eval, phases) = (&l.categories.evaluation, &l.categories.phases);
    // Two passes of two batches each; the last one ends the trace.
    assert_eq!(eval.spans.len(), 2, "{:?}", eval.spans);
    for &(s, e) in &eval.spans {
        let (s, e) = (s as usize, e as usize);
        assert!(phases.phase[s..e].contains(&Phase::Forward));
        assert!(!phases.phase[s..e].contains(&Phase::Backward));
        assert!(!phases.phase[s..e].contains(&Phase::Optimizer));
    }
    let len = phases.phase.len() as u32;
    assert_eq!(eval.spans[1].1, len, "the last pass ends the trace");
    // The four steps' forwards are not evaluation.
    let forwards = (1..phases.phase.len())
        .filter(|&i| phases.run[i] != phases.run[i - 1] || eval.contains(i - 1))
        .filter(|&i| phases.phase[i] == Phase::Forward && !eval.contains(i))
        .count();
    assert_eq!(forwards, 4);
}

#[test]
fn a_loop_that_only_trains_has_no_evaluation_pass() {
    for name in [
        "checkpointed_transformer.pickle.gz",
        "backward_blocks.pickle.gz",
        "mlp_adam_cpu.pickle.gz",
        "cnn_sgd_cpu.pickle.gz",
        "swin_nested_blocks.pickle.gz",
        "gpt2_checkpointed.pickle.gz",
    ] {
        let snap = recorded(name);
        let l = Labelled::new(&snap, 0);
        assert!(
            l.categories.evaluation.is_empty(),
            "{name}: {:?}",
            l.categories.evaluation.spans
        );
    }
    // Training runs that ran out of memory in their first forward: the
    // trace ends in it, with no backward after it, holding what it saved.
    for name in ["oom_gpt_default.pickle.gz", "oom_gpt_half.pickle.gz"] {
        let snap = load(&vramscope_testdata::gpu(name), &Default::default()).expect("reads");
        let l = Labelled::new(&snap, 0);
        assert!(l.categories.evaluation.is_empty(), "{name}");
    }
}

#[test]
fn the_peak_says_when_it_is_in_an_evaluation_pass() {
    let s = summarize(
        &recorded("cnn_eval4x.pickle.gz"),
        &SummaryOptions::default(),
    );
    let p = &s.devices[0].peak;
    assert!(p.in_evaluation);
    assert_eq!(p.allocated_bytes, 46_555_292);
    // The training steps peak lower: the program's peak is its test loop's.
    // The training steps' peak, with the evaluation set (1.5 MiB, made
    // before the recording) beside it.
    let outside = p
        .outside_evaluation
        .as_ref()
        .expect("the rest of the run's peak");
    assert_eq!(outside.allocated_bytes, 34_931_784);
    let sentence = p.evaluation_sentence().expect("a sentence");
    assert!(sentence.starts_with("in an evaluation pass"), "{sentence}");
    // A training loop's peak is not one.
    let s = summarize(
        &recorded("checkpointed_transformer.pickle.gz"),
        &SummaryOptions::default(),
    );
    assert!(!s.devices[0].peak.in_evaluation);
    assert!(s.devices[0].peak.outside_evaluation.is_none());
}

#[test]
fn the_last_steps_gradients_held_through_evaluation_are_found() {
    // zero_grad at the top of each step: the gradients of the step before
    // an evaluation pass live through it, where the run peaks.
    let f = findings(&recorded("cnn_eval4x_zero_first.pickle.gz"));
    let held: Vec<&Finding> = f
        .iter()
        .filter(|x| x.kind == FindingKind::GradientsInEvaluation)
        .collect();
    assert_eq!(
        held.len(),
        1,
        "{:#?}",
        f.iter().map(|x| &x.title).collect::<Vec<_>>()
    );
    assert_eq!(held[0].severity, Severity::Warning);
    // The CNN's parameters: 880,680 bytes of gradients, as many as weights.
    assert_eq!(held[0].bytes, 880_680);
    assert!(held[0].fix.contains("zero_grad(set_to_none=True)"));
    // Nor is it a step's forward holding them.
    assert!(!f.iter().any(|x| x.kind == FindingKind::HeldGradients));
    // zero_grad after the step: none.
    let f = findings(&recorded("cnn_eval4x.pickle.gz"));
    assert!(!f
        .iter()
        .any(|x| x.kind == FindingKind::GradientsInEvaluation));
}

#[test]
fn a_model_loaded_back_after_training_holds_no_gradients() {
    // torch.load's storages come without a stack on the CPU; they were
    // taken for the autograd engine's (stackless on CUDA), so the loaded
    // model's parameters were "gradients held through the forward pass"
    // of the test loop (the word language model of pytorch/examples).
    let snap = recorded("reload_eval.pickle.gz");
    let f = findings(&snap);
    assert!(
        !f.iter().any(|x| matches!(
            x.kind,
            FindingKind::HeldGradients | FindingKind::GradientsInEvaluation
        )),
        "{:#?}",
        f.iter().map(|x| &x.title).collect::<Vec<_>>()
    );
    // Its validation and test passes are evaluation: everything after the
    // last step's backward (the model saved and loaded between them, whose
    // storages come without a stack and so without a phase of their own).
    let l = Labelled::new(&snap, 0);
    let (eval, phases) = (&l.categories.evaluation, &l.categories.phases);
    let last_backward = phases
        .phase
        .iter()
        .rposition(|&p| p == Phase::Backward)
        .expect("a backward");
    let first = eval.spans.first().expect("an evaluation pass").0 as usize;
    assert!(
        first > last_backward,
        "{:?} after {last_backward}",
        eval.spans
    );
    assert_eq!(
        eval.spans.last().map(|s| s.1 as usize),
        Some(phases.phase.len())
    );
}

/// `advise_runs.py cnn evalgrad4x`: the same passes with the model in eval
/// mode and without `torch.no_grad()`; the recorder noted each call's
/// grad mode.
#[test]
fn an_evaluation_run_with_autograd_on_is_told_by_the_recorder() {
    let snap = recorded("cnn_evalgrad4x.pickle.gz");
    let l = Labelled::new(&snap, 0);
    let eval = &l.categories.evaluation;
    // Both passes are found: the last one, which ends the trace holding its
    // graph, because only evaluation called the model from its line before.
    assert_eq!(eval.spans.len(), 2, "{:?}", eval.spans);
    assert_eq!(eval.with_grad, vec![true; eval.forwards.len()]);
    assert_eq!(eval.grad_calls.len(), 4, "two batches per pass");
    let s = summarize(&snap, &SummaryOptions::default());
    let p = &s.devices[0].peak;
    assert!(p.in_evaluation);
    assert_eq!(p.evaluation_with_grad, Some(true));
    assert_eq!(p.allocated_bytes, 92_840_092);
    let sentence = p.evaluation_sentence().expect("a sentence");
    assert!(sentence.contains("run with autograd on"), "{sentence}");
    // The same program under no_grad: its recording (older) has no spans,
    // so the grad mode is not claimed either way.
    let old = summarize(
        &recorded("cnn_eval4x.pickle.gz"),
        &SummaryOptions::default(),
    );
    assert_eq!(old.devices[0].peak.evaluation_with_grad, None);
    let l = Labelled::new(&recorded("cnn_eval4x.pickle.gz"), 0);
    assert!(l.categories.evaluation.with_grad.is_empty());
}

#[test]
fn what_the_evaluation_graphs_keep_is_a_warning_with_its_fix() {
    let f = findings(&recorded("cnn_evalgrad4x.pickle.gz"));
    let g = f
        .iter()
        .find(|f| f.kind == FindingKind::EvaluationWithGrad)
        .expect("an evaluation_with_grad finding");
    assert_eq!(g.severity, Severity::Warning);
    // At the peak (88.54 MiB, in the second batch of a pass), the first
    // batch's graph and the second's saved tensors that `no_grad` frees:
    // 68 MiB; the program with `torch.no_grad()` peaks 44.14 MiB lower.
    assert_eq!(g.bytes, 71_303_168);
    assert!(g.fix.contains("torch.no_grad()"), "{}", g.fix);
    assert!(g.sites.iter().any(|s| s.site.contains("advise_runs.py")));
    // Under no_grad, none.
    let f = findings(&recorded("cnn_eval4x.pickle.gz"));
    assert!(f.iter().all(|f| f.kind != FindingKind::EvaluationWithGrad));
}
