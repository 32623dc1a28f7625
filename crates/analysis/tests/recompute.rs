//! A checkpointed program's backward: `torch.utils.checkpoint` makes each
//! block's forward again inside `loss.backward()`, so the phases read
//! forward, backward, forward, backward within one backward. Recorded on
//! the CPU (`tests/fixtures/recorded/checkpointed_transformer.pickle.gz`:
//! the two-layer Transformer of `advise_runs.py`, every layer checkpointed,
//! 4 AdamW steps), where the recorder tags the parameters (3.50 MiB).

use vramscope_analysis::categories::{category_view, Category, Labelled, Phase};
use vramscope_snapshot::{load, Snapshot};

fn snap() -> Snapshot {
    load(
        &vramscope_testdata::recorded("checkpointed_transformer.pickle.gz"),
        &Default::default(),
    )
    .expect("reads")
}

/// Each layer's recomputation is a forward run inside backward, not a new
/// iteration's forward: four forwards in four steps (the trace's phases
/// have twelve forward runs).
#[test]
fn recomputations_are_not_forwards_of_their_own() {
    let s = snap();
    let l = Labelled::new(&s, 0);
    let ph = &l.categories.phases;
    let n = ph.phase.len();
    let starts = (1..n)
        .filter(|&k| ph.run[k] != ph.run[k - 1] && ph.phase[k] == Phase::Forward)
        .count();
    assert_eq!(starts, 12);
    let recomputed = (1..n)
        .filter(|&k| ph.run[k] != ph.run[k - 1] && ph.is_recomputation(k))
        .count();
    assert_eq!(recomputed, 8, "two layers a step");
    assert_eq!(ph.runs_starting_between(0, n - 1, Phase::Forward), 4);
}

/// What backward makes before a recomputation and frees after it (the
/// gradient flowing into the checkpointed layer) is backward's own
/// memory, not a gradient: the gradients one step's backward makes add up
/// to the parameters, where they came to 4.51 MiB against 3.50 MiB when
/// each recomputation ended the backward; and no more are alive at once.
#[test]
fn one_backwards_gradients_are_the_parameters() {
    let s = snap();
    let l = Labelled::new(&s, 0);
    let (lt, c) = (&l.lifetimes, &l.categories);
    let ph = &c.phases;
    let first_step = ph
        .phase
        .iter()
        .position(|&p| p == Phase::Optimizer)
        .expect("an optimizer step");
    let made: u64 = (0..lt.len())
        .filter(|&b| c.category[b] == Category::Gradient)
        .filter(|&b| (lt.birth[b] as usize) < first_step)
        .map(|b| lt.size[b])
        .sum();
    let v = category_view(&s, 0);
    let max = |c: Category| {
        v.max
            .iter()
            .find(|m| m.category == c)
            .map_or(0, |m| m.bytes)
    };
    let params = max(Category::Parameter);
    assert_eq!(params, 3_674_944, "the recorder's parameter tags");
    assert_eq!(made, params, "gradients made in the first backward");
    assert!(max(Category::Gradient) <= params);
}

/// What a recomputation keeps past its ops is an activation made again in
/// backward (`recomputed`), told apart from what the forward kept: every
/// one is born in a recomputation and freed in the backward that ran it,
/// and the forward's own activations are all born outside one.
#[test]
fn recomputed_activations_have_their_own_rule() {
    use vramscope_analysis::categories::Rule;
    let s = snap();
    let l = Labelled::new(&s, 0);
    let (lt, c) = (&l.lifetimes, &l.categories);
    let ph = &c.phases;
    let by_rule = |r: Rule| (0..lt.len()).filter(move |&b| c.rule[b] == r);
    let recomputed: Vec<usize> = by_rule(Rule::Recomputed).collect();
    assert!(
        recomputed.len() >= 8,
        "{} recomputed blocks",
        recomputed.len()
    );
    for &b in &recomputed {
        assert_eq!(c.category[b], Category::Activation);
        assert!(ph.is_recomputation(lt.birth[b] as usize));
        let death = lt.death[b] as usize;
        assert!(
            ph.phase[death] == Phase::Backward || ph.is_recomputation(death),
            "block {b}"
        );
    }
    assert!(by_rule(Rule::ForwardKept).all(|b| !ph.is_recomputation(lt.birth[b] as usize)));
    assert!(by_rule(Rule::ForwardKept).count() > 0);
}
