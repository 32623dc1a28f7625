//! The advice on LoRA fine-tuning, each row against the program changed as
//! it says and run for real (`python/tests/scripts/lora_peft.py`).
//!
//! Sharding a model most of whose parameters are frozen: LoRA fine-tuning
//! (tests/fixtures/recorded, `lora_peft_gpt2`: GPT-2 of 4 layers of 256
//! through peft, adapters on the attention, 61.38 MiB frozen and 128 KiB
//! that train). FSDP2 gathers every parameter a unit holds, frozen or not,
//! but reduce-scatters only the gradients; the rule read both from the
//! gradients, gathered 32 KiB a layer and nothing for the root, and
//! offered FSDP for "30.88 MiB less". The program run so over two gloo
//! ranks (`python/tests/scripts/lora_peft.py --fsdp`, `fully_shard` on
//! each layer and the root) peaked at 1,044,083,940 B, 22.54 MiB above
//! the program as recorded.

use vramscope_advise::{advise, Advice, AdviseOptions, ChangeClass};
use vramscope_snapshot::{load, Snapshot};

/// Rank 0's peak allocated under FSDP2 over two gloo ranks.
const MEASURED: u64 = 1_044_083_940;

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

/// The script's peak with every layer checkpointed by transformers' own
/// switch (`--checkpoint`), with the first two only (each layer's flag),
/// and with each batch in two halves (`--half`).
const CHECKPOINTED: u64 = 895_545_272;
const FIRST_TWO: u64 = 958_548_028;
const HALVES: u64 = 543_284_412;

fn within(predicted: u64, measured: u64, tolerance: f64) -> bool {
    (predicted as f64 / measured as f64 - 1.0).abs() < tolerance
}

#[test]
fn a_hugging_face_models_layers_are_checkpointed_by_its_own_switch() {
    // The loop over GPT-2's layers is in transformers' code: the row's code
    // was a `checkpoint(block, h)` loop to write there. It is now the
    // library's switch, and for the fewest that fit each layer's flag.
    let snap = recorded("lora_peft_gpt2.pickle.gz");
    let a = advise(
        &snap,
        &AdviseOptions {
            capacity: Some(930 << 20),
            ..Default::default()
        },
    )
    .expect("advice");
    let rows: Vec<&Advice> = a
        .advice
        .iter()
        .filter(|r| r.class == ChangeClass::Checkpoint)
        .collect();
    let (every, fewest) = (rows[0], rows[1]);
    assert!(
        every
            .code
            .contains("model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={\"use_reentrant\": False})"),
        "{}",
        every.code
    );
    assert!(
        !every.code.contains("checkpoint(block, h"),
        "{}",
        every.code
    );
    assert!(
        within(every.peak_allocated, CHECKPOINTED, 0.01),
        "{}",
        every.peak_allocated
    );
    assert!(
        fewest.code.contains(
            "for i, block in enumerate(model.base_model.model.transformer.h):\n    block.gradient_checkpointing = i < 2"
        ),
        "{}",
        fewest.code
    );
    assert!(
        within(fewest.peak_allocated, FIRST_TWO, 0.01),
        "{}",
        fewest.peak_allocated
    );
    let half = a
        .advice
        .iter()
        .find(|r| r.class == ChangeClass::HalfBatch)
        .expect("half the batch");
    assert!(
        within(half.peak_allocated, HALVES, 0.001),
        "{}",
        half.peak_allocated
    );
}
