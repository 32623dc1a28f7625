//! What checkpointing frees: the activations the backward after a block's
//! call frees, not what outlives that backward (a Hugging Face KV cache)
//! nor what the forward frees after the call (autocast's weight casts).

use vramscope_advise::{advise, Advice, AdviseOptions, ChangeClass};
use vramscope_snapshot::{load, Action, Snapshot};
use vramscope_text::units::bytes;

/// A recording of tests/fixtures/recorded.
fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

fn rows(snap: &Snapshot) -> (Advice, Vec<Advice>, Vec<Advice>) {
    let a = advise(snap, &AdviseOptions::default()).expect("advice");
    let pick = |v: Vec<Advice>| -> Vec<Advice> {
        v.into_iter()
            .filter(|r| r.class == ChangeClass::Checkpoint)
            .collect()
    };
    (a.baseline, pick(a.advice), pick(a.no_gain))
}

/// A Hugging Face Llama recorded on the CPU (`vramscope.record`, its layers
/// marked): each layer appends its keys and values to the model's
/// DynamicCache. The row leaves every byte of them out and says so.
#[test]
fn a_hugging_face_kv_cache_is_left_out_and_said() {
    let snap = recorded("llama_kept_logits.pickle.gz");
    let t = snap.trace(0).expect("a trace");
    // Counted here from the stacks alone: every allocation a cache update
    // made (all of them inside the layers' calls).
    let cache: u64 = (0..t.len())
        .filter(|&i| t.action[i] == Action::Alloc)
        .filter(|&i| {
            snap.stacks.get(t.stack[i]).iter().any(|&f| {
                snap.str(snap.frames.get(f).filename)
                    .ends_with("transformers/cache_utils.py")
            })
        })
        .map(|i| t.size[i])
        .sum();
    assert!(cache > 0, "the fixture's layers write a cache");
    let (_, advice, _) = rows(&snap);
    let every = advice
        .iter()
        .find(|r| !r.change.contains("fewest"))
        .expect("a checkpoint row");
    let said = format!(
        "the {} the blocks wrote to Hugging Face's KV cache",
        bytes(cache)
    );
    assert!(every.how.contains(&said), "{said:?} not in {}", every.how);
    assert!(every.how.contains("use_cache=False"), "{}", every.how);
}

/// The H200's GPT trained under bf16 autocast (PyTorch's own history, the
/// layers read from the stacks): each layer's weight casts live until
/// autocast exits. Taken for the layers' outputs, they made the replay
/// recompute every layer as the forward ended, and checkpointing saved
/// nothing (listed at the recorded peak, 2,058,792,448 B allocated).
#[test]
fn autocasts_weight_casts_are_not_a_blocks_output() {
    let snap = load(
        &vramscope_testdata::gpu("estimate_trace_b16_bf16.pickle.gz"),
        &Default::default(),
    )
    .expect("reads");
    let (baseline, advice, no_gain) = rows(&snap);
    assert!(no_gain.is_empty(), "{:?}", no_gain.first().map(|r| &r.how));
    let every = advice
        .iter()
        .find(|r| !r.change.contains("fewest"))
        .expect("checkpointing lowers the peak");
    // Twelve layer calls save 134.38 MiB each; the fp32 run's checkpoint
    // row saves 36% of its peak, this one as much.
    assert!(
        (every.peak_allocated as f64) < 0.65 * baseline.peak_allocated as f64,
        "{} of {}",
        every.peak_allocated,
        baseline.peak_allocated
    );
    assert!(every.how.contains("12 block calls"), "{}", every.how);
}

/// The replay's peak within 0.1% of the real run's.
fn within_a_thousandth(predicted: u64, measured: u64) {
    let err = (predicted as f64 - measured as f64) / measured as f64;
    assert!(err.abs() < 0.001, "{predicted} against {measured}");
}

/// The FSDP row of a recorded run whose layers are all checkpointed.
fn fsdp_row(snap: &Snapshot) -> Advice {
    let a = advise(snap, &AdviseOptions::default()).expect("advice");
    a.advice
        .into_iter()
        .chain(a.no_gain)
        .find(|r| r.class == ChangeClass::Fsdp)
        .expect("an FSDP row")
}

/// The Transformer of `advise_runs.py` with every layer checkpointed
/// (`tests/fixtures/recorded/checkpointed_transformer.pickle.gz`): each
/// layer's recomputation inside backward is part of that backward, and a
/// layer keeps nothing in forward, yet each is an FSDP unit, read from its
/// call in forward and the span where backward reaches it; the units and
/// the root add up to the 3.50 MiB of parameters the recorder tagged. And
/// checkpointing is not offered again.
#[test]
fn a_checkpointed_runs_fsdp_units_are_its_layers() {
    let snap = recorded("checkpointed_transformer.pickle.gz");
    let fsdp = fsdp_row(&snap);
    assert!(
        fsdp.change.contains("each of the 2 blocks a unit"),
        "{}",
        fsdp.change
    );
    for part in [
        "each block's parameters (774.50 KiB a block",
        "again from its recomputation (checkpointed) through its backward",
        "the root's (1.99 MiB)",
    ] {
        assert!(fsdp.how.contains(part), "{part}: {}", fsdp.how);
    }
    assert!(
        fsdp.code.contains("for block in model.blocks.layers:"),
        "{}",
        fsdp.code
    );
    // Measured: the checkpointed Transformer with fully_shard on each layer
    // and the model over two gloo ranks peaks at 41,977,008 B
    // (python/tests/test_advise_cpu.py runs it); the replay within 0.1%.
    within_a_thousandth(fsdp.peak_allocated, 41_977_008);
    let (_, advice, _) = rows(&snap);
    assert!(advice.is_empty(), "checkpointing offered again");
}

/// Hugging Face's GPT-2 under its own checkpointing
/// (`recorded/gpt2_checkpointed.pickle.gz`): backward reaches each layer
/// at its recomputation, which an allocation carrying only the backward
/// call's frames splits in two; no gradient is made between the halves, so
/// they are one layer's and the four layers are four units.
#[test]
fn a_hugging_face_checkpointed_runs_fsdp_units_are_its_layers() {
    let snap = recorded("gpt2_checkpointed.pickle.gz");
    let fsdp = fsdp_row(&snap);
    assert!(
        fsdp.change.contains("each of the 4 blocks a unit"),
        "{}",
        fsdp.change
    );
    assert!(
        fsdp.code.contains("for block in model.transformer.h:"),
        "{}",
        fsdp.code
    );
    // Measured: fully_shard on each GPT2Block and the model, two gloo
    // ranks (`advise_runs.py zoo_gpt2 checkpoint_fsdp`): 80,516,272 B.
    within_a_thousandth(fsdp.peak_allocated, 80_516_272);
}

/// A Hugging Face Swin recorded on the CPU: the recorder marks its stages
/// (`swin.encoder.layers.N`) and the blocks inside each
/// (`layers.N.blocks.M`). The row checkpoints the stages, as its code
/// writes it: replayed at both levels, the blocks' saved activations were
/// freed and made again twice, and the row read 14% below the real run of
/// that code (17.18 MiB against 20.04).
#[test]
fn nested_blocks_are_checkpointed_at_the_outer_level_only() {
    let (_, advice, _) = rows(&recorded("swin_nested_blocks.pickle.gz"));
    let every = advice
        .iter()
        .find(|r| !r.change.contains("fewest"))
        .expect("a checkpoint row");
    assert!(
        every
            .change
            .contains("every block of model.swin.encoder.layers (")
            && !every.change.contains(".blocks"),
        "{}",
        every.change
    );
    // `advise_runs.py zoo_swin checkpoint_outer`: the stages under
    // Hugging Face's checkpointing, the blocks inside them not.
    let real = 21_016_756u64;
    let predicted = every.peak_allocated;
    assert!(
        predicted >= real && predicted <= real + real / 12,
        "predicted {predicted}, real {real}"
    );
}

/// torchvision's DeepLabV3 (MobileNetV3-Large backbone) trained as its
/// segmentation reference trains it (`python/tests/scripts/segmentation.py`).
/// The recorder marks the layers inside seven of the backbone's inverted
/// residual blocks; the backbone is an `IntermediateLayerGetter`, a
/// `ModuleDict` keyed "1", "2", …: `model.backbone[1]` raises `KeyError`,
/// so the row reaches each block's `Sequential` with `get_submodule`, in
/// the order the forward calls them (a string order had put `backbone[10]`
/// second). The same script run with that code
/// (`segmentation_deeplabv3_checkpointed`) peaks within 0.1% of the row.
#[test]
fn blocks_under_a_module_dict_are_named_as_python_reaches_them() {
    let (_, advice, _) = rows(&recorded("segmentation_deeplabv3.pickle.gz"));
    let every = advice
        .iter()
        .find(|r| !r.change.contains("fewest"))
        .expect("a checkpoint row");
    let names: Vec<&str> = every
        .change
        .match_indices("model.get_submodule(\"")
        .map(|(i, m)| {
            let rest = &every.change[i + m.len()..];
            &rest[..rest.find('"').expect("a closing quote")]
        })
        .collect();
    // The blocks segmentation.py checkpoints (CHECKPOINTED), in its order.
    assert_eq!(
        names,
        [
            "backbone.1.block",
            "backbone.2.block",
            "backbone.3.block",
            "backbone.7.block",
            "backbone.8.block",
            "backbone.9.block",
            "backbone.10.block"
        ],
        "{}",
        every.change
    );
    assert!(
        !every.change.contains("model.backbone["),
        "{}",
        every.change
    );
    assert!(
        every
            .code
            .contains("for block in model.get_submodule(\"backbone.1.block\"):"),
        "{}",
        every.code
    );
    let real = recorded("segmentation_deeplabv3_checkpointed.pickle.gz");
    let measured = vramscope_analysis::summary::summarize(&real, &Default::default()).devices[0]
        .peak
        .allocated_bytes;
    within_a_thousandth(every.peak_allocated, measured);
}
