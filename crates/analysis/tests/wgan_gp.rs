//! A WGAN-GP's training loop (tests/fixtures/recorded, `wgan_gp`: an MLP
//! generator and critic, three critic steps per generator step, each with a
//! gradient penalty taken through `autograd.grad(..., create_graph=True)` on
//! `interpolates.requires_grad_()`, recorded with `vramscope run`). Two
//! mistakes, each found, held to what its fix gains in the same script
//! changed (`wgan_gp_zero_grad`, `wgan_gp_item`):
//! - every critic cost kept as a tensor (`disc_costs.append(D_cost)`): its
//!   graph keeps that step's `interpolates` and the gradient the penalty's
//!   backward gave it, which no Python object holds but the graph's
//!   `AccumulateGrad` node;
//! - the generator's gradients, freed by `netG.zero_grad()` only at its next
//!   step, kept through the critic's steps, where the run peaks.

use vramscope_analysis::categories::Category;
use vramscope_analysis::leaks::{find_leaks, Finding, FindingKind, LeakOptions, Severity};
use vramscope_analysis::summary::{summarize, SummaryOptions};
use vramscope_snapshot::{load, Snapshot};

fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

fn findings(snap: &Snapshot) -> Vec<Finding> {
    find_leaks(snap, 0, &LeakOptions::default()).findings
}

fn peak(s: &Snapshot) -> u64 {
    summarize(s, &SummaryOptions::default()).devices[0]
        .peak
        .allocated_bytes
}

/// The generator's parameters: 2x256 + 256 + 2 x (256x256 + 256) + 256x2
/// + 2 = 132,866 fp32 elements.
const GENERATOR_GRADIENTS: u64 = 132_866 * 4;

#[test]
fn the_kept_costs_graphs_are_one_leak_held_by_the_list_with_its_fix() {
    let snap = recorded("wgan_gp.pickle.gz");
    let leaks: Vec<Finding> = findings(&snap)
        .into_iter()
        .filter(|f| f.severity == Severity::Leak)
        .collect();
    // One leak: the costs themselves (4 B each), and, kept by their graphs,
    // each critic step's interpolated points (128 x 2 floats) and their
    // gradient.
    assert_eq!(leaks.len(), 1, "{leaks:#?}");
    let f = &leaks[0];
    assert_eq!(f.kind, FindingKind::RetainedGraph);
    assert!(f.title.ends_with("held by `disc_costs`"), "{}", f.title);
    let lines: Vec<u32> = f.sites.iter().map(|s| s.line).collect();
    let site = |line: u32| {
        f.sites
            .iter()
            .find(|s| s.line == line)
            .unwrap_or_else(|| panic!("no site at line {line}: {lines:?}"))
    };
    let (interpolates, penalty_grad, cost) = (site(73), site(101), site(102));
    for s in [interpolates, penalty_grad] {
        let h = s.held_by.as_ref().expect("named holder");
        assert!(
            h.through_graph && h.path == "disc_costs[*] (autograd graph)",
            "{h:?}"
        );
        assert!(
            h.text
                .starts_with("held by the autograd graph of `disc_costs[*]`")
                && h.text.contains("disc_costs.append(D_cost)"),
            "{}",
            h.text
        );
        assert_eq!(s.bytes_per_iteration, 128.0 * 2.0 * 4.0);
    }
    let h = cost.held_by.as_ref().expect("named holder");
    assert!(!h.through_graph && h.path == "disc_costs[*]", "{h:?}");
    assert_eq!(cost.bytes_per_iteration, 4.0);
    assert!(
        f.fix.contains("`disc_costs.append(D_cost.item())`"),
        "{}",
        f.fix
    );
    // The script changed as the fix says has no leak, and each iteration
    // ends where it began.
    let item = recorded("wgan_gp_item.pickle.gz");
    let r = find_leaks(&item, 0, &LeakOptions::default());
    assert!(!r.leaks_found, "{:#?}", r.findings);
    let ends: Vec<u64> = r.iterations.iter().map(|i| i.end_bytes).collect();
    assert!(ends.windows(2).all(|w| w[0] == w[1]), "{ends:?}");
}

#[test]
fn the_generators_gradients_kept_through_the_critics_steps_are_what_its_fix_gains() {
    let (before, after) = (
        recorded("wgan_gp.pickle.gz"),
        recorded("wgan_gp_zero_grad.pickle.gz"),
    );
    let held = |s: &Snapshot| {
        findings(s)
            .into_iter()
            .find(|f| f.kind == FindingKind::HeldGradients)
    };
    let f = held(&before).expect("held gradients");
    // The generator's gradients alone: not the leaked inputs' gradients,
    // which a backward made and kept but no optimizer steps on.
    assert_eq!(f.bytes, GENERATOR_GRADIENTS);
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.sites.len(), 1, "{:#?}", f.sites);
    assert_eq!(f.sites[0].line, 110); // G.backward(mone)
    assert_eq!(f.sites[0].category, Some(Category::Gradient));
    assert!(
        f.explanation.contains("8 gradient tensors (519.01 KiB)"),
        "{}",
        f.explanation
    );
    assert!(
        f.fix
            .contains("`optimizerG.zero_grad(set_to_none=True)` after `optimizerG.step()`"),
        "{}",
        f.fix
    );
    // The fix: no warning, and the run peaks lower by all of them
    // (5,968,104 -> 5,436,640 B).
    assert!(held(&after).is_none());
    assert_eq!(peak(&before), 5_968_104);
    assert_eq!(peak(&before) - peak(&after), GENERATOR_GRADIENTS);
}
