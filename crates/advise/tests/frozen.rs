//! Sharding a model most of whose parameters are frozen: LoRA fine-tuning
//! (tests/fixtures/recorded, `lora_peft_gpt2`: GPT-2 of 4 layers of 256
//! through peft, adapters on the attention, 61.38 MiB frozen and 128 KiB
//! that train). FSDP2 gathers every parameter a unit holds, frozen or not,
//! but reduce-scatters only the gradients; the rule read both from the
//! gradients, gathered 32 KiB a layer and nothing for the root, and
//! offered FSDP for "30.88 MiB less". The program run so over two gloo
//! ranks (`python/tests/scripts/lora_peft.py --fsdp`, `fully_shard` on
//! each layer and the root) peaked at 1,044,083,936 B, 22.54 MiB above
//! the program as recorded.

use vramscope_advise::{advise, Advice, AdviseOptions, ChangeClass};
use vramscope_snapshot::{load, Snapshot};

/// Rank 0's peak allocated under FSDP2 over two gloo ranks.
const MEASURED: u64 = 1_044_083_936;

fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

fn fsdp_row(snap: &Snapshot) -> (Advice, u64) {
    let a = advise(snap, &AdviseOptions::default()).expect("advice");
    assert!(
        a.advice.iter().all(|r| r.class != ChangeClass::Fsdp),
        "FSDP offered"
    );
    let row = a
        .no_gain
        .iter()
        .find(|r| r.class == ChangeClass::Fsdp)
        .expect("FSDP tried")
        .clone();
    (row, a.baseline.peak_allocated)
}

#[test]
fn frozen_parameters_are_gathered_by_layer_from_the_recorders_table() {
    let snap = recorded("lora_peft_gpt2.pickle.gz");
    let table = &snap.source.recorder.as_ref().expect("recorder").parameters;
    let frozen: u64 = table.iter().map(|g| g.bytes - g.trainable_bytes).sum();
    assert_eq!(frozen, 64_363_520);
    let (row, recorded) = fsdp_row(&snap);
    assert!(row.peak_allocated > recorded);
    let error = row.peak_allocated as f64 / MEASURED as f64 - 1.0;
    assert!(
        error.abs() < 0.01,
        "{} predicted, {MEASURED} measured",
        row.peak_allocated
    );
    assert!(
        row.how
            .contains("each block's parameters (3.04 MiB a block, the recorder's table"),
        "{}",
        row.how
    );
    assert!(row.how.contains("the root's (49.33 MiB)"), "{}", row.how);
}

#[test]
fn without_the_table_the_frozen_parameters_are_put_in_the_root() {
    // A snapshot whose recorder wrote no table (an older vramscope): the
    // parameters that make no gradient, whole for the whole pass, above
    // the real run rather than below it.
    let mut snap = recorded("lora_peft_gpt2.pickle.gz");
    snap.source
        .recorder
        .as_mut()
        .expect("recorder")
        .parameters
        .clear();
    let (row, _) = fsdp_row(&snap);
    let error = row.peak_allocated as f64 / MEASURED as f64 - 1.0;
    assert!(
        (0.0..0.02).contains(&error),
        "{} predicted, {MEASURED} measured",
        row.peak_allocated
    );
    assert!(
        row.how
            .contains("that make none (frozen, or unused in the pass) counted in the root"),
        "{}",
        row.how
    );
}
