//! A run that peaks while it sets up: pytorch/examples' fast neural style
//! (tests/fixtures/recorded, `fast_neural_style_vgg`) builds torchvision's
//! whole VGG-16 and keeps `.features`: its classifier's 471.67 MiB are
//! made and dropped before the first forward, where the run peaked (534.20
//! MiB; its training steps 160.59 MiB). `advise` ranked FSDP first for
//! "17.77 MiB less"; the summary said nothing of why. Now the summary says
//! the peak is the setup's and what made it, and `advise` ranks first the
//! row that makes only what is kept, checked against the script changed so
//! (`vgg.py` building only the feature layers, `make_layers(cfgs["D"])`):
//! 168,394,844 B, to the byte.

use vramscope_advise::{advise, AdviseOptions, ChangeClass};
use vramscope_analysis::setup::SetupKind;
use vramscope_analysis::{summarize, SummaryOptions};
use vramscope_snapshot::{load, Snapshot};

fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

#[test]
fn a_peak_while_setting_up_is_said_and_its_row_is_first() {
    let snap = recorded("fast_neural_style_vgg.pickle.gz");
    let s = summarize(&snap, &SummaryOptions::default());
    let peak = &s.devices[0].peak;
    assert_eq!(peak.allocated_bytes, 560_147_116);
    let setup = peak.setup.as_ref().expect("the setup's peak");
    assert_eq!(setup.made_by, SetupKind::Build);
    // Its classifier (471.67 MiB) and the feature layers past the fourth
    // slice (27.00 MiB), made at the line that builds VGG-16.
    assert_eq!(setup.transient_bytes, 522_889_120);
    assert!(
        setup.sites[0]
            .0
            .ends_with("neural_style/vgg.py:10 in __init__"),
        "{:?}",
        setup.sites
    );
    assert_eq!(setup.after_bytes, 168_394_844);
    assert!(setup
        .sentence()
        .starts_with("while the program sets up, before its first forward"));

    let a = advise(&snap, &AdviseOptions::default()).expect("advice");
    let first = &a.advice[0];
    assert_eq!(first.class, ChangeClass::SetupTransients);
    // The script with vgg.py building only the feature layers: 168,394,844 B.
    assert_eq!(first.peak_allocated, 168_394_844);
    assert!(
        first.code.contains("neural_style/vgg.py:10 in __init__"),
        "{}",
        first.code
    );
    assert!(
        a.answer
            .contains("make only what the program keeps while it sets up"),
        "{}",
        a.answer
    );
}

#[test]
fn a_run_that_peaks_in_training_has_no_setup_row() {
    let snap = recorded("cnn_eval4x.pickle.gz");
    let s = summarize(&snap, &SummaryOptions::default());
    assert!(s.devices[0].peak.setup.is_none());
    let a = advise(&snap, &AdviseOptions::default()).expect("advice");
    assert!(a
        .advice
        .iter()
        .chain(&a.no_gain)
        .all(|r| r.class != ChangeClass::SetupTransients));
}

#[test]
fn data_made_whole_while_setting_up_is_told_from_a_model() {
    // pytorch/examples' GCN (`gcn_dense_setup`, on the made-up graph of
    // Cora's size): `load_cora` builds its diagonal and adjacency matrices
    // dense (2,708² each) before making them sparse; the run peaks there.
    let snap = recorded("gcn_dense_setup.pickle.gz");
    let s = summarize(&snap, &SummaryOptions::default());
    let setup = s.devices[0].peak.setup.as_ref().expect("the setup's peak");
    assert_eq!(setup.made_by, SetupKind::Data);
    assert!(
        setup.sites[0].0.ends_with("main.py:164 in load_cora"),
        "{:?}",
        setup.sites
    );
    assert!(setup.sentence().contains("(made and dropped: "));
    let a = advise(&snap, &AdviseOptions::default()).expect("advice");
    let first = &a.advice[0];
    assert_eq!(first.class, ChangeClass::SetupTransients);
    assert!(
        first
            .change
            .starts_with("make less while the program sets up"),
        "{}",
        first.change
    );
    assert_eq!(first.peak_allocated, setup.after_bytes);
}

#[test]
fn sharding_does_not_lower_a_setup_peak() {
    // `fully_shard` shards a model once it is built: the classifier fast
    // neural style drops before training is never sharded, the features it
    // keeps are whole until training starts. FSDP was ranked second for
    // "17.77 MiB less", from parameters halved while being built.
    let snap = recorded("fast_neural_style_vgg.pickle.gz");
    let a = advise(&snap, &AdviseOptions::default()).expect("advice");
    assert!(a.advice.iter().all(|r| r.class != ChangeClass::Fsdp));
    let fsdp = a
        .no_gain
        .iter()
        .find(|r| r.class == ChangeClass::Fsdp)
        .expect("FSDP tried");
    assert_eq!(fsdp.peak_allocated, 560_147_116);
    assert!(
        fsdp.how.contains(
            "35.53 MiB of them made while the program sets up, whole until training starts"
        ),
        "{}",
        fsdp.how
    );
    assert!(
        fsdp.code.contains("torch.device(\"meta\")"),
        "{}",
        fsdp.code
    );
}
