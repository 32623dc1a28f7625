//! Sites whose tensor is made again larger every iteration, on runs
//! recorded by `vramscope run` from the corpus's programs
//! (tests/fixtures/recorded/README.md): an accumulator grown by
//! `torch.cat` in the program's loop is a leak; a curriculum's output and
//! Hugging Face's cache of past keys and values grow by design.

use vramscope_analysis::leaks::{find_leaks, Finding, FindingKind, LeakOptions, Severity};
use vramscope_snapshot::load;

fn findings(name: &str) -> Vec<Finding> {
    let snap =
        load(&vramscope_testdata::recorded(name), &Default::default()).expect("fixture loads");
    let opts = LeakOptions {
        read_sources: false,
        ..Default::default()
    };
    find_leaks(&snap, 0, &opts).findings
}

fn of_kind(f: &[Finding], kind: FindingKind) -> Vec<&Finding> {
    f.iter().filter(|x| x.kind == kind).collect()
}

#[test]
fn an_accumulator_concatenated_every_step_is_a_leak_held_by_its_variable() {
    // `preds = p if preds is None else torch.cat([preds, p])`, p the batch's
    // softmax: 64 rows of 10 float32, 2,560 bytes more every iteration.
    let f = findings("corpus_metrics_cat_on_device.pickle.gz");
    let grown = of_kind(&f, FindingKind::GrowingTensor);
    assert_eq!(
        grown.len(),
        1,
        "{:#?}",
        f.iter().map(|x| &x.title).collect::<Vec<_>>()
    );
    let g = grown[0];
    assert_eq!(g.severity, Severity::Leak);
    assert_eq!(g.bytes_per_iteration, 2560.0);
    let site = &g.sites[0];
    assert!(
        site.site.contains("corpus.py") && site.site.ends_with("in metrics"),
        "{}",
        site.site
    );
    // Held under another line in the first iterations (`preds = p`), then
    // made at the `torch.cat` line, larger by one batch each time.
    let live = &site.live_bytes;
    assert!(
        live.windows(2).skip(3).all(|w| w[1] == w[0] + 2560),
        "{live:?}"
    );
    assert_eq!(*live.last().unwrap(), 7 * 2560);
    assert_eq!(
        site.held_by.as_ref().map(|h| h.name.as_str()),
        Some("preds")
    );
    // Nothing else is a leak or a warning.
    assert_eq!(
        f.iter().filter(|x| x.severity != Severity::Benign).count(),
        1
    );
}

#[test]
fn a_curriculum_output_grows_with_its_input_and_is_not_a_leak() {
    // Sequences 12 tokens longer every step: the logits (8 × n × 512
    // float32) alive at each iteration's end grow by 196,608 bytes.
    let f = findings("corpus_seq_lm_curriculum.pickle.gz");
    assert!(
        f.iter().all(|x| x.severity == Severity::Benign),
        "{:#?}",
        f.iter().map(|x| &x.title).collect::<Vec<_>>()
    );
    let grown = of_kind(&f, FindingKind::GrowingInput);
    assert_eq!(grown.len(), 1);
    let live = &grown[0].sites[0].live_bytes;
    assert!(
        live.windows(2).skip(1).all(|w| w[1] == w[0] + 196_608),
        "{live:?}"
    );
    assert!(
        grown[0].explanation.contains("the input grows"),
        "{}",
        grown[0].explanation
    );
}

#[test]
fn a_generations_cache_grows_by_design_and_is_not_a_leak() {
    // GPT-2 (2 layers, 2 heads of 32) decoding a batch of 4 one token per
    // call: keys and values of one more position per layer, 4,096 bytes.
    let f = findings("corpus_generation_clean.pickle.gz");
    assert!(
        f.iter().all(|x| x.severity == Severity::Benign),
        "{:#?}",
        f.iter().map(|x| &x.title).collect::<Vec<_>>()
    );
    let cache = of_kind(&f, FindingKind::GrowingCache);
    assert_eq!(cache.len(), 1);
    assert_eq!(cache[0].bytes_per_iteration, 4096.0);
    assert!(
        cache[0].title.contains("transformers/cache_utils.py"),
        "{}",
        cache[0].title
    );
    let live = &cache[0].sites[0].live_bytes;
    assert!(
        live.windows(2).skip(2).all(|w| w[1] == w[0] + 4096),
        "{live:?}"
    );
}

#[test]
fn a_library_cache_and_the_programs_accumulator_are_two_findings() {
    // GPT-2 decoding with its cache while the program concatenates each
    // step's logits (4 × 1 × 512 float32, 8,192 bytes a call): the cache
    // (2 layers' keys and values of one more position, 4,096 bytes) is the
    // library's; the scores are the program's, found apart.
    let f = findings("gpt2_decoding_with_scores.pickle.gz");
    let cache = of_kind(&f, FindingKind::GrowingCache);
    assert_eq!(
        cache.len(),
        1,
        "{:#?}",
        f.iter().map(|x| &x.title).collect::<Vec<_>>()
    );
    assert_eq!(cache[0].bytes_per_iteration, 4096.0);
    let scores: Vec<&Finding> = f
        .iter()
        .filter(|x| {
            x.sites
                .iter()
                .any(|s| s.site.ends_with("decoding_scores.py:17 in <module>"))
        })
        .collect();
    assert_eq!(
        scores.len(),
        1,
        "{:#?}",
        f.iter().map(|x| &x.title).collect::<Vec<_>>()
    );
    assert_ne!(scores[0].kind, FindingKind::GrowingCache);
    assert_eq!(scores[0].bytes_per_iteration, 8192.0);
    // Everything in a decoding loop grows with the sequence: not a leak.
    assert!(f.iter().all(|x| x.severity == Severity::Benign));
}
