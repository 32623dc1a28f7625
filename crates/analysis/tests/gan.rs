//! A GAN's training loop, pytorch/examples' DCGAN (tests/fixtures/recorded,
//! `gan_dcgan`: two models, two Adam optimizers, the discriminator's step
//! and then the generator's, recorded with `vramscope run` and no
//! `vramscope.step()`). Its iterations are the loop's, ended by the
//! generator's step (the optimizer that steps last): the generator's
//! gradients, stepped on at the end of one loop and freed by
//! `netG.zero_grad()` only after the discriminator's step in the next, are
//! alive where the run peaks, in the discriminator's backward.
//! `gan_dcgan_fixed` frees each optimizer's gradients after its own step,
//! as the finding's fix says, and peaks lower by as much.

use vramscope_analysis::categories::Category;
use vramscope_analysis::leaks::{find_leaks, Finding, FindingKind, LeakOptions, Severity};
use vramscope_analysis::summary::{summarize, SummaryOptions};
use vramscope_snapshot::{load, Snapshot};

fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

fn held(snap: &Snapshot) -> Option<Finding> {
    find_leaks(snap, 0, &LeakOptions::default())
        .findings
        .into_iter()
        .find(|f| f.kind == FindingKind::HeldGradients)
}

fn peak(s: &Snapshot) -> u64 {
    summarize(s, &SummaryOptions::default()).devices[0]
        .peak
        .allocated_bytes
}

/// The generator's parameters (ngf 32): four transposed convolutions and
/// three batch norms, 370,624 fp32 elements.
const GENERATOR_BYTES: u64 = 1_482_496;

#[test]
fn the_generators_stepped_on_gradients_at_the_peak_are_a_warning_of_what_the_fix_gains() {
    let (before, after) = (
        recorded("gan_dcgan.pickle.gz"),
        recorded("gan_dcgan_fixed.pickle.gz"),
    );
    let f = held(&before).expect("held gradients");
    assert_eq!(f.bytes, GENERATOR_BYTES);
    assert_eq!(f.severity, Severity::Warning);
    assert!(
        f.title
            .starts_with("gradients an optimizer has stepped on held through a later forward pass"),
        "{}",
        f.title
    );
    assert!(
        f.explanation.contains("several optimizers")
            && f.explanation.contains(
                "1.41 MiB of them are still allocated at the iteration's peak (16.98 MiB)"
            ),
        "{}",
        f.explanation
    );
    // What it cannot count, said.
    assert!(
        f.explanation
            .contains("The other optimizers' gradients may be kept past their steps"),
        "{}",
        f.explanation
    );
    assert!(
        f.fix
            .contains("`optimizerG.zero_grad(set_to_none=True)` after `optimizerG.step()`"),
        "{}",
        f.fix
    );
    // Made by the generator's backward, shown as gradients (a backward's
    // line makes more autograd detail than gradients).
    let site = &f.sites[0];
    assert!(site.file.ends_with("gan_dcgan.py"), "{}", site.file);
    assert_eq!(site.line, 83); // errG.backward()
    assert_eq!(site.category, Some(Category::Gradient));
    // The script changed as the fix says holds none and peaks lower by all
    // of them: 17,808,632 -> 16,326,136 B.
    assert!(held(&after).is_none());
    assert_eq!(peak(&before), 17_808_632);
    assert_eq!(peak(&before) - peak(&after), GENERATOR_BYTES);
}

#[test]
fn each_iteration_ends_with_the_generators_step() {
    // Four loops, each the discriminator's step and then the generator's:
    // the recorder's iterations end with every second optimizer step (the
    // generator's).
    use vramscope_snapshot::AnnotationStage;
    let snap = recorded("gan_dcgan.pickle.gz");
    let times = |prefix: &str, stage: AnnotationStage| -> Vec<i64> {
        let mut t: Vec<i64> = snap
            .annotations
            .iter()
            .filter(|a| snap.str(a.name).starts_with(prefix) && a.stage == stage)
            .map(|a| a.time_us)
            .collect();
        t.sort_unstable();
        t
    };
    let (step_start, step_end) = (
        times("Optimizer.step#", AnnotationStage::Start),
        times("Optimizer.step#", AnnotationStage::End),
    );
    let ends = times("ProfilerStep#", AnnotationStage::End);
    assert_eq!(step_end.len(), 8);
    assert_eq!(ends.len(), 4, "{ends:?}");
    // (The optimizers' post-step hooks run inside the step's annotated
    // scope: each end lies within the generator's step.)
    for (k, &e) in ends.iter().enumerate() {
        let (g0, g1) = (step_start[2 * k + 1], step_end[2 * k + 1]);
        assert!(
            g0 <= e && e <= g1,
            "iteration {k} ends at {e}, outside the generator's step ({g0}..{g1})"
        );
    }
    // Three whole iterations (the last ends with the recording) and no
    // growth between them.
    let r = find_leaks(&snap, 0, &LeakOptions::default());
    assert_eq!(r.iterations.len(), 3);
    assert!(r.findings.iter().all(|f| f.kind != FindingKind::Growth));
}

#[test]
fn the_generators_images_given_to_the_discriminator_are_not_the_batch() {
    // `netD(fake.detach())`: the outermost call's argument needs no
    // gradient, as a batch does, but the generator made it. The inputs at
    // the end are the real images (393,216 B), the noise (12,800 B) and
    // the labels (128 B) alone; `fake` (393,216 B) is the generator's.
    let s = summarize(&recorded("gan_dcgan.pickle.gz"), &SummaryOptions::default());
    let end = &s.devices[0].end_by_category;
    let of = |c: Category| end.iter().find(|t| t.category == c).map_or(0, |t| t.bytes);
    assert_eq!(of(Category::Input), 393_216 + 12_800 + 128);
    assert!(of(Category::Activation) >= 393_216, "{end:?}");
}
